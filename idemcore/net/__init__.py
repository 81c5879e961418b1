"""Requests, responses and the transports that carry them to ``Broker.handle``."""

from idemcore.net.messages import (
    InitProducerIdRequest,
    InitProducerIdResponse,
    PartitionResponse,
    ProduceRequest,
    ProduceResponse,
    Request,
    Response,
    TxnMarker,
    TxnMarkerResult,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)
from idemcore.net.transport import InProcessTransport, RequestHandler, Transport, UnknownTopicError

__all__ = ["InProcessTransport", "InitProducerIdRequest", "InitProducerIdResponse", "PartitionResponse",
           "ProduceRequest", "ProduceResponse", "Request", "RequestHandler", "Response", "Transport", "TxnMarker",
           "TxnMarkerResult", "UnknownTopicError", "WriteTxnMarkersRequest", "WriteTxnMarkersResponse"]

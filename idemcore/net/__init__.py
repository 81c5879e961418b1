"""Requests, responses and the transports that carry them to ``Broker.handle``."""

from idemcore.net.messages import (
    InitProducerIdRequest,
    InitProducerIdResponse,
    PartitionResponse,
    ProduceRequest,
    ProduceResponse,
    Request,
    Response,
)
from idemcore.net.transport import InProcessTransport, RequestHandler, Transport, UnknownTopicError

__all__ = ["InProcessTransport", "InitProducerIdRequest", "InitProducerIdResponse", "PartitionResponse",
           "ProduceRequest", "ProduceResponse", "Request", "RequestHandler", "Response", "Transport",
           "UnknownTopicError"]

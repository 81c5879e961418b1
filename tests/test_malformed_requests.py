"""Malformed transaction and read requests are answered, never raised out of Broker.handle: the broker keeps
serving (the wire server will hand it whatever a client sends)."""

from __future__ import annotations

import numpy as np
import pytest

from idemcore.broker import Broker
from idemcore.net.messages import (
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    FetchPartition,
    FetchRequest,
    InitProducerIdRequest,
    ListOffsetsRequest,
    ProduceRequest,
)
from idemcore.protocol.codes import ErrorCode
from idemcore.record.batch import RecordBatch

E = ErrorCode


@pytest.mark.parametrize("request_, answer", [
    (ListOffsetsRequest(None), lambda r: r.results == ()),  # type: ignore[arg-type]
    (ListOffsetsRequest((("t", 0, np.int64(-1)),)), lambda r: r.results[0].error_code == E.INVALID_REQUEST),
    (ListOffsetsRequest((("t", 0),)), lambda r: r.results[0].error_code == E.INVALID_REQUEST),  # type: ignore
    (ListOffsetsRequest((("t", 0, -1),), isolation_level=7), lambda r: r.results[0].error_code == E.INVALID_REQUEST),
    (AddPartitionsToTxnRequest("x", 1, 0, (("t", []),)), lambda r: r.results == ()),  # type: ignore[arg-type]
    (AddPartitionsToTxnRequest("x", 1, 0, None), lambda r: r.results == ()),  # type: ignore[arg-type]
    (InitProducerIdRequest(producer_id=np.int64(5)), lambda r: r.error_code == E.INVALID_REQUEST),
    (InitProducerIdRequest(transactional_id=3), lambda r: r.error_code == E.INVALID_REQUEST),  # type: ignore
    (EndTxnRequest("x", 1, 0, "yes"), lambda r: r.error_code == E.INVALID_REQUEST),  # type: ignore[arg-type]
    (FetchRequest(None), lambda r: r.error_code == E.INVALID_REQUEST),  # type: ignore[arg-type]
    (FetchRequest(((1, 2),)), lambda r: r.error_code == E.INVALID_REQUEST),  # type: ignore[arg-type]
    (FetchRequest((FetchPartition("t", 0, "0"),)),  # type: ignore[arg-type]
     lambda r: r.partitions[0].error_code == E.OFFSET_OUT_OF_RANGE),
    (FetchRequest((FetchPartition("t", 0, 0),), isolation_level=np.int64(1)),
     lambda r: r.error_code == E.INVALID_REQUEST),
])
def test_a_malformed_request_is_answered_and_the_broker_keeps_serving(request_, answer):
    broker = Broker({"t": 2})
    assert answer(broker.handle(request_))
    written = broker.handle(ProduceRequest((RecordBatch("t", 0, (b"v",)),)))
    assert written.responses[0].error_code == E.NONE  # still serving

"""Produce on the wire (v3+: one RecordBatch v2 per partition). Each partition's bytes become a RecordBatch that
keeps them (``wire``), so the log stores the batch as the client sent it; a partition whose bytes are not one
good batch is answered here (CORRUPT_MESSAGE, INVALID_RECORD) and the others go to the broker."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode as WireError

from idemcore.net.messages import PartitionResponse, ProduceRequest, ProduceResponse
from idemcore.net.wire.api import WireApi, WireContext, topic_id_of
from idemcore.net.wire.frames import make, millis, nested, response_class
from idemcore.protocol.codes import ErrorCode
from idemcore.record.batch import RecordBatch
from idemcore.record.v2 import CorruptRecordError, decode_wire_batch

#: Per partition of the request, in its order: ``(topic, partition, refusal)``, refusal None when the batch went
#: to the broker, else ``(error code, message)``.
ProduceCarry = list[tuple[str, int, tuple[int, str] | None]]


def topic_name_of(ctx: WireContext, topic: Any) -> str:
    """The name a request's topic entry means: its ``name``, or (v13+) the topic its ``topic_id`` names ("" for
    none: the broker answers UNKNOWN_TOPIC_OR_PARTITION)."""
    name = getattr(topic, "name", None)
    if name is not None:
        return str(name)
    return ctx.topic_name(getattr(topic, "topic_id", None)) or ""


def _to_message(ctx: WireContext, version: int, correlation_id: int, body: Any) -> tuple[ProduceRequest, Any]:
    batches: list[RecordBatch] = []
    carry: ProduceCarry = []
    acks = int(body.acks)
    for topic in body.topic_data:
        name = topic_name_of(ctx, topic)
        for data in topic.partition_data:
            partition = int(data.index)
            refusal: tuple[int, str] | None = None
            if acks not in (0, 1, -1):  # Kafka answers every partition so, and writes nothing
                refusal = (ErrorCode.INVALID_REQUIRED_ACKS, f"acks {acks}: 0, 1 or -1 (all)")
            elif data.records is None or len(data.records) == 0:
                refusal = (ErrorCode.INVALID_RECORD, f"no record batch for {name}-{partition}")
            else:
                try:
                    batches.append(decode_wire_batch(name, partition, data.records))
                except CorruptRecordError as error:
                    refusal = (ErrorCode.CORRUPT_MESSAGE, str(error))
                except ValueError as error:
                    refusal = (ErrorCode.INVALID_RECORD, str(error))
            carry.append((name, partition, refusal))
    request = ProduceRequest(tuple(batches), acks if acks in (0, 1, -1) else -1, millis(body.timeout), correlation_id,
                             transactional_id=body.transactional_id)
    return request, carry


def _to_wire(ctx: WireContext, version: int, body: Any, response: ProduceResponse, carry: ProduceCarry) -> Any:
    cls = response_class(body)
    topic_cls, partition_cls = nested(cls, "TopicProduceResponse"), nested(cls, "PartitionProduceResponse")
    # The broker answers the batches it was given in their order: paired in turn, so a partition named twice gets
    # each of its answers (the first written, the second refused), not one for both.
    answers = iter(response.responses)
    by_topic: dict[str, list[Any]] = {}
    for name, partition, refusal in carry:
        answer = next(answers, None) if refusal is None else None
        if answer is None:
            code, message = refusal if refusal is not None else (ErrorCode.UNKNOWN_SERVER_ERROR, "no answer")
            answer = PartitionResponse(name, partition, code, error_message=message)
        by_topic.setdefault(name, []).append(make(
            partition_cls, index=partition, error_code=WireError(answer.error_code), base_offset=answer.base_offset,
            log_append_time=None, log_start_offset=answer.log_start_offset, record_errors=(),
            error_message=answer.error_message))
    topics = tuple(make(topic_cls, name=name, topic_id=topic_id_of(name), partition_responses=tuple(partitions))
                   for name, partitions in by_topic.items())
    return make(cls, responses=topics)


PRODUCE = WireApi(0, "Produce", 3, 11, _to_message, _to_wire)

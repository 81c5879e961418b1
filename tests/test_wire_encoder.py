"""The entity encoder writes kio's bytes: for every API and version the server serves, requests and responses
alike, random entities (hypothesis, from kio's own types) come out byte for byte as kio's ``entity_writer`` writes
them; tagged fields are written only when they differ from their default, in tag order; nulls and lengths at their
edges."""

from __future__ import annotations

import datetime
import struct
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode as WireError
from kio.serial import entity_writer
from kio.static.primitive import Records

from idemcore.net.wire.apis import API_VERSIONS_KEY, API_VERSIONS_RANGE, APIS
from idemcore.net.wire.encoder import entity_encoder, uvarint
from idemcore.net.wire.frames import make, nested, read_response, response_frame
from idemcore.net.wire.schema import load_request_schema, load_response_schema  # kio's, and the schemas kio lacks

st.register_type_strategy(Records, st.binary(max_size=64))

SERVED = [(API_VERSIONS_KEY, version) for version in range(API_VERSIONS_RANGE[0], API_VERSIONS_RANGE[1] + 1)] + [
    (api.key, version) for api in APIS.values() for version in range(api.min_version, api.max_version + 1)]


class _Buffer:
    """What kio's writers write to."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.parts.append(bytes(data))


def _kio_bytes(cls: type, entity: object) -> bytes:
    buffer = _Buffer()
    entity_writer(cls)(buffer, entity)
    return b"".join(buffer.parts)


def _encoded(cls: type, entity: object) -> bytes:
    out: list[bytes] = []
    entity_encoder(cls)(out, entity)
    return b"".join(out)


@pytest.mark.parametrize("kind", ["request", "response"])
@pytest.mark.parametrize(("api_key", "version"), SERVED)
def test_every_served_schema_is_written_as_kio_writes_it(api_key, version, kind):
    cls = (load_request_schema if kind == "request" else load_response_schema)(api_key, version)

    @settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(st.from_type(cls))
    def same(entity):
        assert _encoded(cls, entity) == _kio_bytes(cls, entity)

    same()


def test_a_produce_answer_with_its_tagged_leader_and_nulls():
    cls = load_response_schema(0, 10)
    partition_cls, leader_cls = nested(cls, "PartitionProduceResponse"), nested(cls, "LeaderIdAndEpoch")
    default_leader = make(partition_cls, index=3, error_code=WireError.none, base_offset=7, record_errors=())
    moved = make(partition_cls, index=4, error_code=WireError.not_leader_or_follower, base_offset=-1,
                 record_errors=(), error_message="moved", current_leader=make(leader_cls, leader_id=2, leader_epoch=9),
                 log_append_time=datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC))
    topic = make(nested(cls, "TopicProduceResponse"), name="t", partition_responses=(default_leader, moved))
    entity = make(cls, responses=(topic,), throttle_time=0)
    encoded = _encoded(cls, entity)
    assert encoded == _kio_bytes(cls, entity)
    # The default leader is left out (0 tagged fields); the moved one is 1 tagged field, tag 0, of 9 bytes: the
    # leader id and epoch and the leader's own (empty) tagged fields.
    assert b"\x01\x00\x09" + struct.pack(">ii", 2, 9) + b"\x00" in encoded
    framed = b"".join(response_frame(77, entity))
    assert read_response(0, 10, framed[4:]) == (77, entity)


def test_nulls_empties_and_long_lengths():
    cls = load_response_schema(3, 12)  # Metadata v12: flexible, nullable strings, uuids, arrays
    topic = make(nested(cls, "MetadataResponseTopic"), name=None, topic_id=None, partitions=(),
                 error_code=WireError.none)
    long_name = "x" * 300  # a compact length of two varint bytes
    named = make(nested(cls, "MetadataResponseTopic"), name=long_name, topic_id=uuid.uuid4(), partitions=(),
                 error_code=WireError.none)
    entity = make(cls, throttle_time=0, brokers=(), cluster_id=None, controller_id=-1, topics=(topic, named))
    assert _encoded(cls, entity) == _kio_bytes(cls, entity)
    assert uvarint(len(long_name) + 1) + long_name.encode() in _encoded(cls, entity)


@pytest.mark.parametrize(("value", "expected"), [(0, b"\x00"), (127, b"\x7f"), (128, b"\x80\x01"),
                                                 (300, b"\xac\x02"), (2**31 - 1, b"\xff\xff\xff\xff\x07")])
def test_unsigned_varints(value, expected):
    assert uvarint(value) == expected


def test_values_out_of_their_width_are_refused():
    cls = load_response_schema(22, 1)  # InitProducerId v1: an int64 producer id, an int16 epoch
    with pytest.raises(struct.error):
        _encoded(cls, make(cls, throttle_time=0, error_code=WireError.none, producer_id=2**63, producer_epoch=0))
    with pytest.raises(struct.error):
        _encoded(cls, make(cls, throttle_time=0, error_code=WireError.none, producer_id=1, producer_epoch=2**15))
    with pytest.raises(struct.error):
        uvarint(-1)


def test_an_entity_with_a_field_type_without_a_plan_is_written_by_kio(monkeypatch):
    """A field type this encoder does not know (as a later kio may add) falls back to kio's writer for its entity
    rather than failing: here uuid is made unknown, and Metadata v12's topics (with their topic_id) still come out
    as kio writes them, while its brokers (no uuid) keep their own plan."""
    from idemcore.net.wire import encoder

    real = encoder._primitive

    def without_uuid(kafka_type: str, flexible: bool, optional: bool):
        if kafka_type == "uuid":
            raise encoder._NoPlan(kafka_type)
        return real(kafka_type, flexible, optional)
    cls = load_response_schema(3, 12)
    topic_cls, broker_cls = nested(cls, "MetadataResponseTopic"), nested(cls, "MetadataResponseBroker")
    entity_encoder.cache_clear()
    monkeypatch.setattr(encoder, "_primitive", without_uuid)
    try:
        assert entity_encoder(topic_cls).__name__ == "written"  # kio's writer
        assert entity_encoder(broker_cls).__name__ != "written"  # still planned

        @settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        @given(st.from_type(cls))
        def same(entity):
            assert _encoded(cls, entity) == _kio_bytes(cls, entity)
        same()
    finally:
        entity_encoder.cache_clear()

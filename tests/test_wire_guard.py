"""The length guard walks exactly a body: for every request the server serves, a random well-formed body (kio's
types, hypothesis) is walked to its last byte, and every shorter cut of it is refused with MalformedFrameError,
never read past; lengths that lie (negative, beyond the frame, element counts larger than the bytes left) are
named; unknown tagged fields are cut."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.static.primitive import Records

from idemcore.net.wire.apis import APIS
from idemcore.net.wire.encoder import entity_encoder
from idemcore.net.wire.errors import MalformedFrameError
from idemcore.net.wire.frames import make, nested
from idemcore.net.wire.guard import _checker, check_lengths, without
from idemcore.net.wire.schema import load_request_schema  # kio's, and the schemas kio lacks

st.register_type_strategy(Records, st.binary(max_size=64))

SERVED = [(api.key, version) for api in APIS.values() for version in range(api.min_version, api.max_version + 1)]


@pytest.mark.parametrize(("api_key", "version"), SERVED)
def test_a_body_is_walked_to_its_end_and_every_cut_of_it_is_refused(api_key, version):
    cls = load_request_schema(api_key, version)
    check = _checker(cls)

    @settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(st.from_type(cls), st.data())
    def walked(entity, data):
        out: list[bytes] = []
        entity_encoder(cls)(out, entity)
        body = b"".join(out)
        assert check(body, 0, len(body), []) == len(body)
        cuts = range(len(body)) if len(body) <= 64 else sorted(data.draw(st.sets(
            st.integers(0, len(body) - 1), min_size=16, max_size=16)))
        for cut in cuts:
            with pytest.raises(MalformedFrameError):
                check(body[:cut], 0, cut, [])

    walked()


def _produce_body(records: bytes) -> bytes:
    cls = load_request_schema(0, 9)  # flexible: compact lengths
    partition = make(nested(cls, "PartitionProduceData"), index=0, records=records)
    topic = make(nested(cls, "TopicProduceData"), name="t", partition_data=(partition,))
    out: list[bytes] = []
    entity_encoder(cls)(out, make(cls, acks=-1, timeout=1000, topic_data=(topic,)))
    return b"".join(out)


def test_lengths_that_lie_are_named():
    cls = load_request_schema(0, 9)
    body = _produce_body(b"abc")
    # transactional_id null (0), acks, timeout, then the topic array: compact count 2 (one topic).
    at = body.index(b"\x02\x02t")
    with pytest.raises(MalformedFrameError, match=r"topic_data: 200 elements where \d+ bytes are left"):
        check_lengths(cls, body[:at] + b"\xc9\x01" + body[at + 1:], 0, [])
    records_at = body.index(b"\x04abc")  # compact length 3 + 1
    with pytest.raises(MalformedFrameError, match=r"records: 9 bytes where 6 are left"):
        check_lengths(cls, body[:records_at] + b"\x0a" + body[records_at + 1:], 0, [])
    legacy = load_request_schema(26, 1)  # EndTxn v1: int16 string lengths
    with pytest.raises(MalformedFrameError, match=r"transactional_id of length -2"):
        check_lengths(legacy, b"\xff\xfe", 0, [])
    with pytest.raises(MalformedFrameError, match=r"an unsigned varint longer than 5 bytes"):
        check_lengths(cls, b"\x00\xff\xff\x00\x00\x03\xe8" + b"\xff" * 6, 0, [])


def test_unknown_tagged_fields_are_cut():
    cls = load_request_schema(0, 9)
    body = _produce_body(b"abc")
    assert body.endswith(b"\x00")  # the body's tagged section: no field
    tagged = body[:-1] + b"\x02" + b"\x07\x01x" + b"\x08\x00"  # two fields of tags the schema lacks
    edits: list = []
    check_lengths(cls, tagged, 0, edits)
    assert len(edits) == 3 and without(tagged, edits) == body

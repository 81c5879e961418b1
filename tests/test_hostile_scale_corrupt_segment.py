"""A flipped byte in a ``__consumer_offsets`` segment after a clean stop (the recovery point says the log is whole,
so only loading the groups reads it): the one line that stops the start names the file and the position of the
damaged batch in that file, where a user can look; it named position 0 (the batch's own start) for every batch."""

from __future__ import annotations

from pathlib import Path

import pytest

from idemcore.broker import Broker
from idemcore.broker.log.loader import LogCorruptionError
from idemcore.net.messages import OffsetCommitRequest, OffsetEntry, OffsetFetchRequest, OffsetFetchResponse
from idemcore.protocol.codes import ErrorCode
from idemcore.record.v2.codec import iter_batches
from idemcore.record.v2.errors import CorruptRecordError

TOPIC = "t"


def open_broker(data_dir: Path) -> Broker:
    return Broker({TOPIC: 1}, data_dir=data_dir, fsync=False, offsets_topic_partitions=1)


def test_a_damaged_batch_deep_in_an_offsets_segment_is_named_by_its_position_in_the_file(tmp_path):
    broker = open_broker(tmp_path)
    for n in range(300):  # one batch each, in the one offsets partition: the damage far from the log's end
        answer = broker.handle(OffsetCommitRequest(f"g{n % 7}", (OffsetEntry(TOPIC, 0, 10 + n),), -1, "", 0, None))
        assert answer.results[0].error_code == ErrorCode.NONE  # type: ignore[union-attr]
    broker.close()
    (segment,) = (tmp_path / "__consumer_offsets-0").glob("*.log")
    data = bytearray(segment.read_bytes())
    positions = [position for position, _ in iter_batches(bytes(data), 0)]
    assert len(positions) == 300
    damaged = positions[4]
    data[damaged + 70] ^= 0xFF  # inside the records, under the CRC
    segment.write_bytes(bytes(data))
    with pytest.raises(CorruptRecordError) as raised:
        open_broker(tmp_path).close()
    message = str(raised.value)
    assert str(segment) in message and "\n" not in message
    assert f"at position {damaged}:" in message, message
    assert (f"truncate it to {damaged} bytes and remove <data_dir>/recovery-point-offset-checkpoint and "
            "<data_dir>/written-log-ends") in message

    # The advice holds: so cut, the broker starts with what the batches before the damage committed.
    with segment.open("r+b") as file:
        file.truncate(damaged)
    (tmp_path / "recovery-point-offset-checkpoint").unlink()
    (tmp_path / "written-log-ends").unlink()
    broker = open_broker(tmp_path)
    try:
        answer = broker.handle(OffsetFetchRequest("g3", ((TOPIC, 0),), False))
        assert isinstance(answer, OffsetFetchResponse)
        assert answer.offsets[0].offset == 10 + 3  # batch 3, before the damaged batch 4
    finally:
        broker.close()


def test_damage_near_the_end_is_refused_with_advice_that_works(tmp_path):
    """The loader's line for a damaged batch short of where the log ended said "remove the checkpoints to accept
    the loss", after which the start was refused again (those bytes are then not known to be this broker's); it
    now says to cut the segment there as well, and that start succeeds with every earlier commit."""
    broker = open_broker(tmp_path)
    for n in range(6):
        answer = broker.handle(OffsetCommitRequest(f"g{n}", (OffsetEntry(TOPIC, 0, 10 + n),), -1, "", 0, None))
        assert answer.results[0].error_code == ErrorCode.NONE  # type: ignore[union-attr]
    broker.close()
    (segment,) = (tmp_path / "__consumer_offsets-0").glob("*.log")
    data = bytearray(segment.read_bytes())
    damaged = [position for position, _ in iter_batches(bytes(data), 0)][4]
    data[damaged + 70] ^= 0xFF
    segment.write_bytes(bytes(data))
    with pytest.raises(LogCorruptionError) as raised:
        open_broker(tmp_path).close()
    message = str(raised.value)
    assert f"corrupt at byte {damaged}:" in message and str(segment) in message, message
    assert (f"truncate it to {damaged} bytes and remove <data_dir>/recovery-point-offset-checkpoint and "
            "<data_dir>/written-log-ends") in message, message
    with segment.open("r+b") as file:
        file.truncate(damaged)
    (tmp_path / "recovery-point-offset-checkpoint").unlink()
    (tmp_path / "written-log-ends").unlink()
    broker = open_broker(tmp_path)
    try:
        for n in range(4):
            answer = broker.handle(OffsetFetchRequest(f"g{n}", ((TOPIC, 0),), False))
            assert isinstance(answer, OffsetFetchResponse) and answer.offsets[0].offset == 10 + n
    finally:
        broker.close()

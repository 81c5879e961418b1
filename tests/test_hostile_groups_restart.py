"""A hostile pass over the durable group coordinator: a damaged GroupMetadata or offset commit record in
``__consumer_offsets`` (its batch's CRC intact: written so, not torn on disk) does not stop the broker from
starting; the record is skipped with one error line naming the partition and the offset, its group keeps what its
earlier records said, and every other group of the partition is loaded."""

from __future__ import annotations

import logging
from pathlib import Path

from idemcore.broker import Broker
from idemcore.broker.group.group_metadata_log import (
    GroupMetadataValue,
    MemberMetadata,
    encode_group_key,
    encode_group_value,
)
from idemcore.broker.group.offset_log_writer import HandledOffsetLog
from idemcore.broker.group.offsets_log import encode_key
from idemcore.net.group_admin import DescribeGroupsRequest, DescribeGroupsResponse
from idemcore.net.messages import (
    OffsetCommitRequest,
    OffsetEntry,
    OffsetFetchRequest,
    OffsetFetchResponse,
)
from idemcore.protocol.codes import ErrorCode

TOPIC = "t"


def open_broker(data_dir: Path) -> Broker:
    return Broker({TOPIC: 3}, data_dir=data_dir, fsync=False, offsets_topic_partitions=3)


def committed(broker: Broker, group: str) -> int:
    answer = broker.handle(OffsetFetchRequest(group, ((TOPIC, 0),), False))
    assert isinstance(answer, OffsetFetchResponse) and answer.error_code == ErrorCode.NONE, answer
    return answer.offsets[0].offset


def test_a_damaged_group_record_is_skipped_with_one_line_and_the_rest_of_the_partition_loads(tmp_path, caplog):
    broker = open_broker(tmp_path)
    coordinator = broker.group_coordinator
    target = coordinator.partition_for("bad")
    neighbours = [g for g in (f"g{i}" for i in range(30)) if coordinator.partition_for(g) == target][:3]
    for group in [*neighbours, "bad"]:
        answer = broker.handle(OffsetCommitRequest(group, (OffsetEntry(TOPIC, 0, 7),), -1, "", 0, None))
        assert answer.results[0].error_code == ErrorCode.NONE  # type: ignore[union-attr]
    member = MemberMetadata("m-1", "m", "/127.0.0.1", 10_000, b"", b"", 10_000, None)
    good = GroupMetadataValue("consumer", 4, "range", "m-1", 1, (member,), 3)
    log = HandledOffsetLog(broker.handle, broker.clock)
    assert log.append(target, [(encode_group_key("bad"), encode_group_value(good))], -1, -1, False)[0] == 0
    _, damaged_at = log.append(target, [(encode_group_key("bad"), b"\x00\x03\x00\x08consumer\xff")], -1, -1, False)
    _, commit_at = log.append(target, [(encode_key("bad", TOPIC, 0), b"\x00\x03\x00")], -1, -1, False)
    for group in neighbours:  # after the damage: still loaded
        broker.handle(OffsetCommitRequest(group, (OffsetEntry(TOPIC, 0, 9),), -1, "", 0, None))
    broker.close()
    with caplog.at_level(logging.ERROR, logger="idemcore.broker.group.coordinator"):
        broker = open_broker(tmp_path)
    try:
        errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
        assert errors == [f"__consumer_offsets-{target} at offset {damaged_at}: a damaged record is skipped: "
                          f"{errors[0].split('skipped: ', 1)[1]}",
                          f"__consumer_offsets-{target} at offset {commit_at}: a damaged record is skipped: "
                          f"{errors[1].split('skipped: ', 1)[1]}"], errors
        assert all("\n" not in e for e in errors)
        assert [committed(broker, g) for g in neighbours] == [9] * len(neighbours)
        assert committed(broker, "bad") == 7, "the damaged commit is skipped: the earlier one stands"
        described = broker.handle(DescribeGroupsRequest(("bad",)))
        assert isinstance(described, DescribeGroupsResponse)
        group = described.groups[0]
        assert group.error_code == ErrorCode.NONE and group.state == "Stable" and group.protocol_name == "range"
        assert [m.member_id for m in group.members] == ["m-1"], "the group as its last good record left it"
    finally:
        broker.close()

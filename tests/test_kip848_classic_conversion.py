"""An Empty classic group that gives its id to a KIP-848 group (Kafka converts it) is gone for good: its
GroupMetadata tombstone is written, so after a restart the consumer group's members are answered as members the
coordinator forgot (UNKNOWN_MEMBER_ID, after which they rejoin), not GROUP_ID_NOT_FOUND for a classic group come
back from the log (which librdkafka takes as fatal)."""

from __future__ import annotations

from pathlib import Path

from idemcore import Broker
from idemcore.net.consumer_group import ConsumerGroupHeartbeatRequest as Hb
from idemcore.net.membership import JoinGroupRequest, LeaveGroupRequest, LeavingMember, SyncGroupRequest
from idemcore.net.messages import Pending
from idemcore.protocol.codes import ErrorCode as E

G = "g"
T0 = 1_000_000


def open_broker(data_dir: Path) -> Broker:
    return Broker({"t": 2}, data_dir=data_dir, offsets_topic_partitions=1, clock=lambda: T0)


def empty_classic_group(broker: Broker) -> None:
    """A classic group that had a member (its GroupMetadata records written) and is Empty now."""
    broker.group_coordinator.classic_groups.initial_rebalance_delay_ms = 0
    protocols = (("range", b""),)
    first = broker.handle(JoinGroupRequest(G, 10_000, 10_000, "consumer", protocols, member_id_required=True))
    member = first.member_id  # type: ignore[union-attr]
    joined = broker.handle(JoinGroupRequest(G, 10_000, 10_000, "consumer", protocols, member_id=member,
                                            member_id_required=True))
    broker.run_housekeeping()  # the join phase ends
    assert isinstance(joined, Pending) and joined.response is not None and joined.response.error_code == E.NONE
    synced = broker.handle(SyncGroupRequest(G, joined.response.generation_id, member, assignments=((member, b""),)))
    synced = synced.response if isinstance(synced, Pending) else synced  # answered once its record is stored
    assert synced is not None and synced.error_code == E.NONE
    assert broker.handle(LeaveGroupRequest(G, (LeavingMember(member),))).error_code == E.NONE


def test_a_converted_classic_group_does_not_come_back_after_a_restart(tmp_path: Path):
    broker = open_broker(tmp_path)
    try:
        empty_classic_group(broker)
        joined = broker.handle(Hb(G, "m", 0, rebalance_timeout_ms=5_000, subscribed_topic_names=("t",),
                                  owned_partitions=()))
        assert joined.error_code == E.NONE and G not in broker.group_coordinator.classic_groups.groups
        epoch = joined.member_epoch
    finally:
        broker.close()
    again = open_broker(tmp_path)
    try:
        assert G not in again.group_coordinator.classic_groups.groups
        answer = again.handle(Hb(G, "m", epoch, owned_partitions=()))
        assert answer.error_code == E.UNKNOWN_MEMBER_ID, answer
        rejoined = again.handle(Hb(G, "m", 0, rebalance_timeout_ms=5_000, subscribed_topic_names=("t",),
                                   owned_partitions=()))
        assert rejoined.error_code == E.NONE
    finally:
        again.close()


def test_a_conversion_whose_tombstone_cannot_be_written_keeps_the_classic_group(tmp_path: Path):
    broker = open_broker(tmp_path)
    try:
        empty_classic_group(broker)
        coordinator = broker.group_coordinator
        coordinator._store_group = lambda group_id, value: int(E.NOT_COORDINATOR)  # type: ignore[method-assign]
        answer = broker.handle(Hb(G, "m", 0, rebalance_timeout_ms=5_000, subscribed_topic_names=("t",),
                                  owned_partitions=()))
        assert answer.error_code == E.NOT_COORDINATOR
        assert G in coordinator.classic_groups.groups and G not in broker.consumer_groups.groups
    finally:
        broker.close()

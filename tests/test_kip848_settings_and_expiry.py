"""The KIP-848 groups' own settings (``group.consumer.session.timeout.ms``, ``.heartbeat.interval.ms``,
``.assignors``) checked and acted on by a broker made with them; the client id and host a member joined with
(the request header's, through the server's ``with_client``), kept and described; and an Empty consumer group
deleted by the coordinator's cleanup once no committed offset is left (Kafka's ``cleanupGroupMetadata``), all
under a controllable clock."""

from __future__ import annotations

import pytest

from idemcore import Broker
from idemcore.broker.config import BrokerConfig
from idemcore.broker.group.consumer_group import EMPTY, ConsumerGroups
from idemcore.errors import ConfigError
from idemcore.net.consumer_group import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from idemcore.net.messages import OffsetCommitRequest, OffsetEntry
from idemcore.net.wire.membership import with_client
from idemcore.protocol.codes import ErrorCode as E

G = "g"
T0 = 1_000_000
RETENTION_MS = 60_000
CHECK_MS = 1_000


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> int:
        return self.now


def broker(clock: Clock, **settings: str) -> Broker:
    properties = {"offsets.retention.minutes": str(RETENTION_MS // 60_000),
                  "offsets.retention.check.interval.ms": str(CHECK_MS), **settings}
    made = Broker({"t": 4, "u": 2}, offsets_topic_partitions=1, clock=clock,
                  settings=BrokerConfig.from_properties(properties))
    made.group_coordinator  # noqa: B018 - made now, so the first housekeeping sets its cleanup at T0 + CHECK_MS
    made.run_housekeeping()
    return made


def join(target: Broker, member: str, topics: tuple[str, ...] = ("t",), assignor: str | None = None,
         client: tuple[str, str] = ("", "")) -> ConsumerGroupHeartbeatResponse:
    answer = target.handle(ConsumerGroupHeartbeatRequest(
        G, member, 0, rebalance_timeout_ms=5_000, subscribed_topic_names=topics, server_assignor=assignor,
        owned_partitions=(), client_id=client[0], client_host=client[1]))
    assert isinstance(answer, ConsumerGroupHeartbeatResponse)
    return answer


def leave(target: Broker, member: str) -> None:
    answer = target.handle(ConsumerGroupHeartbeatRequest(G, member, -1))
    assert answer.error_code == E.NONE, answer


def housekeeping_at(target: Broker, clock: Clock, now: int) -> None:
    clock.now = now
    target.run_housekeeping()


# ------------------------------------------------------------ the settings


def test_the_settings_default_to_kafkas_and_refuse_a_bad_value_in_one_line():
    assert BrokerConfig.from_properties({}).consumer_groups_kwargs() == {
        "session_timeout_ms": 45_000, "heartbeat_interval_ms": 5_000, "assignors": ("uniform", "range")}
    given = BrokerConfig.from_properties({"group.consumer.session.timeout.ms": "7000",
                                          "group.consumer.heartbeat.interval.ms": "700",
                                          "group.consumer.assignors": " range , uniform "})
    assert given.consumer_groups_kwargs() == {
        "session_timeout_ms": 7_000, "heartbeat_interval_ms": 700, "assignors": ("range", "uniform")}
    for name, value, words in (("group.consumer.session.timeout.ms", "0", "at least 1"),
                               ("group.consumer.session.timeout.ms", "ten", "not a number of type INT"),
                               ("group.consumer.heartbeat.interval.ms", "-5", "at least 1"),
                               ("group.consumer.assignors", "uniform,sticky", "'sticky' is not one of uniform, range"),
                               ("group.consumer.assignors", " ", "name at least one server assignor")):
        with pytest.raises(ConfigError) as refused:
            BrokerConfig.from_properties({name: value}, {name: "test.properties"})
        message = str(refused.value)
        assert "\n" not in message and words in message
        assert message.startswith(f"invalid value {value!r} for {name} (from test.properties)"), message


def test_a_broker_tells_members_its_heartbeat_interval_and_times_them_out_at_its_session():
    clock = Clock()
    target = broker(clock, **{"group.consumer.session.timeout.ms": "7000",
                              "group.consumer.heartbeat.interval.ms": "700"})
    joined = join(target, "m")
    assert joined.error_code == E.NONE and joined.heartbeat_interval_ms == 700
    beat = target.handle(ConsumerGroupHeartbeatRequest(G, "m", joined.member_epoch, owned_partitions=None))
    assert beat.error_code == E.NONE and beat.heartbeat_interval_ms == 700
    housekeeping_at(target, clock, T0 + 6_999)
    assert "m" in target.consumer_groups.groups[G].members  # Kafka's default (45 s) would keep it too
    housekeeping_at(target, clock, T0 + 7_000)
    assert target.consumer_groups.groups[G].members == {}  # not the default session: gone at 7 s


def test_a_broker_serves_the_assignors_it_is_given_the_first_the_default():
    clock = Clock()
    target = broker(clock, **{"group.consumer.assignors": "range"})
    refused = join(target, "m", assignor="uniform")
    assert refused.error_code == E.UNSUPPORTED_ASSIGNOR and "Supported assignors: range." in refused.error_message
    assert join(target, "m").error_code == E.NONE
    described = target.handle(ConsumerGroupDescribeRequest((G,))).groups[0]
    assert described.assignor_name == "range"
    # The default order names uniform first.
    other = broker(Clock())
    join(other, "m")
    assert other.handle(ConsumerGroupDescribeRequest((G,))).groups[0].assignor_name == "uniform"


# ------------------------------------------------------------ client id and host


def test_the_server_gives_a_heartbeat_the_headers_client_id_and_the_peers_host():
    request = ConsumerGroupHeartbeatRequest(G, "m", 0)
    given = with_client(request, "reader-1", ("127.0.0.5", 40_000))
    assert (given.client_id, given.client_host) == ("reader-1", "/127.0.0.5")
    assert with_client(request, None, None) == request  # no header id, no peer: empty, as before


def test_a_member_keeps_the_client_id_and_host_it_joined_with():
    clock = Clock()
    target = broker(clock)
    joined = join(target, "m", client=("reader-1", "/127.0.0.5"))
    target.handle(ConsumerGroupHeartbeatRequest(G, "m", joined.member_epoch, owned_partitions=None,
                                                client_id="other", client_host="/10.0.0.9"))
    member = target.handle(ConsumerGroupDescribeRequest((G,))).groups[0].members[0]
    assert (member.client_id, member.client_host) == ("reader-1", "/127.0.0.5")


# ------------------------------------------------------------ expiry


def commit(target: Broker, member: str, epoch: int, *entries: OffsetEntry) -> None:
    answer = target.handle(OffsetCommitRequest(G, entries, epoch, member))
    assert [r.error_code for r in answer.results] == [E.NONE] * len(entries), answer


def listed(target: Broker) -> set[str]:
    return {g.group_id for g in target.group_coordinator.list_groups()}


def test_an_empty_consumer_group_goes_with_its_last_expired_offset():
    clock = Clock()
    target = broker(clock)
    epoch = join(target, "m").member_epoch
    commit(target, "m", epoch, OffsetEntry("t", 0, 5))
    committed_at = clock.now
    leave(target, "m")
    assert target.consumer_groups.groups[G].state == EMPTY
    housekeeping_at(target, clock, committed_at + RETENTION_MS - 1)
    assert G in target.consumer_groups.groups and G in listed(target)  # its offset is not old enough
    housekeeping_at(target, clock, committed_at + RETENTION_MS + CHECK_MS)
    assert G not in target.consumer_groups.groups and G not in listed(target)
    assert target.group_coordinator.offset_fetch(G)[1] == {}
    gone = target.handle(ConsumerGroupDescribeRequest((G,))).groups[0]
    assert gone.error_code == E.GROUP_ID_NOT_FOUND


def test_an_empty_consumer_group_without_offsets_goes_at_the_next_cleanup():
    clock = Clock()
    target = broker(clock)
    join(target, "m")
    leave(target, "m")
    housekeeping_at(target, clock, T0 + CHECK_MS)
    assert G not in target.consumer_groups.groups and G not in listed(target)


def test_a_consumer_group_with_members_stays_and_keeps_the_offsets_of_its_topics():
    clock = Clock()
    target = broker(clock, **{"group.consumer.session.timeout.ms": str(10 * RETENTION_MS)})
    epoch = join(target, "m", topics=("t",)).member_epoch
    commit(target, "m", epoch, OffsetEntry("t", 0, 5), OffsetEntry("u", 0, 7))
    housekeeping_at(target, clock, T0 + RETENTION_MS + CHECK_MS)
    # By commit time, as Kafka's ConsumerGroup: "u" (no member subscribes to it) expired, "t" kept.
    assert set(target.group_coordinator.offset_fetch(G)[1]) == {("t", 0)}
    assert "m" in target.consumer_groups.groups[G].members and G in listed(target)
    # Once it is Empty, the subscription goes with the member and so does the offset, then the group.
    leave(target, "m")
    housekeeping_at(target, clock, T0 + RETENTION_MS + 2 * CHECK_MS)
    assert target.group_coordinator.offset_fetch(G)[1] == {}
    assert G not in target.consumer_groups.groups


def test_the_consumer_groups_the_broker_makes_are_the_ones_its_coordinator_cleans():
    target = broker(Clock())
    assert isinstance(target.consumer_groups, ConsumerGroups)
    assert target.group_coordinator.consumer_groups is target.consumer_groups

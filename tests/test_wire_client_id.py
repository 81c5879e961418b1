"""The request header's client id and the connection's host reach a JoinGroup (Kafka's ``RequestContext``): the
member id the coordinator makes starts with the client id, and DescribeGroups shows both; other requests pass
through unchanged."""

from __future__ import annotations

from idemcore.broker.group import GroupCoordinator
from idemcore.net.membership import MEMBER_ID_REQUIRED, HeartbeatRequest, JoinGroupRequest
from idemcore.net.wire.membership import with_client

from .test_group_membership import RANGE, Clock, FakeLog


def test_a_join_takes_the_headers_client_id_and_the_peers_host():
    request = JoinGroupRequest("g", 10_000, 10_000, "consumer", RANGE)
    joined = with_client(request, "billing-app", ("10.1.2.3", 40_000))
    assert (joined.client_id, joined.client_host) == ("billing-app", "/10.1.2.3")
    assert with_client(request, None, None) == request  # no client id in the header: "", no address: ""
    beat = HeartbeatRequest("g", 1, "m")
    assert with_client(beat, "billing-app", ("10.1.2.3", 1)) is beat


def test_the_member_id_starts_with_the_client_id():
    gc = GroupCoordinator(FakeLog(), Clock(), offsets_partitions=1, min_session_timeout_ms=1)
    gc.load(0, [])
    request = with_client(JoinGroupRequest("g", 10_000, 10_000, "consumer", RANGE), "billing-app", ("::1", 9, 0, 0))
    answer = gc.join_group(request)
    assert answer.error_code == MEMBER_ID_REQUIRED and answer.member_id.startswith("billing-app-")

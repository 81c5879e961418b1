"""That no request type escapes the checks, and that a random allow-set gives exactly the allowed partitions for
Produce, Fetch and Metadata."""

from __future__ import annotations

import typing
from dataclasses import dataclass
from unittest.mock import MagicMock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from idemcore.broker import Broker
from idemcore.broker.security import request_authorization as checks
from idemcore.broker.security.request_authorization import RequestRefused, authorized_handle
from idemcore.broker.security.session import KafkaPrincipal, Session
from idemcore.net import messages
from idemcore.net.messages import FetchPartition, FetchRequest, MetadataRequest, ProduceRequest
from idemcore.protocol.acls import AclOperation as Op
from idemcore.protocol.acls import AclResourceType as Kind
from idemcore.protocol.codes import ErrorCode
from idemcore.record.batch import RecordBatch
from tests.authz_model import ALICE, AllowSet

TOPICS = {"a": 2, "b": 1, "c": 3}


def _served_types() -> set[type]:
    """Every type a broker answers: alone, in a cluster (ClusterMember's), and in the simulated cluster."""
    from idemcore.broker.cluster_member import ClusterMember

    with Broker({"a": 1}) as broker:
        served = set(broker._handlers)
    return served | set(ClusterMember.handlers(MagicMock()))


def test_every_request_type_the_broker_serves_has_a_check():
    served = _served_types()
    assert len(served) > 30
    unchecked = sorted(t.__name__ for t in served if t.__name__ not in checks.checked_types())
    assert unchecked == []


def test_every_request_type_of_the_message_union_has_a_check():
    names = {t.__name__ for t in typing.get_args(messages.Request)}
    names |= {t.__name__ for module in ("membership", "group_admin", "consumer_group")
              for t in typing.get_args(getattr(__import__(f"idemcore.net.{module}", fromlist=["x"]),
                                               {"membership": "MembershipRequest", "group_admin": "GroupAdminRequest",
                                                "consumer_group": "ConsumerGroupHeartbeatRequest"}[module]))}
    assert names - checks.checked_types() == set()


def test_the_acl_and_scram_apis_are_checked_by_name():
    for name in ("CreateAclsRequest", "DeleteAclsRequest", "DescribeAclsRequest", "AlterUserScramCredentialsRequest",
                 "DescribeUserScramCredentialsRequest"):
        assert name in checks.checked_types()


# Stand-ins for the ACL messages of net/acls.py (their own module: the refusal is found beside the request).
@dataclass(frozen=True)
class DescribeAclsRequest:
    request_id: int = 0


@dataclass(frozen=True)
class DescribeAclsResponse:
    error_code: int
    request_id: int = 0
    error_message: str | None = None


@dataclass(frozen=True)
class CreateAclsRequest:
    request_id: int = 0


@dataclass(frozen=True)
class CreateAclsResponse:
    results: tuple[int, ...]
    request_id: int = 0


def test_a_cluster_checked_api_is_refused_with_its_own_response_type(monkeypatch):
    from idemcore.broker.security.request_authorization import CLUSTER_REFUSALS
    from idemcore.net import acls
    from idemcore.protocol.acls import AclBindingFilter

    sent: list[object] = []
    refused = authorized_handle(sent.append, AllowSet(), ALICE, DescribeAclsRequest(request_id=4))
    assert refused == DescribeAclsResponse(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, 4) and sent == []
    # The real messages: CreateAcls' and DeleteAcls' per-item results come from the table.
    real = authorized_handle(sent.append, AllowSet(), ALICE, acls.DeleteAclsRequest((AclBindingFilter(),) * 2, 5))
    assert real == acls.DeleteAclsResponse((acls.DeleteAclsFilterResult(ErrorCode.CLUSTER_AUTHORIZATION_FAILED),) * 2,
                                           5) and sent == []
    monkeypatch.delitem(CLUSTER_REFUSALS, "CreateAclsRequest")
    with pytest.raises(RequestRefused, match="needs"):  # per-item results: the table entry is needed
        authorized_handle(sent.append, AllowSet(), ALICE, CreateAclsRequest())
    allowed = AllowSet().allow_cluster(Op.DESCRIBE, Op.ALTER)
    authorized_handle(sent.append, allowed, ALICE, CreateAclsRequest())
    authorized_handle(sent.append, allowed, ALICE, DescribeAclsRequest())
    assert len(sent) == 2


# ---------------------------------------------------------------- random allow-sets

_ops = st.sampled_from([Op.WRITE, Op.READ, Op.DESCRIBE])
_grants = st.sets(st.tuples(st.sampled_from(["User:alice", "User:bob"]), _ops, st.sampled_from(sorted(TOPICS))))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(grants=_grants, names=st.lists(st.sampled_from([*sorted(TOPICS), "zz"]), max_size=5))
def test_a_random_allow_set_gives_exactly_the_allowed_partitions(grants, names):
    model = AllowSet({(principal, op, Kind.TOPIC, topic) for principal, op, topic in grants})
    mine = {(op, topic) for principal, op, topic in grants if principal == "User:alice"}
    every = [(topic, p) for topic, count in sorted(TOPICS.items()) for p in range(count)]
    with Broker(TOPICS, auto_create_topics=False) as broker:
        broker.authorizer = model
        produced = broker.handle_from(ALICE, ProduceRequest(tuple(RecordBatch(t, p, [b"v"]) for t, p in every)))
        assert [(r.topic, r.partition) for r in produced.responses] == every
        for (topic, partition), answer in zip(every, produced.responses, strict=True):
            allowed = (Op.WRITE, topic) in mine
            assert answer.error_code == (0 if allowed else ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            assert broker.log(topic, partition).log_end_offset == (1 if allowed else 0)

        fetched = broker.handle_from(ALICE, FetchRequest(tuple(FetchPartition(t, p, 0) for t, p in every)))
        for (topic, _), answer in zip(every, fetched.partitions, strict=True):
            allowed = (Op.READ, topic) in mine
            assert answer.error_code == (0 if allowed else ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            assert (answer.records != b"") == (allowed and (Op.WRITE, topic) in mine)

        listed = broker.handle_from(ALICE, MetadataRequest(None))
        assert [t.name for t in listed.topics] == sorted(t for t in TOPICS if (Op.DESCRIBE, t) in mine)
        named = broker.handle_from(ALICE, MetadataRequest(tuple(names)))
        expected = [(n, ErrorCode.TOPIC_AUTHORIZATION_FAILED if (Op.DESCRIBE, n) not in mine
                     else ErrorCode.NONE if n in TOPICS else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION) for n in names]
        assert [(t.name, t.error_code) for t in named.topics] == expected


def test_another_principal_s_grants_do_not_count():
    bob = Session(KafkaPrincipal("User", "bob"), "10.0.0.8")
    model = AllowSet().allow(Op.WRITE, Kind.TOPIC, "a", principal="User:bob")
    with Broker(TOPICS) as broker:
        broker.authorizer = model
        assert broker.handle_from(bob, ProduceRequest((RecordBatch("a", 0, [b"v"]),))).responses[0].error_code == 0
        refused = broker.handle_from(ALICE, ProduceRequest((RecordBatch("a", 0, [b"v"]),)))
        assert refused.responses[0].error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED

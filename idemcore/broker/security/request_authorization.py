"""Every request checked as Kafka's ``KafkaApis`` checks it (3.x, with ``AuthHelper``), before and around
``Broker.handle``: which operation on which resource each API needs, and the error code a refusal carries.

A request whose parts name several resources (a Produce to several topics, a DescribeConfigs of several
resources, ...) is split as KafkaApis splits it: the authorized parts go to ``handle``, the others are answered
here with the refusal's code, and the two are merged into one response of the request's type (a
:class:`~idemcore.net.messages.Pending` answer is merged when it completes, into a new Pending). A request whose
check is all or nothing (JoinGroup, EndTxn, LeaderAndIsr, ...) is either handled or answered with the error alone.
A message type with no check here is refused (:class:`RequestRefused`), never passed through unchecked.

Each refusal is logged at INFO with the principal, the client's host, the operation and the resource, in the
form of Kafka's authorizer log (``kafka.authorizer.logger``), except where KafkaApis asks for no log (a check
with a fallback, as CREATE on the cluster before CREATE on each topic)."""

from __future__ import annotations

import dataclasses
import logging
import sys
from collections import defaultdict, deque
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from idemcore.broker.input_checks import illegal_topic_name
from idemcore.broker.security.acls import CLUSTER_NAME, AclOperation, AclResourceType
from idemcore.broker.security.session import Authorizer, Session
from idemcore.errors import IdemcoreError
from idemcore.net.admin import (
    DeletedRecords,
    DeleteRecordsResponse,
    DescribedTransaction,
    DescribeProducersResponse,
    DescribeTransactionsResponse,
    PartitionProducers,
)
from idemcore.net.configs import (
    AlterConfigsResponse,
    AlteredResource,
    DescribeConfigsResponse,
    DescribedResource,
    IncrementalAlterConfigsResponse,
    ResourceType,
)
from idemcore.net.consumer_group import (
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatResponse,
    DescribedConsumerGroup,
)
from idemcore.net.group_admin import DeleteGroupsResponse, DescribedGroup, DescribeGroupsResponse, OffsetDeleteResponse
from idemcore.net.membership import HeartbeatResponse, JoinGroupResponse, LeaveGroupResponse, SyncGroupResponse
from idemcore.net.messages import (
    GROUP_KEY,
    TRANSACTION_KEY,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnResponse,
    CreatedTopic,
    CreateTopicsResponse,
    EndTxnResponse,
    FetchedOffset,
    FetchedPartition,
    FetchResponse,
    FindCoordinatorResponse,
    InitProducerIdResponse,
    ListedOffset,
    ListOffsetsResponse,
    OffsetCommitResponse,
    OffsetFetchResponse,
    PartitionResponse,
    PartitionResult,
    Pending,
    ProduceResponse,
    TopicMetadata,
    TxnMarkerResult,
    TxnOffsetCommitResponse,
    WriteTxnMarkersResponse,
)
from idemcore.net.replication import (
    ElectLeadersResponse,
    EpochEndOffset,
    LeaderAndIsrResponse,
    OffsetForLeaderEpochResponse,
    StopReplicaResponse,
    UpdateMetadataResponse,
)
from idemcore.protocol.codes import ErrorCode
from idemcore.protocol.constants import INTERNAL_TOPICS

log = logging.getLogger(__name__)

__all__ = ["CHECKED_BY_NAME", "RequestRefused", "authorized_handle", "checked_types"]

Op, Kind = AclOperation, AclResourceType
TOPIC, GROUP, CLUSTER, TXN = Kind.TOPIC, Kind.GROUP, Kind.CLUSTER, Kind.TRANSACTIONAL_ID
TOPIC_DENIED = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
GROUP_DENIED = int(ErrorCode.GROUP_AUTHORIZATION_FAILED)
CLUSTER_DENIED = int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
TXN_DENIED = int(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)

Handle = Callable[[Any], Any]


class RequestRefused(IdemcoreError):
    """No answer can be given to the request: its connection is to be closed (Kafka closes it after an acks=0
    Produce with a refused partition, and for a request it has no handler for)."""


class _Context:
    """One request's checks: the authorizer's answers (asked once per resource and operation), the refusals logged,
    and what the broker knows of its topics."""

    def __init__(self, authorizer: Authorizer, session: Session, request_name: str,
                 partitions_of: Callable[[str], int | None] | None, auto_create_topics: bool) -> None:
        self.authorizer = authorizer
        self.session = session
        self.request_name = request_name
        self.partitions_of = partitions_of
        self.auto_create_topics = auto_create_topics
        self._answers: dict[tuple[AclOperation, AclResourceType, str], bool] = {}
        self._logged: set[tuple[AclOperation, AclResourceType, str]] = set()

    def allowed(self, op: AclOperation, kind: AclResourceType, name: str, *, log_denied: bool = True) -> bool:
        key = (op, kind, name)
        answer = self._answers.get(key)
        if answer is None:
            answer = self._answers[key] = bool(self.authorizer.authorize(self.session, op, kind, name))
        if not answer and log_denied and key not in self._logged:
            self._logged.add(key)
            log.info("Principal = %s is Denied Operation = %s from host = %s on resource = %s:LITERAL:%s for "
                     "request = %s", self.session.principal, op.kafka_name, self.session.client_host,
                     kind.kafka_name, name, self.request_name)
        return answer

    def cluster(self, op: AclOperation, *, log_denied: bool = True) -> bool:
        return self.allowed(op, CLUSTER, CLUSTER_NAME, log_denied=log_denied)

    def denied(self, op: AclOperation, kind: AclResourceType, names: Iterable[str]) -> set[str]:
        """The names of ``names`` on which ``op`` is refused (Kafka's ``filterByAuthorized``, inverted)."""
        return {name for name in dict.fromkeys(names) if not self.allowed(op, kind, name)}

    def topic_exists(self, topic: str, partition: int | None = None) -> bool:
        """Whether the broker's metadata has ``topic`` (and ``partition`` of it); True when it was not told."""
        if self.partitions_of is None:
            return True
        count = self.partitions_of(topic)
        return count is not None and (partition is None or 0 <= partition < count)


# ---------------------------------------------------------------- merging the broker's answer with the refusals


def then(answer: Any, merge: Callable[[Any], Any]) -> Any:
    """``merge(answer)``, or for a Pending answer a new Pending completed with ``merge`` of the broker's."""
    if isinstance(answer, Pending):
        merged = Pending()

        def complete(response: Any) -> None:
            try:
                merged.complete(merge(response))
            except Exception:  # never leave the client waiting: the broker's answer alone (the refused parts missing)
                log.exception("merging the refusals into a %s failed", type(response).__name__)
                if not merged.done:
                    merged.complete(response)
        answer.add_done_callback(complete)
        return merged
    return merge(answer)


def _split(handle: Handle, request: Any, items: Sequence[Any], refusals: Sequence[Any | None],
           rebuild: Callable[[list[int]], Any], answers_field: str, empty: Any,
           item_key: Callable[[Any], Any], answer_key: Callable[[Any], Any]) -> Any:
    """``request`` as it is when nothing is refused; else the items whose refusal is None sent on (``rebuild``
    makes the request of those, by index) and the rest answered with their refusals, in the request's order: the
    broker's answers are matched to the items by key (a key asked twice is answered in turn). With nothing left to
    send, the broker is not asked (``empty`` is merged)."""
    if all(refusal is None for refusal in refusals):
        return handle(request)
    kept = [index for index, refusal in enumerate(refusals) if refusal is None]

    def merge(response: Any) -> Any:
        by_key: defaultdict[Any, deque[Any]] = defaultdict(deque)
        for answer in getattr(response, answers_field):
            by_key[answer_key(answer)].append(answer)
        merged = []
        for item, refusal in zip(items, refusals, strict=True):
            if refusal is not None:
                merged.append(refusal)
            elif by_key[item_key(item)]:
                merged.append(by_key[item_key(item)].popleft())
        merged.extend(answer for answers in by_key.values() for answer in answers)  # none expected; never lost
        return dataclasses.replace(response, **{answers_field: tuple(merged)})

    if not kept:
        return merge(empty)
    return then(handle(rebuild(kept)), merge)


def _tp(item: Any) -> tuple[Any, Any]:
    return item.topic, item.partition


def _first_two(item: Sequence[Any]) -> tuple[Any, Any]:
    return item[0], item[1]


def _pick(values: Sequence[Any], indexes: list[int]) -> tuple[Any, ...]:
    return tuple(values[index] for index in indexes)


# ---------------------------------------------------------------- the checks, by message type name

Check = Callable[[_Context, Handle, Any], Any]
#: The check of each message type, by its class name (so a type of a module merged later is found by name).
CHECKED_BY_NAME: dict[str, Check] = {}


def _check(*names: str) -> Callable[[Check], Check]:
    def register(function: Check) -> Check:
        for name in names:
            CHECKED_BY_NAME[name] = function
        return function
    return register


def checked_types() -> frozenset[str]:
    """The names of the message types that have a check."""
    return frozenset(CHECKED_BY_NAME)


@_check("ProduceRequest")
def _produce(c: _Context, handle: Handle, r: Any) -> Any:
    """WRITE on the transactional id for transactional batches (else the whole request is refused), then WRITE on
    each topic (TOPIC_AUTHORIZATION_FAILED for the others); an acks=0 request with a refusal closes the
    connection, after the authorized batches are written (Kafka's ``handleProduceRequest``)."""
    batches = tuple(r.batches)
    if any(batch.is_transactional for batch in batches):
        transactional_id = getattr(r, "transactional_id", None)
        if transactional_id is None or not c.allowed(Op.WRITE, TXN, transactional_id):
            if r.acks == 0:
                raise RequestRefused(f"an acks=0 produce for transactional id {transactional_id!r} refused")
            return ProduceResponse(r.request_id, tuple(PartitionResponse(b.topic, b.partition, TXN_DENIED)
                                                      for b in batches))
    denied = c.denied(Op.WRITE, TOPIC, (batch.topic for batch in batches))
    if r.acks == 0:
        if not denied:
            return handle(r)
        kept = tuple(batch for batch in batches if batch.topic not in denied)
        if kept:
            handle(dataclasses.replace(r, batches=kept))
        raise RequestRefused(f"an acks=0 produce to topics {sorted(denied)} refused")
    refusals = [PartitionResponse(b.topic, b.partition, TOPIC_DENIED) if b.topic in denied else None
                for b in batches]
    return _split(handle, r, batches, refusals, lambda kept: dataclasses.replace(r, batches=_pick(batches, kept)),
                  "responses", ProduceResponse(r.request_id), _tp, _tp)


@_check("FetchRequest")
def _fetch(c: _Context, handle: Handle, r: Any) -> Any:
    """A follower's fetch (replica id >= 0) needs CLUSTER_ACTION on the cluster; a consumer's, READ on each topic."""
    parts = tuple(r.partitions)
    if r.replica_id >= 0:
        if c.cluster(Op.CLUSTER_ACTION):
            return handle(r)
        return FetchResponse(tuple(FetchedPartition(p.topic, p.partition, TOPIC_DENIED) for p in parts),
                             request_id=r.request_id)
    denied = c.denied(Op.READ, TOPIC, (p.topic for p in parts))
    refusals = [FetchedPartition(p.topic, p.partition, TOPIC_DENIED) if p.topic in denied else None for p in parts]
    return _split(handle, r, parts, refusals, lambda kept: dataclasses.replace(r, partitions=_pick(parts, kept)),
                  "partitions", FetchResponse((), request_id=r.request_id), _tp, _tp)


@_check("ListOffsetsRequest")
def _list_offsets(c: _Context, handle: Handle, r: Any) -> Any:
    """DESCRIBE on each topic."""
    parts = tuple(r.partitions)
    denied = c.denied(Op.DESCRIBE, TOPIC, (p[0] for p in parts))
    refusals = [ListedOffset(p[0], p[1], TOPIC_DENIED) if p[0] in denied else None for p in parts]

    def rebuild(kept: list[int]) -> Any:
        epochs = r.current_leader_epochs
        return dataclasses.replace(r, partitions=_pick(parts, kept),
                                   current_leader_epochs=None if epochs is None else _pick(epochs, kept))
    return _split(handle, r, parts, refusals, rebuild, "results", ListOffsetsResponse((), r.request_id), _first_two,
                  _tp)


@_check("MetadataRequest")
def _metadata(c: _Context, handle: Handle, r: Any) -> Any:
    """Only topics the principal may DESCRIBE: all topics filtered silently; a named topic refused with
    TOPIC_AUTHORIZATION_FAILED. A missing topic to be made on the way needs CREATE on the cluster or on the topic
    (TOPIC_AUTHORIZATION_FAILED otherwise, and it is not made)."""
    names = r.topics
    if names is None:
        return then(handle(r), lambda response: dataclasses.replace(response, topics=tuple(
            topic for topic in response.topics if c.allowed(Op.DESCRIBE, TOPIC, topic.name, log_denied=False))))
    names = tuple(names)
    refusals: dict[str, TopicMetadata] = {name: TopicMetadata(name, TOPIC_DENIED)
                                          for name in c.denied(Op.DESCRIBE, TOPIC, names)}
    authorized = [name for name in dict.fromkeys(names) if name not in refusals]
    if r.allow_auto_topic_creation and c.auto_create_topics:
        missing = [name for name in authorized if not c.topic_exists(name)]
        if missing and not c.cluster(Op.CREATE, log_denied=False):
            for name in c.denied(Op.CREATE, TOPIC, missing):
                refusals[name] = TopicMetadata(name, TOPIC_DENIED, is_internal=name in INTERNAL_TOPICS)
    if not refusals:
        return handle(r)

    def merge(response: Any) -> Any:
        answers: dict[str, Any] = {}
        for topic in response.topics:
            answers.setdefault(topic.name, topic)
        merged = [refusals.get(name) or answers.get(name) for name in names]
        return dataclasses.replace(response, topics=tuple(topic for topic in merged if topic is not None))
    # Always asked (even for no topic): the answer carries the brokers and the controller.
    return then(handle(dataclasses.replace(r, topics=tuple(name for name in names if name not in refusals))), merge)


@_check("CreateTopicsRequest")
def _create_topics(c: _Context, handle: Handle, r: Any) -> Any:
    """CREATE on the cluster, else on each topic ("Authorization failed."); a topic named twice is the broker's
    INVALID_REQUEST whatever the ACLs; the configs and partition count of a made topic only with DESCRIBE_CONFIGS
    on it."""
    topics = tuple(r.topics)
    names = [getattr(topic, "name", None) for topic in topics]
    repeated = {name for name in names if names.count(name) > 1}
    denied: set[Any] = set()
    if not c.cluster(Op.CREATE, log_denied=False):
        denied = c.denied(Op.CREATE, TOPIC, (n for n in names if isinstance(n, str) and n not in repeated))
    refusals = [CreatedTopic(str(name), TOPIC_DENIED, "Authorization failed.") if name in denied else None
                for name in names]

    def hide_configs(response: Any) -> Any:  # as Kafka's createTopics leaves out configs and partition count
        return dataclasses.replace(response, results=tuple(
            result if result.error_code != ErrorCode.NONE
            or c.allowed(Op.DESCRIBE_CONFIGS, TOPIC, result.name, log_denied=False)
            else dataclasses.replace(result, configs=(), partitions=-1) for result in response.results))

    def rebuild(kept: list[int]) -> Any:
        return dataclasses.replace(r, topics=_pick(topics, kept))
    name_of = lambda item: getattr(item, "name", None)  # noqa: E731
    # The broker answers a repeated name once: its answer goes to the first mention, the others get none.
    answer = _split(handle, r, topics, refusals, rebuild, "results", CreateTopicsResponse((), r.request_id), name_of,
                    name_of)
    return then(answer, hide_configs)


@_check("InitProducerIdRequest")
def _init_producer_id(c: _Context, handle: Handle, r: Any) -> Any:
    """WRITE on the transactional id; without one, IDEMPOTENT_WRITE on the cluster or WRITE on some topic
    (KIP-679's ``authorizeByResourceType``), else CLUSTER_AUTHORIZATION_FAILED."""
    if r.transactional_id is not None:
        if not c.allowed(Op.WRITE, TXN, r.transactional_id):
            return InitProducerIdResponse(TXN_DENIED, request_id=r.request_id)
    elif not c.cluster(Op.IDEMPOTENT_WRITE, log_denied=False) \
            and not c.authorizer.authorize_by_resource_type(c.session, Op.WRITE, TOPIC):
        log.info("Principal = %s is Denied Operation = IdempotentWrite from host = %s on resource = Cluster:LITERAL:"
                 "%s nor Write on any topic for request = %s", c.session.principal, c.session.client_host,
                 CLUSTER_NAME, c.request_name)
        return InitProducerIdResponse(CLUSTER_DENIED, request_id=r.request_id)
    return handle(r)


@_check("AddPartitionsToTxnRequest")
def _add_partitions_to_txn(c: _Context, handle: Handle, r: Any) -> Any:
    """WRITE on the transactional id (every partition TRANSACTIONAL_ID_AUTHORIZATION_FAILED otherwise), then
    WRITE on each topic (an internal topic never): any refused or unknown partition fails the whole request, the
    others answered OPERATION_NOT_ATTEMPTED."""
    parts = tuple(r.partitions)
    if not c.allowed(Op.WRITE, TXN, r.transactional_id):
        return AddPartitionsToTxnResponse(tuple(PartitionResult(t, p, TXN_DENIED) for t, p in parts), r.request_id)
    denied = {t for t, _ in parts if t in INTERNAL_TOPICS}
    denied |= c.denied(Op.WRITE, TOPIC, (t for t, _ in parts if t not in INTERNAL_TOPICS))
    missing = {(t, p) for t, p in parts if t not in denied and not c.topic_exists(t, p)}
    if not denied and not missing:
        return handle(r)
    return AddPartitionsToTxnResponse(tuple(
        PartitionResult(t, p, TOPIC_DENIED if t in denied else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                        if (t, p) in missing else ErrorCode.OPERATION_NOT_ATTEMPTED) for t, p in parts), r.request_id)


@_check("AddOffsetsToTxnRequest")
def _add_offsets_to_txn(c: _Context, handle: Handle, r: Any) -> Any:
    """WRITE on the transactional id, then READ on the group."""
    if not c.allowed(Op.WRITE, TXN, r.transactional_id):
        return AddOffsetsToTxnResponse(TXN_DENIED, r.request_id)
    if not c.allowed(Op.READ, GROUP, r.group_id):
        return AddOffsetsToTxnResponse(GROUP_DENIED, r.request_id)
    return handle(r)


@_check("EndTxnRequest")
def _end_txn(c: _Context, handle: Handle, r: Any) -> Any:
    """WRITE on the transactional id."""
    if not c.allowed(Op.WRITE, TXN, r.transactional_id):
        return EndTxnResponse(TXN_DENIED, r.request_id)
    return handle(r)


def _offsets_split(c: _Context, handle: Handle, r: Any, empty: Any) -> Any:
    """OffsetCommit's and TxnOffsetCommit's per-topic READ, the others sent on."""
    offsets = tuple(r.offsets)
    denied = c.denied(Op.READ, TOPIC, (entry.topic for entry in offsets))
    refusals = [PartitionResult(e.topic, e.partition, TOPIC_DENIED) if e.topic in denied else None for e in offsets]
    return _split(handle, r, offsets, refusals, lambda kept: dataclasses.replace(r, offsets=_pick(offsets, kept)),
                  "results", empty, _tp, _tp)


@_check("TxnOffsetCommitRequest")
def _txn_offset_commit(c: _Context, handle: Handle, r: Any) -> Any:
    """WRITE on the transactional id, READ on the group (each refusal answers every partition), READ on each
    topic."""
    for allowed, code in ((lambda: c.allowed(Op.WRITE, TXN, r.transactional_id), TXN_DENIED),
                          (lambda: c.allowed(Op.READ, GROUP, r.group_id), GROUP_DENIED)):
        if not allowed():
            return TxnOffsetCommitResponse(tuple(PartitionResult(e.topic, e.partition, code) for e in r.offsets),
                                           r.request_id)
    return _offsets_split(c, handle, r, TxnOffsetCommitResponse((), r.request_id))


@_check("OffsetCommitRequest")
def _offset_commit(c: _Context, handle: Handle, r: Any) -> Any:
    """READ on the group (every partition GROUP_AUTHORIZATION_FAILED otherwise), READ on each topic."""
    if not c.allowed(Op.READ, GROUP, r.group_id):
        return OffsetCommitResponse(tuple(PartitionResult(e.topic, e.partition, GROUP_DENIED) for e in r.offsets),
                                    r.request_id)
    return _offsets_split(c, handle, r, OffsetCommitResponse((), r.request_id))


@_check("OffsetFetchRequest")
def _offset_fetch(c: _Context, handle: Handle, r: Any) -> Any:
    """DESCRIBE on the group (GROUP_AUTHORIZATION_FAILED for the request); of all the group's offsets only those
    of topics the principal may DESCRIBE; a named partition of another topic TOPIC_AUTHORIZATION_FAILED."""
    if not c.allowed(Op.DESCRIBE, GROUP, r.group_id):
        return OffsetFetchResponse((), GROUP_DENIED, r.request_id)
    if r.partitions is None:
        return then(handle(r), lambda response: dataclasses.replace(response, offsets=tuple(
            entry for entry in response.offsets if c.allowed(Op.DESCRIBE, TOPIC, entry.topic))))
    parts = tuple(r.partitions)
    denied = c.denied(Op.DESCRIBE, TOPIC, (t for t, _ in parts))
    if not denied:
        return handle(r)

    def merge(response: Any) -> Any:
        if response.error_code != ErrorCode.NONE:  # a group-wide error answers alone, as the broker gives it
            return response
        answers = iter(response.offsets)
        return dataclasses.replace(response, offsets=tuple(
            FetchedOffset(t, p, error_code=TOPIC_DENIED) if t in denied else next(answers) for t, p in parts))
    # Asked even with no partition left: a group-wide error (NOT_COORDINATOR...) is still the broker's to give.
    return then(handle(dataclasses.replace(r, partitions=tuple(tp for tp in parts if tp[0] not in denied))), merge)


@_check("FindCoordinatorRequest")
def _find_coordinator(c: _Context, handle: Handle, r: Any) -> Any:
    """DESCRIBE on the group, or on the transactional id."""
    if r.key_type == GROUP_KEY and not c.allowed(Op.DESCRIBE, GROUP, r.key):
        return FindCoordinatorResponse(GROUP_DENIED, request_id=r.request_id)
    if r.key_type == TRANSACTION_KEY and not c.allowed(Op.DESCRIBE, TXN, r.key):
        return FindCoordinatorResponse(TXN_DENIED, request_id=r.request_id)
    return handle(r)


# ---------------------------------------------------------------- inter-broker requests: CLUSTER_ACTION


@_check("WriteTxnMarkersRequest")
def _write_txn_markers(c: _Context, handle: Handle, r: Any) -> Any:
    if c.cluster(Op.CLUSTER_ACTION):
        return handle(r)
    return WriteTxnMarkersResponse(r.request_id, tuple(
        TxnMarkerResult(m.producer_id, tuple(PartitionResponse(t, p, CLUSTER_DENIED) for t, p in m.partitions))
        for m in r.markers))


@_check("LeaderAndIsrRequest")
def _leader_and_isr(c: _Context, handle: Handle, r: Any) -> Any:
    if c.cluster(Op.CLUSTER_ACTION):
        return handle(r)
    return LeaderAndIsrResponse(CLUSTER_DENIED, tuple((p.topic, p.partition, CLUSTER_DENIED) for p in r.partitions),
                                r.request_id)


@_check("StopReplicaRequest")
def _stop_replica(c: _Context, handle: Handle, r: Any) -> Any:
    if c.cluster(Op.CLUSTER_ACTION):
        return handle(r)
    return StopReplicaResponse(CLUSTER_DENIED, tuple((p.topic, p.partition, CLUSTER_DENIED) for p in r.partitions),
                               r.request_id)


@_check("UpdateMetadataRequest")
def _update_metadata(c: _Context, handle: Handle, r: Any) -> Any:
    if c.cluster(Op.CLUSTER_ACTION):
        return handle(r)
    return UpdateMetadataResponse(CLUSTER_DENIED, r.request_id)


@_check("OffsetForLeaderEpochRequest")
def _offset_for_leader_epoch(c: _Context, handle: Handle, r: Any) -> Any:
    """CLUSTER_ACTION on the cluster (a follower), else DESCRIBE on each topic (a consumer, KIP-320)."""
    if c.cluster(Op.CLUSTER_ACTION, log_denied=False):
        return handle(r)
    parts = tuple(r.partitions)
    denied = c.denied(Op.DESCRIBE, TOPIC, (q.topic for q in parts))
    refusals = [EpochEndOffset(q.topic, q.partition, TOPIC_DENIED) if q.topic in denied else None for q in parts]
    return _split(handle, r, parts, refusals, lambda kept: dataclasses.replace(r, partitions=_pick(parts, kept)),
                  "partitions", OffsetForLeaderEpochResponse((), r.request_id), _tp, _tp)


@_check("ElectLeadersRequest")
def _elect_leaders(c: _Context, handle: Handle, r: Any) -> Any:
    """ALTER on the cluster."""
    if c.cluster(Op.ALTER):
        return handle(r)
    return ElectLeadersResponse(CLUSTER_DENIED, tuple((t, p, CLUSTER_DENIED, None) for t, p in r.partitions or ()),
                                r.request_id)


# ---------------------------------------------------------------- admin requests


@_check("DeleteRecordsRequest")
def _delete_records(c: _Context, handle: Handle, r: Any) -> Any:
    """DELETE on each topic."""
    parts = tuple(r.partitions)
    denied = c.denied(Op.DELETE, TOPIC, (p[0] for p in parts))
    refusals = [DeletedRecords(p[0], p[1], TOPIC_DENIED) if p[0] in denied else None for p in parts]
    return _split(handle, r, parts, refusals, lambda kept: dataclasses.replace(r, partitions=_pick(parts, kept)),
                  "partitions", DeleteRecordsResponse((), r.request_id), _first_two, _tp)


@_check("DescribeProducersRequest")
def _describe_producers(c: _Context, handle: Handle, r: Any) -> Any:
    """READ on each topic (an illegal name is the broker's INVALID_TOPIC_EXCEPTION first, as Kafka checks it)."""
    parts = tuple(r.partitions)
    denied = c.denied(Op.READ, TOPIC, (t for t, _ in parts if illegal_topic_name(t) is None))
    refusals = [PartitionProducers(t, p, TOPIC_DENIED) if t in denied else None for t, p in parts]
    return _split(handle, r, parts, refusals, lambda kept: dataclasses.replace(r, partitions=_pick(parts, kept)),
                  "partitions", DescribeProducersResponse((), r.request_id), _first_two, _tp)


@_check("DescribeTransactionsRequest")
def _describe_transactions(c: _Context, handle: Handle, r: Any) -> Any:
    """DESCRIBE on each transactional id; of a transaction's partitions only those of topics the principal may
    DESCRIBE."""
    ids = tuple(r.transactional_ids)
    denied = c.denied(Op.DESCRIBE, TXN, ids)
    refusals = [DescribedTransaction(i, TXN_DENIED) if i in denied else None for i in ids]

    def visible(response: Any) -> Any:
        return dataclasses.replace(response, transactions=tuple(dataclasses.replace(
            txn, topic_partitions=tuple(tp for tp in txn.topic_partitions if c.allowed(Op.DESCRIBE, TOPIC, tp[0])))
            for txn in response.transactions))
    key = lambda item: getattr(item, "transactional_id", item)  # noqa: E731
    answer = _split(handle, r, ids, refusals, lambda kept: dataclasses.replace(r, transactional_ids=_pick(ids, kept)),
                    "transactions", DescribeTransactionsResponse((), r.request_id), key, key)
    return then(answer, visible)


@_check("ListTransactionsRequest")
def _list_transactions(c: _Context, handle: Handle, r: Any) -> Any:
    """Only the transactional ids the principal may DESCRIBE."""
    return then(handle(r), lambda response: dataclasses.replace(response, transactions=tuple(
        txn for txn in response.transactions if c.allowed(Op.DESCRIBE, TXN, txn.transactional_id))))


# ---------------------------------------------------------------- configs

#: The message each refusal carries where Kafka's response has one (its exceptions' default messages).
_DENIED_MESSAGES = {TOPIC_DENIED: "Topic authorization failed.", GROUP_DENIED: "Group authorization failed.",
                    CLUSTER_DENIED: "Cluster authorization failed."}
#: Per config resource type: the ACL resource its check names and the refusal's code.
_CONFIG_RESOURCES: dict[int, tuple[AclResourceType, int]] = {
    ResourceType.TOPIC: (TOPIC, TOPIC_DENIED),
    ResourceType.BROKER: (CLUSTER, CLUSTER_DENIED),
    ResourceType.BROKER_LOGGER: (CLUSTER, CLUSTER_DENIED),
    ResourceType.CLIENT_METRICS: (CLUSTER, CLUSTER_DENIED),
    ResourceType.GROUP: (GROUP, GROUP_DENIED),
}


def _config_refusal(c: _Context, op: AclOperation, resource: Any, legal: frozenset[int]) -> tuple[int, str] | None:
    """The code and message refusing ``op`` on a config resource; None when allowed."""
    kind_code = _CONFIG_RESOURCES.get(resource.resource_type) if resource.resource_type in legal else None
    if kind_code is None:
        return int(ErrorCode.INVALID_REQUEST), f"Unexpected resource type {resource.resource_type} for resource " \
                                               f"{resource.resource_name}"
    kind, code = kind_code
    name = CLUSTER_NAME if kind is CLUSTER else resource.resource_name
    return None if c.allowed(op, kind, name) else (code, _DENIED_MESSAGES[code])


def _configs(c: _Context, handle: Handle, r: Any, op: AclOperation, legal: frozenset[int], answer_type: type,
             empty: Any) -> Any:
    resources = tuple(r.resources)
    refusals: list[Any] = []
    for resource in resources:
        refusal = _config_refusal(c, op, resource, legal)
        refusals.append(None if refusal is None else answer_type(resource.resource_type, resource.resource_name,
                                                                 refusal[0], refusal[1]))
    key = lambda item: (item.resource_type, item.resource_name)  # noqa: E731
    return _split(handle, r, resources, refusals, lambda kept: dataclasses.replace(r, resources=_pick(resources, kept)),
                  "results", empty, key, key)


_ALL_CONFIG_TYPES = frozenset(_CONFIG_RESOURCES)


@_check("DescribeConfigsRequest")
def _describe_configs(c: _Context, handle: Handle, r: Any) -> Any:
    """DESCRIBE_CONFIGS on each topic (or group), on the cluster for the broker's."""
    return _configs(c, handle, r, Op.DESCRIBE_CONFIGS, _ALL_CONFIG_TYPES, DescribedResource,
                    DescribeConfigsResponse((), r.request_id))


@_check("AlterConfigsRequest")
def _alter_configs(c: _Context, handle: Handle, r: Any) -> Any:
    """ALTER_CONFIGS on each topic, on the cluster for the broker's (the legacy API takes no other type)."""
    return _configs(c, handle, r, Op.ALTER_CONFIGS, frozenset({ResourceType.TOPIC, ResourceType.BROKER}),
                    AlteredResource, AlterConfigsResponse((), r.request_id))


@_check("IncrementalAlterConfigsRequest")
def _incremental_alter_configs(c: _Context, handle: Handle, r: Any) -> Any:
    """ALTER_CONFIGS on each topic (or group), on the cluster for the broker's and its loggers."""
    return _configs(c, handle, r, Op.ALTER_CONFIGS, _ALL_CONFIG_TYPES, AlteredResource,
                    IncrementalAlterConfigsResponse((), r.request_id))


# ---------------------------------------------------------------- groups


@_check("JoinGroupRequest", "SyncGroupRequest", "HeartbeatRequest", "LeaveGroupRequest",
        "ConsumerGroupHeartbeatRequest")
def _group_member(c: _Context, handle: Handle, r: Any) -> Any:
    """READ on the group (the classic protocol's four requests and KIP-848's heartbeat); a KIP-848 heartbeat's
    subscribed topic names also DESCRIBE each (TOPIC_AUTHORIZATION_FAILED otherwise, as Kafka 4.0 checks them)."""
    if c.allowed(Op.READ, GROUP, r.group_id):
        subscribed = getattr(r, "subscribed_topic_names", None) or ()
        denied = c.denied(Op.DESCRIBE, TOPIC, subscribed)
        if denied:
            return ConsumerGroupHeartbeatResponse(TOPIC_DENIED, request_id=r.request_id, error_message=(
                f"The member is not authorized to describe topics {sorted(denied)}"))
        return handle(r)
    refusal = {"JoinGroupRequest": JoinGroupResponse, "SyncGroupRequest": SyncGroupResponse,
               "HeartbeatRequest": HeartbeatResponse, "LeaveGroupRequest": LeaveGroupResponse,
               "ConsumerGroupHeartbeatRequest": ConsumerGroupHeartbeatResponse}[type(r).__name__]
    return refusal(GROUP_DENIED, request_id=r.request_id)


@_check("DescribeGroupsRequest", "ConsumerGroupDescribeRequest")
def _describe_groups(c: _Context, handle: Handle, r: Any) -> Any:
    """DESCRIBE on each group; a KIP-848 group whose members name a topic the principal may not DESCRIBE is
    answered TOPIC_AUTHORIZATION_FAILED without its members (as Kafka 4.0 answers it)."""
    ids = tuple(r.group_ids)
    denied = c.denied(Op.DESCRIBE, GROUP, ids)
    classic = type(r).__name__ == "DescribeGroupsRequest"
    refusals = [None if i not in denied else DescribedGroup(i, GROUP_DENIED, state="") if classic
                else DescribedConsumerGroup(i, GROUP_DENIED) for i in ids]
    empty = DescribeGroupsResponse((), r.request_id) if classic else ConsumerGroupDescribeResponse((), r.request_id)
    key = lambda item: getattr(item, "group_id", item)  # noqa: E731
    answer = _split(handle, r, ids, refusals, lambda kept: dataclasses.replace(r, group_ids=_pick(ids, kept)),
                    "groups", empty, key, key)
    return answer if classic else then(answer, lambda response: _hide_undescribed_topics(c, response))


def _hide_undescribed_topics(c: _Context, response: Any) -> Any:
    groups = []
    for group in response.groups:
        topics = {name for member in group.members for name in member.subscribed_topic_names}
        topics |= {tp[0] for member in group.members for tp in (*member.assignment, *member.target_assignment)}
        if c.denied(Op.DESCRIBE, TOPIC, sorted(topics)):
            group = DescribedConsumerGroup(group.group_id, TOPIC_DENIED, "The group has described topic(s) that the "
                                           "client is not authorized to describe.")
        groups.append(group)
    return dataclasses.replace(response, groups=tuple(groups))


@_check("ListGroupsRequest")
def _list_groups(c: _Context, handle: Handle, r: Any) -> Any:
    """Every group with DESCRIBE on the cluster, else those the principal may DESCRIBE."""
    if c.cluster(Op.DESCRIBE):
        return handle(r)
    return then(handle(r), lambda response: dataclasses.replace(response, groups=tuple(
        group for group in response.groups if c.allowed(Op.DESCRIBE, GROUP, group.group_id))))


@_check("DeleteGroupsRequest")
def _delete_groups(c: _Context, handle: Handle, r: Any) -> Any:
    """DELETE on each group."""
    ids = tuple(r.group_ids)
    denied = c.denied(Op.DELETE, GROUP, ids)
    refusals = [(i, GROUP_DENIED) if i in denied else None for i in ids]
    key = lambda item: item if isinstance(item, str) else item[0]  # noqa: E731
    return _split(handle, r, ids, refusals, lambda kept: dataclasses.replace(r, group_ids=_pick(ids, kept)),
                  "results", DeleteGroupsResponse((), r.request_id), key, key)


@_check("OffsetDeleteRequest")
def _offset_delete(c: _Context, handle: Handle, r: Any) -> Any:
    """DELETE on the group, READ on each topic; a group-wide error from the broker answers alone."""
    if not c.allowed(Op.DELETE, GROUP, r.group_id):
        return OffsetDeleteResponse(GROUP_DENIED, request_id=r.request_id)
    parts = tuple(r.partitions)
    denied = c.denied(Op.READ, TOPIC, (t for t, _ in parts))
    if not denied:
        return handle(r)

    def merge(response: Any) -> Any:
        if response.error_code != ErrorCode.NONE:
            return response
        answers = {(t, p): code for t, p, code in response.results}
        return dataclasses.replace(response, results=tuple(
            (t, p, TOPIC_DENIED if t in denied else answers.get((t, p), ErrorCode.NONE)) for t, p in parts))
    return then(handle(dataclasses.replace(r, partitions=tuple(tp for tp in parts if tp[0] not in denied))), merge)


# ---------------------------------------------------------------- ACL and SCRAM credential APIs (by name)

#: The cluster operation each ACL and SCRAM credential API needs (Kafka's ``AclApis`` and KIP-554's handlers).
#: Their messages arrive with the ACL (net/acls.py) and SASL (net/scram_credentials.py) work; a refusal is
#: built by :data:`CLUSTER_REFUSALS` when it has an entry for the type, else as :func:`_generic_refusal` can.
CLUSTER_CHECKED: dict[str, AclOperation] = {
    "CreateAclsRequest": Op.ALTER,
    "DeleteAclsRequest": Op.ALTER,
    "DescribeAclsRequest": Op.DESCRIBE,
    "AlterUserScramCredentialsRequest": Op.ALTER,
    "DescribeUserScramCredentialsRequest": Op.DESCRIBE,
}
#: MERGE: the lead fills per-item refusals here (request -> response with every item CLUSTER_AUTHORIZATION_FAILED)
#: where the response has per-item results without defaults (CreateAcls' and DeleteAcls' results, ...).
CLUSTER_REFUSALS: dict[str, Callable[[Any, int], Any]] = {}


def _generic_refusal(request: Any, code: int) -> Any:
    """The response class beside the request's (``XRequest`` -> ``XResponse`` in its module) with ``error_code``
    and ``request_id`` set; :class:`RequestRefused` when it cannot be built so (a field with no default)."""
    name = type(request).__name__
    response_type = getattr(sys.modules.get(type(request).__module__), name[:-len("Request")] + "Response", None)
    if not isinstance(response_type, type) or not dataclasses.is_dataclass(response_type):
        raise RequestRefused(f"{name} refused: no response type to answer CLUSTER_AUTHORIZATION_FAILED with")
    values = {"error_code": code, "request_id": getattr(request, "request_id", 0)}
    fields = {f.name: f for f in dataclasses.fields(response_type)}
    for key in [key for key in values if key not in fields]:
        del values[key]
    missing = [f.name for f in fields.values() if f.name not in values and f.default is dataclasses.MISSING
               and f.default_factory is dataclasses.MISSING]
    if missing or "error_code" not in values:
        raise RequestRefused(f"{name} refused: {response_type.__name__} needs {missing or ['error_code']} filled")
    return response_type(**values)


def _cluster_checked(c: _Context, handle: Handle, r: Any) -> Any:
    name = type(r).__name__
    if c.cluster(CLUSTER_CHECKED[name]):
        return handle(r)
    refusal = CLUSTER_REFUSALS.get(name, _generic_refusal)
    return refusal(r, CLUSTER_DENIED)


for _name in CLUSTER_CHECKED:
    CHECKED_BY_NAME[_name] = _cluster_checked


# ---------------------------------------------------------------- the entry point


def authorized_handle(handle: Handle, authorizer: Authorizer, session: Session, message: Any, *,
                      partitions_of: Callable[[str], int | None] | None = None,
                      auto_create_topics: bool = True) -> Any:
    """``handle(message)`` for what ``session`` may do, the rest answered with Kafka's authorization errors, in
    one response of the request's type (or a Pending of one; None for an acks=0 produce).

    ``partitions_of``: the partition count of a topic the broker's metadata has, None for a topic it does not
    (which missing topics Metadata would make, which AddPartitionsToTxn partitions are unknown); None: every
    topic is taken as existing. ``auto_create_topics``: the broker's ``auto.create.topics.enable``.
    :class:`RequestRefused` when no answer may be given (the connection is to be closed)."""
    name = type(message).__name__
    check = CHECKED_BY_NAME.get(name)
    if check is None:
        log.info("Principal = %s from host = %s: refused a %s, a request with no authorization check",
                 session.principal, session.client_host, name)
        raise RequestRefused(f"a {name} has no authorization check: refused")
    context = _Context(authorizer, session, name.removesuffix("Request"), partitions_of, auto_create_topics)
    return check(context, handle, message)

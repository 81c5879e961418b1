"""Which broker each request goes to, and what its answers teach (what Kafka's ``Sender`` and ``Fetcher`` do
per partition leader, and the coordinator lookups of ``AbstractCoordinator`` and ``TransactionManager``).

- Produce, Fetch and ListOffsets go to each partition's leader: a request over partitions of several leaders is
  split into one part per leader, and the parts' answers joined back into one response.
- InitProducerId with a transactional id, AddPartitionsToTxn, AddOffsetsToTxn and EndTxn go to the transaction
  coordinator; TxnOffsetCommit, OffsetCommit, OffsetFetch and the classic group protocol's requests to the group
  coordinator; CreateTopics to the controller; the rest to any broker.
- Coordinators come from FindCoordinator (the clients' own, or the router's), cached, forgotten on
  NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE or when their connection fails; a leader that moved
  (NOT_LEADER_OR_FOLLOWER and the like) asks for the topic's metadata again.
- A request whose route is not known yet waits (at most ``request_timeout_ms``) while it is looked up.
"""

from __future__ import annotations

import logging
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from idemcore.net.membership import HeartbeatRequest, JoinGroupRequest, LeaveGroupRequest, SyncGroupRequest
from idemcore.net.messages import (
    GROUP_KEY,
    TRANSACTION_KEY,
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    CreateTopicsRequest,
    EndTxnRequest,
    EndTxnResponse,
    FetchRequest,
    FetchResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    PartitionResponse,
    ProduceRequest,
    ProduceResponse,
    Request,
    Response,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)
from idemcore.net.tcp.cluster_metadata import ClusterMetadata
from idemcore.net.tcp.connection import COORDINATOR, DATA, INTERNAL, Call, Connection
from idemcore.net.wire.client import PRODUCE, ClientApi, WireProtocolError, api_of, encode_produce
from idemcore.protocol.codes import ErrorCode

log = logging.getLogger(__name__)

#: Kafka's LEADER_NOT_AVAILABLE, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH (not in ErrorCode): a stale leader.
_LEADER_NOT_AVAILABLE, _FENCED_LEADER_EPOCH, _UNKNOWN_LEADER_EPOCH = 5, 74, 76
_STALE_LEADER = frozenset({ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                           _LEADER_NOT_AVAILABLE, _FENCED_LEADER_EPOCH, _UNKNOWN_LEADER_EPOCH,
                           ErrorCode.KAFKA_STORAGE_ERROR})
_NO_COORDINATOR = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE})
#: The classic group protocol's requests: to the group coordinator, like the offset requests.
_MEMBERSHIP = (JoinGroupRequest, SyncGroupRequest, HeartbeatRequest, LeaveGroupRequest)


@dataclass(slots=True)
class _Exchange:
    """One client request on its way: the parts it was split into (one per broker), and their answers."""

    client: str
    request: Request
    parts: int
    answers: list[Response] = field(default_factory=list)
    dead: bool = False


@dataclass(slots=True)
class _Waiting:
    client: str
    request: Request
    since_ms: int


class RoutingSettings(Protocol):
    """The owner's settings routing follows (read at each use: the owner may change them)."""

    request_timeout_ms: int
    retry_backoff_ms: int


class Router:
    """Routes each client's requests to their brokers and collects their answers per client.

    ``connect(client, node, role)``: the owner's connection (None while the node's address is not known);
    ``any_node(client)``: a broker to ask what any broker answers; ``now_ms()``: the owner's clock."""

    def __init__(self, metadata: ClusterMetadata, settings: RoutingSettings,
                 connect: Callable[[str, int, str], Connection | None], any_node: Callable[[str], int],
                 now_ms: Callable[[], int]) -> None:
        self.metadata = metadata
        self._settings = settings
        self._connect = connect
        self._any_node = any_node
        self._now_ms = now_ms
        self.coordinators: dict[tuple[int, str], int] = {}
        self._coordinator_lookups: dict[tuple[int, str], int] = {}  # key -> when it may be asked (again)
        self._coordinator_inflight: set[tuple[int, str]] = set()
        #: Producer id -> transactional id (from InitProducerId answers): Produce names a transaction's id.
        self._transactional_ids: dict[int, str] = {}
        #: Per client: its answered requests, and the errors its next poll raises.
        self.responses: dict[str, list[tuple[Request, Response]]] = defaultdict(list)
        self.errors: dict[str, list[Exception]] = defaultdict(list)
        #: Clients a connection of which broke (see :meth:`TcpTransport.lost`).
        self.broken: set[str] = set()
        self._exchanges: dict[str, set[int]] = defaultdict(set)  # client -> ids of its exchanges in flight
        self._live: dict[int, _Exchange] = {}
        self._waiting: deque[_Waiting] = deque()

    def send(self, client: str, request: Request) -> None:
        """Put ``request`` on its way, or on hold while its route is looked up."""
        if not self._dispatch(client, request):
            self._waiting.append(_Waiting(client, request, self._now_ms()))

    def route_waiting(self, now: int) -> None:
        """Route the requests that waited for metadata or a coordinator; give up those that waited too long."""
        for _ in range(len(self._waiting)):
            waiting = self._waiting.popleft()
            if self._dispatch(waiting.client, waiting.request):
                continue
            if now - waiting.since_ms >= self._settings.request_timeout_ms:
                log.warning("%s: gave up %s: no route within request_timeout_ms=%d", waiting.client,
                            type(waiting.request).__name__, self._settings.request_timeout_ms)
                continue
            self._waiting.append(waiting)

    def forget(self, client: str) -> None:
        """Drop what ``client`` has in flight, waiting and unread (its connections were closed)."""
        self.broken.discard(client)
        for exchange_id in self._exchanges.pop(client, set()):
            exchange = self._live.pop(exchange_id, None)
            if exchange is not None:
                exchange.dead = True
        self._waiting = deque(w for w in self._waiting if w.client != client)
        self.responses.pop(client, None)
        self.errors.pop(client, None)

    def coordinator_lost(self, node: int) -> None:
        """A coordinator connection to ``node`` failed: the coordinator may have moved, so look it up again."""
        for key in [k for k, v in self.coordinators.items() if v == node]:
            del self.coordinators[key]

    # ------------------------------------------------------------ coordinators

    def _coordinator(self, key_type: int, key: str) -> int | None:
        node = self.coordinators.get((key_type, key))
        if node is not None and self.metadata.address(node) is not None:
            return node
        self._lookup_coordinator(key_type, key)
        return None

    def _lookup_coordinator(self, key_type: int, key: str) -> None:
        wanted = (key_type, key)
        now = self._now_ms()
        if wanted in self._coordinator_inflight or now < self._coordinator_lookups.get(wanted, 0):
            return
        node = self._any_node(INTERNAL)
        connection = self._connect(INTERNAL, node, DATA)
        if connection is None:
            return
        self._coordinator_inflight.add(wanted)
        self._coordinator_lookups[wanted] = now + self._settings.retry_backoff_ms
        request = FindCoordinatorRequest(key, key_type)
        api = api_of(request)

        def answered(version: int, body: Any) -> None:
            self._coordinator_inflight.discard(wanted)
            response = api.decode(request, version, body)
            assert isinstance(response, FindCoordinatorResponse)
            self._learn_coordinator(request, response)

        def lost(why: str) -> None:
            self._coordinator_inflight.discard(wanted)

        connection.call(Call(api, lambda version: api.encode(request, version), answered, lost))

    def _learn_coordinator(self, request: FindCoordinatorRequest, response: FindCoordinatorResponse) -> None:
        if response.error_code == ErrorCode.NONE and response.node_id >= 0:
            self.coordinators[(request.key_type, request.key)] = response.node_id
            self.metadata.learn_broker(response.node_id, (response.host, response.port))

    def _forget_coordinator(self, key_type: int, key: str) -> None:
        self.coordinators.pop((key_type, key), None)

    # ------------------------------------------------------------ routing

    def _routes(self, request: Request) -> list[tuple[int | None, str, Request]] | None:
        """``(node, role, part)`` for each broker ``request`` goes to (node None: any broker); None while a route
        is not known."""
        if isinstance(request, ProduceRequest):
            batches: dict[int, list[Any]] = defaultdict(list)
            for batch in request.batches:
                leader = self.metadata.leader(batch.topic, batch.partition)
                if leader is None:
                    return None
                batches[leader].append(batch)
            if len(batches) <= 1:
                return [(node, DATA, request) for node in batches] or [(None, DATA, request)]
            return [(node, DATA, ProduceRequest(tuple(part), request.acks, request.timeout_ms, request.request_id))
                    for node, part in batches.items()]
        if isinstance(request, FetchRequest):
            wanted: dict[int, list[Any]] = defaultdict(list)
            for p in request.partitions:
                leader = self.metadata.leader(p.topic, p.partition)
                if leader is None:
                    return None
                wanted[leader].append(p)
            if len(wanted) <= 1:
                return [(node, DATA, request) for node in wanted] or [(None, DATA, request)]
            return [(node, DATA, FetchRequest(tuple(part), request.isolation_level, request.max_bytes,
                                               request.min_bytes, request.max_wait_ms, request.request_id))
                    for node, part in wanted.items()]
        if isinstance(request, ListOffsetsRequest):
            asked: dict[int, list[tuple[str, int, int]]] = defaultdict(list)
            for entry in request.partitions:
                leader = self.metadata.leader(entry[0], entry[1])
                if leader is None:
                    return None
                asked[leader].append(entry)
            if len(asked) <= 1:
                return [(node, DATA, request) for node in asked] or [(None, DATA, request)]
            return [(node, DATA, ListOffsetsRequest(tuple(part), request.isolation_level, request.request_id))
                    for node, part in asked.items()]
        if isinstance(request, InitProducerIdRequest) and request.transactional_id is None:
            return [(None, DATA, request)]
        if isinstance(request, (InitProducerIdRequest, AddPartitionsToTxnRequest, AddOffsetsToTxnRequest,
                                EndTxnRequest)):
            assert request.transactional_id is not None
            node = self._coordinator(TRANSACTION_KEY, request.transactional_id)
            return None if node is None else [(node, COORDINATOR, request)]
        if isinstance(request, (TxnOffsetCommitRequest, OffsetCommitRequest, OffsetFetchRequest, *_MEMBERSHIP)):
            node = self._coordinator(GROUP_KEY, request.group_id)
            return None if node is None else [(node, COORDINATOR, request)]
        if isinstance(request, CreateTopicsRequest) and self.metadata.controller in self.metadata.brokers:
            return [(self.metadata.controller, DATA, request)]
        return [(None, DATA, request)]  # Metadata, FindCoordinator, CreateTopics before any metadata: any broker

    def _dispatch(self, client: str, request: Request) -> bool:
        """Send ``request``'s parts; False when its route is not known yet (nothing was sent)."""
        routes = self._routes(request)
        if routes is None:
            return False
        connections = [self._connect(client, self._any_node(client) if node is None else node, role)
                       for node, role, _ in routes]
        if any(c is None for c in connections):
            self.metadata.want(set())
            return False
        exchange = _Exchange(client, request, len(routes))
        exchange_id = id(exchange)
        self._live[exchange_id] = exchange
        self._exchanges[client].add(exchange_id)
        expects_answer = not (isinstance(request, ProduceRequest) and request.acks == 0)
        for connection, (_, _, part) in zip(connections, routes, strict=True):
            assert connection is not None
            api = api_of(part)
            connection.call(Call(api, self._builder(api, part), self._on_part(exchange, api, part),
                                  self._on_lost(exchange), self._on_refused(exchange, api), expects_answer))
        if not expects_answer:
            self._finish(exchange)
        return True

    def _builder(self, api: ClientApi, part: Request) -> Callable[[int], Any]:
        if api is PRODUCE:
            assert isinstance(part, ProduceRequest)
            transactional = next((b for b in part.batches if b.is_transactional), None)
            txn_id = None if transactional is None else self._transactional_ids.get(transactional.producer_id)
            return lambda version: encode_produce(part, version, txn_id)
        return lambda version: api.encode(part, version)

    def _on_part(self, exchange: _Exchange, api: ClientApi, part: Request) -> Callable[[int, Any], None]:
        def answered(version: int, body: Any) -> None:
            try:
                response = api.decode(part, version, body)
            except (ValueError, TypeError, AttributeError, KeyError) as error:
                self._fail_exchange(exchange, WireProtocolError(f"{api.name} v{version}: unreadable answer: "
                                                                f"{type(error).__name__}: {error}"))
                return
            self._observe(part, response)
            if exchange.dead:
                return
            exchange.answers.append(response)
            if len(exchange.answers) == exchange.parts:
                self._finish(exchange)
        return answered

    def _on_refused(self, exchange: _Exchange, api: ClientApi) -> Callable[[str], None]:
        def refused(why: str) -> None:
            self._fail_exchange(exchange, WireProtocolError(why))
        return refused

    def _on_lost(self, exchange: _Exchange) -> Callable[[str], None]:
        def lost(why: str) -> None:
            if exchange.dead:
                return
            exchange.dead = True
            self._drop(exchange)
            self.broken.add(exchange.client)
            log.debug("%s: %s lost: %s", exchange.client, type(exchange.request).__name__, why)
        return lost

    def _fail_exchange(self, exchange: _Exchange, error: Exception) -> None:
        if exchange.dead:
            return
        exchange.dead = True
        self._drop(exchange)
        self.errors[exchange.client].append(error)

    def _drop(self, exchange: _Exchange) -> None:
        exchange_id = id(exchange)
        self._live.pop(exchange_id, None)
        owned = self._exchanges.get(exchange.client)
        if owned is not None:
            owned.discard(exchange_id)

    def _finish(self, exchange: _Exchange) -> None:
        exchange.dead = True
        self._drop(exchange)
        if not exchange.answers:
            return  # acks=0: nobody answers
        response = exchange.answers[0] if exchange.parts == 1 else _joined(exchange.request, exchange.answers)
        self.responses[exchange.client].append((exchange.request, response))

    # ------------------------------------------------------------ what answers teach

    def _observe(self, request: Request, response: Response) -> None:
        """Learn from an answer: coordinators found or moved, leaders moved, transactional ids."""
        if isinstance(response, FindCoordinatorResponse) and isinstance(request, FindCoordinatorRequest):
            self._learn_coordinator(request, response)
        elif isinstance(response, InitProducerIdResponse) and isinstance(request, InitProducerIdRequest):
            if response.error_code == ErrorCode.NONE and request.transactional_id is not None:
                self._transactional_ids[response.producer_id] = request.transactional_id
            elif response.error_code in _NO_COORDINATOR and request.transactional_id is not None:
                self._forget_coordinator(TRANSACTION_KEY, request.transactional_id)
        elif isinstance(response, (AddOffsetsToTxnResponse, EndTxnResponse)) and \
                isinstance(request, (AddOffsetsToTxnRequest, EndTxnRequest)):
            if response.error_code in _NO_COORDINATOR:
                self._forget_coordinator(TRANSACTION_KEY, request.transactional_id)
        elif isinstance(response, AddPartitionsToTxnResponse) and isinstance(request, AddPartitionsToTxnRequest):
            if any(r.error_code in _NO_COORDINATOR for r in response.results):
                self._forget_coordinator(TRANSACTION_KEY, request.transactional_id)
        elif isinstance(response, (TxnOffsetCommitResponse, OffsetCommitResponse)) and \
                isinstance(request, (TxnOffsetCommitRequest, OffsetCommitRequest)):
            if any(r.error_code in _NO_COORDINATOR for r in response.results):
                self._forget_coordinator(GROUP_KEY, request.group_id)
        elif isinstance(response, OffsetFetchResponse) and isinstance(request, OffsetFetchRequest):
            if response.error_code in _NO_COORDINATOR or any(o.error_code in _NO_COORDINATOR
                                                             for o in response.offsets):
                self._forget_coordinator(GROUP_KEY, request.group_id)
        elif isinstance(request, _MEMBERSHIP):
            if response.error_code in _NO_COORDINATOR:
                self._forget_coordinator(GROUP_KEY, request.group_id)
        elif isinstance(response, ProduceResponse):
            self._stale({r.topic for r in response.responses if r.error_code in _STALE_LEADER})
        elif isinstance(response, FetchResponse):
            self._stale({p.topic for p in response.partitions if p.error_code in _STALE_LEADER})
        elif isinstance(response, ListOffsetsResponse):
            self._stale({r.topic for r in response.results if r.error_code in _STALE_LEADER})

    def _stale(self, topics: set[str]) -> None:
        if topics:
            self.metadata.want(topics)


def _joined(request: Request, answers: list[Response]) -> Response:
    """One response from the answers of a request's parts (one part per leader)."""
    if isinstance(request, ProduceRequest):
        by_partition = {(r.topic, r.partition): r for answer in answers if isinstance(answer, ProduceResponse)
                        for r in answer.responses}
        return ProduceResponse(request.request_id, tuple(
            by_partition.get((b.topic, b.partition)) or PartitionResponse(
                b.topic, b.partition, ErrorCode.UNKNOWN_SERVER_ERROR,
                error_message=f"no answer for {b.topic}-{b.partition}") for b in request.batches))
    if isinstance(request, FetchRequest):
        fetched = [a for a in answers if isinstance(a, FetchResponse)]
        code = next((a.error_code for a in fetched if a.error_code != ErrorCode.NONE), ErrorCode.NONE)
        return FetchResponse(tuple(p for a in fetched for p in a.partitions), code, request.request_id)
    if isinstance(request, ListOffsetsRequest):
        return ListOffsetsResponse(tuple(r for a in answers if isinstance(a, ListOffsetsResponse) for r in a.results),
                                   request.request_id)
    return answers[0]

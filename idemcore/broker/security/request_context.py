"""The machinery of the request checks: one request's :class:`RequestContext` (the authorizer's answers,
asked once each, and the refusals logged as Kafka's authorizer logs them), the split of a request into
its allowed and refused parts and the merge of the broker's answer with the refusals (:func:`split`,
:func:`then` for a Pending answer), and the table of checks by message type name (:func:`check`)."""

from __future__ import annotations

import dataclasses
import logging
from collections import defaultdict, deque
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from idemcore.broker.security.session import Authorizer, Session
from idemcore.errors import IdemcoreError
from idemcore.net.messages import Pending
from idemcore.protocol.acls import CLUSTER_NAME, AclOperation, AclResourceType
from idemcore.protocol.codes import ErrorCode

log = logging.getLogger(__name__)

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


def printable(text: object) -> str:
    """``text`` for a log line: a client's name (a group id, a transactional id, a SASL mechanism) may hold line
    breaks and other control characters that would forge lines of their own; those are escaped (``\\n``)."""
    text = str(text)
    return text if text.isprintable() else text.encode("unicode_escape").decode("ascii")


class RequestContext:
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
                     kind.kafka_name, printable(name), self.request_name)
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


def split(handle: Handle, request: Any, items: Sequence[Any], refusals: Sequence[Any | None],
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


def tp(item: Any) -> tuple[Any, Any]:
    return item.topic, item.partition


def first_two(item: Sequence[Any]) -> tuple[Any, Any]:
    return item[0], item[1]


def pick(values: Sequence[Any], indexes: list[int]) -> tuple[Any, ...]:
    return tuple(values[index] for index in indexes)


# ---------------------------------------------------------------- the checks, by message type name

Check = Callable[[RequestContext, Handle, Any], Any]
#: The check of each message type, by its class name (so a type of a module merged later is found by name).
CHECKED_BY_NAME: dict[str, Check] = {}


def check(*names: str) -> Callable[[Check], Check]:
    def register(function: Check) -> Check:
        for name in names:
            CHECKED_BY_NAME[name] = function
        return function
    return register


def checked_types() -> frozenset[str]:
    """The names of the message types that have a check."""
    return frozenset(CHECKED_BY_NAME)

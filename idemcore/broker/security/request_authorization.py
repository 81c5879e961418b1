"""Every request checked as Kafka's ``KafkaApis`` checks it (3.x, with ``AuthHelper``), before and around
``Broker.handle``: which operation on which resource each API needs, and the error code a refusal carries.

A request whose parts name several resources (a Produce to several topics, a DescribeConfigs of several
resources, ...) is split as KafkaApis splits it: the authorized parts go to ``handle``, the others are answered
here with the refusal's code, and the two are merged into one response of the request's type (a
:class:`~idemcore.net.messages.Pending` answer is merged when it completes, into a new Pending). A request whose
check is all or nothing (JoinGroup, EndTxn, LeaderAndIsr, ...) is either handled or answered with the error alone.
A message type with no check here is refused (:class:`RequestRefused`), never passed through unchecked.

Each refusal is logged at INFO with the principal, the client's host, the operation and the resource, in the
form of Kafka's authorizer log (``kafka.authorizer.logger``; here the logger
``idemcore.broker.security.request_context``), except where KafkaApis asks for no log (a check
with a fallback, as CREATE on the cluster before CREATE on each topic)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

# Imported for their checks: each registers its message types in CHECKED_BY_NAME.
from idemcore.broker.security import checks_cluster, checks_groups, checks_records, checks_transactions  # noqa: F401
from idemcore.broker.security.checks_cluster import CLUSTER_CHECKED, CLUSTER_REFUSALS
from idemcore.broker.security.request_context import (
    CHECKED_BY_NAME,
    Handle,
    RequestContext,
    RequestRefused,
    checked_types,
)
from idemcore.broker.security.session import Authorizer, Session

log = logging.getLogger(__name__)

__all__ = ["CHECKED_BY_NAME", "CLUSTER_CHECKED", "CLUSTER_REFUSALS", "RequestRefused", "authorized_handle",
           "checked_types"]


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
    context = RequestContext(authorizer, session, name.removesuffix("Request"), partitions_of, auto_create_topics)
    return check(context, handle, message)

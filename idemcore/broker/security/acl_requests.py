"""The broker's answers to CreateAcls, DescribeAcls and DeleteAcls (Kafka's ``AclApis``), over its
:class:`~idemcore.broker.security.authorizer.AclAuthorizer`; a broker without one answers SECURITY_DISABLED.

Who may call them (ALTER on the cluster to create and delete, DESCRIBE to list) is checked before, with every
other request (:mod:`idemcore.broker.security.request_authorization`)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from idemcore.broker.security.authorizer import AclAuthorizer
from idemcore.net.acls import (
    AclCreationResult,
    CreateAclsRequest,
    CreateAclsResponse,
    DeleteAclsFilterResult,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DeletedAcl,
    DescribeAclsRequest,
    DescribeAclsResponse,
)
from idemcore.net.messages import Pending
from idemcore.protocol.codes import ErrorCode

log = logging.getLogger(__name__)

#: Kafka's message for an ACL request to a broker without an authorizer.
NO_AUTHORIZER = "No Authorizer is configured on the broker"


def create_acls(authorizer: AclAuthorizer | None, request: CreateAclsRequest) -> CreateAclsResponse:
    if authorizer is None:
        return CreateAclsResponse(tuple(AclCreationResult(ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER)
                                        for _ in request.creations), request.request_id)
    results = authorizer.create_acls(request.creations)
    return CreateAclsResponse(tuple(AclCreationResult() if error is None
                                    else AclCreationResult(error.error_code, error.message) for error in results),
                              request.request_id)


def describe_acls(authorizer: AclAuthorizer | None, request: DescribeAclsRequest) -> DescribeAclsResponse:
    if authorizer is None:
        return DescribeAclsResponse(ErrorCode.SECURITY_DISABLED, request_id=request.request_id,
                                    error_message=NO_AUTHORIZER)
    problem = request.acl_filter.problem()
    if problem is not None:
        return DescribeAclsResponse(ErrorCode.INVALID_REQUEST, request_id=request.request_id, error_message=problem)
    return DescribeAclsResponse(ErrorCode.NONE, tuple(authorizer.acls(request.acl_filter)), request.request_id)


def delete_acls(authorizer: AclAuthorizer | None, request: DeleteAclsRequest) -> DeleteAclsResponse:
    if authorizer is None:
        return DeleteAclsResponse(tuple(DeleteAclsFilterResult(ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER)
                                        for _ in request.filters), request.request_id)
    results = []
    for error, deleted in authorizer.delete_acls(request.filters):
        if error is not None:
            results.append(DeleteAclsFilterResult(error.error_code, error.message))
            continue
        results.append(DeleteAclsFilterResult(deleted=tuple(
            DeletedAcl(binding) if failure is None else DeletedAcl(binding, failure.error_code, failure.message)
            for binding, failure in deleted)))
    return DeleteAclsResponse(tuple(results), request.request_id)


def _off_the_loop(authorizer: AclAuthorizer | None, work: Callable[[], Any], failed: Callable[[str], Any]
                  ) -> Any:
    """``work()``'s answer; when the ACLs live in ZooKeeper and the broker runs on an asyncio loop, made on a
    thread of the loop's executor and answered as a :class:`Pending` (a compare-and-set that lost a race backs off
    and retries: the loop must not wait for that). ``failed(why)``: the answer if ``work`` raises."""
    if authorizer is None or not authorizer.store.remote:
        return work()
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # used in process, not behind the server: answered in place
        return work()
    pending = Pending()

    def done(future: asyncio.Future[Any]) -> None:
        error = future.exception()
        if error is not None:
            log.error("an ACL request failed: %s", error)
        pending.complete(failed(f"{type(error).__name__}: {error}") if error is not None else future.result())

    loop.run_in_executor(None, work).add_done_callback(done)
    return pending


def acl_handlers(authorizer: Callable[[], AclAuthorizer | None]) -> dict[type, Callable[[Any], Any]]:
    """The ACL requests' handlers, over the broker's authorizer as it is when each comes."""

    def create(r: CreateAclsRequest) -> Any:
        made = authorizer()
        return _off_the_loop(made, lambda: create_acls(made, r), lambda why: CreateAclsResponse(tuple(
            AclCreationResult(ErrorCode.UNKNOWN_SERVER_ERROR, why) for _ in r.creations), r.request_id))

    def delete(r: DeleteAclsRequest) -> Any:
        made = authorizer()
        return _off_the_loop(made, lambda: delete_acls(made, r), lambda why: DeleteAclsResponse(tuple(
            DeleteAclsFilterResult(ErrorCode.UNKNOWN_SERVER_ERROR, why) for _ in r.filters), r.request_id))

    return {
        CreateAclsRequest: create,
        DescribeAclsRequest: lambda r: describe_acls(authorizer(), r),  # the cache only: in place
        DeleteAclsRequest: delete,
    }


def authorizer_of(broker: Any, given: AclAuthorizer | None) -> tuple[AclAuthorizer | None, bool]:
    """The broker's authorizer and whether the broker made it (and so closes it): ``given``, else the one its
    settings name (ACLs in ZooKeeper for a broker of a cluster, in its log directory alone), else none."""
    if given is not None:
        return given, False
    if broker.settings is None:
        return None, False
    from idemcore.broker.security.authorizer import authorizer_from_settings

    cluster = broker.cluster
    zookeeper = None if cluster is None else (cluster.config.zookeeper_connect, cluster.config.session_timeout_ms,
                                              cluster.config.connection_timeout_ms)
    made = authorizer_from_settings(broker.settings, broker.data_dir, fsync=broker.log_manager.fsync,
                                    zookeeper=zookeeper)
    return made, made is not None

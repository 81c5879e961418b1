"""ACL administration from idemcore's side (what ``kafka-acls.sh`` does over the admin API): create, list and
delete ACLs with CreateAcls, DescribeAcls and DeleteAcls, asked of one broker of the cluster (any broker answers
them: in a cluster they share the ACLs through ZooKeeper). Blocking, one connection
(:class:`~idemcore.net.broker_channel.BlockingBrokerChannel`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from idemcore.errors import IdemcoreError
from idemcore.net.acls import (
    AclCreationResult,
    CreateAclsRequest,
    CreateAclsResponse,
    DeleteAclsFilterResult,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DescribeAclsRequest,
    DescribeAclsResponse,
)
from idemcore.net.broker_channel import BlockingBrokerChannel
from idemcore.net.client_security import ClientSecurity
from idemcore.net.tcp import parse_bootstrap
from idemcore.protocol.acls import AclBinding, AclBindingFilter

T = TypeVar("T")


class AclAdminError(IdemcoreError, RuntimeError):
    """The broker could not be reached or answered something else; one line naming it."""


class AclAdmin:
    """ACL administration through the broker ``bootstrap`` names (``HOST:PORT``; the first of a list)."""

    def __init__(self, bootstrap: str, *, client_id: str = "idemcore-acls", request_timeout_ms: int = 30_000,
                 security: ClientSecurity | None = None) -> None:
        self.address = parse_bootstrap(bootstrap)[0]
        self._channel = BlockingBrokerChannel(*self.address, client_id, request_timeout_ms=request_timeout_ms,
                                              security=security)

    def __enter__(self) -> AclAdmin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._channel.close()

    def create_acls(self, bindings: Sequence[AclBinding]) -> tuple[AclCreationResult, ...]:
        """Each binding's outcome, in order (SECURITY_DISABLED from a broker without an authorizer)."""
        return self._call(CreateAclsRequest(tuple(bindings)), CreateAclsResponse).results

    def describe_acls(self, acl_filter: AclBindingFilter) -> DescribeAclsResponse:
        """The ACLs ``acl_filter`` matches, or the error that kept the broker from looking."""
        return self._call(DescribeAclsRequest(acl_filter), DescribeAclsResponse)

    def delete_acls(self, filters: Sequence[AclBindingFilter]) -> tuple[DeleteAclsFilterResult, ...]:
        """Per filter, its error or the ACLs it deleted."""
        return self._call(DeleteAclsRequest(tuple(filters)), DeleteAclsResponse).results

    def _call(self, request: Any, kind: type[T]) -> T:
        where = f"{self.address[0]}:{self.address[1]}"
        try:
            answer = self._channel.call(request)
        except (ConnectionError, TimeoutError) as exc:
            raise AclAdminError(f"broker at {where}: {str(exc).removeprefix(f'broker {where}: ')}") from None
        if not isinstance(answer, kind):
            raise AclAdminError(f"broker at {where} answered a {type(request).__name__} with a "
                                f"{type(answer).__name__}")
        return answer

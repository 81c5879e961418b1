"""How a Producer or Consumer gets its transport: the one it is given, or a
:class:`~idemcore.net.tcp.TcpTransport` of its own to bootstrap servers, with the security it is given."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from idemcore.net.transport import RequestHandler, Transport, as_transport

if TYPE_CHECKING:
    from idemcore.net.client_security import ClientSecurity


def own_transport(transport: Transport | RequestHandler | str, client_id: str,
                  security: ClientSecurity | Mapping[str, str] | None, what: str) -> tuple[Transport, bool]:
    """``(transport, whether the client owns it and closes it)``. ``transport`` a string: bootstrap servers
    (``"host:port[,...]"``), connected to by a new TcpTransport with ``security`` (a ClientSecurity or Kafka's
    client properties); otherwise the transport or Broker given, and ``security`` must be None (that transport
    already decided how it connects)."""
    if isinstance(transport, str):
        from idemcore.net.tcp import TcpTransport  # only a client of bootstrap servers needs TCP
        return TcpTransport(transport, client_id=client_id, security=security), True
    if security is not None:
        raise TypeError(f"security= is for a {what} given bootstrap servers ('host:port'); a transport it is given "
                        "keeps its own: TcpTransport(bootstrap, security=...)")
    return as_transport(transport), False

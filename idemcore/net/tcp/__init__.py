"""A transport over TCP to ``idemcore serve`` or any Kafka-compatible cluster, speaking Kafka's protocol
(:mod:`idemcore.net.wire.client` translates each request).

:class:`TcpTransport` does what Kafka's ``NetworkClient`` and ``Metadata`` do for a client. Its modules, one job each:
:mod:`~idemcore.net.tcp.connection` (one socket to one broker: framing, TLS, ApiVersions, SASL, in-flight
correlation), :mod:`~idemcore.net.tcp.cluster_metadata` (brokers, leaders, the controller, and their refresh),
:mod:`~idemcore.net.tcp.routing` (which broker a request goes to, coordinator lookups, what answers teach) and
:mod:`~idemcore.net.tcp.transport` (the connections, the I/O loop and the Transport interface).

- **connections**: one per client, broker node and role (the coordinator gets its own, as Kafka's consumer keeps
  one to ``Integer.MAX_VALUE - coordinator id``: a fetch a broker holds for ``max_wait`` does not hold up a
  commit). Non-blocking sockets under :mod:`selectors`, run in the caller's thread by :meth:`poll` and
  :meth:`tick` (which waits up to ~1 ms for a socket); no background thread.
- **versions**: each connection first asks ApiVersions and then speaks, per API, the highest version both sides
  know (``wire.client.pick_version``).
- **routing**: Produce, Fetch and ListOffsets to each partition's leader (a request over partitions of several
  leaders is split, and the answers joined back into one response); InitProducerId with a transactional id,
  AddPartitionsToTxn, AddOffsetsToTxn and EndTxn to the transaction coordinator; TxnOffsetCommit, OffsetCommit,
  OffsetFetch, JoinGroup, SyncGroup, Heartbeat and LeaveGroup to the group coordinator; Metadata, FindCoordinator
  and an idempotent InitProducerId to any broker; CreateTopics to the controller. Leaders come from Metadata,
  refreshed when an answer says a leader moved; coordinators from FindCoordinator (the clients' own, or the
  transport's), cached, forgotten on NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE. A request whose route is not
  known yet waits (at most ``request_timeout_ms``) while the transport looks it up.
- **answers**: a connection's answers come in the order of its requests (Kafka guarantees it); each is matched to
  its correlation id. A broken connection loses the requests in flight on it, as :meth:`disconnect` does: the
  clients' request timeouts and retries handle that; the next request reconnects (after ``reconnect_backoff_ms``).

- **threads**: the public methods hold :attr:`TcpTransport.lock` (a re-entrant lock), so a second thread (a
  consumer's heartbeat thread) may use the transport with its own client name; the long waits
  (:meth:`~TcpTransport.partition_count`, :meth:`~TcpTransport.call`) take it for one step at a time.

- **security** (``security=``, a :class:`~idemcore.net.client_security.ClientSecurity` or Kafka's client
  properties): on SSL and SASL_SSL each connection, once its TCP connect completes, runs a non-blocking TLS
  handshake (driven on socket readiness; the broker's certificate checked against the trust store); on
  SASL_PLAINTEXT and SASL_SSL, after ApiVersions, it authenticates with SaslHandshake v1 and SaslAuthenticate
  (KIP-152) before anything else is sent on it. A connection lost during either is lost as any other (retried
  after ``reconnect_backoff_ms``); a refusal (a certificate that fails its check, a TLS alert from the broker, a
  SASL mechanism or credentials the broker refuses) is fatal, as Kafka's ``AuthenticationException``: every later
  :meth:`~TcpTransport.poll`, :meth:`~TcpTransport.partition_count` and :meth:`~TcpTransport.call` raises one
  :class:`AuthenticationError` naming the broker, and no connection is opened again.

A request the negotiated versions cannot carry (the broker lacks the API) is not lost silently: the next
:meth:`poll` of its client raises :class:`~idemcore.net.wire.client.WireProtocolError` naming it.
"""

from idemcore.net.tcp.cluster_metadata import parse_bootstrap
from idemcore.net.tcp.connection import MAX_RESPONSE_BYTES, AuthenticationError
from idemcore.net.tcp.transport import TcpTransport, TransportTimeoutError, client_security

__all__ = ["MAX_RESPONSE_BYTES", "AuthenticationError", "TcpTransport", "TransportTimeoutError", "client_security",
           "parse_bootstrap"]

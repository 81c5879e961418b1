"""How a client connection authenticates to a broker, by Kafka's client settings: ``security.protocol``
(PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL), TLS (the trust store the broker's certificate is checked against, the
client's own key and certificate for mutual TLS) and SASL (mechanism, user name, password).

:meth:`ClientSecurity.from_properties` reads the names Kafka's Java clients use (``ssl.truststore.location`` of
type PEM, ``ssl.keystore.location``, ``ssl.key.password``, ``sasl.mechanism``, ``sasl.jaas.config``) and
librdkafka's (``ssl.ca.location``, ``ssl.certificate.location``, ``ssl.key.location``, ``sasl.username``,
``sasl.password``), so one ``client.properties`` works for idemcore's broker channels, its CLIs and librdkafka.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field

from idemcore.errors import ConfigError
from idemcore.net import scram
from idemcore.net.jaas import parse_jaas_config

#: Kafka's security protocols (``SecurityProtocol``).
PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
#: The SASL mechanisms idemcore speaks, both sides (Kafka's GSSAPI and OAUTHBEARER are not among them).
SASL_MECHANISMS = ("PLAIN", *scram.MECHANISMS)


def protocol_uses_tls(protocol: str) -> bool:
    return protocol in ("SSL", "SASL_SSL")


def protocol_uses_sasl(protocol: str) -> bool:
    return protocol in ("SASL_PLAINTEXT", "SASL_SSL")


@dataclass(frozen=True)
class ClientSecurity:
    """One client's security: ``protocol``; ``ssl_context`` (SSL, SASL_SSL) with ``server_hostname`` checked
    unless the context says not to; SASL ``mechanism`` with ``username`` and ``password`` (SASL_*)."""

    protocol: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = field(default=None, compare=False, repr=False)
    sasl_mechanism: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise ConfigError(f"security.protocol={self.protocol!r} is not one of {', '.join(PROTOCOLS)}")
        if self.uses_tls and self.ssl_context is None:
            raise ConfigError(f"security.protocol={self.protocol} needs a TLS context")
        if self.uses_sasl:
            if self.sasl_mechanism not in SASL_MECHANISMS:
                raise ConfigError(f"sasl.mechanism={self.sasl_mechanism!r} is not one idemcore speaks "
                                  f"({', '.join(SASL_MECHANISMS)})")
            if self.username is None or self.password is None:
                raise ConfigError(f"security.protocol={self.protocol} needs a user name and password (sasl.username "
                                  "and sasl.password, or sasl.jaas.config with username and password)")

    @property
    def uses_tls(self) -> bool:
        return protocol_uses_tls(self.protocol)

    @property
    def uses_sasl(self) -> bool:
        return protocol_uses_sasl(self.protocol)

    @classmethod
    def from_properties(cls, properties: Mapping[str, str]) -> ClientSecurity:
        """The security of Kafka client ``properties`` (Java's names or librdkafka's; see the module)."""
        def get(*names: str) -> str | None:
            for name in names:
                value = properties.get(name)
                if value is not None and str(value).strip() != "":
                    return str(value).strip()
            return None

        protocol = (get("security.protocol") or "PLAINTEXT").upper()
        context = None
        if protocol in ("SSL", "SASL_SSL"):
            context = _client_context(get, properties)
        mechanism = username = password = None
        if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
            mechanism = (get("sasl.mechanism", "sasl.mechanisms") or "GSSAPI").upper()
            username, password = get("sasl.username"), get("sasl.password")
            jaas = get("sasl.jaas.config")
            if jaas is not None and (username is None or password is None):
                username, password = parse_jaas_config(jaas).client_credentials()
        return cls(protocol, context, mechanism, username, password)


def _client_context(get: object, properties: Mapping[str, str]) -> ssl.SSLContext:
    assert callable(get)
    context = ssl.create_default_context()
    trust_type = (get("ssl.truststore.type") or "PEM").upper()
    trust = get("ssl.ca.location", "ssl.truststore.location")
    if trust is not None:
        if trust_type != "PEM":
            raise ConfigError(f"ssl.truststore.type={trust_type}: idemcore reads PEM trust stores only (KIP-651)")
        try:
            context.load_verify_locations(cafile=trust)
        except (OSError, ssl.SSLError) as error:
            raise ConfigError(f"cannot load the trust store {trust}: {getattr(error, 'strerror', None) or error}") \
                from None
    certificate = get("ssl.certificate.location", "ssl.keystore.location")
    key = get("ssl.key.location")
    if certificate is not None:
        password = get("ssl.key.password")
        try:
            context.load_cert_chain(certificate, key, password=password)
        except (OSError, ssl.SSLError) as error:
            raise ConfigError(f"cannot load the client key and certificate {certificate}: "
                              f"{getattr(error, 'strerror', None) or error}") from None
    identification = properties.get("ssl.endpoint.identification.algorithm", "https")
    if str(identification).strip().lower() in ("", "none"):
        context.check_hostname = False
    return context

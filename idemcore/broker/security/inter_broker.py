"""How this broker authenticates to the others (Kafka's inter-broker client): the inter-broker listener's
protocol, its TLS settings used as a client (the trust store checks the other broker's certificate; the key store
is presented for mutual TLS), and SASL with ``sasl.mechanism.inter.broker.protocol`` and the ``username`` /
``password`` of that listener's JAAS config for the mechanism (as Kafka's brokers take their own credentials)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from idemcore.errors import ConfigError
from idemcore.net.client_security import ClientSecurity

if TYPE_CHECKING:
    from idemcore.broker.config import BrokerConfig


def inter_broker_security(settings: BrokerConfig | None, listener: str | None = None) -> ClientSecurity | None:
    """The security of this broker's connections to the others over ``listener`` (default: the settings'
    inter-broker listener); None for PLAINTEXT (or a broker built without settings)."""
    if settings is None:
        return None
    name = (listener or settings.inter_broker_listener).upper()
    security = next((one for one in settings.listeners if one.name == name), None)
    if security is None or security.protocol == "PLAINTEXT":
        return None
    context = security.tls.client_context() if security.tls is not None else None
    mechanism = username = password = None
    if security.uses_sasl:
        mechanism = settings["sasl.mechanism.inter.broker.protocol"]
        if mechanism not in security.sasl_mechanisms:
            raise ConfigError(f"sasl.mechanism.inter.broker.protocol={mechanism} is not enabled on the inter-broker "
                              f"listener {name} ({', '.join(security.sasl_mechanisms)})")
        jaas = security.jaas.get(mechanism)
        if jaas is None or "username" not in jaas.options or "password" not in jaas.options:
            raise ConfigError(f"listener.name.{name.lower()}.{mechanism.lower()}.sasl.jaas.config needs username and "
                              "password: the credentials this broker authenticates to the others with")
        username, password = jaas.client_credentials()
    return ClientSecurity(security.protocol, context, mechanism, username, password)

"""A broker's listeners as Kafka configures them: ``listeners`` / ``advertised.listeners`` (``NAME://host:port``,
several), ``listener.security.protocol.map`` (a listener name's security protocol), per-listener settings
(``listener.name.<listener>.<setting>`` over the broker-wide ``<setting>``), and each listener's TLS (Kafka's PEM
stores, KIP-651) and SASL mechanisms. The inter-broker listener (``inter.broker.listener.name``, else the one
named like ``security.inter.broker.protocol``) is the one brokers reach each other on.

Everything is checked when the settings are read (Kafka's ``KafkaConfig`` and ``SslFactory`` validation): a key
store that cannot be loaded, an unknown protocol or mechanism, two listeners with one name or port, are one
:class:`~idemcore.errors.ConfigError` line naming the setting and value.
"""

from __future__ import annotations

import os
import re
import ssl
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from idemcore.errors import ConfigError
from idemcore.net.client_security import PROTOCOLS, SASL_MECHANISMS, protocol_uses_sasl, protocol_uses_tls
from idemcore.net.jaas import JaasConfig, jaas_for_mechanism

#: Kafka's ``EndPoint`` syntax: NAME://host:port, an IPv6 host in brackets.
_ENDPOINT = re.compile(r"(?P<name>[^:/]*)://\[?(?P<host>[0-9a-zA-Z\-%._:]*)\]?:(?P<port>-?[0-9]+)")
_SEPARATOR = re.compile(r"\s*,\s*")
#: The settings a listener may override (``listener.name.<listener>.<setting>``), besides
#: ``<mechanism>.sasl.jaas.config``.
PER_LISTENER = ("ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password", "ssl.keystore.key",
                "ssl.keystore.certificate.chain", "ssl.key.password", "ssl.truststore.type",
                "ssl.truststore.location", "ssl.truststore.password", "ssl.truststore.certificates",
                "ssl.client.auth", "ssl.protocol", "ssl.enabled.protocols", "ssl.cipher.suites",
                "ssl.endpoint.identification.algorithm", "ssl.principal.mapping.rules", "sasl.enabled.mechanisms",
                "sasl.server.max.receive.size", "connections.max.reauth.ms")
_JAAS_KEY = re.compile(r"(?P<mechanism>[a-z0-9-]+)\.sasl\.jaas\.config")
_TLS_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}


@dataclass(frozen=True)
class Endpoint:
    """One listener's address: its name (upper case, as Kafka's ``ListenerName.normalised``), ``host`` (empty:
    every interface) and ``port`` (0: any free port)."""

    host: str
    port: int
    name: str = "PLAINTEXT"

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"


def parse_protocol_map(text: str, origin: str = "") -> dict[str, str]:
    """``listener.security.protocol.map``: ``NAME:PROTOCOL,...`` (names upper-cased, each protocol one of
    Kafka's four)."""
    mapping: dict[str, str] = {}
    for part in (p for p in _SEPARATOR.split(text.strip()) if p):
        name, colon, protocol = part.partition(":")
        if not colon or not name.strip():
            raise ConfigError(f"invalid value {text!r} for listener.security.protocol.map{origin}: {part!r} is not "
                              "NAME:PROTOCOL")
        protocol = protocol.strip().upper()
        if protocol not in PROTOCOLS:
            raise ConfigError(f"invalid value {text!r} for listener.security.protocol.map{origin}: {protocol!r} is "
                              f"not a security protocol ({', '.join(PROTOCOLS)})")
        mapping[name.strip().upper()] = protocol
    return mapping


def parse_endpoints(setting: str, text: str, protocols: Mapping[str, str], origin: str = "") -> tuple[Endpoint, ...]:
    """The listeners of a ``listeners``-style value; each name must have a security protocol, names and non-zero
    ports must differ (Kafka's ``listenerListToEndPoints``)."""
    def bad(reason: str) -> ConfigError:
        return ConfigError(f"invalid value {text!r} for {setting}{origin}: {reason}")

    parts = [part for part in _SEPARATOR.split(text.strip()) if part]
    if not parts:
        raise bad("no listener (expected NAME://host:port)")
    endpoints: list[Endpoint] = []
    for part in parts:
        match = _ENDPOINT.fullmatch(part)
        if match is None:
            raise bad(f"{part!r} is not NAME://host:port (an IPv6 host in brackets)")
        name = match["name"].upper()
        if name not in protocols:
            raise bad(f"no security protocol for the listener name {match['name']!r}: add it to "
                      f"listener.security.protocol.map (which maps {', '.join(protocols) or 'nothing'})")
        port = int(match["port"])
        if not 0 <= port <= 65535:
            raise bad(f"port {port} is not from 0 to 65535")
        if any(e.name == name for e in endpoints):
            raise bad(f"the listener name {name} is given twice: each listener must have a different name")
        if port and any(e.port == port for e in endpoints):
            raise bad(f"port {port} is given twice: each listener must have a different port")
        endpoints.append(Endpoint(match["host"], port, name))
    return tuple(endpoints)


# ------------------------------------------------------------ TLS


@dataclass(frozen=True)
class TlsSettings:
    """One listener's ``ssl.*`` settings (already resolved over its ``listener.name.<l>.`` overrides)."""

    listener: str
    keystore_type: str = "JKS"
    keystore_location: str | None = None
    keystore_password: str | None = field(default=None, repr=False)
    keystore_key: str | None = field(default=None, repr=False)
    keystore_certificate_chain: str | None = field(default=None, repr=False)
    key_password: str | None = field(default=None, repr=False)
    truststore_type: str = "JKS"
    truststore_location: str | None = None
    truststore_password: str | None = field(default=None, repr=False)
    truststore_certificates: str | None = field(default=None, repr=False)
    client_auth: str = "none"
    enabled_protocols: tuple[str, ...] = ("TLSv1.2", "TLSv1.3")
    cipher_suites: tuple[str, ...] = ()
    endpoint_identification: str = "https"
    principal_mapping_rules: str = "DEFAULT"

    def _setting(self, name: str) -> str:
        return f"listener.name.{self.listener.lower()}.{name} (or {name})"

    def _check_key_store(self) -> None:
        if self.keystore_location is None and self.keystore_key is None:
            raise ConfigError(f"listener {self.listener} uses TLS and has no key store: set ssl.keystore.type=PEM and "
                              "ssl.keystore.location to a PEM file holding the private key and the certificate chain "
                              "(or ssl.keystore.key and ssl.keystore.certificate.chain)")
        if self.keystore_type.upper() != "PEM":
            raise ConfigError(f"{self._setting('ssl.keystore.type')}={self.keystore_type}: idemcore reads PEM key "
                              "stores only (KIP-651): convert the store to PEM and set ssl.keystore.type=PEM")
        if self.keystore_password is not None:  # Kafka's DefaultSslEngineFactory refuses it for PEM too
            raise ConfigError(f"{self._setting('ssl.keystore.password')} is set: a PEM key store takes no store "
                              "password, only ssl.key.password for an encrypted private key")
        if self.keystore_location is not None and self.keystore_key is not None:
            raise ConfigError(f"both {self._setting('ssl.keystore.location')} and ssl.keystore.key are set: give "
                              "the key store as a file or inline, not both")
        if self.keystore_key is not None and self.keystore_certificate_chain is None:
            raise ConfigError(f"{self._setting('ssl.keystore.key')} is set without ssl.keystore.certificate.chain")

    def _check_trust_store(self) -> None:
        if self.truststore_location is None and self.truststore_certificates is None:
            return
        if self.truststore_type.upper() != "PEM":
            raise ConfigError(f"{self._setting('ssl.truststore.type')}={self.truststore_type}: idemcore reads PEM "
                              "trust stores only (KIP-651): convert the store to PEM and set ssl.truststore.type=PEM")
        if self.truststore_password is not None:
            raise ConfigError(f"{self._setting('ssl.truststore.password')} is set: a PEM trust store takes no "
                              "password")

    def _base(self, purpose: int) -> ssl.SSLContext:
        context = ssl.SSLContext(purpose)
        versions = []
        for name in self.enabled_protocols:
            if name not in _TLS_VERSIONS:
                raise ConfigError(f"{self._setting('ssl.enabled.protocols')}: {name!r} is not served (TLSv1.2, "
                                  "TLSv1.3)")
            versions.append(_TLS_VERSIONS[name])
        if not versions:
            raise ConfigError(f"{self._setting('ssl.enabled.protocols')} is empty: enable TLSv1.2 or TLSv1.3")
        context.minimum_version, context.maximum_version = min(versions), max(versions)
        if self.cipher_suites:
            try:
                context.set_ciphers(":".join(self.cipher_suites))
            except ssl.SSLError as error:
                raise ConfigError(f"{self._setting('ssl.cipher.suites')}={','.join(self.cipher_suites)}: "
                                  f"{error.reason or error}") from None
        return context

    def _load_trust(self, context: ssl.SSLContext) -> bool:
        """Load the trust store into ``context``; False when none is set."""
        try:
            if self.truststore_location is not None:
                context.load_verify_locations(cafile=self.truststore_location)
            elif self.truststore_certificates is not None:
                context.load_verify_locations(cadata=self.truststore_certificates)
            else:
                return False
        except (OSError, ssl.SSLError) as error:
            where = self.truststore_location or "ssl.truststore.certificates"
            raise ConfigError(f"cannot load the trust store {where} of listener {self.listener}: "
                              f"{getattr(error, 'strerror', None) or error}") from None
        return True

    def _load_key(self, context: ssl.SSLContext) -> None:
        password = self.key_password
        try:
            if self.keystore_location is not None:
                context.load_cert_chain(self.keystore_location, password=password or _no_password)
                return
            assert self.keystore_key is not None and self.keystore_certificate_chain is not None
            # ssl loads certificates only from files: a private directory, removed at once.
            with tempfile.TemporaryDirectory(prefix="idemcore-tls-") as private:
                path = os.path.join(private, "keystore.pem")
                descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(descriptor, "w") as out:
                    out.write(self.keystore_key.strip() + "\n" + self.keystore_certificate_chain.strip() + "\n")
                context.load_cert_chain(path, password=password or _no_password)
        except (OSError, ssl.SSLError) as error:
            where = self.keystore_location or "ssl.keystore.key"
            reason = getattr(error, "strerror", None) or getattr(error, "reason", None) or error
            if isinstance(error, ssl.SSLError) and "BAD_DECRYPT" in str(error) and not password:
                reason = "the private key is encrypted: set ssl.key.password"
            elif isinstance(error, ssl.SSLError) and password:  # OpenSSL says only "PEM lib"
                reason = "the private key does not decrypt with ssl.key.password, or the file is not a PEM key " \
                    "store (a private key and its certificate chain)"
            elif isinstance(error, ssl.SSLError):
                reason = "not a PEM key store (a private key and its certificate chain)"
            raise ConfigError(f"cannot load the key store {where} of listener {self.listener}: {reason}") from None

    def server_context(self) -> ssl.SSLContext:
        """The TLS context a listener serves with: its key and certificate chain; client certificates verified
        against the trust store when ``ssl.client.auth`` is requested or required (mutual TLS)."""
        self._check_key_store()
        self._check_trust_store()
        context = self._base(ssl.PROTOCOL_TLS_SERVER)
        self._load_key(context)
        trusted = self._load_trust(context)
        if self.client_auth != "none":
            if not trusted:
                raise ConfigError(f"{self._setting('ssl.client.auth')}={self.client_auth} needs a trust store to "
                                  "verify client certificates: set ssl.truststore.type=PEM and ssl.truststore.location")
            context.verify_mode = ssl.CERT_REQUIRED if self.client_auth == "required" else ssl.CERT_OPTIONAL
        return context

    def client_context(self) -> ssl.SSLContext:
        """The TLS context a broker connects to another with (the inter-broker listener): the server's certificate
        verified against the trust store (its host name too, unless ``ssl.endpoint.identification.algorithm`` is
        empty); this broker's own key and chain presented for mutual TLS."""
        self._check_trust_store()
        context = self._base(ssl.PROTOCOL_TLS_CLIENT)
        if not self._load_trust(context):
            context.load_default_certs()
        context.check_hostname = self.endpoint_identification.lower() == "https"
        if self.keystore_location is not None or self.keystore_key is not None:
            self._check_key_store()
            self._load_key(context)
        return context


def _no_password() -> str:
    """Asked for a password by an encrypted key while none was given: fail at once instead of prompting."""
    raise ssl.SSLError("BAD_DECRYPT: no ssl.key.password for an encrypted private key")


# ------------------------------------------------------------ principals of client certificates

#: The attribute keywords of RFC 2253 (what Java's ``X500Principal.getName()`` writes by keyword).
_RFC2253_KEYWORDS = {"commonName": "CN", "countryName": "C", "localityName": "L", "stateOrProvinceName": "ST",
                     "organizationName": "O", "organizationalUnitName": "OU", "streetAddress": "STREET",
                     "domainComponent": "DC", "userId": "UID"}
_RULE = re.compile(r"RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?)")


def distinguished_name(subject: tuple[Any, ...]) -> str:
    """A certificate subject (as ``SSLSocket.getpeercert()['subject']`` gives it, in ASN.1 order) as Java's
    ``X500Principal.getName()`` writes it (RFC 2253: last RDN first, ``CN=alice,OU=eng,O=Example``). Attributes
    without an RFC 2253 keyword keep their OpenSSL name (``emailAddress=...``), where Java writes the OID and the
    hex of the value."""
    rdns = []
    for rdn in reversed(subject):
        rdns.append("+".join(f"{_RFC2253_KEYWORDS.get(kind, kind)}={_escape(value)}" for kind, value in rdn))
    return ",".join(rdns)


def _escape(value: str) -> str:
    out = re.sub(r'([,+"\\<>;])', r"\\\1", value)
    if out.startswith(("#", " ")):
        out = "\\" + out
    if out.endswith(" ") and len(out) > 1:
        out = out[:-1] + "\\ "
    return out


@dataclass(frozen=True)
class PrincipalMapper:
    """``ssl.principal.mapping.rules`` (Kafka's ``SslPrincipalMapper``): ``RULE:pattern/replacement/[LU]`` rules
    tried in order, the first whose pattern matches the whole name giving the principal's name, ``DEFAULT`` the
    name itself."""

    rules: tuple[tuple[re.Pattern[str], str, str] | None, ...]

    @classmethod
    def parse(cls, text: str, setting: str = "ssl.principal.mapping.rules") -> PrincipalMapper:
        rules: list[tuple[re.Pattern[str], str, str] | None] = []
        rest = text.strip()
        while rest:
            if rest.startswith("DEFAULT"):
                rules.append(None)
                rest = rest[len("DEFAULT"):]
            else:
                match = _RULE.match(rest)
                if match is None:
                    raise ConfigError(f"invalid value {text!r} for {setting}: expected DEFAULT or "
                                      f"RULE:pattern/replacement/[LU] at {rest[:40]!r}")
                try:
                    pattern = re.compile(match[1].replace("\\/", "/"))
                except re.error as error:
                    raise ConfigError(f"invalid value {text!r} for {setting}: pattern {match[1]!r}: {error}") from None
                rules.append((pattern, match[2].replace("\\/", "/"), match[3]))
                rest = rest[match.end():]
            rest = rest.lstrip()
            if rest.startswith(","):
                rest = rest[1:].lstrip()
        return cls(tuple(rules) or (None,))

    def name_of(self, distinguished: str) -> str:
        """The principal name of ``distinguished`` (the first rule that applies; the name itself when none does)."""
        for rule in self.rules:
            if rule is None:
                return distinguished
            pattern, replacement, case = rule
            if pattern.fullmatch(distinguished):
                # Java's $1 back-references in the replacement
                name = pattern.sub(re.sub(r"\$(\d+)", r"\\\1", replacement), distinguished)
                return name.lower() if case == "L" else name.upper() if case == "U" else name
        return distinguished


# ------------------------------------------------------------ a listener's whole security


@dataclass(frozen=True)
class ListenerSecurity:
    """How one listener authenticates: its protocol, its TLS (SSL, SASL_SSL), its SASL mechanisms and their JAAS
    configs (``listener.name.<l>.<mechanism>.sasl.jaas.config``: PLAIN's users; the broker's own credentials as a
    client of the inter-broker listener)."""

    endpoint: Endpoint
    protocol: str
    tls: TlsSettings | None = None
    server_tls: ssl.SSLContext | None = field(default=None, repr=False, compare=False)
    sasl_mechanisms: tuple[str, ...] = ()
    jaas: Mapping[str, JaasConfig] = field(default_factory=dict, repr=False)
    sasl_max_receive_size: int = 524_288
    principal_mapper: PrincipalMapper = field(default_factory=lambda: PrincipalMapper((None,)))

    @property
    def name(self) -> str:
        return self.endpoint.name

    @property
    def uses_tls(self) -> bool:
        return protocol_uses_tls(self.protocol)

    @property
    def uses_sasl(self) -> bool:
        return protocol_uses_sasl(self.protocol)


def split_listener_overrides(properties: Mapping[str, str]) -> dict[tuple[str, str], str]:
    """The ``listener.name.<listener>.<setting>`` entries of ``properties`` as ``(LISTENER, setting): text``;
    a setting a listener cannot override is refused in one line."""
    overrides: dict[tuple[str, str], str] = {}
    for key, text in properties.items():
        if not key.startswith("listener.name."):
            continue
        listener, dot, setting = key[len("listener.name."):].partition(".")
        if not dot or not listener or not (setting in PER_LISTENER or _JAAS_KEY.fullmatch(setting)):
            raise ConfigError(f"{key}: not a per-listener setting (listener.name.<listener>.<setting> takes "
                              "ssl.*, sasl.enabled.mechanisms or <mechanism>.sasl.jaas.config)")
        overrides[(listener.upper(), setting)] = text
    return overrides


def listener_securities(endpoints: tuple[Endpoint, ...], protocols: Mapping[str, str],
                        setting: Any, overrides: Mapping[tuple[str, str], Any]) -> tuple[ListenerSecurity, ...]:
    """Each listener's security, its settings resolved (``setting(name)``: the broker-wide value of a setting;
    ``overrides``: per-listener values, already typed) and its TLS context loaded."""
    securities = []
    for endpoint in endpoints:
        def value(name: str, listener: str = endpoint.name) -> Any:
            return overrides.get((listener, name), setting(name))

        protocol = protocols[endpoint.name]
        tls = None
        server_tls = None
        if protocol_uses_tls(protocol):
            tls = tls_settings(endpoint.name, value)
            server_tls = tls.server_context()
        mechanisms: tuple[str, ...] = ()
        jaas: dict[str, JaasConfig] = {}
        if protocol_uses_sasl(protocol):
            mechanisms = tuple(value("sasl.enabled.mechanisms"))
            where = f"listener.name.{endpoint.name.lower()}.sasl.enabled.mechanisms (or sasl.enabled.mechanisms)"
            if not mechanisms:
                raise ConfigError(f"{where} is empty: SASL listener {endpoint.name} needs a mechanism "
                                  f"({', '.join(SASL_MECHANISMS)})")
            for mechanism in mechanisms:
                if mechanism not in SASL_MECHANISMS:
                    raise ConfigError(f"{where}: {mechanism} is not served by idemcore (it serves "
                                      f"{', '.join(SASL_MECHANISMS)}; Kafka's default is GSSAPI)")
            for (listener, name), text in overrides.items():
                match = _JAAS_KEY.fullmatch(name)
                if listener == endpoint.name and match is not None:
                    mechanism = match["mechanism"].upper()
                    try:
                        jaas[mechanism] = jaas_for_mechanism(text, mechanism)
                    except ConfigError as error:  # the text holds passwords: name the setting, not the value
                        raise ConfigError(f"listener.name.{listener.lower()}.{name}: {error}") from None
            if "PLAIN" in mechanisms and not (jaas.get("PLAIN") and jaas["PLAIN"].plain_users()):
                raise ConfigError(f"SASL listener {endpoint.name} enables PLAIN and has no users: set "
                                  f"listener.name.{endpoint.name.lower()}.plain.sasl.jaas.config to "
                                  "org.apache.kafka.common.security.plain.PlainLoginModule required "
                                  'user_<name>="<password>";')
        mapper = PrincipalMapper.parse(value("ssl.principal.mapping.rules"))
        securities.append(ListenerSecurity(endpoint, protocol, tls, server_tls, mechanisms, jaas,
                                           value("sasl.server.max.receive.size"), mapper))
    return tuple(securities)


def tls_settings(listener: str, value: Any) -> TlsSettings:
    """The ``ssl.*`` settings of ``listener`` (``value(name)``: the setting resolved for it)."""
    return TlsSettings(
        listener=listener, keystore_type=value("ssl.keystore.type"), keystore_location=value("ssl.keystore.location"),
        keystore_password=value("ssl.keystore.password"), keystore_key=value("ssl.keystore.key"),
        keystore_certificate_chain=value("ssl.keystore.certificate.chain"), key_password=value("ssl.key.password"),
        truststore_type=value("ssl.truststore.type"), truststore_location=value("ssl.truststore.location"),
        truststore_password=value("ssl.truststore.password"),
        truststore_certificates=value("ssl.truststore.certificates"), client_auth=value("ssl.client.auth"),
        enabled_protocols=tuple(value("ssl.enabled.protocols")), cipher_suites=tuple(value("ssl.cipher.suites")),
        endpoint_identification=value("ssl.endpoint.identification.algorithm") or "",
        principal_mapping_rules=value("ssl.principal.mapping.rules"))


def inter_broker_listener(endpoints: tuple[Endpoint, ...], protocols: Mapping[str, str], named: str | None,
                          protocol: str, protocol_given: bool) -> Endpoint:
    """The listener brokers reach each other on: ``inter.broker.listener.name``, else the listener named like
    ``security.inter.broker.protocol`` (Kafka's rule: the two are not both set)."""
    if named is not None and protocol_given:
        raise ConfigError("inter.broker.listener.name and security.inter.broker.protocol are both set: set one")
    wanted = named.upper() if named is not None else protocol
    for endpoint in endpoints:
        if endpoint.name == wanted:
            return endpoint
    which = f"inter.broker.listener.name={named}" if named is not None else \
        f"security.inter.broker.protocol={protocol}"
    raise ConfigError(f"{which}: no such listener in listeners ({', '.join(e.name for e in endpoints)}); the "
                      "inter-broker listener must be one of them")

"""The security of one connection: what a listener gives its connections and what an outgoing
connection needs (Kafka's ChannelBuilder choices, as plain data).

`ClientSecurity` is handed to common/network/client.NetworkClient: the security protocol, the TLS
context for SSL and SASL_SSL (a ReloadingSslContext, so new connections take reloaded
certificates), and, for SASL_*, an `authenticate` step run on every new connection before its
first request (the SASL client side fills it in).
"""

from __future__ import annotations

import ssl
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from odradek.common.config_def import ConfigException

from .principal import PrincipalMapper
from .reload import ReloadingSslContext
from .sasl_client import SaslCredentials, authenticate_step
from .ssl_factory import SECURITY_PROTOCOLS, TLS_SECURITY_PROTOCOLS, SslConfig, client_context

TLS_HANDSHAKE_TIMEOUT_S = 10.0
"""A TLS handshake not done by then closes the connection: a half-open handshake must not hold a
connection slot for long."""

Authenticate = Callable[[Any], Awaitable[None]]
"""Runs on a new connection (the NetworkClient) before its first request; raises to refuse it."""


@dataclass(frozen=True)
class ClientSecurity:
    security_protocol: str = "PLAINTEXT"
    context: ReloadingSslContext | None = None
    """For SSL and SASL_SSL: the TLS context of new connections."""
    authenticate: Authenticate | None = None
    """For SASL_PLAINTEXT and SASL_SSL: the SASL exchange (set by the SASL client side)."""
    sasl: Any = None
    """The SASL client settings (mechanism, credentials), for whoever builds `authenticate`."""

    @property
    def tls(self) -> bool:
        return self.security_protocol in TLS_SECURITY_PROTOCOLS

    def ssl_context(self) -> ssl.SSLContext | None:
        return self.context.current() if self.context is not None and self.tls else None


PLAINTEXT = ClientSecurity()


@dataclass(frozen=True)
class ListenerSecurity:
    """What a listener's connections need for their security protocol (common/security builds it)."""

    security_protocol: str = "PLAINTEXT"
    ssl_context: Callable[[], ssl.SSLContext] | None = None
    """For SSL and SASL_SSL: the context for a new connection (the current one after a reload)."""
    principal_mapper: PrincipalMapper | None = None
    """ssl.principal.mapping.rules, for the client certificate's subject."""
    handshake_timeout_s: float = TLS_HANDSHAKE_TIMEOUT_S

    @property
    def tls(self) -> bool:
        return self.security_protocol in TLS_SECURITY_PROTOCOLS


PLAINTEXT_LISTENER = ListenerSecurity()


def client_security(security_protocol: str, ssl_values: Mapping[str, object], name: str = "") -> ClientSecurity:
    """The security of outgoing connections with `security_protocol`, TLS settings from Kafka's
    `ssl.*` keys (already resolved for the listener)."""
    protocol = security_protocol.upper()
    if protocol not in SECURITY_PROTOCOLS:
        raise ConfigException("security.protocol", security_protocol,
                              "must be PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL")
    if protocol not in TLS_SECURITY_PROTOCOLS:
        return ClientSecurity(protocol)
    config = SslConfig.from_values(ssl_values)
    return ClientSecurity(protocol, ReloadingSslContext(config, client_context, name or f"{protocol} client"))


LIBRDKAFKA_SSL_KEYS = {
    "ssl.ca.location": "ssl.truststore.location",
    "ssl.certificate.location": "ssl.keystore.certificate.chain.location",
    "ssl.key.location": "ssl.keystore.key.location",
    "ssl.key.password": "ssl.key.password",
}


def client_security_from_properties(props: Mapping[str, str], name: str = "client") -> ClientSecurity:
    """A Kafka client properties file (`--command-config`, `odradek dev`'s client.config): Java
    client keys (`ssl.truststore.location`, `ssl.keystore.location`, ...) and librdkafka's
    (`ssl.ca.location`, `ssl.certificate.location` + `ssl.key.location`,
    `enable.ssl.certificate.verification`); on SASL_* the SASL client's keys (`sasl.mechanism`,
    `sasl.username` + `sasl.password` or `sasl.jaas.config`) make the `authenticate` step."""
    values: dict[str, object] = {k: v for k, v in props.items() if k.startswith("ssl.")}
    if "ssl.ca.location" in props and "ssl.truststore.location" not in props:
        values["ssl.truststore.location"] = props["ssl.ca.location"]
    cert, key = props.get("ssl.certificate.location"), props.get("ssl.key.location")
    if cert and key and "ssl.keystore.location" not in props:
        values["ssl.keystore.certificate.chain"] = _read(cert, "ssl.certificate.location")
        values["ssl.keystore.key"] = _read(key, "ssl.key.location")
    if props.get("enable.ssl.certificate.verification", "true").lower() == "false":
        raise ConfigException("enable.ssl.certificate.verification", "false",
                              "connections without certificate verification are not supported")
    security = client_security(props.get("security.protocol", "PLAINTEXT"), values, name)
    try:
        credentials = SaslCredentials.from_properties(props)
    except ValueError as e:
        raise ConfigException("sasl.mechanism", props.get("sasl.mechanism"), str(e)) from None
    if credentials is None:
        return security
    return ClientSecurity(security.security_protocol, security.context, authenticate_step(credentials), credentials)


def _read(path: str, key: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError as e:
        raise ConfigException(key, path, e.strerror or "cannot read") from None

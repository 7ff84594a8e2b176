"""A process's listener and outgoing-connection security from its config (Kafka's ChannelBuilders).

A listener's settings are Kafka's keys read through the listener's prefix
(`listener.name.<listener>.ssl.keystore.location` over `ssl.keystore.location`); an outgoing
connection to a listener uses the settings of the same listener name (its trust store to verify
the server, its key store as the client certificate), as Kafka's inter-broker client does. Every
TLS context built here is registered with the process's CertificateWatcher, so replaced files
reach new connections, incoming and outgoing.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping

from odradek.common.config import SecurityConfig, parse_listeners
from odradek.common.config_def import ConfigException

from . import sasl_client
from .channel import ClientSecurity, ListenerSecurity, client_security
from .principal import SslPrincipalMapper
from .reload import CertificateWatcher, ReloadingSslContext
from .ssl_factory import SSL_KEYS, TLS_SECURITY_PROTOCOLS, SslConfig, server_context

log = logging.getLogger(__name__)


def listener_security(config: SecurityConfig, listener: str, watcher: CertificateWatcher,
                      contexts: dict[str, ReloadingSslContext] | None = None) -> ListenerSecurity:
    """The security of the listener named `listener` (its protocol from listener.security.protocol.map);
    its TLS context goes into `contexts` too, for `reconfigure_listener_ssl`."""
    protocol = config.security_protocol(listener)
    if protocol not in TLS_SECURITY_PROTOCOLS:
        return ListenerSecurity(protocol)
    ssl_config = SslConfig.from_values(config.listener_values(listener, SSL_KEYS))
    try:
        mapper = SslPrincipalMapper(ssl_config.principal_mapping_rules)
    except ValueError as e:
        raise ConfigException("ssl.principal.mapping.rules", ssl_config.principal_mapping_rules, str(e)) from None
    context = watcher.watch(ReloadingSslContext(ssl_config, server_context, f"listener {listener}"))
    if contexts is not None:
        contexts[listener] = context
    return ListenerSecurity(protocol, context.current, mapper)


def reconfigure_listener_ssl(config: SecurityConfig, contexts: Mapping[str, ReloadingSslContext]) -> list[str]:
    """The listeners whose TLS settings in `config` (a new dynamic configuration) differ from
    their context's get one built from them (Kafka's DynamicListenerConfig for its key stores):
    new connections take it, open ones keep theirs. Settings that do not load keep the previous
    context, logged. Returns the listeners reconfigured."""
    changed = []
    for listener, context in contexts.items():
        try:
            if context.reconfigure(SslConfig.from_values(config.listener_values(listener, SSL_KEYS))):
                changed.append(listener)
        except ValueError as e:
            log.warning("listener %s: new TLS settings do not load (%s); keeping the previous ones", listener, e)
    return changed


def check_listener_security(config: SecurityConfig) -> None:
    """Builds every listener's security once, so that a bad key, a missing or unreadable key
    store or bad mapping rules stop the process at start-up with one ConfigException line."""
    watcher = CertificateWatcher()
    for name, _, _ in parse_listeners(str(getattr(config, "listeners", ""))):
        listener_security(config, name, watcher)


def outgoing_security(config: SecurityConfig, listener: str, security_protocol: str,
                      watcher: CertificateWatcher) -> ClientSecurity:
    """The security of connections this process opens to a peer's `listener` whose protocol is
    `security_protocol`, with this process's settings for that listener name."""
    security = client_security(security_protocol, config.listener_values(listener, SSL_KEYS),
                               f"connections to {listener}")
    if security.context is not None:
        watcher.watch(security.context)
    if security.security_protocol in sasl_client.SASL_PROTOCOLS:
        credentials = sasl_client.outgoing_credentials(config, listener)
        security = dataclasses.replace(security, authenticate=sasl_client.authenticate_step(credentials),
                                       sasl=credentials)
    return security

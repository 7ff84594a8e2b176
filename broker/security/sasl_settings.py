"""A listener's SASL settings from Kafka's keys, each read with the `listener.name.<l>.` prefix first.

`sasl.enabled.mechanisms`, `connections.max.reauth.ms`, `connection.failed.authentication.delay.ms`,
`sasl.server.max.receive.size`, and PLAIN's users from `listener.name.<l>.plain.sasl.jaas.config`
(or `sasl.jaas.config`), a PlainLoginModule with `user_<name>="<password>"` options.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from odradek.common.config_def import ConfigException
from odradek.common.security import jaas, scram

from .authenticator import SASL_SERVER_MAX_RECEIVE_SIZE
from .plain_server import users_from_jaas_options

SUPPORTED = ("PLAIN", *scram.MECHANISMS)
DEFAULT_MECHANISMS = "SCRAM-SHA-256,SCRAM-SHA-512"
"""Kafka's default is GSSAPI, which is not supported here; SCRAM needs credentials in ZooKeeper,
so enabling it by default lets nobody in by itself."""
FAILED_AUTHENTICATION_DELAY_MS = 100


@dataclass(frozen=True)
class ListenerSaslSettings:
    listener: str
    enabled_mechanisms: list[str]
    max_reauth_ms: int = 0
    failed_authentication_delay_ms: int = FAILED_AUTHENTICATION_DELAY_MS
    max_receive_size: int = SASL_SERVER_MAX_RECEIVE_SIZE
    plain_users: dict[str, str] = field(default_factory=dict, repr=False)


def _get(props: Mapping[str, str], listener: str, key: str, mechanism: str | None = None) -> str | None:
    prefix = f"listener.name.{listener.lower()}."
    if mechanism is not None:
        value = props.get(f"{prefix}{mechanism.lower()}.{key}")
        if value is not None:
            return value
    return props.get(prefix + key, props.get(key))


def _int(props: Mapping[str, str], listener: str, key: str, default: int, minimum: int = 0) -> int:
    text = _get(props, listener, key)
    if text is None:
        return default
    try:
        value = int(text.strip())
    except ValueError:
        raise ConfigException(key, text, "Not a number") from None
    if value < minimum:
        raise ConfigException(key, value, f"Value must be at least {minimum}")
    return value


def listener_settings(props: Mapping[str, str], listener: str) -> ListenerSaslSettings:
    """The settings of one SASL listener; ConfigException on a bad value (never quoting a JAAS value)."""
    enabled = [m.strip().upper() for m in (_get(props, listener, "sasl.enabled.mechanisms") or DEFAULT_MECHANISMS)
               .split(",") if m.strip()]
    unsupported = [m for m in enabled if m not in SUPPORTED]
    if unsupported or not enabled:
        raise ConfigException("sasl.enabled.mechanisms", ",".join(enabled),
                              f"supported mechanisms are {', '.join(SUPPORTED)}")
    users: dict[str, str] = {}
    if "PLAIN" in enabled:
        text = _get(props, listener, "sasl.jaas.config", "PLAIN")
        if text:
            try:
                parsed = jaas.parse(text)
            except jaas.JaasConfigError as e:
                raise ConfigException(f"listener.name.{listener.lower()}.plain.sasl.jaas.config", None, str(e)) from None
            users = users_from_jaas_options(parsed.options)
    return ListenerSaslSettings(
        listener=listener,
        enabled_mechanisms=enabled,
        max_reauth_ms=_int(props, listener, "connections.max.reauth.ms", 0),
        failed_authentication_delay_ms=_int(props, listener, "connection.failed.authentication.delay.ms",
                                            FAILED_AUTHENTICATION_DELAY_MS),
        max_receive_size=_int(props, listener, "sasl.server.max.receive.size", SASL_SERVER_MAX_RECEIVE_SIZE, 1),
        plain_users=users,
    )

"""Which listeners authenticate with SASL, and their handlers (the wiring's one call per listener)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from odradek.common.clock import now_ms
from odradek.common.config import parse_listeners, parse_protocol_map
from odradek.common.security.sasl_client import sasl_properties

from .authenticator import ErrorResponse
from .credential_cache import CredentialCache
from .sasl_handler import FrameHandler, SaslHandler
from .sasl_settings import listener_settings

SASL_PROTOCOLS = frozenset({"SASL_PLAINTEXT", "SASL_SSL"})


def sasl_listener_handler(handler: FrameHandler, listener: str, protocols: Mapping[str, str],
                          props: Mapping[str, str], credentials: CredentialCache,
                          error_response: ErrorResponse | None = None, clock: Callable[[], int] = now_ms) -> Any:
    """`handler` behind a SaslHandler when the listener's security protocol is SASL_*, else as is."""
    if protocols.get(listener, "PLAINTEXT").upper() not in SASL_PROTOCOLS:
        return handler
    return SaslHandler(handler, listener_settings(props, listener), credentials, error_response, clock)


def check_sasl_listeners(config: Any) -> None:
    """Reads every SASL listener's settings once at start-up, so a bad one stops the broker with one line."""
    props = sasl_properties(config)
    protocols = parse_protocol_map(config.listener_security_protocol_map)
    for name, _, _ in parse_listeners(config.listeners):
        if protocols.get(name, "PLAINTEXT").upper() in SASL_PROTOCOLS:
            listener_settings(props, name)

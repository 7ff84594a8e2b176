"""SaslHandshake and SaslAuthenticate as KafkaApis sees them: ILLEGAL_SASL_STATE.

On a SASL listener the authenticator (sasl_handler) takes both before they reach the dispatcher;
what does reach it arrived on a listener without SASL, or after authentication without starting a
re-authentication, and Kafka's KafkaApis answers ILLEGAL_SASL_STATE then. Registered so that
ApiVersions advertises both APIs, as Kafka does on every listener.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from odradek.common import wire
from odradek.common.api_key import ApiKey
from odradek.common.network.request_context import Handler, RequestContext

from .authenticator import AUTHENTICATE_VERSIONS, HANDSHAKE_VERSIONS


class SaslApis:
    def __init__(self) -> None:
        self.versions: dict[int, tuple[int, int]] = {
            ApiKey.SASL_HANDSHAKE: HANDSHAKE_VERSIONS, ApiKey.SASL_AUTHENTICATE: AUTHENTICATE_VERSIONS}
        self.handlers: dict[int, Handler] = {
            ApiKey.SASL_HANDSHAKE: self.handle_sasl_handshake,
            ApiKey.SASL_AUTHENTICATE: self.handle_sasl_authenticate,
        }

    async def handle_sasl_handshake(self, context: RequestContext, request: Any) -> Any:
        mod = wire.response_module(ApiKey.SASL_HANDSHAKE, context.api_version)
        return mod.SaslHandshakeResponse(error_code=ErrorCode.illegal_sasl_state, mechanisms=())

    async def handle_sasl_authenticate(self, context: RequestContext, request: Any) -> Any:
        mod = wire.response_module(ApiKey.SASL_AUTHENTICATE, context.api_version)
        return wire.make_entity(mod.SaslAuthenticateResponse, error_code=ErrorCode.illegal_sasl_state,
                                error_message="Unexpected SASL authentication request", auth_bytes=b"")

"""The shell around the SASL authenticator: a request handler for a SASL_* listener's socket server.

It sits between the socket server and KafkaApis: every frame of a connection goes first to that
connection's SaslServerAuthenticator (kept on the connection), and only what it lets through
reaches KafkaApis. A failed authentication waits `connection.failed.authentication.delay.ms` in
this connection's task (other connections carry on), then answers and closes. Once a connection
authenticates, its principal is set on the connection, where the request context takes it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from odradek.common.clock import now_ms
from odradek.common.network.socket_server import CloseConnection, RateLimitedLog
from odradek.common.security import scram
from odradek.common.security.principal import KafkaPrincipal

from .authenticator import ErrorResponse, SaslServer, SaslServerAuthenticator
from .credential_cache import CredentialCache
from .plain_server import PlainServer
from .sasl_settings import ListenerSaslSettings
from .scram_server import ScramServer

log = logging.getLogger(__name__)

FrameHandler = Callable[[memoryview, Any], Awaitable["list[Any] | None"]]


def set_principal(conn: Any, username: str) -> None:
    """Record the authenticated user on the connection (the request context reads it there)."""
    conn.principal = KafkaPrincipal.user(username)


class SaslHandler:
    def __init__(self, handler: FrameHandler, settings: ListenerSaslSettings, credentials: CredentialCache,
                 error_response: ErrorResponse | None = None, clock: Callable[[], int] = now_ms):
        self.handler = handler
        self.settings = settings
        self.credentials = credentials
        self.error_response = error_response
        self.clock = clock
        self.max_request_bytes_unauthenticated = settings.max_receive_size
        """The socket server bounds a new connection's frames by this until `conn.authenticated()`."""
        self.bad_input = RateLimitedLog(log)
        self.failures = 0
        self.successes = 0

    def new_server(self, mechanism: str) -> SaslServer:
        if mechanism == "PLAIN":
            return PlainServer(self.settings.plain_users)
        return ScramServer(scram.MECHANISMS[mechanism], self.credentials.get, self.credentials.decoy_secret)

    def _authenticator(self, conn: Any) -> SaslServerAuthenticator:
        auth: SaslServerAuthenticator | None = getattr(conn, "sasl_authenticator", None)
        if auth is None:
            s = self.settings
            auth = SaslServerAuthenticator(s.enabled_mechanisms, self.new_server, max_reauth_ms=s.max_reauth_ms,
                                           max_receive_size=s.max_receive_size, error_response=self.error_response)
            conn.sasl_authenticator = auth
        return auth

    async def __call__(self, frame: memoryview, conn: Any) -> list[Any] | None:
        auth = self._authenticator(conn)
        was_authenticated = auth.authenticated
        outcome = auth.receive(frame, self.clock())
        if outcome.forward:
            return await self.handler(frame, conn)
        peer = getattr(conn, "peer", None)
        if outcome.reason:
            kind = "sasl-failed" if outcome.delay else "sasl"
            self.bad_input.warning(kind, "listener %s, connection from %s: %s", self.settings.listener, peer,
                                   outcome.reason)
        if outcome.delay:
            self.failures += 1
            delay_ms = self.settings.failed_authentication_delay_ms
            if delay_ms > 0:
                await asyncio.sleep(delay_ms / 1000)
        if outcome.close:
            transport = getattr(conn, "transport", None)
            if outcome.response and transport is not None and not transport.is_closing():
                transport.write(outcome.response)  # close() below flushes it first
            raise CloseConnection()
        if auth.authenticated and auth.username is not None:
            if not was_authenticated:
                self.successes += 1
                raise_limit = getattr(conn, "authenticated", None)
                if raise_limit is not None:
                    raise_limit()
                log.debug("listener %s, connection from %s: authenticated as User:%s with %s",
                          self.settings.listener, peer, auth.username, auth.mechanism)
            set_principal(conn, auth.username)
        return [outcome.response] if outcome.response else None

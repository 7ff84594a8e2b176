"""One connection's SASL state machine (Kafka's SaslServerAuthenticator), sans I/O.

The socket server's shell feeds it every request frame of a connection on a SASL_* listener and
does what the `Outcome` says. Kafka's rules:
- before authentication only ApiVersions and SaslHandshake (v0-1) may arrive; anything else, or a
  frame larger than `sasl.server.max.receive.size`, closes the connection without an answer;
- SaslHandshake v1 wraps each token in SaslAuthenticate (v0-2); v0 is followed by raw
  size-prefixed tokens; a mechanism not enabled on the listener gets UNSUPPORTED_SASL_MECHANISM
  with the enabled list, and the connection closes;
- while tokens are expected, any other request gets ILLEGAL_SASL_STATE and the connection closes;
- a failed exchange answers SASL_AUTHENTICATION_FAILED with Kafka's message, which never says
  why (an unknown user and a wrong password read the same); the answer and the close wait
  `connection.failed.authentication.delay.ms` (the shell sleeps, the event loop does not);
- KIP-368: with `connections.max.reauth.ms` > 0 the session lifetime goes back in SaslAuthenticate
  v1+; once it has passed, any request but a SaslHandshake (re-authentication) closes the
  connection. Re-authentication keeps the mechanism and the principal.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from odradek.common import wire
from odradek.common.api_key import ApiKey

from .errors import IllegalSaslStateError, SaslAuthenticationError, client_message

SASL_SERVER_MAX_RECEIVE_SIZE = 524288
"""Kafka's `sasl.server.max.receive.size` default: the largest frame before authentication."""
HANDSHAKE_VERSIONS = (0, 1)
AUTHENTICATE_VERSIONS = (0, 2)


class SaslServer(Protocol):
    username: str | None

    @property
    def complete(self) -> bool: ...

    def evaluate(self, token: bytes) -> bytes: ...


class State(enum.Enum):
    HANDSHAKE = "handshake"
    """Expecting ApiVersions or SaslHandshake."""
    AUTHENTICATE = "authenticate"
    """Expecting SaslAuthenticate (after SaslHandshake v1)."""
    RAW_TOKEN = "raw-token"
    """Expecting a raw size-prefixed token (after SaslHandshake v0)."""
    COMPLETE = "complete"
    FAILED = "failed"


@dataclass(frozen=True)
class Outcome:
    forward: bool = False
    """Hand the frame to the API dispatcher (ApiVersions before authentication; every request after)."""
    response: bytes | None = None
    """A whole frame (size prefix included) to send."""
    close: bool = False
    """Close the connection (after `response`, if any)."""
    delay: bool = False
    """A failed authentication: wait connection.failed.authentication.delay.ms before answering and closing."""
    reason: str | None = None
    """One line for the broker's log (never a secret)."""


FORWARD = Outcome(forward=True)


def _close(reason: str) -> Outcome:
    return Outcome(close=True, reason=reason)


ServerFactory = Callable[[str], SaslServer]
"""mechanism name → a fresh server exchange."""
ErrorResponse = Callable[[Any, ErrorCode], Any]
"""(a decoded request, an error code) → that request's response carrying the code."""


class SaslServerAuthenticator:
    def __init__(self, enabled_mechanisms: list[str], new_server: ServerFactory, *,
                 max_reauth_ms: int = 0, max_receive_size: int = SASL_SERVER_MAX_RECEIVE_SIZE,
                 error_response: ErrorResponse | None = None):
        self.enabled = list(enabled_mechanisms)
        self._new_server = new_server
        self.max_reauth_ms = max_reauth_ms
        self.max_receive_size = max_receive_size
        self._error_response = error_response
        self.state = State.HANDSHAKE
        self.mechanism: str | None = None
        self.username: str | None = None
        """The authenticated user (the principal is User:<username>); None before."""
        self.session_expires_ms: int | None = None
        self.supports_reauth = False
        """The client used SaslAuthenticate v1+ (KIP-368), so it may re-authenticate."""
        self._server: SaslServer | None = None
        self._reauth_from: tuple[str, str] | None = None
        """(mechanism, username) of the session being re-authenticated."""
        self._reauth_bad_mechanism: str | None = None

    @property
    def authenticated(self) -> bool:
        return self.state == State.COMPLETE

    @property
    def reauthenticating(self) -> bool:
        return self._reauth_from is not None

    # --- the one entry point --------------------------------------------------------------------

    def receive(self, frame: bytes | memoryview, now_ms: int) -> Outcome:
        state = self.state
        if state == State.COMPLETE:
            return self._after_authentication(frame, now_ms)
        if state == State.FAILED:
            return _close("request after a failed authentication")
        if len(frame) > self.max_receive_size:
            self.state = State.FAILED
            return _close(f"{len(frame)}-byte frame during authentication (sasl.server.max.receive.size "
                          f"{self.max_receive_size})")
        if state == State.RAW_TOKEN:
            return self._raw_token(bytes(frame), now_ms)
        try:
            api_key, version, _ = wire.peek_api(frame)
        except ValueError:
            self.state = State.FAILED
            return _close("truncated request header during authentication")
        if state == State.HANDSHAKE:
            if api_key == ApiKey.API_VERSIONS and not self.reauthenticating:
                return FORWARD
            if api_key == ApiKey.SASL_HANDSHAKE:
                return self._handshake(frame, version)
            self.state = State.FAILED
            return _close(f"unexpected request (API {api_key}) before SASL authentication")
        # State.AUTHENTICATE
        if api_key == ApiKey.SASL_AUTHENTICATE:
            return self._authenticate(frame, version, now_ms)
        self.state = State.FAILED
        return self._illegal_state(frame, f"unexpected request (API {api_key}) during SASL authentication")

    # --- before authentication ------------------------------------------------------------------

    def _decode(self, frame: bytes | memoryview, versions: tuple[int, int], version: int) -> tuple[Any, Any, Any]:
        if not versions[0] <= version <= versions[1]:
            raise ValueError(f"unsupported version {version}")
        return wire.decode_request(bytes(frame))

    def _handshake(self, frame: bytes | memoryview, version: int) -> Outcome:
        try:
            header, request, schema = self._decode(frame, HANDSHAKE_VERSIONS, version)
        except (KeyError, ValueError) as e:
            self.state = State.FAILED
            return _close(f"bad SaslHandshake: {e}")
        mechanism = str(request.mechanism)
        mod = wire.response_module(ApiKey.SASL_HANDSHAKE, version)
        if mechanism not in self.enabled:
            self.state = State.FAILED
            answer = mod.SaslHandshakeResponse(error_code=ErrorCode.unsupported_sasl_mechanism,
                                               mechanisms=tuple(self.enabled))
            return Outcome(response=_encode(answer, header, schema), close=True, delay=not self.reauthenticating,
                           reason=f"SASL mechanism {mechanism[:64]!r} is not enabled (enabled: {self.enabled})")
        if self._reauth_from is not None and mechanism != self._reauth_from[0]:
            self._reauth_bad_mechanism = (f"SASL mechanism '{mechanism}' requested by client is not supported "
                                          f"for re-authentication of mechanism '{self._reauth_from[0]}'")
        self.mechanism = mechanism
        self._server = self._new_server(mechanism)
        self.state = State.AUTHENTICATE if version >= 1 else State.RAW_TOKEN
        answer = mod.SaslHandshakeResponse(error_code=ErrorCode.none, mechanisms=tuple(self.enabled))
        return Outcome(response=_encode(answer, header, schema))

    def _authenticate(self, frame: bytes | memoryview, version: int, now_ms: int) -> Outcome:
        try:
            header, request, schema = self._decode(frame, AUTHENTICATE_VERSIONS, version)
        except (KeyError, ValueError) as e:
            self.state = State.FAILED
            return _close(f"bad SaslAuthenticate: {e}")
        self.supports_reauth |= version >= 1
        mod = wire.response_module(ApiKey.SASL_AUTHENTICATE, version)
        try:
            if self._reauth_bad_mechanism is not None:
                raise _Refused(self._reauth_bad_mechanism)
            token = self._evaluate(bytes(request.auth_bytes))
            lifetime = self._complete(now_ms) if self.state == State.COMPLETE else 0
        except (SaslAuthenticationError, IllegalSaslStateError, _Refused) as e:
            self.state = State.FAILED
            message = str(e) if isinstance(e, _Refused) else client_message(str(self.mechanism), self.reauthenticating)
            answer = wire.make_entity(mod.SaslAuthenticateResponse, error_code=ErrorCode.sasl_authentication_failed,
                                      error_message=message, auth_bytes=b"")
            return Outcome(response=_encode(answer, header, schema), close=True, delay=not self.reauthenticating,
                           reason=self._failure_reason(e))
        fields: dict[str, Any] = dict(error_code=ErrorCode.none, error_message=None, auth_bytes=token)
        if version >= 1:
            fields["session_lifetime"] = _timedelta_ms(lifetime)
        answer = wire.make_entity(mod.SaslAuthenticateResponse, **fields)
        return Outcome(response=_encode(answer, header, schema))

    def _raw_token(self, token: bytes, now_ms: int) -> Outcome:
        try:
            out = self._evaluate(token)
            if self.state == State.COMPLETE:
                self._complete(now_ms)
        except (SaslAuthenticationError, IllegalSaslStateError, _Refused) as e:
            self.state = State.FAILED
            return Outcome(close=True, delay=True, reason=self._failure_reason(e))
        return Outcome(response=struct.pack(">i", len(out)) + out)

    def _evaluate(self, token: bytes) -> bytes:
        server = self._server
        assert server is not None
        out = server.evaluate(token)
        if server.complete:
            username = server.username
            assert username is not None
            if self._reauth_from is not None and self._reauth_from[1] != username:
                raise _Refused(f"Cannot change principals during re-authentication from User.{self._reauth_from[1]}: "
                               f"User.{username}")
            self.username = username
            self.state = State.COMPLETE
        return out

    def _complete(self, now_ms: int) -> int:
        """The session lifetime to tell the client (0: none), from connections.max.reauth.ms."""
        self._reauth_from = None
        self._reauth_bad_mechanism = None
        self._server = None
        if self.max_reauth_ms > 0:
            self.session_expires_ms = now_ms + self.max_reauth_ms
            return self.max_reauth_ms
        self.session_expires_ms = None
        return 0

    def _failure_reason(self, e: Exception) -> str:
        what = "re-authentication" if self.reauthenticating else "authentication"
        user = self._server.username if self._server is not None else None
        who = f" of user {user[:128]!r}" if user else ""
        return f"{self.mechanism} {what}{who} failed: {e}"

    def _illegal_state(self, frame: bytes | memoryview, reason: str) -> Outcome:
        """ILLEGAL_SASL_STATE in the unexpected request's own response, then close."""
        if self._error_response is None:
            return _close(reason)
        try:
            header, request, schema = wire.decode_request(bytes(frame))
            answer = self._error_response(request, ErrorCode.illegal_sasl_state)
            return Outcome(response=_encode(answer, header, schema), close=True, reason=reason)
        except Exception:
            return _close(reason)

    # --- after authentication -------------------------------------------------------------------

    def _after_authentication(self, frame: bytes | memoryview, now_ms: int) -> Outcome:
        expired = self.session_expires_ms is not None and now_ms >= self.session_expires_ms
        try:
            api_key, version, _ = wire.peek_api(frame)
        except ValueError:
            return FORWARD if not expired else _close("session expired (connections.max.reauth.ms)")
        if api_key == ApiKey.SASL_HANDSHAKE and self.supports_reauth and version >= 1:
            assert self.mechanism is not None and self.username is not None
            self._reauth_from = (self.mechanism, self.username)
            self.state = State.HANDSHAKE
            return self._handshake(frame, version)
        if expired:
            self.state = State.FAILED
            return _close(f"session of user {self.username!r} expired (connections.max.reauth.ms "
                          f"{self.max_reauth_ms}) and the client sent API {api_key} instead of re-authenticating")
        return FORWARD


class _Refused(Exception):
    """A failure whose message Kafka shows the client as it is (re-authentication rules)."""


def _encode(answer: Any, header: Any, schema: Any) -> bytes:
    api_key = int(schema.__api_key__)
    return wire.encode_response(answer, int(header.correlation_id),
                                flexible_header=wire.response_header_flexible(api_key, schema.__flexible__))


def _timedelta_ms(ms: int) -> Any:
    import datetime

    from kio.static.primitive import i64Timedelta
    return i64Timedelta.parse(datetime.timedelta(milliseconds=ms))


def enabled_for_listener(props: Mapping[str, str], listener: str, default: str) -> list[str]:
    """`listener.name.<l>.sasl.enabled.mechanisms`, else `sasl.enabled.mechanisms`, else `default`."""
    key = "sasl.enabled.mechanisms"
    value = props.get(f"listener.name.{listener.lower()}.{key}") or props.get(key) or default
    return [m.strip().upper() for m in value.split(",") if m.strip()]

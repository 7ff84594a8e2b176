"""The client side of SASL (PLAIN, SCRAM-SHA-256/512), sans I/O, and the exchange over Kafka requests.

`SaslCredentials.from_properties` reads Kafka's client keys (`security.protocol`,
`sasl.mechanism`, `sasl.jaas.config` with PlainLoginModule/ScramLoginModule username and
password, or librdkafka's `sasl.username`/`sasl.password`). `PlainClient` and `ScramClient` are
the exchanges as state machines; `authenticate(send, credentials)` runs one over a connection
(SaslHandshake v1, then SaslAuthenticate until done), as Kafka's SaslClientAuthenticator does.
The SCRAM client refuses a server that asks for fewer than 4096 iterations, a nonce that does not
extend its own, and a server signature that does not match (a server that does not know the
password).
"""

from __future__ import annotations

import asyncio
import base64
import hmac
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from . import jaas, scram

SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


class SaslClientError(Exception):
    """Authentication failed or the server misbehaved (never carries the password)."""


@dataclass(frozen=True)
class SaslCredentials:
    mechanism: str
    username: str
    password: str = field(repr=False)

    @classmethod
    def from_properties(cls, props: Mapping[str, str], prefix: str = "") -> SaslCredentials | None:
        """From client properties (keys under `prefix`); None when security.protocol is not SASL."""
        protocol = props.get(prefix + "security.protocol", "PLAINTEXT").upper()
        if protocol not in SASL_PROTOCOLS:
            return None
        mechanism = props.get(prefix + "sasl.mechanism", props.get(prefix + "sasl.mechanisms", "GSSAPI")).upper()
        if mechanism not in MECHANISMS:
            raise ValueError(f"sasl.mechanism {mechanism} is not supported (supported: {', '.join(MECHANISMS)})")
        jaas_text = props.get(f"{prefix}{mechanism.lower()}.sasl.jaas.config") or props.get(prefix + "sasl.jaas.config")
        if jaas_text:
            options = jaas.parse(jaas_text).options
            username, password = options.get("username"), options.get("password")
        else:
            username, password = props.get(prefix + "sasl.username"), props.get(prefix + "sasl.password")
        if not username or password is None:
            raise ValueError(f"{protocol} with {mechanism} needs a username and password "
                             "(sasl.jaas.config, or sasl.username and sasl.password)")
        return cls(mechanism, username, password)


class PlainClient:
    def __init__(self, username: str, password: str):
        self._token = b"\0" + username.encode() + b"\0" + password.encode()
        self.complete = False

    def first(self) -> bytes:
        return self._token

    def evaluate(self, challenge: bytes) -> bytes | None:
        self.complete = True
        return None


class ScramClient:
    def __init__(self, mechanism: str, username: str, password: str, nonce: str | None = None):
        self.mechanism = scram.MECHANISMS[mechanism]
        self._password = password
        self._nonce = nonce or scram.new_nonce()
        self._bare = f"n={scram.encode_saslname(username)},r={self._nonce}"
        self._server_signature: bytes | None = None
        self.complete = False

    def first(self) -> bytes:
        return ("n,," + self._bare).encode()

    def evaluate(self, challenge: bytes) -> bytes | None:
        """server-first → client-final; server-final → None (verified)."""
        try:
            if self._server_signature is None:
                return self._final(scram.decode_message(challenge))
            self._verify(scram.decode_message(challenge))
        except scram.ScramFormatError as e:
            raise SaslClientError(f"invalid {self.mechanism.name} message from the server: {e}") from None
        return None

    def _final(self, server_first: str) -> bytes:
        attrs = dict(scram.attributes(server_first))
        nonce, salt_b64, iterations_text = attrs.get("r", ""), attrs.get("s", ""), attrs.get("i", "")
        if not nonce.startswith(self._nonce) or len(nonce) == len(self._nonce) or not scram.valid_nonce(nonce):
            raise SaslClientError("server nonce does not extend the client's")
        if not iterations_text.isdigit() or int(iterations_text) < scram.MIN_ITERATIONS:
            raise SaslClientError(f"server asks for {iterations_text} iterations, fewer than {scram.MIN_ITERATIONS}")
        iterations = int(iterations_text)
        if iterations > 10 * scram.MAX_ITERATIONS:
            raise SaslClientError(f"server asks for {iterations} iterations")
        salt = scram.b64decode(salt_b64)
        mech = self.mechanism
        salted = mech.salted_password(self._password, salt, iterations)
        client_key = mech.hmac(salted, b"Client Key")
        stored_key = mech.h(client_key)
        without_proof = f"c=biws,r={nonce}"
        auth_message = f"{self._bare},{server_first},{without_proof}".encode()
        proof = scram.xor(client_key, mech.hmac(stored_key, auth_message))
        self._server_signature = mech.hmac(mech.hmac(salted, b"Server Key"), auth_message)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def _verify(self, server_final: str) -> None:
        attrs = dict(scram.attributes(server_final))
        if "e" in attrs:
            raise SaslClientError(f"server refused: {attrs['e']}")
        signature = scram.b64decode(attrs.get("v", ""))
        assert self._server_signature is not None
        if not hmac.compare_digest(signature, self._server_signature):
            raise SaslClientError("server signature does not match: the server does not know the password")
        self.complete = True


def new_client(credentials: SaslCredentials) -> PlainClient | ScramClient:
    if credentials.mechanism == "PLAIN":
        return PlainClient(credentials.username, credentials.password)
    return ScramClient(credentials.mechanism, credentials.username, credentials.password)


Send = Callable[[Any], Awaitable[Any]]
"""Sends one kio request on the connection being authenticated and returns its response."""


async def authenticate(send: Send, credentials: SaslCredentials) -> int:
    """SaslHandshake v1 + SaslAuthenticate v1 round trips; returns the session lifetime (ms, 0:
    none). Raises SaslClientError when the server refuses."""
    from kio.schema.sasl_authenticate.v1.request import SaslAuthenticateRequest
    from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

    handshake = await send(SaslHandshakeRequest(mechanism=credentials.mechanism))
    if int(handshake.error_code) != 0:
        raise SaslClientError(f"SaslHandshake: {handshake.error_code.name}, broker mechanisms "
                              f"{list(handshake.mechanisms)}")
    client = new_client(credentials)
    token: bytes | None = client.first()
    lifetime = 0
    for _ in range(4):  # PLAIN takes one round trip, SCRAM two
        assert token is not None
        response = await send(SaslAuthenticateRequest(auth_bytes=token))
        if int(response.error_code) != 0:
            raise SaslClientError(f"SaslAuthenticate: {response.error_code.name}: {response.error_message}")
        lifetime = int(response.session_lifetime.total_seconds() * 1000)
        token = client.evaluate(bytes(response.auth_bytes))
        if client.complete:
            return lifetime
    raise SaslClientError("SASL exchange did not complete")


def authenticate_step(credentials: SaslCredentials) -> Callable[[Any], Awaitable[None]]:
    """The `authenticate` step of an outgoing connection (common/security/channel.ClientSecurity):
    runs the exchange on a freshly connected NetworkClient; a refusal becomes a ConnectionError
    naming the user and the reason, never the password."""

    async def step(client: Any) -> None:
        try:
            lifetime_ms = await authenticate(lambda request: client.send(request, client.connect_timeout), credentials)
        except (SaslClientError, ValueError) as e:
            raise ConnectionError(f"SASL {credentials.mechanism} authentication to {client.host}:{client.port} as "
                                  f"{credentials.username!r} failed: {e}") from None
        if lifetime_ms > 0:
            task = asyncio.get_running_loop().create_task(_retire(client, client._protocol, lifetime_ms / 1000))
            _retiring.add(task)
            task.add_done_callback(_retiring.discard)

    return step


_retiring: set[asyncio.Task[None]] = set()
RETIRE_AT = 0.85
"""Share of a session's lifetime after which its connection is replaced (Kafka's client re-authenticates
between 85 and 95 %)."""


DRAIN_S = 30.0
"""Longest wait for a retired connection's last answers."""


async def _retire(client: Any, connection: Any, lifetime_s: float) -> None:
    """KIP-368 for this process's own connections: rather than re-authenticate in place, after
    RETIRE_AT of its session the connection is detached from its client, so the next request
    connects and authenticates anew, while the requests already in flight on it (a replica
    fetcher's long poll) are still answered there (a broker refuses only new requests past the
    session's end); it is closed once they are. Ends at once when the connection was replaced or closed meanwhile."""
    await asyncio.sleep(lifetime_s * RETIRE_AT)
    if client._protocol is not connection or connection is None:
        return
    client._protocol = None
    loop = asyncio.get_running_loop()
    # the broker answers what was sent before the session's end: wait for it (bounded), send nothing more
    end = loop.time() + max(lifetime_s, DRAIN_S)
    while connection.pending and loop.time() < end:
        await asyncio.sleep(0.02)
    if connection.transport is not None:
        connection.transport.close()


def listener_credentials(props: Mapping[str, str], listener: str, mechanism_key: str,
                         fallback_key: str | None = None) -> SaslCredentials:
    """A broker's or controller's own credentials for outgoing connections to a SASL listener, as
    Kafka reads them: the mechanism from `mechanism_key` (`sasl.mechanism.inter.broker.protocol`,
    `sasl.mechanism.controller.protocol`, else `fallback_key`), username and password from that
    mechanism's login module, `listener.name.<l>.<mechanism>.sasl.jaas.config`, else `sasl.jaas.config`."""
    mechanism = (props.get(mechanism_key) or (props.get(fallback_key) if fallback_key else None) or "GSSAPI").upper()
    if mechanism not in MECHANISMS:
        raise ValueError(f"{mechanism_key} {mechanism} is not supported for listener {listener} "
                         f"(supported: {', '.join(MECHANISMS)})")
    key = f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config"
    text = props.get(key) or props.get("sasl.jaas.config")
    if not text:
        raise ValueError(f"listener {listener} is SASL with {mechanism}: {key} (or sasl.jaas.config) must give "
                         "the username and password this process authenticates with")
    options = jaas.parse(text).options
    username, password = options.get("username"), options.get("password")
    if not username or password is None:
        raise ValueError(f"{key}: the login module needs username and password options")
    return SaslCredentials(mechanism, username, password)


SASL_KEYS = ("sasl.enabled.mechanisms", "sasl.jaas.config", "sasl.mechanism.inter.broker.protocol",
             "sasl.mechanism.controller.protocol", "connections.max.reauth.ms",
             "connection.failed.authentication.delay.ms", "sasl.server.max.receive.size")


def sasl_properties(config: Any) -> dict[str, str]:
    """A broker's or controller's SASL keys (common.config.SecurityConfig) as properties, with the
    listener-prefixed ones (`listener.name.<l>.<mechanism>.sasl.jaas.config`, ...)."""
    out = dict(config.listener_prefixed)
    for key in SASL_KEYS:
        try:
            value = config.value_of(key)
        except KeyError:
            continue
        if value is not None:
            out[key] = ",".join(value) if isinstance(value, list) else str(value)
    return out


def outgoing_credentials(config: Any, listener: str) -> SaslCredentials:
    """This process's credentials for connections to a peer's SASL `listener`: controller traffic
    (the control-plane listener) with `sasl.mechanism.controller.protocol`, else the inter-broker mechanism."""
    key = ("sasl.mechanism.controller.protocol" if listener == getattr(config, "control_plane_listener_name", None)
           else "sasl.mechanism.inter.broker.protocol")
    return listener_credentials(sasl_properties(config), listener, key, "sasl.mechanism.inter.broker.protocol")

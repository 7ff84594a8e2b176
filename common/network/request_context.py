"""RequestContext: who sent a request and where (Kafka's RequestContext), handed to every handler.

Handlers need more than the request: the header (version, client id, correlation id), the client's
address (JoinGroup reports it as the member's client host), the listener it arrived on, its
security protocol and the principal (`User:ANONYMOUS` on PLAINTEXT; the mapped certificate subject
on TLS with a client certificate; the SASL user once authenticated), printed as Kafka prints a
KafkaPrincipal.
"""

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from kio.static.protocol import RequestHeader

ANONYMOUS = "User:ANONYMOUS"
DEFAULT_LISTENER = "PLAINTEXT"
UNKNOWN_HOST = "/127.0.0.1"
"""The client host of a request without a peer address (a handler called in-process)."""


@dataclass(frozen=True)
class RequestContext:
    header: RequestHeader
    """The request header (kio's, v1 or v2)."""
    client_host: str = UNKNOWN_HOST
    """The client's address as Kafka prints it: "/" + IP."""
    listener: str = DEFAULT_LISTENER
    principal: str = ANONYMOUS
    security_protocol: str = "PLAINTEXT"
    size: int = 0
    """The request's size in bytes (its frame, Kafka's request.sizeInBytes): what producer quotas count."""

    @property
    def api_version(self) -> int:
        return int(self.header.request_api_version)

    @property
    def client_id(self) -> str:
        return self.header.client_id or ""

    @property
    def user(self) -> str:
        """The principal's name without its type (KafkaPrincipal.getName): the quota user."""
        return self.principal.partition(":")[2] or self.principal


def client_host(peer: object) -> str:
    """A socket's peer address (host, port[, ...]) as Kafka prints a client host."""
    if peer is None:
        return UNKNOWN_HOST
    return f"/{peer[0]}" if isinstance(peer, tuple) else str(peer)


Handler = Callable[[RequestContext, Any], Awaitable[Any]]
"""An API's handler: (context, the decoded kio request) → the response (or a pre-encoded Body)."""

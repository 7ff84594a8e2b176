"""Connections of a command-line tool to a cluster it knows by its bootstrap servers.

Kafka's admin tools try every server of `--bootstrap-server` until one answers: the first one
named may be the very broker that crashed. `send_any` does so and remembers the one that answered;
`send` talks to one broker (a coordinator, a partition's leader) over a connection kept per broker.
"""

from __future__ import annotations

import argparse
from typing import Any

from kio.schema.errors import ErrorCode

from odradek.common.config import load_properties
from odradek.common.network.client import NetworkClient
from odradek.common.security.channel import PLAINTEXT, ClientSecurity, client_security_from_properties


class ToolError(Exception):
    """What an admin tool reports and exits non-zero for: a usage mistake or a broker's error."""


def error_name(code: int) -> str | None:
    """Kafka's name of an error code as kio spells it (`unknown_topic_or_partition`); None for
    NONE. The operator keeps it so in its results; the tools print it upper-case."""
    error = ErrorCode(int(code))
    return None if error == ErrorCode.none else error.name


def error_text(code: int, message: str | None = None) -> str | None:
    """`NAME: message` (or `NAME` alone) as the tools print an error answer; None for NONE."""
    name = error_name(code)
    if name is None:
        return None
    return f"{name.upper()}: {message}" if message else name.upper()


def raise_for_error(code: int, message: str | None = None, context: str = "") -> None:
    """ToolError `context: NAME: message` when `code` is an error."""
    text = error_text(code, message)
    if text is not None:
        raise ToolError(f"{context}: {text}" if context else text)


def parse_bootstrap(value: str) -> list[tuple[str, int]]:
    """`host:port,host:port` → endpoints; a missing host is loopback."""
    out = []
    for item in value.split(","):
        if item.strip():
            host, _, port = item.strip().rpartition(":")
            out.append((host or "127.0.0.1", int(port)))
    return out


def add_command_config(parser: argparse.ArgumentParser) -> None:
    """Kafka's `--command-config FILE`: client properties (security.protocol, ssl.*, sasl.*)."""
    parser.add_argument("--command-config", metavar="FILE",
                        help="client properties: security.protocol, ssl.ca.location / ssl.truststore.location, "
                             "sasl.mechanism, sasl.username, sasl.password, ...")


def command_security(path: str | None) -> ClientSecurity:
    """The security of a tool's connections from its --command-config file (PLAINTEXT without one)."""
    if not path:
        return PLAINTEXT
    return client_security_from_properties(load_properties(path), "command-config")


class BootstrapConnections:
    def __init__(self, bootstrap: str, timeout_s: float, client_id: str, security: ClientSecurity = PLAINTEXT):
        self.security = security
        self.bootstraps = parse_bootstrap(bootstrap)
        self.timeout_s = timeout_s
        self.client_id = client_id
        self._clients: dict[tuple[str, int], NetworkClient] = {}

    def client(self, endpoint: tuple[str, int]) -> NetworkClient:
        if endpoint not in self._clients:
            self._clients[endpoint] = NetworkClient(*endpoint, client_id=self.client_id,
                                                    connect_timeout=self.timeout_s, security=self.security)
        return self._clients[endpoint]

    async def send(self, endpoint: tuple[str, int], request: object) -> Any:
        """The answer is kio's response class of the version asked (`NetworkClient.send`)."""
        return await self.client(endpoint).send(request, self.timeout_s)

    async def send_any(self, request: object) -> Any:
        """To the first bootstrap server that answers (tried first for the next requests)."""
        last: Exception = ConnectionError("no bootstrap server given")
        for endpoint in list(self.bootstraps):
            try:
                response = await self.send(endpoint, request)
            except (ConnectionError, TimeoutError, OSError) as e:
                last = e
                continue
            self.bootstraps.remove(endpoint)
            self.bootstraps.insert(0, endpoint)
            return response
        raise last

    async def close(self) -> None:
        for c in self._clients.values():
            await c.close()

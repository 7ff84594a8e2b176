"""Connections of a command-line tool to a cluster it knows by its bootstrap servers.

Kafka's admin tools try every server of `--bootstrap-server` until one answers: the first one
named may be the very broker that crashed. `AdminConnections` does so for the tools and the
operator alike (`send_any`, `connect_any`), and `send` talks to one broker (a coordinator, a
partition's leader) over a connection kept per broker.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.types import TopicName
from kio.static.primitive import i8

from odradek.common.config import load_properties
from odradek.common.network.client import NetworkClient
from odradek.common.security.channel import PLAINTEXT, ClientSecurity, client_security_from_properties

SOFTWARE_VERSION = "0.1.0"
"""What ApiVersions tells a broker of this client's version (KIP-511)."""


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


Endpoint = tuple[str, int]


def agree(ours: tuple[int, int], theirs: tuple[int, int] | None) -> int | None:
    """The highest version both sides speak, or None."""
    if theirs is None:
        return None
    low, high = max(ours[0], theirs[0]), min(ours[1], theirs[1])
    return high if low <= high else None


class AdminConnections:
    """Connections of an admin client (a command-line tool, the operator) to one cluster.

    Bootstrap servers are tried in order until one answers, and one that fails goes to the back
    of the list: Kafka's admin clients do so, the first server named may be the very broker that
    crashed. Connections are kept per broker and per `lane`: the operator looks and changes on
    connections of their own, since a request that times out closes its connection and fails
    everything in flight on it. With `software_name` every new connection to a bootstrap server
    first asks ApiVersions, and `version` agrees one per API with that broker (as librdkafka does).
    Admin requests need no controller routing here: a broker forwards them to the controller and
    retries NOT_CONTROLLER itself (broker/controller_channel.py)."""

    def __init__(self, bootstraps: list[Endpoint], timeout_s: float, client_id: str,
                 security: ClientSecurity = PLAINTEXT, *, connect_attempts: int = 3,
                 connect_timeout_s: float | None = None, software_name: str | None = None):
        self.security = security
        self.bootstraps = list(bootstraps)
        self.timeout_s = timeout_s
        self.client_id = client_id
        self.connect_attempts = connect_attempts
        self.connect_timeout_s = timeout_s if connect_timeout_s is None else connect_timeout_s
        self.software_name = software_name
        self.versions: dict[Endpoint, dict[int, tuple[int, int]]] = {}
        """ApiVersions of each broker asked (with `software_name`): api key → (min, max)."""
        self._clients: dict[tuple[Endpoint, str], NetworkClient] = {}
        self._lock = asyncio.Lock()

    def client(self, endpoint: Endpoint, lane: str = "") -> NetworkClient:
        if (endpoint, lane) not in self._clients:
            self._clients[(endpoint, lane)] = NetworkClient(
                *endpoint, client_id=self.client_id, connect_timeout=self.connect_timeout_s,
                connect_attempts=self.connect_attempts, security=self.security)
        return self._clients[(endpoint, lane)]

    async def send(self, endpoint: Endpoint, request: object, timeout_s: float | None = None, lane: str = "") -> Any:
        """The answer is kio's response class of the version asked (`NetworkClient.send`). With
        `software_name`, ToolError instead of sending a version the broker does not offer (it
        would close the connection without an answer)."""
        if self.software_name is None:
            client = self.client(endpoint, lane)
        else:
            client = await self.connect(endpoint, lane)
            entity: Any = request  # a kio request: its class names its API and version
            api_key, version = int(entity.__api_key__), int(entity.__version__)
            if self.version(endpoint, api_key, (version, version)) is None:
                raise ToolError(f"{endpoint[0]}:{endpoint[1]} does not support {type(request).__name__} v{version}")
        return await client.send(request, self.timeout_s if timeout_s is None else timeout_s)

    async def send_any(self, request: object) -> Any:
        """To the first bootstrap server that answers (tried first for the next requests)."""
        last: Exception = ConnectionError("no bootstrap server given")
        for endpoint in list(self.bootstraps):
            try:
                return await self.send(endpoint, request)
            except (ConnectionError, TimeoutError, OSError) as e:
                last = e
                self._to_back(endpoint)
        raise last

    async def connect_any(self, lane: str = "") -> tuple[Endpoint, NetworkClient]:
        """A connection on `lane` to the first bootstrap server that answers (ApiVersions, with
        `software_name`); it stays in use until `failed` drops it."""
        async with self._lock:
            errors = []
            for endpoint in list(self.bootstraps):
                try:
                    return endpoint, await self.connect(endpoint, lane)
                except (OSError, ConnectionError, TimeoutError, ValueError) as e:
                    errors.append(f"{endpoint[0]}:{endpoint[1]}: {e}")
                    await self.failed(endpoint, lane)
            raise ConnectionError("no broker answered: " + "; ".join(errors) if errors else "no bootstrap server given")

    async def connect(self, endpoint: Endpoint, lane: str = "") -> NetworkClient:
        """A connection on `lane` to `endpoint` (a bootstrap server, or a broker Metadata named),
        ApiVersions asked first with `software_name`."""
        client = self.client(endpoint, lane)
        if not client.connected or (self.software_name is not None and endpoint not in self.versions):
            await client.connect()
            if self.software_name is not None:
                self.versions[endpoint] = await self._api_versions(client)
        return client

    async def _api_versions(self, client: NetworkClient) -> dict[int, tuple[int, int]]:
        request = ApiVersionsRequest(client_software_name=self.software_name or "", client_software_version=SOFTWARE_VERSION)
        response = await client.send(request, timeout=self.connect_timeout_s)
        if ErrorCode(int(response.error_code)) != ErrorCode.none:
            raise ValueError(f"ApiVersions answered {ErrorCode(int(response.error_code)).name}")
        return {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in response.api_keys}

    def version(self, endpoint: Endpoint, api_key: int, ours: tuple[int, int]) -> int | None:
        """The version of `api_key` agreed with `endpoint` (asked by `connect_any`), or None."""
        return agree(ours, self.versions.get(endpoint, {}).get(api_key))

    async def failed(self, endpoint: Endpoint, lane: str = "") -> None:
        """Drop `endpoint`'s connection on `lane`; the next `connect_any` starts with another broker."""
        self._to_back(endpoint)
        client = self._clients.pop((endpoint, lane), None)
        if client is not None:
            await client.close()

    def _to_back(self, endpoint: Endpoint) -> None:
        if endpoint in self.bootstraps:
            self.bootstraps.remove(endpoint)
            self.bootstraps.append(endpoint)

    async def close(self) -> None:
        clients, self._clients = self._clients, {}
        for c in clients.values():
            await c.close()

    # --- routing: brokers, partition leaders, coordinators -----------------------------------------

    async def metadata(self, topics: list[str] | None) -> Any:
        """Metadata v12 of `topics` (None: every topic; []: only the brokers)."""
        request = MetadataRequest(
            topics=None if topics is None else tuple(MetadataRequestTopic(topic_id=None, name=TopicName(t)) for t in topics),
            allow_auto_topic_creation=False, include_topic_authorized_operations=False)
        return await self.send_any(request)

    async def brokers(self) -> dict[int, Endpoint]:
        meta = await self.metadata([])
        return {int(b.node_id): (b.host, int(b.port)) for b in meta.brokers}

    async def leader(self, topic: str, partition: int) -> Endpoint:
        """The endpoint of the partition's leader; ToolError when it has none."""
        meta = await self.metadata([topic])
        brokers = {int(b.node_id): (b.host, int(b.port)) for b in meta.brokers}
        for t in meta.topics:
            for p in t.partitions:
                if int(p.partition_index) == partition and int(p.leader_id) in brokers:
                    return brokers[int(p.leader_id)]
        raise ToolError(f"{topic}-{partition} has no leader")

    async def coordinator(self, key_type: int, key: str) -> tuple[int, Endpoint]:
        """(node id, endpoint) of the coordinator of a group (key_type 0) or a transactional id
        (1); ToolError when there is none."""
        found = await self.send_any(FindCoordinatorRequest(key_type=i8(key_type), coordinator_keys=(key,)))
        (c,) = found.coordinators
        raise_for_error(c.error_code, None, f"no coordinator for {key!r}")
        return int(c.node_id), (c.host, int(c.port))

"""Topic administration over the Kafka protocol, as any Kafka admin client does it.

Every call takes many topics and makes one request: Metadata and DescribeConfigs to look at
topics, CreateTopics, CreatePartitions, IncrementalAlterConfigs and DeleteTopics to change them.
Looking and changing use connections of their own to one broker of the bootstrap list (the next
one when it fails): a request that times out closes its connection and fails everything in
flight on it, and a slow look must not take a CreateTopics of hundreds of topics down with it. Versions
are agreed through ApiVersions; an API the cluster does not offer fails its topics with
UNSUPPORTED_VERSION instead of sending anything (as librdkafka does).
"""

import asyncio
import datetime
import logging
import sys
from collections.abc import Callable, Iterable
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i8, i16, i32, i32Timedelta

from odradek.common import wire
from odradek.common.api_key import ApiKey
from odradek.common.network.client import NetworkClient
from odradek.common.replica_balance import BalanceError, change_replication_factor
from odradek.operator.topic_reconciler import (
    ActionResult,
    AlterConfigs,
    ChangeReplicationFactor,
    CreatePartitions,
    CreateTopic,
    LiveTopic,
)

log = logging.getLogger(__name__)

Build = Callable[[Any, int], object]
"""Builds a request from the agreed version's kio module and that version."""

OUR_VERSIONS = {
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: (0, 0),
    ApiKey.METADATA: (1, 12),
    ApiKey.CREATE_TOPICS: (2, 7),
    ApiKey.DELETE_TOPICS: (1, 5),  # v6 names topics by id or name; names are all the operator has
    ApiKey.DESCRIBE_CONFIGS: (1, 4),
    ApiKey.CREATE_PARTITIONS: (0, 3),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 1),
}
API_NAMES = {ApiKey.METADATA: "Metadata", ApiKey.CREATE_TOPICS: "CreateTopics", ApiKey.DELETE_TOPICS: "DeleteTopics",
             ApiKey.DESCRIBE_CONFIGS: "DescribeConfigs", ApiKey.CREATE_PARTITIONS: "CreatePartitions",
             ApiKey.INCREMENTAL_ALTER_CONFIGS: "IncrementalAlterConfigs",
             ApiKey.ALTER_PARTITION_REASSIGNMENTS: "AlterPartitionReassignments"}

RESOURCE_TOPIC = 2
DYNAMIC_TOPIC_CONFIG = 1
OP_SET, OP_DELETE = 0, 1


class Unsupported(Exception):
    """The cluster does not offer an API (or no version both sides speak)."""


def agree(ours: tuple[int, int], theirs: tuple[int, int] | None) -> int | None:
    """The highest version both sides speak, or None."""
    if theirs is None:
        return None
    low, high = max(ours[0], theirs[0]), min(ours[1], theirs[1])
    return high if low <= high else None


def _module(api_key: int, version: int) -> Any:
    return sys.modules[wire.request_schema(api_key, version).__module__]


def _timeout(seconds: float) -> i32Timedelta:
    return i32Timedelta.parse(datetime.timedelta(seconds=seconds))


def _error_name(code: int) -> str | None:
    code = ErrorCode(int(code))
    return None if code == ErrorCode.none else code.name


def live_topics(metadata: Any, described: Any) -> dict[str, LiveTopic | None]:
    """Metadata and DescribeConfigs answers → each topic as the cluster reports it (None: absent).
    `described` is None when Metadata knew none of the topics."""
    overrides: dict[str, dict[str, str] | None] = {}
    for result in described.results if described is not None else ():
        if ErrorCode(int(result.error_code)) == ErrorCode.unknown_topic_or_partition:
            overrides[result.resource_name] = None
            continue
        if ErrorCode(int(result.error_code)) != ErrorCode.none:
            raise ValueError(f"DescribeConfigs of {result.resource_name!r}: {ErrorCode(int(result.error_code)).name} "
                             f"{result.error_message or ''}".strip())
        overrides[result.resource_name] = {
            c.name: c.value for c in result.configs
            if int(c.config_source) == DYNAMIC_TOPIC_CONFIG and c.value is not None}
    found: dict[str, LiveTopic | None] = {}
    for topic in metadata.topics:
        code = ErrorCode(int(topic.error_code))
        if code == ErrorCode.unknown_topic_or_partition or (not topic.partitions and code == ErrorCode.none):
            found[topic.name] = None
            continue
        if not topic.partitions:
            raise ValueError(f"Metadata of {topic.name!r}: {code.name}")
        config = overrides.get(topic.name)
        if config is None:
            found[topic.name] = None  # deleted between the two answers
            continue
        found[topic.name] = LiveTopic(
            partitions=len(topic.partitions),
            replicas=max(len(p.replica_nodes) for p in topic.partitions),
            config=config)
    return found


class KafkaAdmin:
    """Admin requests to one cluster. Raises ConnectionError when no broker answers."""

    def __init__(self, bootstrap: list[tuple[str, int]], *, request_timeout: float = 30.0,
                 client_id: str = "odradek-topic-operator"):
        if not bootstrap:
            raise ValueError("no bootstrap servers")
        self.bootstrap = list(bootstrap)
        self.request_timeout = request_timeout
        self.client_id = client_id
        self._clients: dict[str, NetworkClient] = {}
        self._versions: dict[int, tuple[int, int]] = {}
        self._next = 0
        self._lock = asyncio.Lock()

    async def close(self) -> None:
        clients, self._clients = self._clients, {}
        for client in clients.values():
            await client.close()

    async def _connection(self, lane: str) -> NetworkClient:
        async with self._lock:
            current = self._clients.get(lane)
            if current is not None and current.connected:
                return current
            if current is not None:
                await current.close()
                del self._clients[lane]
            errors = []
            for _ in range(len(self.bootstrap)):
                host, port = self.bootstrap[self._next % len(self.bootstrap)]
                client = NetworkClient(host, port, client_id=self.client_id, connect_attempts=1,
                                       connect_timeout=min(5.0, self.request_timeout))
                try:
                    versions = await self._api_versions(client)
                except (OSError, ConnectionError, TimeoutError, ValueError) as e:
                    errors.append(f"{host}:{port}: {e}")
                    await client.close()
                    self._next += 1
                    continue
                self._clients[lane], self._versions = client, versions
                return client
            raise ConnectionError("no broker answered: " + "; ".join(errors))

    async def _api_versions(self, client: NetworkClient) -> dict[int, tuple[int, int]]:
        request = _module(ApiKey.API_VERSIONS, 3).ApiVersionsRequest(
            client_software_name="odradek-operator", client_software_version="0.1.0")
        response = await client.send(request, timeout=min(5.0, self.request_timeout))
        if ErrorCode(int(response.error_code)) != ErrorCode.none:
            raise ValueError(f"ApiVersions answered {ErrorCode(int(response.error_code)).name}")
        return {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in response.api_keys}

    async def _send(self, api_key: ApiKey, build: Build, extra_timeout: float = 0.0) -> Any:
        """Build (with the agreed version's kio module) and send one request; a broken connection
        is dropped so the next call starts over with the next broker."""
        lane = "look" if api_key in (ApiKey.METADATA, ApiKey.DESCRIBE_CONFIGS) else "change"
        client = await self._connection(lane)
        version = agree(OUR_VERSIONS[api_key], self._versions.get(api_key))
        if version is None:
            raise Unsupported(f"the cluster does not support {API_NAMES[api_key]}")
        try:
            return await client.send(build(_module(api_key, version), version),
                                     timeout=self.request_timeout + extra_timeout)
        except (OSError, ConnectionError, TimeoutError):
            self._next += 1
            if self._clients.get(lane) is client:
                del self._clients[lane]
            await client.close()
            raise

    # --- looking -------------------------------------------------------------------------------

    async def describe_topics(self, names: list[str]) -> dict[str, LiveTopic | None]:
        """Each named topic as the cluster reports it, None when it does not exist."""
        if not names:
            return {}

        def metadata(m: Any, version: int) -> object:
            if version >= 10:
                topics = tuple(m.MetadataRequestTopic(topic_id=None, name=n) for n in names)
            else:
                topics = tuple(m.MetadataRequestTopic(name=n) for n in names)
            return wire.make_entity(m.MetadataRequest, topics=topics, allow_auto_topic_creation=False,
                                    include_cluster_authorized_operations=False,
                                    include_topic_authorized_operations=False)

        def describe(existing: list[str]) -> Build:  # only topics Metadata knows: a topic to create needs no DescribeConfigs
            def build(m: Any, version: int) -> object:
                resources = tuple(m.DescribeConfigsResource(resource_type=i8(RESOURCE_TOPIC), resource_name=n,
                                                            configuration_keys=None) for n in existing)
                return wire.make_entity(m.DescribeConfigsRequest, resources=resources, include_synonyms=False,
                                        include_documentation=False)
            return build

        meta = await self._send(ApiKey.METADATA, metadata)
        existing = [t.name for t in meta.topics if t.partitions]
        described = await self._send(ApiKey.DESCRIBE_CONFIGS, describe(existing)) if existing else None
        found = live_topics(meta, described)
        return {n: found.get(n) for n in names}

    # --- changing ------------------------------------------------------------------------------

    async def _per_topic(self, api_key: ApiKey, names: list[str], build: Build,
                         results_of: Callable[[Any], Iterable[Any]], timeout: float) -> dict[str, ActionResult]:
        """{topic: ActionResult}; an API the cluster lacks fails every topic the same way. The
        broker's own `timeout` starts once it has written every topic's znodes, which for hundreds
        of topics on a busy machine took over 30 s: the answer is awaited that long again."""
        try:
            response = await self._send(api_key, build, extra_timeout=2 * timeout)
        except Unsupported as e:
            return {n: ActionResult("unsupported_version", str(e)) for n in names}
        out: dict[str, ActionResult] = {}
        for r in results_of(response):
            out[r.name] = ActionResult(_error_name(r.error_code), getattr(r, "error_message", None),
                                       _positive(getattr(r, "num_partitions", None)),
                                       _positive(getattr(r, "replication_factor", None)))
        return {n: out.get(n, ActionResult("unknown_server_error", "no answer for this topic")) for n in names}

    async def create_topics(self, actions: list[CreateTopic], timeout: float = 30.0) -> dict[str, ActionResult]:
        """CreateTopics; the broker answers once every partition has a leader (or `timeout`)."""

        def build(m: Any, version: int) -> object:
            topics = tuple(m.CreatableTopic(
                name=a.topic, num_partitions=i32(a.partitions or -1), replication_factor=i16(a.replicas or -1),
                assignments=(), configs=tuple(m.CreatableTopicConfig(name=k, value=v) for k, v in sorted(a.config.items())),
            ) for a in actions)
            return wire.make_entity(m.CreateTopicsRequest, topics=topics, timeout=_timeout(timeout), validate_only=False)

        return await self._per_topic(ApiKey.CREATE_TOPICS, [a.topic for a in actions], build, lambda r: r.topics, timeout)

    async def create_partitions(self, actions: list[CreatePartitions], timeout: float = 30.0) -> dict[str, ActionResult]:
        def build(m: Any, version: int) -> object:
            topics = tuple(m.CreatePartitionsTopic(name=a.topic, count=i32(a.count), assignments=None) for a in actions)
            return wire.make_entity(m.CreatePartitionsRequest, topics=topics, timeout=_timeout(timeout),
                                    validate_only=False)

        return await self._per_topic(ApiKey.CREATE_PARTITIONS, [a.topic for a in actions], build, lambda r: r.results, timeout)

    async def alter_configs(self, actions: list[AlterConfigs]) -> dict[str, ActionResult]:
        """IncrementalAlterConfigs: only the keys that change, so concurrent changes to other
        keys are not overwritten (AlterConfigs would replace the whole set)."""

        def build(m: Any, version: int) -> object:
            resources = tuple(m.AlterConfigsResource(
                resource_type=i8(RESOURCE_TOPIC), resource_name=a.topic,
                configs=tuple([m.AlterableConfig(name=k, config_operation=i8(OP_SET), value=v)
                               for k, v in sorted(a.set.items())]
                              + [m.AlterableConfig(name=k, config_operation=i8(OP_DELETE), value=None)
                                 for k in a.delete]),
            ) for a in actions)
            return wire.make_entity(m.IncrementalAlterConfigsRequest, resources=resources, validate_only=False)

        def results(response: Any) -> list[_Named]:
            return [_Named(r.resource_name, r.error_code, r.error_message) for r in response.responses]

        return await self._per_topic(ApiKey.INCREMENTAL_ALTER_CONFIGS, [a.topic for a in actions], build, results, 0.0)

    async def change_replication_factors(self, actions: list[ChangeReplicationFactor], timeout: float = 30.0
                                         ) -> dict[str, ActionResult]:
        """Each topic to its replication factor by AlterPartitionReassignments (started, not
        awaited: the controller completes it); the placement is computed from Metadata."""
        names = [a.topic for a in actions]

        def metadata(m: Any, version: int) -> object:
            topics = tuple(wire.make_entity(m.MetadataRequestTopic, topic_id=None, name=n) for n in names)
            return wire.make_entity(m.MetadataRequest, topics=topics, allow_auto_topic_creation=False,
                                    include_cluster_authorized_operations=False,
                                    include_topic_authorized_operations=False)

        meta = await self._send(ApiKey.METADATA, metadata)
        brokers = [int(b.node_id) for b in meta.brokers]
        current = {t.name: {int(p.partition_index): tuple(int(r) for r in p.replica_nodes) for p in t.partitions}
                   for t in meta.topics if t.partitions}
        out: dict[str, ActionResult] = {}
        targets: dict[str, dict[int, tuple[int, ...]]] = {}
        for a in actions:
            if a.topic not in current:
                out[a.topic] = ActionResult("unknown_topic_or_partition", "the topic does not exist")
                continue
            try:
                targets[a.topic] = change_replication_factor(a.topic, current[a.topic], a.replicas, brokers)
            except BalanceError as e:
                out[a.topic] = ActionResult("invalid_replication_factor", str(e))
        if not targets:
            return out

        def build(m: Any, version: int) -> object:
            topics = tuple(m.ReassignableTopic(name=t, partitions=tuple(
                m.ReassignablePartition(partition_index=i32(p), replicas=tuple(i32(b) for b in r))
                for p, r in sorted(parts.items()))) for t, parts in sorted(targets.items()))
            return wire.make_entity(m.AlterPartitionReassignmentsRequest, topics=topics, timeout=_timeout(timeout))

        def results(response: Any) -> list[_Named]:
            if int(response.error_code) != 0:
                return [_Named(t, response.error_code, response.error_message) for t in targets]
            named: list[_Named] = []
            for t in response.responses:
                failed = [p for p in t.partitions if int(p.error_code) != 0]
                first = failed[0] if failed else None
                named.append(_Named(t.name, first.error_code if first else 0, first.error_message if first else None))
            return named

        out.update(await self._per_topic(ApiKey.ALTER_PARTITION_REASSIGNMENTS, list(targets), build, results, timeout))
        return out

    async def delete_topics(self, names: list[str], timeout: float = 30.0) -> dict[str, ActionResult]:
        """DeleteTopics; a topic that is already gone counts as deleted."""

        def build(m: Any, version: int) -> object:
            return wire.make_entity(m.DeleteTopicsRequest, topic_names=tuple(names), timeout=_timeout(timeout))

        results = await self._per_topic(ApiKey.DELETE_TOPICS, names, build, lambda r: r.responses, timeout)
        return {n: ActionResult() if r.error == "unknown_topic_or_partition" else r for n, r in results.items()}


class _Named:
    __slots__ = ("error_code", "error_message", "name")

    def __init__(self, name: str, error_code: int, error_message: str | None) -> None:
        self.name, self.error_code, self.error_message = name, error_code, error_message


def _positive(value: int | None) -> int | None:
    return int(value) if value is not None and int(value) > 0 else None

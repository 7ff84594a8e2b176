"""Topic and user administration over the Kafka protocol, as any Kafka admin client does it.

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
import secrets
import sys
from collections.abc import Callable, Iterable
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import f64, i8, i16, i32, i32Timedelta

from odradek.common import wire
from odradek.common.api_key import ApiKey
from odradek.common.network.bootstrap import AdminConnections, error_name
from odradek.common.replica_balance import BalanceError, change_replication_factor
from odradek.common.security import scram
from odradek.common.security.channel import PLAINTEXT, ClientSecurity
from odradek.operator.topic_reconciler import (
    ActionResult,
    AlterConfigs,
    ChangeReplicationFactor,
    CreatePartitions,
    CreateTopic,
    LiveTopic,
)
from odradek.operator.user_reconciler import (
    SCRAM_ITERATIONS,
    SCRAM_MECHANISM,
    Acl,
    AlterQuotas,
    AlterScram,
    CreateAcls,
    DeleteAcls,
    LiveUser,
    principal,
)
from odradek.operator.user_reconciler import ActionResult as UserActionResult

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
    ApiKey.DESCRIBE_ACLS: (1, 3),
    ApiKey.CREATE_ACLS: (1, 3),
    ApiKey.DELETE_ACLS: (1, 3),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (0, 0),
    ApiKey.DESCRIBE_CLIENT_QUOTAS: (0, 1),
    ApiKey.ALTER_CLIENT_QUOTAS: (0, 1),
}
API_NAMES = {ApiKey.METADATA: "Metadata", ApiKey.CREATE_TOPICS: "CreateTopics", ApiKey.DELETE_TOPICS: "DeleteTopics",
             ApiKey.DESCRIBE_CONFIGS: "DescribeConfigs", ApiKey.CREATE_PARTITIONS: "CreatePartitions",
             ApiKey.INCREMENTAL_ALTER_CONFIGS: "IncrementalAlterConfigs",
             ApiKey.ALTER_PARTITION_REASSIGNMENTS: "AlterPartitionReassignments",
             ApiKey.DESCRIBE_ACLS: "DescribeAcls", ApiKey.CREATE_ACLS: "CreateAcls", ApiKey.DELETE_ACLS: "DeleteAcls",
             ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: "DescribeUserScramCredentials",
             ApiKey.ALTER_USER_SCRAM_CREDENTIALS: "AlterUserScramCredentials",
             ApiKey.DESCRIBE_CLIENT_QUOTAS: "DescribeClientQuotas", ApiKey.ALTER_CLIENT_QUOTAS: "AlterClientQuotas"}
LOOKING = frozenset({ApiKey.METADATA, ApiKey.DESCRIBE_CONFIGS, ApiKey.DESCRIBE_ACLS,
                     ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, ApiKey.DESCRIBE_CLIENT_QUOTAS})
"""APIs sent on the connection for looking (the rest change things, on their own connection)."""

RESOURCE_TOPIC, RESOURCE_BROKER = 2, 4
DYNAMIC_TOPIC_CONFIG, DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG = 1, 2, 3
OP_SET, OP_DELETE = 0, 1


class Unsupported(Exception):
    """The cluster does not offer an API (or no version both sides speak)."""


def _module(api_key: int, version: int) -> Any:
    return sys.modules[wire.request_schema(api_key, version).__module__]


def _timeout(seconds: float) -> i32Timedelta:
    return i32Timedelta.parse(datetime.timedelta(seconds=seconds))


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
                 client_id: str = "odradek-topic-operator", security: ClientSecurity = PLAINTEXT):
        if not bootstrap:
            raise ValueError("no bootstrap servers")
        self.request_timeout = request_timeout
        self.connections = AdminConnections(
            bootstrap, request_timeout, client_id, security, connect_attempts=1,
            connect_timeout_s=min(5.0, request_timeout), software_name="odradek-operator")
        """Shared with the tools (common/network/bootstrap): one connection per lane to the first
        bootstrap server that answers ApiVersions, the next one once it fails."""

    async def close(self) -> None:
        await self.connections.close()

    async def _send(self, api_key: ApiKey, build: Build, extra_timeout: float = 0.0,
                    endpoint: tuple[str, int] | None = None) -> Any:
        """Build (with the agreed version's kio module) and send one request, to a bootstrap
        server or to `endpoint`; a broken connection is dropped so the next call starts over
        with the next broker."""
        lane = "look" if api_key in LOOKING else "change"
        if endpoint is None:
            endpoint, client = await self.connections.connect_any(lane)
        else:
            client = await self.connections.connect(endpoint, lane)
        version = self.connections.version(endpoint, api_key, OUR_VERSIONS[api_key])
        if version is None:
            raise Unsupported(f"the cluster does not support {API_NAMES[api_key]}")
        try:
            return await client.send(build(_module(api_key, version), version),
                                     timeout=self.request_timeout + extra_timeout)
        except (OSError, ConnectionError, TimeoutError):
            await self.connections.failed(endpoint, lane)
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

    async def broker_endpoints(self) -> dict[int, tuple[str, int]]:
        """Every live broker's id and endpoint (Metadata of no topic)."""

        def build(m: Any, version: int) -> object:
            return wire.make_entity(m.MetadataRequest, topics=(), allow_auto_topic_creation=False,
                                    include_cluster_authorized_operations=False,
                                    include_topic_authorized_operations=False)

        meta = await self._send(ApiKey.METADATA, build)
        return {int(b.node_id): (b.host, int(b.port)) for b in meta.brokers}

    async def describe_broker_defaults(self, broker: tuple[int, tuple[str, int]] | None = None) -> dict[str, str]:
        """The cluster-wide dynamic broker configs (`/config/brokers/<default>`): DescribeConfigs
        of the BROKER resource "", which lists only those (passwords, never shown, left out).
        With `broker` (id, endpoint): that broker's own (`/config/brokers/<id>`), asked of it, as
        Kafka wants per-broker resources."""
        name, source = ("", DYNAMIC_DEFAULT_BROKER_CONFIG) if broker is None else (str(broker[0]), DYNAMIC_BROKER_CONFIG)

        def build(m: Any, version: int) -> object:
            resource = m.DescribeConfigsResource(resource_type=i8(RESOURCE_BROKER), resource_name=name,
                                                 configuration_keys=None)
            return wire.make_entity(m.DescribeConfigsRequest, resources=(resource,), include_synonyms=False,
                                    include_documentation=False)

        response = await self._send(ApiKey.DESCRIBE_CONFIGS, build, endpoint=None if broker is None else broker[1])
        result = response.results[0]
        if ErrorCode(int(result.error_code)) != ErrorCode.none:
            raise ValueError(f"DescribeConfigs of the broker resource {name!r}: "
                             f"{ErrorCode(int(result.error_code)).name} {result.error_message or ''}".strip())
        return {c.name: c.value for c in result.configs if int(c.config_source) == source and c.value is not None}

    async def alter_broker_defaults(self, set_: dict[str, str], delete: Iterable[str],
                                    broker: tuple[int, tuple[str, int]] | None = None) -> str | None:
        """IncrementalAlterConfigs of the BROKER resource "" (every broker's dynamic default), or
        with `broker` (id, endpoint) of that broker's own, sent to it; the refusal (error name
        and message) or None."""

        def build(m: Any, version: int) -> object:
            configs = tuple([m.AlterableConfig(name=k, config_operation=i8(OP_SET), value=v)
                             for k, v in sorted(set_.items())]
                            + [m.AlterableConfig(name=k, config_operation=i8(OP_DELETE), value=None)
                               for k in delete])
            resource = m.AlterConfigsResource(resource_type=i8(RESOURCE_BROKER),
                                              resource_name="" if broker is None else str(broker[0]), configs=configs)
            return wire.make_entity(m.IncrementalAlterConfigsRequest, resources=(resource,), validate_only=False)

        response = await self._send(ApiKey.INCREMENTAL_ALTER_CONFIGS, build,
                                    endpoint=None if broker is None else broker[1])
        result = response.responses[0]
        error = error_name(result.error_code)
        return None if error is None else f"{error}: {result.error_message or ''}".strip()

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
            out[r.name] = ActionResult(error_name(r.error_code), getattr(r, "error_message", None),
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

    # --- users: credentials, ACLs, quotas (KafkaUser) ---------------------------------------------

    async def describe_users(self, users: list[str]) -> dict[str, LiveUser]:
        """Each user as the cluster reports it: SCRAM credentials, every ACL naming its principal
        (one DescribeAcls of every ACL, shared by the batch), its user-entity quotas."""
        if not users:
            return {}

        def acls(m: Any, version: int) -> object:
            return wire.make_entity(m.DescribeAclsRequest, resource_type_filter=i8(1), resource_name_filter=None,
                                    pattern_type_filter=i8(1), principal_filter=None, host_filter=None,
                                    operation=i8(1), permission_type=i8(1))

        def scram_request(m: Any, version: int) -> object:
            return wire.make_entity(m.DescribeUserScramCredentialsRequest,
                                    users=tuple(m.UserName(name=u) for u in users))

        def quotas_request(m: Any, version: int) -> object:
            return wire.make_entity(m.DescribeClientQuotasRequest, strict=True, components=(
                m.ComponentData(entity_type=QUOTA_USER, match_type=i8(MATCH_SPECIFIED), match=None),))

        acl_answer, scram_answer, quota_answer = await asyncio.gather(
            self._send(ApiKey.DESCRIBE_ACLS, acls), self._send(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, scram_request),
            self._send(ApiKey.DESCRIBE_CLIENT_QUOTAS, quotas_request))
        return live_users(users, acl_answer, scram_answer, quota_answer)

    async def _per_user(self, api_key: ApiKey, users: list[str], build: Build,
                        results_of: Callable[[Any], dict[str, UserActionResult]]) -> dict[str, UserActionResult]:
        try:
            response = await self._send(api_key, build)
        except Unsupported as e:
            return {u: UserActionResult("unsupported_version", str(e)) for u in users}
        out = results_of(response)
        return {u: out.get(u, UserActionResult()) for u in users}

    async def alter_scram(self, actions: list[AlterScram]) -> dict[str, UserActionResult]:
        """AlterUserScramCredentials: salted here (a fresh salt each time), never sent in clear."""
        mechanism = scram.MECHANISMS[SCRAM_MECHANISM]

        def salt_all() -> list[tuple[str, bytes, bytes]]:
            out = []
            for a in actions:
                if a.password is not None:
                    salt = secrets.token_bytes(scram.SALT_BYTES)
                    out.append((a.user, salt, mechanism.salted_password(a.password, salt, SCRAM_ITERATIONS)))
            return out

        salted = await asyncio.to_thread(salt_all)  # PBKDF2: thousands of users must not stall the loop

        def build(m: Any, version: int) -> object:
            return wire.make_entity(m.AlterUserScramCredentialsRequest, upsertions=tuple(
                m.ScramCredentialUpsertion(name=user, mechanism=i8(mechanism.type), iterations=i32(SCRAM_ITERATIONS),
                                           salt=salt, salted_password=key) for user, salt, key in salted),
                deletions=tuple(m.ScramCredentialDeletion(name=a.user, mechanism=i8(scram.MECHANISMS[d].type))
                                for a in actions for d in a.delete if d in scram.MECHANISMS))

        def results(response: Any) -> dict[str, UserActionResult]:
            out = {}
            for r in response.results:
                error = error_name(r.error_code)
                # A credential deleted meanwhile is as good as deleted.
                out[r.user] = UserActionResult() if error == "resource_not_found" else UserActionResult(
                    error, r.error_message)
            return out

        return await self._per_user(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, [a.user for a in actions], build, results)

    async def create_acls(self, actions: list[CreateAcls]) -> dict[str, UserActionResult]:
        """CreateAcls of every action's bindings in one request; a user's first failure is its result."""
        flat = [(a.user, acl) for a in actions for acl in a.acls]

        def build(m: Any, version: int) -> object:
            return wire.make_entity(m.CreateAclsRequest, creations=tuple(m.AclCreation(
                resource_type=i8(acl.resource_type), resource_name=acl.resource_name,
                resource_pattern_type=i8(acl.pattern_type), principal=acl.principal, host=acl.host,
                operation=i8(acl.operation), permission_type=i8(acl.permission)) for _, acl in flat))

        def results(response: Any) -> dict[str, UserActionResult]:
            out: dict[str, UserActionResult] = {}
            for (user, _), r in zip(flat, response.results):
                if error_name(r.error_code) is not None and user not in out:
                    out[user] = UserActionResult(error_name(r.error_code), r.error_message)
            return out

        return await self._per_user(ApiKey.CREATE_ACLS, [a.user for a in actions], build, results)

    async def delete_acls(self, actions: list[DeleteAcls]) -> dict[str, UserActionResult]:
        """DeleteAcls: one exact filter per binding, or one per principal for `everything`."""
        flat: list[tuple[str, tuple[int, str | None, int, str, str | None, int, int]]] = []
        for a in actions:
            if a.everything:
                flat.append((a.user, (1, None, 1, principal(a.user), None, 1, 1)))
            else:
                flat += [(a.user, (acl.resource_type, acl.resource_name, acl.pattern_type, acl.principal, acl.host,
                                   acl.operation, acl.permission)) for acl in a.acls]

        def build(m: Any, version: int) -> object:
            return wire.make_entity(m.DeleteAclsRequest, filters=tuple(m.DeleteAclsFilter(
                resource_type_filter=i8(f[0]), resource_name_filter=f[1], pattern_type_filter=i8(f[2]),
                principal_filter=f[3], host_filter=f[4], operation=i8(f[5]), permission_type=i8(f[6]))
                for _, f in flat))

        def results(response: Any) -> dict[str, UserActionResult]:
            out: dict[str, UserActionResult] = {}
            for (user, _), r in zip(flat, response.filter_results):
                errors = [(r.error_code, r.error_message)] + [(x.error_code, x.error_message) for x in r.matching_acls]
                failed = [(c, msg) for c, msg in errors if error_name(c) is not None]
                if failed and user not in out:
                    out[user] = UserActionResult(error_name(failed[0][0]), failed[0][1])
            return out

        return await self._per_user(ApiKey.DELETE_ACLS, [a.user for a in actions], build, results)

    async def alter_quotas(self, actions: list[AlterQuotas]) -> dict[str, UserActionResult]:
        """AlterClientQuotas: one user entity per action."""

        def build(m: Any, version: int) -> object:
            return wire.make_entity(m.AlterClientQuotasRequest, validate_only=False, entries=tuple(m.EntryData(
                entity=(m.EntityData(entity_type=QUOTA_USER, entity_name=a.user),),
                ops=tuple([m.OpData(key=k, value=f64(v), remove=False) for k, v in sorted(a.set.items())]
                          + [m.OpData(key=k, value=f64(0.0), remove=True) for k in a.remove]))
                for a in actions))

        def results(response: Any) -> dict[str, UserActionResult]:
            out = {}
            for e in response.entries:
                name = next((x.entity_name for x in e.entity if x.entity_type == QUOTA_USER), None)
                if name is not None:
                    out[name] = UserActionResult(error_name(e.error_code), e.error_message)
            return out

        return await self._per_user(ApiKey.ALTER_CLIENT_QUOTAS, [a.user for a in actions], build, results)


QUOTA_USER = "user"
MATCH_SPECIFIED = 2
"""DescribeClientQuotas: any entity with a name of this type (not the default)."""


def live_users(users: list[str], acls: Any, credentials: Any, quotas: Any) -> dict[str, LiveUser]:
    """DescribeAcls, DescribeUserScramCredentials and DescribeClientQuotas answers → each user."""
    acl_code = error_name(acls.error_code)
    found: dict[str, set[Acl]] = {}
    if acl_code not in (None, "security_disabled"):
        raise ValueError(f"DescribeAcls: {acl_code} {acls.error_message or ''}".strip())
    by_principal = None if acl_code == "security_disabled" else found
    if by_principal is not None:
        for res in acls.resources:
            for d in res.acls:
                found.setdefault(d.principal, set()).add(Acl(
                    int(res.resource_type), res.resource_name, int(res.pattern_type), d.principal, d.host,
                    int(d.operation), int(d.permission_type)))
    code = error_name(credentials.error_code)
    if code is not None:
        raise ValueError(f"DescribeUserScramCredentials: {code} {credentials.error_message or ''}".strip())
    scram_of: dict[str, dict[str, int]] = {}
    for r in credentials.results:
        error = error_name(r.error_code)
        if error == "resource_not_found":
            continue
        if error is not None:
            raise ValueError(f"DescribeUserScramCredentials of {r.user!r}: {error}")
        scram_of[r.user] = {scram.BY_TYPE[int(i.mechanism)].name: int(i.iterations) for i in r.credential_infos
                            if int(i.mechanism) in scram.BY_TYPE}
    code = error_name(quotas.error_code)
    if code is not None:
        raise ValueError(f"DescribeClientQuotas: {code} {quotas.error_message or ''}".strip())
    quotas_of: dict[str, dict[str, float]] = {}
    for e in quotas.entries or ():
        if len(e.entity) == 1 and e.entity[0].entity_type == QUOTA_USER and e.entity[0].entity_name is not None:
            quotas_of[e.entity[0].entity_name] = {v.key: float(v.value) for v in e.values}
    return {u: LiveUser(scram_of.get(u, {}),
                        None if by_principal is None else frozenset(by_principal.get(principal(u), ())),
                        quotas_of.get(u, {})) for u in users}


class _Named:
    __slots__ = ("error_code", "error_message", "name")

    def __init__(self, name: str, error_code: int, error_message: str | None) -> None:
        self.name, self.error_code, self.error_message = name, error_code, error_message


def _positive(value: int | None) -> int | None:
    return int(value) if value is not None and int(value) > 0 else None

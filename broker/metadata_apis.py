"""The broker's metadata and admin APIs: Metadata, UpdateMetadata, CreateTopics, DeleteTopics,
CreatePartitions, DescribeCluster (the config APIs are config_apis').

Each handler takes (context, request) and returns the kio response of the request's version. One
builder per API fills whatever fields that version's classes have (`_make` drops the rest), so
every version comes from the same code. KafkaApis merges `handlers`/`versions` into its dispatch
table and ApiVersions answer.
"""

import asyncio
import datetime
import logging
import struct
import uuid
from dataclasses import fields
from types import ModuleType
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i32Timedelta
from kio.static.protocol import Entity

from odradek.common import wire
from odradek.common.api_key import ApiKey
from odradek.common.config import BrokerConfig
from odradek.common.messages import UpdateMetadataBroker, UpdateMetadataResponse
from odradek.common.network.encoding import Body, uvarint
from odradek.common.network.request_context import DEFAULT_LISTENER, Handler, RequestContext

from . import config_helper as ch
from .admin_manager import (
    INTERNAL_TOPICS,
    AdminManager,
    ApiError,
    CreateResult,
    PartitionsSpec,
    TopicSpec,
    topic_name_error,
)
from .auth_helper import NOT_REQUESTED, ResourceType, authorized_operations
from .authorizer.acl import AclOperation
from .authorizer.authorizer import ALLOW_ALL, Authorizer, authorize_cluster, authorized_names
from .dynamic_config import DynamicBrokerConfig
from .error_response import error_response
from .log.config import LogConfig
from .metadata_cache import MetadataCache, StaleControllerEpochError, broker_endpoint
from .quota.controller_mutation_quota import THROTTLING_QUOTA_EXCEEDED_MESSAGE, MutationQuota
from .quota.quota_managers import QuotaManagers
from .zk_client import BrokerZkClient, base64_to_uuid

log = logging.getLogger(__name__)

ENDPOINT_TYPE_BROKER = 1


def topic_ids_unusable(version: int, topics: Any) -> bool:
    """Kafka refuses a Metadata v10/v11 request (INVALID_REQUEST) naming a topic by id or without a
    name: those versions carry the fields, but only v12 gives them a meaning (and their answer
    cannot hold a null name)."""
    if not 10 <= version < 12:
        return False
    return any(t.name is None or t.topic_id not in (None, ZERO_UUID) for t in topics)


def throttled_topic() -> ApiError:
    """A topic refused by a strict controller mutation quota (KIP-599)."""
    return ApiError(ErrorCode.throttling_quota_exceeded, THROTTLING_QUOTA_EXCEEDED_MESSAGE)


def refused_topic() -> ApiError:
    """The error of a topic the principal may not act on (Kafka's TOPIC_AUTHORIZATION_FAILED)."""
    return ApiError(ErrorCode.topic_authorization_failed, "Authorization failed.")

ZERO_UUID = uuid.UUID(int=0)
AUTO_CREATE_WAIT_S = 5.0
"""How long Metadata waits for ZooKeeper (auto-creation, the cluster id) before answering anyway."""
_INT16, _INT32 = struct.Struct(">h"), struct.Struct(">i")


def _array_length(n: int, flexible: bool) -> bytes:
    return uvarint(n + 1) if flexible else _INT32.pack(n)


def _nullable_string(value: str | None, flexible: bool) -> bytes:
    if value is None:
        return b"\0" if flexible else b"\xff\xff"
    data = value.encode()
    return (uvarint(len(data) + 1) if flexible else _INT16.pack(len(data))) + data


def encode_metadata_response(
    schema: type[Entity], *, brokers: list[bytes], cluster_id: str | None, controller_id: int, topics: list[bytes],
    cluster_authorized_operations: int = NOT_REQUESTED,
) -> list[bytes]:
    """A MetadataResponse body from pre-encoded brokers and topics, byte for byte what kio would
    write for the whole object (the test compares), without re-encoding every partition each time."""
    flexible = schema.__flexible__
    chunks: list[bytes] = []
    for f in fields(schema):
        name = f.name
        if name == "throttle_time":
            chunks.append(_INT32.pack(0))
        elif name == "brokers":
            chunks.append(_array_length(len(brokers), flexible))
            chunks.extend(brokers)
        elif name == "cluster_id":
            chunks.append(_nullable_string(cluster_id, flexible))
        elif name == "controller_id":
            chunks.append(_INT32.pack(controller_id))
        elif name == "topics":
            chunks.append(_array_length(len(topics), flexible))
            chunks.extend(topics)
        elif name == "cluster_authorized_operations":
            chunks.append(_INT32.pack(cluster_authorized_operations))
        elif name == "error_code":
            chunks.append(_INT16.pack(0))
        else:
            raise ValueError(f"unexpected MetadataResponse field {name}")
    if flexible:
        chunks.append(b"\0")  # no tagged fields
    return chunks


def _body(chunks: list[bytes]) -> Body:
    """broker-data's pre-encoded response body (KafkaApis frames it as is)."""
    return Body([*chunks], sum(len(c) for c in chunks))


class MetadataApis:
    def __init__(self, config: BrokerConfig, metadata_cache: MetadataCache, zk: BrokerZkClient, admin: AdminManager,
                 dynamic_config: DynamicBrokerConfig, *, authorizer: Authorizer = ALLOW_ALL,
                 quotas: QuotaManagers | None = None):
        self.config = config
        self.authorizer = authorizer
        self.metadata_cache = metadata_cache
        self.zk = zk
        self.dynamic_config = dynamic_config
        """The effective (static + dynamic) configuration, shared with the config manager."""
        self.admin = admin
        """Carries out topic creation and deletion (also for the group and transaction APIs)."""
        self._cluster_id: str | None = None
        self._topic_ids: dict[str, uuid.UUID] = {}
        self._topic_cache: dict[tuple[int, str, int, str], bytes] = {}
        """Encoded Metadata topics per (version, topic, operations, listener), valid for one
        MetadataCache generation."""
        self._broker_cache: dict[tuple[int, str], list[bytes]] = {}
        """Encoded Metadata broker lists per (version, listener), for the same generation."""
        self._topic_cache_generation = -1
        self.quotas = quotas
        """Client quotas: CreateTopics, CreatePartitions and DeleteTopics charge controller_mutation_rate."""
        self.handlers: dict[int, Handler] = {
            ApiKey.METADATA: self.handle_metadata,
            ApiKey.UPDATE_METADATA: self.handle_update_metadata,
            ApiKey.CREATE_TOPICS: self.handle_create_topics,
            ApiKey.DELETE_TOPICS: self.handle_delete_topics,
            ApiKey.CREATE_PARTITIONS: self.handle_create_partitions,
            ApiKey.DESCRIBE_CLUSTER: self.handle_describe_cluster,
        }
        self.versions: dict[int, tuple[int, int]] = {
            ApiKey.METADATA: (0, 13),
            ApiKey.UPDATE_METADATA: (5, 5),
            ApiKey.CREATE_TOPICS: (0, 7),  # v0, v1 from common/legacy_schemas
            ApiKey.DELETE_TOPICS: (0, 6),
            ApiKey.CREATE_PARTITIONS: (0, 3),
            ApiKey.DESCRIBE_CLUSTER: (0, 2),
        }

    # --- shared pieces -------------------------------------------------------------------------

    def controller_id(self) -> int:
        """The smallest live broker: the controller process is no broker, so clients send admin
        requests to a live broker, which carries them out through ZooKeeper."""
        brokers = self.metadata_cache.live_brokers()
        return min(brokers) if brokers else -1

    async def cluster_id(self) -> str | None:
        if self._cluster_id is None:
            try:
                self._cluster_id = await asyncio.wait_for(self.zk.get_cluster_id(), AUTO_CREATE_WAIT_S)
            except Exception:
                log.warning("cannot read the cluster id from ZooKeeper", exc_info=True)
        return self._cluster_id

    async def topic_ids(self, topics: list[str]) -> dict[str, uuid.UUID]:
        """topic → topic id from its assignment znode (zero UUID when it has none), memoised. A
        name no topic may have (a request's: "", ".", "a/b") has the zero UUID, unasked: it is no
        znode name, and one such lookup would fail those of the whole batch."""
        missing = [t for t in topics if t not in self._topic_ids and topic_name_error(t) is None]
        if missing:
            try:
                found = await self.zk.get_topic_ids(missing)
            except Exception:
                log.warning("cannot read topic ids from ZooKeeper", exc_info=True)
                found = {}
            for t in missing:
                text = found.get(t)
                if t in found:
                    self._topic_ids[t] = base64_to_uuid(text) if text else ZERO_UUID
        return {t: self._topic_ids.get(t, ZERO_UUID) for t in topics}

    async def topic_names_by_id(self) -> dict[uuid.UUID, str]:
        """topic id → name for the known topics (those without an id left out); build once per request."""
        ids = await self.topic_ids(self.metadata_cache.topics())
        return {tid: name for name, tid in ids.items() if tid != ZERO_UUID}

    @staticmethod
    def broker_address(broker: UpdateMetadataBroker, listener: str = DEFAULT_LISTENER) -> tuple[str, int] | None:
        """The broker's endpoint on the listener the client came through, as Kafka answers (a
        broker without that listener is left out). A request from no listener (in-process) gets
        the PLAINTEXT endpoint, else the first one."""
        endpoint = broker_endpoint(broker, listener)
        if endpoint is None and listener == DEFAULT_LISTENER:
            endpoint = broker.endpoints[0] if broker.endpoints else None
        return None if endpoint is None else (endpoint.host, int(endpoint.port))

    # --- Metadata (3) --------------------------------------------------------------------------

    async def handle_metadata(self, context: RequestContext, request: Any) -> Body | Any:
        version = int(request.__version__)
        mod = wire.response_module(ApiKey.METADATA, version)
        cache = self.metadata_cache
        requested = request.topics
        all_topics = requested is None or (version == 0 and not requested)
        if not all_topics and topic_ids_unusable(version, requested):
            return error_response(request, ErrorCode.invalid_request)
        allow_auto = bool(getattr(request, "allow_auto_topic_creation", True))
        auth = self.authorizer
        want_topic_ops = bool(getattr(request, "include_topic_authorized_operations", False))
        topic_ops = authorized_operations(ResourceType.TOPIC, want_topic_ops)

        topics_out = []
        by_id_asked: dict[str, uuid.UUID] = {}
        if all_topics:  # Kafka lists only the topics the principal may describe
            names = sorted(authorized_names(auth, context, AclOperation.DESCRIBE, ResourceType.TOPIC, cache.topics()))
            unknown_ids: list[uuid.UUID] = []
        else:
            names, unknown_ids = [], []
            by_id: dict[uuid.UUID, str] | None = None
            for t in requested:
                name = getattr(t, "name", None)
                if name is None:
                    tid: uuid.UUID | None = getattr(t, "topic_id", None)
                    if tid is not None and by_id is None:
                        by_id = await self.topic_names_by_id()
                    name = by_id.get(tid) if tid is not None and by_id is not None else None
                    if name is None or tid is None:
                        unknown_ids.append(tid or ZERO_UUID)
                        continue
                    by_id_asked[name] = tid
                if name not in names:
                    names.append(name)
        described = authorized_names(auth, context, AclOperation.DESCRIBE, ResourceType.TOPIC, names)
        ids = await self.topic_ids([n for n in names if cache.contains(n)]) if version >= 10 else {}
        may_create = None
        for name in names:
            if name not in described:  # Kafka: refused whatever the topic's existence
                tid = by_id_asked.get(name)
                topics_out.append(wire.encode_entity(wire.make_entity(
                    mod.MetadataResponseTopic, error_code=ErrorCode.topic_authorization_failed,
                    name=None if tid is not None else name, topic_id=tid or ZERO_UUID, partitions=(),
                    topic_authorized_operations=topic_ops)))
                continue
            if cache.contains(name):
                ops = (authorized_operations(ResourceType.TOPIC, want_topic_ops, auth, context, name)
                       if auth.enabled else topic_ops)
                topics_out.append(self._metadata_topic(mod, version, name, ids.get(name, ZERO_UUID), ops,
                                                       context.listener))
                continue
            auto = allow_auto and self.config.auto_create_topics_enable and not all_topics
            if auto and may_create is None:
                may_create = authorize_cluster(auth, context, AclOperation.CREATE)
            if topic_name_error(name) is not None:
                error = ErrorCode.invalid_topic_exception
            elif auto and not (may_create or auth.authorize(context, AclOperation.CREATE, ResourceType.TOPIC, name)):
                error = ErrorCode.topic_authorization_failed
            elif not cache.initialized:  # no view yet: the topic may well exist; retriable, created by nobody
                error = ErrorCode.leader_not_available
            elif auto:
                try:  # bounded: a slow ZooKeeper must not hold the Metadata answer
                    error = await asyncio.wait_for(self.admin.auto_create_topic(name), AUTO_CREATE_WAIT_S)
                except TimeoutError:
                    error = ErrorCode.leader_not_available
            else:
                error = ErrorCode.unknown_topic_or_partition
            topics_out.append(
                wire.encode_entity(
                    wire.make_entity(mod.MetadataResponseTopic, error_code=error, name=name, topic_id=ZERO_UUID,
                                     partitions=(), topic_authorized_operations=topic_ops)
                )
            )
        for tid in unknown_ids:
            topics_out.append(
                wire.encode_entity(
                    wire.make_entity(
                        mod.MetadataResponseTopic,
                        error_code=ErrorCode.unknown_topic_id, name=None, topic_id=tid, partitions=(),
                        topic_authorized_operations=topic_ops,
                    )
                )
            )
        chunks = encode_metadata_response(
            mod.MetadataResponse,
            brokers=self._metadata_brokers(mod, version, context.listener),
            cluster_id=await self.cluster_id(),
            controller_id=self.controller_id(),
            topics=topics_out,
            cluster_authorized_operations=self._cluster_operations(
                context, bool(getattr(request, "include_cluster_authorized_operations", False))),
        )
        return _body(chunks)

    def _cluster_operations(self, context: RequestContext, requested: bool) -> int:
        """Kafka: the Cluster's authorized operations for a principal that may DESCRIBE it, else none."""
        if requested and not authorize_cluster(self.authorizer, context, AclOperation.DESCRIBE):
            return 0
        return authorized_operations(ResourceType.CLUSTER, requested, self.authorizer, context)

    def _metadata_brokers(self, mod: ModuleType, version: int, listener: str = DEFAULT_LISTENER) -> list[bytes]:
        self._sync_topic_cache()
        key = (version, listener)
        cached = self._broker_cache.get(key)
        if cached is not None:
            return cached
        out = []
        for broker_id, broker in sorted(self.metadata_cache.live_brokers().items()):
            address = self.broker_address(broker, listener)
            if address is not None:
                out.append(
                    wire.encode_entity(
                        wire.make_entity(mod.MetadataResponseBroker, node_id=broker_id, host=address[0], port=address[1],
                                         rack=broker.rack)
                    )
                )
        self._broker_cache[key] = out
        return out

    def _sync_topic_cache(self) -> None:
        if self._topic_cache_generation != self.metadata_cache.generation:
            self._topic_cache.clear()
            self._broker_cache.clear()
            self._topic_cache_generation = self.metadata_cache.generation

    def _metadata_topic(self, mod: ModuleType, version: int, name: str, topic_id: uuid.UUID, authorized_ops: int,
                        listener: str = DEFAULT_LISTENER) -> bytes:
        """A topic's encoded entry, memoised per (version, topic, operations, listener) until the next
        UpdateMetadata. A live leader without an endpoint on the client's listener is no leader for
        this client: LISTENER_NOT_FOUND (v6+; LEADER_NOT_AVAILABLE before), as Kafka answers."""
        cache = self.metadata_cache
        self._sync_topic_cache()
        key = (version, name, authorized_ops, listener)
        live = cache.live_brokers()
        cached = self._topic_cache.get(key)
        if cached is not None:
            return cached
        partitions = []
        for p, state in sorted((cache.topic_partitions(name) or {}).items()):
            leader = int(state.leader)
            alive = leader >= 0 and cache.is_alive(leader)
            code = ErrorCode.none if alive else ErrorCode.leader_not_available
            if alive and listener != DEFAULT_LISTENER and leader in live and broker_endpoint(live[leader], listener) is None:
                alive = False
                code = ErrorCode.listener_not_found if version >= 6 else ErrorCode.leader_not_available
            partitions.append(
                wire.make_entity(
                    mod.MetadataResponsePartition,
                    error_code=code,
                    partition_index=p,
                    leader_id=leader if alive else -1,
                    leader_epoch=int(state.leader_epoch),
                    replica_nodes=tuple(state.replicas),
                    isr_nodes=tuple(state.isr),
                    offline_replicas=tuple(state.offline_replicas),
                )
            )
        entry = wire.encode_entity(wire.make_entity(
            mod.MetadataResponseTopic,
            error_code=ErrorCode.none,
            name=name,
            topic_id=topic_id,
            is_internal=name in INTERNAL_TOPICS,
            partitions=tuple(partitions),
            topic_authorized_operations=authorized_ops,
        ))
        self._topic_cache[key] = entry
        return entry

    # --- UpdateMetadata (6) --------------------------------------------------------------------

    async def handle_update_metadata(self, context: RequestContext, request: Any) -> Any:
        request_epoch = int(request.broker_epoch)
        if request_epoch != -1 and request_epoch < self.zk.broker_epoch:
            log.info("UpdateMetadata with stale broker epoch %d < %d", request_epoch, self.zk.broker_epoch)
            return UpdateMetadataResponse(error_code=ErrorCode.stale_broker_epoch)
        try:
            deleted = self.metadata_cache.update(request)
        except StaleControllerEpochError as e:
            log.info("rejected UpdateMetadata: %s", e)
            return UpdateMetadataResponse(error_code=e.error_code)
        for topic in {t for t, _ in deleted}:
            if not self.metadata_cache.contains(topic):
                self._topic_ids.pop(topic, None)
        return UpdateMetadataResponse(error_code=ErrorCode.none)

    # --- CreateTopics (19) ---------------------------------------------------------------------

    async def handle_create_topics(self, context: RequestContext, request: Any) -> Any:
        version = int(request.__version__)
        mod = wire.response_module(ApiKey.CREATE_TOPICS, version)
        specs = [
            TopicSpec(
                name=t.name,
                num_partitions=int(t.num_partitions),
                replication_factor=int(t.replication_factor),
                assignments={int(a.partition_index): tuple(int(b) for b in a.broker_ids) for a in t.assignments},
                configs={c.name: c.value for c in t.configs},
            )
            for t in request.topics
        ]
        # Kafka: CREATE on the Cluster, else on each topic; the refused ones are not created
        denied: set[str] = set()
        if self.authorizer.enabled and not authorize_cluster(self.authorizer, context, AclOperation.CREATE):
            names = {s.name for s in specs}
            denied = names - authorized_names(self.authorizer, context, AclOperation.CREATE, ResourceType.TOPIC, names)
        allowed = [spec for spec in specs if spec.name not in denied]
        quota = self._mutation_quota(context, 6, bool(request.validate_only))
        charged = {spec.name: float(len(spec.assignments) or (
            spec.num_partitions if spec.num_partitions > 0 else self.config.num_partitions)) for spec in allowed}
        throttled = self._admit(quota, charged)
        allowed = [spec for spec in allowed if spec.name not in throttled]
        created = iter(await self.admin.create_topics(allowed, wire.ms(request.timeout), bool(request.validate_only))
                       if allowed else [])
        results = [CreateResult(spec.name, refused_topic()) if spec.name in denied
                   else CreateResult(spec.name, throttled_topic()) if spec.name in throttled
                   else next(created) for spec in specs]
        self._refund(quota, charged, {r.name for r in results if r.error is not None and r.name not in throttled})
        out = []
        for r in results:
            values: dict[str, Any] = dict(name=r.name, topic_id=ZERO_UUID, configs=())
            plan = r.plan
            if r.error is not None or plan is None:
                error = r.error or ApiError(ErrorCode.unknown_server_error, "no result")
                values.update(error_code=error.error_code, error_message=error.message)
            else:
                values.update(
                    error_code=ErrorCode.none,
                    error_message=None,
                    topic_id=base64_to_uuid(plan.topic_id),
                    num_partitions=plan.num_partitions,
                    replication_factor=plan.replication_factor,
                )
                if version >= 5 and not self.authorizer.authorize(context, AclOperation.DESCRIBE_CONFIGS,
                                                                  ResourceType.TOPIC, r.name):
                    # Kafka: a creator that may not describe configs gets none, and says why
                    values["topic_config_error_code"] = int(ErrorCode.topic_authorization_failed)
                elif version >= 5:
                    try:
                        values["configs"] = tuple(
                            wire.make_entity(
                                mod.CreatableTopicConfigs,
                                name=e.name, value=e.value, read_only=e.read_only,
                                config_source=e.source, is_sensitive=e.sensitive,
                            )
                            for e in self.topic_config_entries(plan.config)
                        )
                    except Exception:
                        log.exception("describing the configs of new topic %r failed", r.name)
                        values["topic_config_error_code"] = int(ErrorCode.unknown_server_error)
            out.append(wire.make_entity(mod.CreatableTopicResult, **values))
        return wire.make_entity(mod.CreateTopicsResponse, throttle_time=self._mutation_throttle(quota),
                                topics=tuple(out))

    # --- controller_mutation_rate (KIP-599) ------------------------------------------------------

    def _mutation_quota(self, context: RequestContext, strict_since: int, validate_only: bool) -> MutationQuota | None:
        """The request's controller mutation quota (strict from `strict_since`); None without one
        or for validate_only (Kafka charges only what it does)."""
        if self.quotas is None or validate_only:
            return None
        return self.quotas.mutation_quota(context.user, context.client_id, context.api_version >= strict_since)

    def _admit(self, quota: MutationQuota | None, charged: dict[str, float]) -> set[str]:
        """Charge {topic: partitions} in order; the topics refused THROTTLING_QUOTA_EXCEEDED."""
        if quota is None or self.quotas is None:
            return set()
        return quota.admit(list(charged.items()), self.quotas.clock())

    def _refund(self, quota: MutationQuota | None, charged: dict[str, float], failed: set[str]) -> None:
        if quota is not None and self.quotas is not None:
            for name in failed:
                if name in charged:
                    quota.refund(charged[name], self.quotas.clock())

    def _mutation_throttle(self, quota: MutationQuota | None) -> i32Timedelta:
        """The answer's throttle_time (the dispatcher mutes the connection that long)."""
        if quota is None or self.quotas is None:
            return wire.NO_THROTTLE
        return i32Timedelta.parse(datetime.timedelta(milliseconds=quota.finish(self.quotas.clock())))

    def topic_config_entries(self, overrides: dict[str, str]) -> list[ch.DescribedConfig]:
        """A new topic's full config as DescribeConfigs would describe it."""
        log_config = LogConfig.from_broker(self.dynamic_config.current, overrides)
        return ch.describe_topic(log_config, log_config.overrides, self.dynamic_config.sources())

    # --- DeleteTopics (20) ---------------------------------------------------------------------

    async def handle_delete_topics(self, context: RequestContext, request: Any) -> Any:
        version = int(request.__version__)
        mod = wire.response_module(ApiKey.DELETE_TOPICS, version)
        entries: list[tuple[str | None, uuid.UUID | None]] = []
        if version >= 6:
            by_id: dict[uuid.UUID, str] | None = None
            for t in request.topics:
                if t.name is not None:
                    entries.append((t.name, None))
                else:
                    if by_id is None:
                        by_id = await self.topic_names_by_id()
                    entries.append((by_id.get(t.topic_id), t.topic_id or ZERO_UUID))
        else:
            entries = [(name, None) for name in request.topic_names]
        known = [(i, name) for i, (name, _) in enumerate(entries) if name is not None]
        ids = await self.topic_ids([name for _, name in known]) if version >= 6 else {}
        # Kafka: DELETE on each topic; a refused one is answered without a hint of its existence
        deletable = authorized_names(self.authorizer, context, AclOperation.DELETE, ResourceType.TOPIC,
                                     [name for _, name in known])
        allowed = [(i, name) for i, name in known if name in deletable]
        quota = self._mutation_quota(context, 5, False)
        charged = {name: float(self.metadata_cache.partition_count(name)) for _, name in allowed
                   if self.metadata_cache.contains(name)}
        throttled = self._admit(quota, charged)
        allowed = [(i, name) for i, name in allowed if name not in throttled]
        errors = await self.admin.delete_topics([name for _, name in allowed], wire.ms(request.timeout))
        error_at = {i: err for (i, _), err in zip(allowed, errors)}
        self._refund(quota, charged, {name for (_, name), err in zip(allowed, errors) if err is not None})
        error_at.update({i: throttled_topic() for i, name in known if name in throttled})
        error_at.update({i: refused_topic() for i, name in known if name not in deletable})
        out = []
        for i, (name, tid) in enumerate(entries):
            error = ApiError(ErrorCode.unknown_topic_id, f"Topic id {tid} not found.") if name is None else error_at[i]
            if tid is None:
                tid = ids.get(name, ZERO_UUID) if name is not None else ZERO_UUID
            out.append(
                wire.make_entity(
                    mod.DeletableTopicResult,
                    name=name,
                    topic_id=tid,
                    error_code=ErrorCode.none if error is None else error.error_code,
                    error_message=None if error is None else error.message,
                )
            )
        return wire.make_entity(mod.DeleteTopicsResponse, throttle_time=self._mutation_throttle(quota),
                                responses=tuple(out))

    # --- CreatePartitions (37) ----------------------------------------------------------------

    async def handle_create_partitions(self, context: RequestContext, request: Any) -> Any:
        mod = wire.response_module(ApiKey.CREATE_PARTITIONS, int(request.__version__))
        specs = [
            PartitionsSpec(
                t.name, int(t.count),
                None if t.assignments is None else tuple(tuple(int(b) for b in a.broker_ids) for a in t.assignments),
            )
            for t in request.topics
        ]
        alterable = authorized_names(self.authorizer, context, AclOperation.ALTER, ResourceType.TOPIC,
                                     [spec.name for spec in specs])
        allowed = [spec for spec in specs if spec.name in alterable]
        quota = self._mutation_quota(context, 3, bool(request.validate_only))
        charged = {spec.name: float(max(spec.count - self.metadata_cache.partition_count(spec.name), 0))
                   for spec in allowed if self.metadata_cache.contains(spec.name)}
        throttled = self._admit(quota, charged)
        allowed = [spec for spec in allowed if spec.name not in throttled]
        done = iter(await self.admin.create_partitions(allowed, wire.ms(request.timeout), bool(request.validate_only))
                    if allowed else [])
        errors = [refused_topic() if spec.name not in alterable else throttled_topic() if spec.name in throttled
                  else next(done) for spec in specs]
        self._refund(quota, charged, {spec.name for spec, e in zip(specs, errors)
                                      if e is not None and spec.name not in throttled})
        results = tuple(
            wire.make_entity(
                mod.CreatePartitionsTopicResult, name=spec.name,
                error_code=ErrorCode.none if e is None else e.error_code, error_message=None if e is None else e.message,
            )
            for spec, e in zip(specs, errors)
        )
        return wire.make_entity(mod.CreatePartitionsResponse, throttle_time=self._mutation_throttle(quota),
                                results=results)

    # --- DescribeCluster (60) ------------------------------------------------------------------

    async def handle_describe_cluster(self, context: RequestContext, request: Any) -> Any:
        version = int(request.__version__)
        mod = wire.response_module(ApiKey.DESCRIBE_CLUSTER, version)
        endpoint_type = int(getattr(request, "endpoint_type", ENDPOINT_TYPE_BROKER))
        cluster_ops = self._cluster_operations(context, bool(request.include_cluster_authorized_operations))
        cluster_id = await self.cluster_id() or ""
        if endpoint_type != ENDPOINT_TYPE_BROKER:
            return wire.make_entity(
                mod.DescribeClusterResponse,
                throttle_time=wire.NO_THROTTLE, error_code=ErrorCode.unsupported_endpoint_type,
                error_message="Only broker endpoints can be described.", endpoint_type=endpoint_type,
                cluster_id=cluster_id, controller_id=-1, brokers=(),
                cluster_authorized_operations=cluster_ops,
            )
        brokers = []
        for broker_id, broker in sorted(self.metadata_cache.live_brokers().items()):
            address = self.broker_address(broker, context.listener)
            if address is not None:
                brokers.append(
                    wire.make_entity(
                        mod.DescribeClusterBroker,
                        broker_id=broker_id, host=address[0], port=address[1], rack=broker.rack, is_fenced=False,
                    )
                )
        return wire.make_entity(
            mod.DescribeClusterResponse,
            throttle_time=wire.NO_THROTTLE, error_code=ErrorCode.none, error_message=None,
            endpoint_type=endpoint_type, cluster_id=cluster_id, controller_id=self.controller_id(),
            brokers=tuple(brokers), cluster_authorized_operations=cluster_ops,
        )

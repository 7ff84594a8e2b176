"""GroupApis: the group APIs' handler table (FindCoordinator and the group/offset APIs).

Translates each version's kio request into GroupCoordinator calls and back; `make_entity` fills only the
fields a version has. KafkaApis merges `handlers`/`versions` like MetadataApis'. OffsetCommit v1
(not in kio, needed for librdkafka's feature check) is decoded by hand into the v2 class.
"""

import asyncio
import datetime
import logging
from collections.abc import Callable, Iterable
from types import ModuleType
from typing import Any, Protocol

from kio.schema.errors import ErrorCode
from kio.schema.offset_commit.v2 import request as offset_commit_v2
from kio.schema.offset_commit.v2.request import OffsetCommitRequest as OffsetCommitRequestV2
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.types import GroupId, TopicName
from kio.static.primitive import i32, i64, i64Timedelta

from odradek.broker.auth_helper import ResourceType, authorized_operations
from odradek.broker.authorizer.acl import AclOperation
from odradek.broker.authorizer.authorizer import ALLOW_ALL, Authorizer, authorize_cluster, authorized_names
from odradek.broker.metadata_cache import MetadataCache
from odradek.common.api_key import ApiKey
from odradek.common.network.request_context import Handler, RequestContext
from odradek.common.wire import (
    NO_THROTTLE,
    make_entity,
    ms,
    read_request_header_v1,  # kio has no OffsetCommit v1
    response_module,
)

from . import records, txn_offsets
from .group_coordinator import GroupCoordinator
from .group_metadata import OffsetAndMetadata
from .offsets_topic import GROUP_METADATA_TOPIC_CONFIG, GROUP_METADATA_TOPIC_NAME

log = logging.getLogger(__name__)

VERSIONS: dict[int, tuple[int, int]] = {
    ApiKey.FIND_COORDINATOR: (0, 6),  # v5 and v6 only add error codes and the share key type
    ApiKey.OFFSET_COMMIT: (0, 9),  # v9 as v8 for classic groups (Kafka 3.9); v10 is 4.x
    ApiKey.OFFSET_FETCH: (0, 9),  # v9's member id and epoch are for KIP-848 groups only
    ApiKey.JOIN_GROUP: (0, 9),
    ApiKey.HEARTBEAT: (0, 4),
    ApiKey.LEAVE_GROUP: (0, 5),
    ApiKey.SYNC_GROUP: (0, 5),
    ApiKey.DESCRIBE_GROUPS: (0, 5),
    ApiKey.LIST_GROUPS: (0, 5),
    ApiKey.DELETE_GROUPS: (0, 2),
    ApiKey.OFFSET_DELETE: (0, 0),
    ApiKey.TXN_OFFSET_COMMIT: (0, 4),  # v4 adds TRANSACTION_ABORTABLE, never sent; v5 is transaction version 2
}
KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION = 0, 1
CLASSIC_GROUP_TYPE = "classic"
"""The only group type of the classic protocol (KIP-848 adds "consumer"): ListGroups v5's group_type."""


class _NamedTopic(Protocol):
    """A request's topic entry, any version's kio class (each has its own)."""

    @property
    def name(self) -> str: ...


class ConsumerOffsetStore(Protocol):
    """Where OffsetCommit/OffsetFetch v0 keep offsets (BrokerZkClient: `/consumers/<group>/offsets/...`)."""

    async def set_consumer_offset(self, group: str, topic: str, partition: int, offset: int) -> None: ...

    async def get_consumer_offset(self, group: str, topic: str, partition: int) -> int | None: ...


class GroupAdmin(Protocol):
    """What GroupApis needs of AdminManager (a protocol: admin_manager imports this package)."""

    @property
    def zk(self) -> ConsumerOffsetStore: ...

    async def create_internal_topic(self, name: str, partitions: int, replication_factor: int,
                                    config: dict[str, str]) -> ErrorCode: ...


class GroupApis:
    def __init__(self, coordinator: GroupCoordinator, metadata_cache: MetadataCache, admin: GroupAdmin,
                 offsets_partitions: int,
                 offsets_replication_factor: int, *, authorizer: Authorizer = ALLOW_ALL,
                 find_transaction_coordinator: Callable[[str, str], tuple[ErrorCode, int, str, int]] | None = None,
                 verify_txn_offsets: txn_offsets.Verify | None = None):
        self.coordinator = coordinator
        self.authorizer = authorizer
        self.metadata_cache = metadata_cache
        self.admin = admin
        self.offsets_partitions = offsets_partitions
        self.offsets_replication_factor = offsets_replication_factor
        self.versions: dict[int, tuple[int, int]] = dict(VERSIONS)
        self.handlers: dict[int, Handler] = {
            ApiKey.FIND_COORDINATOR: self.handle_find_coordinator,
            ApiKey.OFFSET_COMMIT: self.handle_offset_commit,
            ApiKey.OFFSET_FETCH: self.handle_offset_fetch,
            ApiKey.JOIN_GROUP: self.handle_join_group,
            ApiKey.HEARTBEAT: self.handle_heartbeat,
            ApiKey.LEAVE_GROUP: self.handle_leave_group,
            ApiKey.SYNC_GROUP: self.handle_sync_group,
            ApiKey.DESCRIBE_GROUPS: self.handle_describe_groups,
            ApiKey.LIST_GROUPS: self.handle_list_groups,
            ApiKey.DELETE_GROUPS: self.handle_delete_groups,
            ApiKey.OFFSET_DELETE: self.handle_offset_delete,
            ApiKey.TXN_OFFSET_COMMIT: self.handle_txn_offset_commit,
        }
        self.find_transaction_coordinator = find_transaction_coordinator
        """(key, listener) → (error, node, host, port) for FindCoordinator's transaction key type."""
        self.verify_txn_offsets = verify_txn_offsets
        """TxnOffsetCommit's check with the transaction coordinator (txn_offsets.commit_txn_offsets)."""
        self._creating: asyncio.Task[None] | None = None
        self.legacy_requests = {(ApiKey.OFFSET_COMMIT, 1): decode_offset_commit_v1}
        """Request versions kio lacks: (api, version) → decoder of the frame body."""

    # --- FindCoordinator ------------------------------------------------------------------------

    def _ensure_offsets_topic(self) -> None:
        """Creates __consumer_offsets on first use (in the background; clients retry meanwhile)."""
        if self.metadata_cache.contains(GROUP_METADATA_TOPIC_NAME) or (self._creating and not self._creating.done()):
            return

        async def create() -> None:
            try:
                await self.admin.create_internal_topic(
                    GROUP_METADATA_TOPIC_NAME, self.offsets_partitions, self.offsets_replication_factor,
                    GROUP_METADATA_TOPIC_CONFIG,
                )
            except Exception:
                log.exception("creating %s failed", GROUP_METADATA_TOPIC_NAME)

        self._creating = asyncio.get_running_loop().create_task(create())

    def find_coordinator(self, key: str, key_type: int, context: RequestContext | None = None
                         ) -> tuple[ErrorCode, str | None, int, str, int]:
        """(error, error message, node, host, port) of the coordinator of `key`, its address on
        the client's listener; Kafka asks for DESCRIBE on the group or the transactional id first."""
        listener = context.listener if context is not None else "PLAINTEXT"
        if context is not None and key_type in (KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION):
            rt = ResourceType.GROUP if key_type == KEY_TYPE_GROUP else ResourceType.TRANSACTIONAL_ID
            if not self.authorizer.authorize(context, AclOperation.DESCRIBE, rt, key or ""):
                code = (ErrorCode.group_authorization_failed if key_type == KEY_TYPE_GROUP
                        else ErrorCode.transactional_id_authorization_failed)
                return code, None, -1, "", -1
        if key_type == KEY_TYPE_TRANSACTION:
            if self.find_transaction_coordinator is None:
                return ErrorCode.coordinator_not_available, None, -1, "", -1
            code, node, host, port = self.find_transaction_coordinator(key, listener)
            return code, None, node, host, port
        if key_type != KEY_TYPE_GROUP:
            return ErrorCode.invalid_request, f"Unknown coordinator type {key_type}", -1, "", -1
        if not key:
            return ErrorCode.invalid_request, None, -1, "", -1
        if not self.metadata_cache.contains(GROUP_METADATA_TOPIC_NAME):
            self._ensure_offsets_topic()
            return ErrorCode.coordinator_not_available, None, -1, "", -1
        p = self.coordinator.manager.partition_for(key)
        endpoint = self.metadata_cache.leader_endpoint(GROUP_METADATA_TOPIC_NAME, p, listener)
        if endpoint is None:
            return ErrorCode.coordinator_not_available, None, -1, "", -1
        node, host, port = endpoint
        return ErrorCode.none, None, node, host, port

    async def handle_find_coordinator(self, context: RequestContext, request: Any) -> Any:
        version = context.api_version
        mod = response_module(ApiKey.FIND_COORDINATOR, version)
        key_type = int(getattr(request, "key_type", 0))
        if version >= 4:
            out = []
            for key in request.coordinator_keys:
                code, message, node, host, port = self.find_coordinator(key, key_type, context)
                out.append(mod.Coordinator(key=key, node_id=i32(node), host=host, port=i32(port), error_code=code,
                                           error_message=message))
            return mod.FindCoordinatorResponse(throttle_time=NO_THROTTLE, coordinators=tuple(out))
        code, message, node, host, port = self.find_coordinator(request.key, key_type, context)
        return make_entity(mod.FindCoordinatorResponse, throttle_time=NO_THROTTLE, error_code=code,
                           error_message=message, node_id=i32(node), host=host, port=i32(port))

    # --- JoinGroup / SyncGroup / Heartbeat / LeaveGroup -----------------------------------------

    async def handle_join_group(self, context: RequestContext, request: Any) -> Any:
        version = context.api_version
        mod = response_module(ApiKey.JOIN_GROUP, version)
        if not self._may_read_group(context, request.group_id):
            return make_entity(
                mod.JoinGroupResponse, throttle_time=NO_THROTTLE, error_code=ErrorCode.group_authorization_failed,
                generation_id=i32(-1), protocol_type=None, protocol_name=None if version >= 7 else "", leader="",
                skip_assignment=False, member_id="", members=())
        session = ms(request.session_timeout)
        rebalance = ms(getattr(request, "rebalance_timeout", session)) if version >= 1 else session
        result = await self.coordinator.join_group(
            request.group_id, request.member_id, getattr(request, "group_instance_id", None), version >= 4,
            context.client_id, context.client_host, rebalance, session, request.protocol_type,
            [(p.name, bytes(p.metadata)) for p in request.protocols],
        )
        members = tuple(
            make_entity(mod.JoinGroupResponseMember, member_id=mid, group_instance_id=iid, metadata=meta)
            for mid, iid, meta in result.members
        )
        return make_entity(
            mod.JoinGroupResponse, throttle_time=NO_THROTTLE, error_code=result.error,
            generation_id=i32(result.generation_id), protocol_type=result.protocol_type,
            protocol_name=result.protocol_name if version >= 7 else (result.protocol_name or ""),
            leader=result.leader_id, skip_assignment=False, member_id=result.member_id, members=members,
        )

    async def handle_sync_group(self, context: RequestContext, request: Any) -> Any:
        version = context.api_version
        mod = response_module(ApiKey.SYNC_GROUP, version)
        if not self._may_read_group(context, request.group_id):
            return make_entity(mod.SyncGroupResponse, throttle_time=NO_THROTTLE,
                               error_code=ErrorCode.group_authorization_failed, protocol_type=None,
                               protocol_name=None, assignment=b"")
        code, assignment = await self.coordinator.sync_group(
            request.group_id, int(request.generation_id), request.member_id,
            getattr(request, "group_instance_id", None), getattr(request, "protocol_type", None),
            getattr(request, "protocol_name", None), {a.member_id: bytes(a.assignment) for a in request.assignments},
        )
        group = self.coordinator.manager.groups.get(request.group_id)
        return make_entity(
            mod.SyncGroupResponse, throttle_time=NO_THROTTLE, error_code=code,
            protocol_type=group.protocol_type if group and code == ErrorCode.none else None,
            protocol_name=group.protocol_name if group and code == ErrorCode.none else None,
            assignment=assignment,
        )

    async def handle_heartbeat(self, context: RequestContext, request: Any) -> Any:
        mod = response_module(ApiKey.HEARTBEAT, context.api_version)
        if not self._may_read_group(context, request.group_id):
            return make_entity(mod.HeartbeatResponse, throttle_time=NO_THROTTLE,
                               error_code=ErrorCode.group_authorization_failed)
        code = self.coordinator.heartbeat(request.group_id, request.member_id,
                                          getattr(request, "group_instance_id", None), int(request.generation_id))
        return make_entity(mod.HeartbeatResponse, throttle_time=NO_THROTTLE, error_code=code)

    async def handle_leave_group(self, context: RequestContext, request: Any) -> Any:
        version = context.api_version
        mod = response_module(ApiKey.LEAVE_GROUP, version)
        if not self._may_read_group(context, request.group_id):
            return make_entity(mod.LeaveGroupResponse, throttle_time=NO_THROTTLE,
                               error_code=ErrorCode.group_authorization_failed, members=())
        if version >= 3:
            leaving = [(m.member_id, m.group_instance_id) for m in request.members]
        else:
            leaving = [(request.member_id, None)]
        code, codes = self.coordinator.leave_group(request.group_id, leaving)
        if version < 3:
            return make_entity(mod.LeaveGroupResponse, throttle_time=NO_THROTTLE,
                         error_code=code if code != ErrorCode.none else codes[0])
        members = tuple(
            mod.MemberResponse(member_id=mid, group_instance_id=iid, error_code=c)
            for (mid, iid), c in zip(leaving, codes)
        )
        return mod.LeaveGroupResponse(throttle_time=NO_THROTTLE, error_code=code, members=members)

    # --- OffsetCommit / OffsetFetch -------------------------------------------------------------

    def _may_read_group(self, context: RequestContext, group_id: str) -> bool:
        return self.authorizer.authorize(context, AclOperation.READ, ResourceType.GROUP, group_id)

    def _unreadable_topics(self, context: RequestContext, topics: Iterable[_NamedTopic]) -> set[str]:
        names = {t.name for t in topics}
        return names - authorized_names(self.authorizer, context, AclOperation.READ, ResourceType.TOPIC, names)

    def _known_partition(self, topic: str, partition: int) -> bool:
        return self.metadata_cache.partition_state(topic, partition) is not None

    async def handle_offset_commit(self, context: RequestContext, request: Any) -> Any:
        """Offsets of partitions the cluster does not have get UNKNOWN_TOPIC_OR_PARTITION, as Kafka's
        KafkaApis answers before the coordinator sees them; the rest are committed."""
        version = context.api_version
        mod = response_module(ApiKey.OFFSET_COMMIT, max(version, 2))
        now = self.coordinator.clock_ms()
        offsets = {}
        results = {}
        group_ok = self._may_read_group(context, request.group_id)  # Kafka: READ on the group, then each topic
        unreadable = self._unreadable_topics(context, request.topics) if group_ok else set()
        for t in request.topics:
            for p in t.partitions:
                key = (t.name, int(p.partition_index))
                if not group_ok or t.name in unreadable:
                    results[key] = (ErrorCode.topic_authorization_failed if group_ok
                                    else ErrorCode.group_authorization_failed)
                    continue
                if not self._known_partition(*key):
                    results[key] = ErrorCode.unknown_topic_or_partition
                    continue
                offsets[key] = OffsetAndMetadata(
                    int(p.committed_offset), int(getattr(p, "committed_leader_epoch", -1)),
                    p.committed_metadata or "", now,
                )
        if offsets and version == 0:
            results.update(await self._commit_offsets_to_zookeeper(request.group_id, offsets))
        elif offsets:
            results.update(await self.coordinator.commit_offsets(
                request.group_id, request.member_id, getattr(request, "group_instance_id", None),
                int(request.generation_id_or_member_epoch), offsets,
            ))
        topics = tuple(
            mod.OffsetCommitResponseTopic(name=t.name, partitions=tuple(
                mod.OffsetCommitResponsePartition(partition_index=p.partition_index,
                                                  error_code=results[(t.name, int(p.partition_index))])
                for p in t.partitions))
            for t in request.topics
        )
        return make_entity(mod.OffsetCommitResponse, throttle_time=NO_THROTTLE, topics=topics)

    def _fetch_group(self, version: int, group_id: str, topics: Iterable[Any] | None, topic_cls: type,
                     part_cls: type, require_stable: bool = False,
                     context: RequestContext | None = None) -> tuple[ErrorCode, tuple[Any, ...]]:
        """(error, the response's topic entries of `topic_cls`): `topics` are the request's, any
        version's kio classes; None asks for every partition of the group."""
        wanted = None if topics is None else [(t.name, int(p)) for t in topics for p in t.partition_indexes]
        found: dict[tuple[str, int], OffsetAndMetadata | None]
        if context is not None and not self._may_read_group(context, group_id):
            code, found = ErrorCode.group_authorization_failed, {}
        else:
            code, found = self.coordinator.fetch_offsets(group_id, wanted)
        per_topic: dict[str, list[Any]] = {}
        if code == ErrorCode.none:
            keys = wanted if wanted is not None else sorted(found)
            group = self.coordinator.manager.groups.get(group_id) if require_stable else None
            described = None
            if context is not None and self.authorizer.enabled:  # Kafka: DESCRIBE on each topic
                described = authorized_names(self.authorizer, context, AclOperation.DESCRIBE, ResourceType.TOPIC,
                                             {t for t, _ in keys})
            for topic, p in keys:
                if described is not None and topic not in described:
                    if wanted is not None:  # listed: refused; all topics: left out
                        per_topic.setdefault(topic, []).append(make_entity(
                            part_cls, partition_index=i32(p), committed_offset=i64(-1),
                            committed_leader_epoch=i32(-1), metadata="",
                            error_code=ErrorCode.topic_authorization_failed))
                    continue
                if require_stable and txn_offsets.has_pending(group, (topic, p)):
                    # KIP-447: a transaction may still change this offset; the consumer retries
                    per_topic.setdefault(topic, []).append(make_entity(
                        part_cls, partition_index=i32(p), committed_offset=i64(-1), committed_leader_epoch=i32(-1),
                        metadata="", error_code=ErrorCode.unstable_offset_commit))
                    continue
                om = found.get((topic, p))
                per_topic.setdefault(topic, []).append(make_entity(
                    part_cls, partition_index=i32(p), committed_offset=i64(om.offset if om else -1),
                    committed_leader_epoch=i32(om.leader_epoch if om else -1),
                    metadata=(om.metadata if om else ""), error_code=ErrorCode.none,
                ))
        elif version < 2 and wanted is not None:
            for topic, p in wanted:  # v0/v1 have no top-level error: put it on every partition
                per_topic.setdefault(topic, []).append(make_entity(
                    part_cls, partition_index=i32(p), committed_offset=i64(-1), metadata="", error_code=code))
        return code, tuple(topic_cls(name=n, partitions=tuple(ps)) for n, ps in per_topic.items())

    async def _commit_offsets_to_zookeeper(self, group_id: str, offsets: dict[tuple[str, int], OffsetAndMetadata]
                                           ) -> dict[tuple[str, int], ErrorCode]:
        """OffsetCommit v0: offsets go to ZooKeeper (`/consumers/<group>/offsets/<topic>/<p>`), not
        to the coordinator, as Kafka's KafkaApis.commitOffsetsToZookeeper does."""
        results = {}
        limit = self.coordinator.config.offset_metadata_max_bytes
        for (topic, partition), om in offsets.items():
            if len(om.metadata.encode()) > limit:
                results[(topic, partition)] = ErrorCode.offset_metadata_too_large
                continue
            try:
                await self.admin.zk.set_consumer_offset(group_id, topic, partition, om.offset)
                results[(topic, partition)] = ErrorCode.none
            except Exception:
                log.warning("storing offset %s-%d of group %s in ZooKeeper failed", topic, partition, group_id,
                            exc_info=True)
                results[(topic, partition)] = ErrorCode.unknown_server_error
        return results

    async def _fetch_offsets_from_zookeeper(self, context: RequestContext, mod: ModuleType, request: Any) -> Any:
        """OffsetFetch v0: offsets from ZooKeeper (Kafka's handleOffsetFetchRequestFromZookeeper);
        a partition unknown, or without an offset there, is UNKNOWN_TOPIC_OR_PARTITION."""
        if not self.authorizer.authorize(context, AclOperation.DESCRIBE, ResourceType.GROUP, request.group_id):
            code = ErrorCode.group_authorization_failed
            return mod.OffsetFetchResponse(topics=tuple(mod.OffsetFetchResponseTopic(name=t.name, partitions=tuple(
                mod.OffsetFetchResponsePartition(partition_index=i32(p), committed_offset=i64(-1), metadata="",
                                                 error_code=code) for p in t.partition_indexes))
                for t in request.topics or ()))
        described = authorized_names(self.authorizer, context, AclOperation.DESCRIBE, ResourceType.TOPIC,
                                     {t.name for t in request.topics or ()})
        topics = []
        for t in request.topics or ():
            parts = []
            for p in t.partition_indexes:
                offset, code = -1, ErrorCode.unknown_topic_or_partition
                if t.name not in described:
                    code = ErrorCode.topic_authorization_failed
                elif self._known_partition(t.name, int(p)):
                    try:
                        found = await self.admin.zk.get_consumer_offset(request.group_id, t.name, int(p))
                    except Exception:
                        log.warning("reading an offset of group %s from ZooKeeper failed", request.group_id,
                                    exc_info=True)
                        found, code = None, ErrorCode.unknown_server_error
                    if found is not None:
                        offset, code = found, ErrorCode.none
                parts.append(mod.OffsetFetchResponsePartition(partition_index=i32(p), committed_offset=i64(offset),
                                                              metadata="", error_code=code))
            topics.append(mod.OffsetFetchResponseTopic(name=t.name, partitions=tuple(parts)))
        return mod.OffsetFetchResponse(topics=tuple(topics))

    async def handle_offset_fetch(self, context: RequestContext, request: Any) -> Any:
        version = context.api_version
        mod = response_module(ApiKey.OFFSET_FETCH, version)
        if version == 0:
            return await self._fetch_offsets_from_zookeeper(context, mod, request)
        if version >= 8:
            groups = []
            for g in request.groups:
                code, topics = self._fetch_group(version, g.group_id, g.topics, mod.OffsetFetchResponseTopics,
                                                 mod.OffsetFetchResponsePartitions, bool(request.require_stable),
                                                 context)
                groups.append(mod.OffsetFetchResponseGroup(group_id=g.group_id, topics=topics, error_code=code))
            return mod.OffsetFetchResponse(throttle_time=NO_THROTTLE, groups=tuple(groups))
        code, topics = self._fetch_group(version, request.group_id, request.topics, mod.OffsetFetchResponseTopic,
                                         mod.OffsetFetchResponsePartition, bool(getattr(request, "require_stable", False)),
                                         context)
        return make_entity(mod.OffsetFetchResponse, throttle_time=NO_THROTTLE, topics=topics, error_code=code)

    async def handle_txn_offset_commit(self, context: RequestContext, request: Any) -> Any:
        mod = response_module(ApiKey.TXN_OFFSET_COMMIT, context.api_version)
        now = self.coordinator.clock_ms()
        offsets = {
            (t.name, int(p.partition_index)): OffsetAndMetadata(
                int(p.committed_offset), int(getattr(p, "committed_leader_epoch", -1)), p.committed_metadata or "", now)
            for t in request.topics for p in t.partitions
        }
        # Kafka: WRITE on the transactional id, READ on the group, READ on each topic
        refused: dict[tuple[str, int], ErrorCode] = {}
        if not self.authorizer.authorize(context, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID,
                                         request.transactional_id):
            refused = dict.fromkeys(offsets, ErrorCode.transactional_id_authorization_failed)
        elif not self._may_read_group(context, request.group_id):
            refused = dict.fromkeys(offsets, ErrorCode.group_authorization_failed)
        else:
            unreadable = self._unreadable_topics(context, request.topics)
            refused = {k: ErrorCode.topic_authorization_failed for k in offsets if k[0] in unreadable}
        offsets = {k: v for k, v in offsets.items() if k not in refused}
        results = await txn_offsets.commit_txn_offsets(
            self.coordinator, request.group_id, int(request.producer_id), int(request.producer_epoch),
            getattr(request, "member_id", ""), getattr(request, "group_instance_id", None),
            int(getattr(request, "generation_id", -1)), offsets, request.transactional_id,
            self.verify_txn_offsets) if offsets else {}
        results = {**results, **refused}
        topics = tuple(
            mod.TxnOffsetCommitResponseTopic(name=t.name, partitions=tuple(
                mod.TxnOffsetCommitResponsePartition(partition_index=p.partition_index,
                                                     error_code=results[(t.name, int(p.partition_index))])
                for p in t.partitions))
            for t in request.topics
        )
        return mod.TxnOffsetCommitResponse(throttle_time=NO_THROTTLE, topics=topics)

    # --- DescribeGroups / ListGroups / DeleteGroups ---------------------------------------------

    async def handle_describe_groups(self, context: RequestContext, request: Any) -> Any:
        mod = response_module(ApiKey.DESCRIBE_GROUPS, context.api_version)
        want_ops = bool(getattr(request, "include_authorized_operations", False))
        out = []
        for gid in request.groups:
            ops = authorized_operations(ResourceType.GROUP, want_ops, self.authorizer, context, gid)
            if not self.authorizer.authorize(context, AclOperation.DESCRIBE, ResourceType.GROUP, gid):
                out.append(make_entity(mod.DescribedGroup, error_code=ErrorCode.group_authorization_failed,
                                       group_id=gid, group_state="", protocol_type="", protocol_data="", members=(),
                                       authorized_operations=ops))
                continue
            code, group = self.coordinator.describe_group(gid)
            if group is None:
                state = "Dead" if code == ErrorCode.none else ""
                out.append(make_entity(mod.DescribedGroup, error_code=code, group_id=gid, group_state=state,
                                       protocol_type="", protocol_data="", members=(), authorized_operations=ops))
                continue
            stable = group.state.value == "Stable"
            members = tuple(
                make_entity(mod.DescribedGroupMember, member_id=m.member_id, group_instance_id=m.group_instance_id,
                      client_id=m.client_id, client_host=m.client_host,
                      member_metadata=m.metadata(group.protocol_name) if stable and group.protocol_name else b"",
                      member_assignment=m.assignment if stable else b"")
                for m in group.members.values()
            )
            out.append(make_entity(mod.DescribedGroup, error_code=code, group_id=gid, group_state=group.state.value,
                             protocol_type=group.protocol_type or "",
                             protocol_data=(group.protocol_name or "") if stable else "", members=members,
                             authorized_operations=ops))
        return make_entity(mod.DescribeGroupsResponse, throttle_time=NO_THROTTLE, groups=tuple(out))

    async def handle_list_groups(self, context: RequestContext, request: Any) -> Any:
        """Every group here is a classic one: a types filter (v5) lists them only if it names
        "classic" (any case), as Kafka's old coordinator does."""
        mod = response_module(ApiKey.LIST_GROUPS, context.api_version)
        states = set(getattr(request, "states_filter", ()) or ())
        types = {t.lower() for t in getattr(request, "types_filter", ()) or ()}
        code, groups = self.coordinator.list_groups(states or None)
        if types and CLASSIC_GROUP_TYPE not in types:
            groups = []
        if not authorize_cluster(self.authorizer, context, AclOperation.DESCRIBE):  # else those it may describe
            visible = authorized_names(self.authorizer, context, AclOperation.DESCRIBE, ResourceType.GROUP,
                                       [g.group_id for g in groups])
            groups = [g for g in groups if g.group_id in visible]
        listed = tuple(
            make_entity(mod.ListedGroup, group_id=g.group_id, protocol_type=g.protocol_type or "",
                        group_state=g.state.value, group_type=CLASSIC_GROUP_TYPE)
            for g in groups
        )
        return make_entity(mod.ListGroupsResponse, throttle_time=NO_THROTTLE, error_code=code, groups=listed)

    async def handle_delete_groups(self, context: RequestContext, request: Any) -> Any:
        mod = response_module(ApiKey.DELETE_GROUPS, context.api_version)
        names = list(request.groups_names)
        deletable = authorized_names(self.authorizer, context, AclOperation.DELETE, ResourceType.GROUP, names)
        results = await self.coordinator.delete_groups([g for g in names if g in deletable])
        results.update({g: ErrorCode.group_authorization_failed for g in names if g not in deletable})
        return mod.DeleteGroupsResponse(throttle_time=NO_THROTTLE, results=tuple(
            mod.DeletableGroupResult(group_id=g, error_code=c) for g, c in results.items()))

    # --- OffsetDelete (KIP-496) -----------------------------------------------------------------

    async def handle_offset_delete(self, context: RequestContext, request: Any) -> Any:
        """Deletes a group's committed offsets. Partitions the cluster does not have get
        UNKNOWN_TOPIC_OR_PARTITION (as in OffsetCommit); a group error answers alone, with no topics
        (Kafka's getErrorResponse)."""
        mod = response_module(ApiKey.OFFSET_DELETE, context.api_version)
        if not self.authorizer.authorize(context, AclOperation.DELETE, ResourceType.GROUP, request.group_id):
            return mod.OffsetDeleteResponse(error_code=ErrorCode.group_authorization_failed,
                                            throttle_time=NO_THROTTLE, topics=())
        results: dict[tuple[str, int], ErrorCode] = {}
        wanted = []
        unreadable = self._unreadable_topics(context, request.topics)
        for t in request.topics:
            for p in t.partitions:
                key = (t.name, int(p.partition_index))
                if t.name in unreadable:
                    results[key] = ErrorCode.topic_authorization_failed
                elif self._known_partition(*key):
                    wanted.append(key)
                else:
                    results[key] = ErrorCode.unknown_topic_or_partition
        code, deleted = await self.coordinator.delete_offsets(request.group_id, wanted)
        if code != ErrorCode.none:
            return mod.OffsetDeleteResponse(error_code=code, throttle_time=NO_THROTTLE, topics=())
        results.update(deleted)
        per_topic: dict[str, list[Any]] = {}
        for (topic, p), c in results.items():
            per_topic.setdefault(topic, []).append(mod.OffsetDeleteResponsePartition(partition_index=i32(p), error_code=c))
        topics = tuple(mod.OffsetDeleteResponseTopic(name=n, partitions=tuple(ps)) for n, ps in per_topic.items())
        return mod.OffsetDeleteResponse(error_code=ErrorCode.none, throttle_time=NO_THROTTLE, topics=topics)


# --- OffsetCommit v1 (not in kio) -----------------------------------------------------------------


_NO_RETENTION = i64Timedelta.parse(datetime.timedelta(milliseconds=-1))
"""retention_time -1: the broker's offsets.retention.minutes (v1 has no field for it)."""


def decode_offset_commit_v1(
        body: bytes | memoryview) -> tuple[RequestHeaderV1, OffsetCommitRequestV2, type[OffsetCommitRequestV2]]:
    """An OffsetCommitRequest v1 frame → (header, kio's v2 request, v2 schema); ValueError if malformed.
    The per-partition timestamps are dropped, as Kafka ignores them since 2.1; v1 and v2 responses
    are identical."""
    req_cls = OffsetCommitRequestV2
    mod = offset_commit_v2
    try:
        header, pos = read_request_header_v1(body, 0)
        r = records._Reader(bytes(body))
        r.pos = pos
        group_id, generation, member_id = r.required_string(), r.int32(), r.required_string()
        topics = []
        for _ in range(r.int32()):
            name = r.required_string()
            parts = []
            for _ in range(r.int32()):
                index, offset, _ts, metadata = r.int32(), r.int64(), r.int64(), r.string()
                parts.append(mod.OffsetCommitRequestPartition(
                    partition_index=i32(index), committed_offset=i64(offset), committed_metadata=metadata))
            topics.append(mod.OffsetCommitRequestTopic(name=TopicName(name), partitions=tuple(parts)))
    except Exception as e:  # struct.error and friends on truncated bodies, kio's errors on a bad header
        raise ValueError(f"malformed OffsetCommit v1: {e}") from e
    if r.pos != len(body):
        raise ValueError("trailing bytes in OffsetCommit v1")
    request = req_cls(group_id=GroupId(group_id), generation_id_or_member_epoch=i32(generation), member_id=member_id,
                      retention_time=_NO_RETENTION, topics=tuple(topics))
    return header, request, req_cls

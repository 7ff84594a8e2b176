"""KafkaApis: one dispatch table for every API the broker speaks, and the error path around it.

The data APIs (Produce, Fetch, ListOffsets, LeaderAndIsr, StopReplica) and ApiVersions live here;
the metadata and admin APIs come from MetadataApis and are merged in, so ApiVersions advertises
exactly what the two together implement.

Bad input follows Kafka: an unknown API or version closes the connection (ApiVersions instead
answers UNSUPPORTED_VERSION with the version list, in its v0 layout, so any client can read it), a
malformed body is logged (rate-limited) and closes the connection, and an exception escaping a
handler becomes Kafka's error code in an ordinary response (UNKNOWN_SERVER_ERROR by default).
"""

import dataclasses
import datetime
import logging
import sys
import typing
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import ModuleType

from kio.schema.errors import ErrorCode
from kio.static.primitive import i16, i32, i32Timedelta, i64

from odradek.broker import control_plane
from odradek.broker import fetch as fetch_codec
from odradek.broker import produce as produce_codec
from odradek.broker.authorizer.acl import AclOperation, ResourceType
from odradek.broker.authorizer.authorizer import ALLOW_ALL, CLUSTER_GATED_APIS, Authorizer, authorize_cluster
from odradek.broker.error_response import error_response
from odradek.broker.fetch_session import (
    FINAL_EPOCH,
    INVALID_SESSION_ID,
    FetchContext,
    FetchManager,
    FetchSessionCache,
    PartitionFetch,
)
from odradek.broker.log.errors import LogError
from odradek.broker.log.legacy_records import down_convert, up_convert
from odradek.broker.log.local_log import FileRegion
from odradek.broker.log.producer_state import NO_PRODUCER_EPOCH, NO_PRODUCER_ID
from odradek.broker.metadata_apis import ZERO_UUID, MetadataApis
from odradek.broker.metadata_cache import broker_endpoint
from odradek.broker.producer_id_manager import ProducerIdBlockUnavailableError, ZkProducerIdManager
from odradek.broker.quota.quota_managers import QuotaManagers
from odradek.broker.quota.request_time import RequestTime
from odradek.broker.replica_manager import FetchInfo, FetchResult, ProduceResult, ReplicaManager
from odradek.broker.transaction.transaction_apis import TransactionApis
from odradek.broker.transaction.verification import TransactionVerifier
from odradek.common import legacy_schemas, wire
from odradek.common.api_key import ApiKey
from odradek.common.clock import Clock, Timer, monotonic_ns, now_ms
from odradek.common.config import BrokerConfig
from odradek.common.errors import KafkaError
from odradek.common.messages import LeaderAndIsrRequest, LeaderAndIsrResponse, StopReplicaRequest, StopReplicaResponse
from odradek.common.network.encoding import Body, Chunk, frame, response_header
from odradek.common.network.request_context import ANONYMOUS, DEFAULT_LISTENER, Handler, RequestContext, client_host
from odradek.common.network.socket_server import CloseConnection, RateLimitedLog

log = logging.getLogger(__name__)

INIT_PRODUCER_ID_VERSIONS = (0, 5)
"""v0 for librdkafka (it wants exactly v0 advertised), up to v5 (KIP-890's error code, which we
never send); v6 (KIP-939 two-phase commit) only means something to transactions."""

DATA_VERSIONS: dict[int, tuple[int, int]] = {
    ApiKey.PRODUCE: (produce_codec.MIN_VERSION, produce_codec.MAX_VERSION),
    ApiKey.FETCH: (fetch_codec.MIN_VERSION, fetch_codec.MAX_VERSION),
    ApiKey.LIST_OFFSETS: (0, 9),  # v0 (legacy_schemas): offsets before a time; v7 MAX_TIMESTAMP, v8/v9 tiered specs
    ApiKey.LEADER_AND_ISR: (2, 2),
    ApiKey.STOP_REPLICA: (1, 1),
    ApiKey.API_VERSIONS: (0, 4),
    ApiKey.FIND_COORDINATOR: (0, 6),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (0, 4),  # v3+ carry replica_id (followers truncating); v0, v1: legacy_schemas
    ApiKey.DELETE_RECORDS: (0, 2),
}


REQUEST_QUOTA_EXEMPT = frozenset({
    ApiKey.LEADER_AND_ISR, ApiKey.STOP_REPLICA, ApiKey.UPDATE_METADATA, ApiKey.CONTROLLED_SHUTDOWN,
    ApiKey.WRITE_TXN_MARKERS, ApiKey.ALTER_PARTITION})
"""APIs Kafka answers with sendResponseExemptThrottle: the controller's and inter-broker requests
are never charged to the request quota (a follower's Fetch is exempt too, decided in handle_fetch).
ApiVersions and the SASL requests are charged, as in Kafka."""

LEADING_THROTTLE: dict[int, int] = {ApiKey.METADATA: 3}
"""Hand-encoded bodies whose first field is throttle_time_ms from this version on."""

_Q = typing.TypeVar("_Q")
_A = typing.TypeVar("_A")
_TopicResults = tuple[str, list[tuple[int, FetchResult]]]
"""A Fetch response's topic: (name, [(partition index, result)])."""

UNKNOWN_TOPIC_ID_PREFIX = "\0unknown-topic-id:"
"""The name Fetch v13+ gives a topic id no topic has (no topic name holds a NUL)."""


def down_converted(result: FetchResult, magic: int, fetch_offset: int) -> FetchResult:
    """A partition's fetched v2 batches (a FetchResult) as a magic 0/1 message set (Fetch v0–v3)."""
    if not isinstance(result, FetchResult) or not result.size:
        return result
    data = b"".join(r.read_bytes() if isinstance(r, FileRegion) else bytes(r) for r in result.regions)
    converted = down_convert(data, magic, fetch_offset)
    return dataclasses.replace(result, regions=[converted] if converted else [], size=len(converted))


LegacyDecoder = Callable[[bytes | memoryview], tuple[typing.Any, ...]]
"""A request version kio lacks: frame body → (header, request, schema)."""


def decode_legacy_produce(frame_body: bytes | memoryview) -> tuple[typing.Any, ...]:
    """A Produce v0–v2 frame as (its header, a v3 request whose message sets are up-converted to
    v2 batches, the v3 schema): handle_produce serves it and answers in the frame's version. A set
    that does not convert becomes empty records, answered INVALID_RECORD."""
    header, _ = wire.read_request_header_v1(frame_body, 0)
    acks, timeout, topics = produce_codec.parse_legacy_request(frame_body)
    schema = wire.request_schema(ApiKey.PRODUCE, 3)
    mod = sys.modules[schema.__module__]

    def converted(message_set: bytes) -> bytes:
        try:
            return up_convert(message_set)
        except (LogError, ValueError):
            return b""

    request = schema(transactional_id=None, acks=i16(acks), timeout=i32Timedelta.parse(
        datetime.timedelta(milliseconds=timeout)), topic_data=tuple(
            mod.TopicProduceData(name=name, partition_data=tuple(
                mod.PartitionProduceData(index=i32(index), records=converted(records)) for index, records in parts))
            for name, parts in topics))
    return header, request, schema


@dataclasses.dataclass(frozen=True)
class Unanswered:
    """A handler's result for a request that gets no answer (Produce with acks=0) but earned a
    quota's throttle time: the connection is muted that long (Kafka mutes acks=0 producers too)."""

    throttle_ms: int


# --- KafkaApis ------------------------------------------------------------------------------------


class ApiGroup(typing.Protocol):
    """A module's handlers and the versions it serves, merged into KafkaApis' one dispatch table."""

    @property
    def handlers(self) -> Mapping[int, Handler]: ...
    @property
    def versions(self) -> Mapping[int, tuple[int, int]]: ...


def fetch_session_sweep_ms(config: typing.Any) -> int:
    """How often an incremental fetch reads its whole session (broker/fetch_session): often
    enough that a follower's caught-up time is never stale by more than a quarter of
    replica.lag.time.max.ms, at most every second."""
    lag = int(getattr(config, "replica_lag_time_max_ms", 0) or 0)
    return max(0, min(1000, lag // 4))


class KafkaApis:
    """Kafka's KafkaApis: one dispatch table from ApiKey to handler (its own and those of the API
    groups it is given, built once here), the authorizer's cluster-wide checks, the framing."""

    def __init__(self, config: BrokerConfig, replica_manager: ReplicaManager, metadata_apis: MetadataApis | None,
                 apis: Sequence[ApiGroup] = (), producer_id_manager: ZkProducerIdManager | None = None,
                 control_plane_guard: control_plane.ControlPlaneGuard | None = None, *,
                 authorizer: Authorizer = ALLOW_ALL, quotas: QuotaManagers | None = None,
                 transaction_verifier: TransactionVerifier | None = None,
                 transaction_apis: TransactionApis | None = None, clock: Clock = now_ms):
        self.config = config
        self.authorizer = authorizer
        """Consulted where Kafka's KafkaApis consults its authorizer (broker/authorizer)."""
        self.control_plane_guard = control_plane_guard
        """Admits controller requests (broker/control_plane); without one every one is refused."""
        self.replica_manager = replica_manager
        self.producer_id_manager = producer_id_manager
        """ZkProducerIdManager; without one InitProducerId is not advertised."""
        self.transaction_verifier = transaction_verifier
        self.transaction_apis = transaction_apis
        """The transaction coordinator's APIs, for InitProducerId with a transactional id."""
        self.quotas = quotas
        """Client quotas (broker/quota): Produce and consumer Fetch answers carry their throttle time."""
        self.clock = clock
        self.request_timer: Timer = monotonic_ns
        """Measures handler time for the request quota (broker/quota/request_time)."""
        self.metadata_apis = metadata_apis
        """Topic ids for Fetch v13+ (without it, unknown to every id)."""
        self._names_by_id: dict[uuid.UUID, str] = {}
        self.handlers, self.versions, self.legacy_requests = self._dispatch_table(
            [g for g in (metadata_apis,) if g is not None] + list(apis))
        self.leader_and_isr_listeners: list[Callable[[LeaderAndIsrRequest, LeaderAndIsrResponse], None]] = []
        """Called with (request, response) after each LeaderAndIsr (the group coordinator's election hook)."""
        self.stop_replica_listeners: list[Callable[[StopReplicaRequest, StopReplicaResponse], None]] = []
        """Called with (request, response) after each StopReplica."""
        self.bad_input = RateLimitedLog(log)
        self._api_versions_bodies: dict[int, Body] = {}
        self.fetch_manager = FetchManager(
            FetchSessionCache(int(config.max_incremental_fetch_session_cache_slots),
                              int(config.min_incremental_fetch_session_eviction_ms)),
            clock, fetch_session_sweep_ms(config),
        )
        """Incremental fetch sessions (KIP-227), used by Fetch v7+."""
        listeners = getattr(replica_manager, "partition_listeners", None)
        if listeners is not None:
            listeners.append(self.fetch_manager.partition_changed)

    def _dispatch_table(self, groups: Sequence[ApiGroup]) -> tuple[
            dict[int, Handler], dict[int, tuple[int, int]], dict[tuple[int, int], LegacyDecoder]]:
        """ApiKey → handler and → (lowest, highest) version, and the (api, version) decoders of
        versions kio lacks or that are read by hand (Produce): this class's APIs, then each
        group's (an API handled twice is a wiring error). FindCoordinator here is a placeholder,
        replaced by the group coordinator's."""
        handlers: dict[int, Handler] = {
            ApiKey.PRODUCE: self.handle_produce,
            ApiKey.FETCH: self.handle_fetch,
            ApiKey.LIST_OFFSETS: self.handle_list_offsets,
            ApiKey.LEADER_AND_ISR: self.handle_leader_and_isr,
            ApiKey.STOP_REPLICA: self.handle_stop_replica,
            ApiKey.API_VERSIONS: self.handle_api_versions,
            ApiKey.FIND_COORDINATOR: self.handle_find_coordinator,
            ApiKey.OFFSET_FOR_LEADER_EPOCH: self.handle_offset_for_leader_epoch,
            ApiKey.DELETE_RECORDS: self.handle_delete_records,
        }
        versions: dict[int, tuple[int, int]] = dict(DATA_VERSIONS)
        if self.producer_id_manager is not None:
            handlers[ApiKey.INIT_PRODUCER_ID] = self.handle_init_producer_id
            versions[ApiKey.INIT_PRODUCER_ID] = INIT_PRODUCER_ID_VERSIONS
        legacy: dict[tuple[int, int], LegacyDecoder] = {
            (ApiKey.PRODUCE, v): decode_legacy_produce for v in produce_codec.LEGACY_VERSIONS}
        legacy.update({(ApiKey.PRODUCE, v): produce_codec.decode_request for v in produce_codec.DECODED_VERSIONS})
        placeholders = {ApiKey.FIND_COORDINATOR}
        for group in groups:
            for key, handler in group.handlers.items():
                if key in handlers and key not in placeholders:
                    raise ValueError(f"API {key} handled twice")
                placeholders.discard(ApiKey(key))
                handlers[key] = handler
                lowest, highest = group.versions[key]
                versions[key] = (lowest, highest)
            legacy.update(getattr(group, "legacy_requests", {}))
        return handlers, versions, legacy

    # --- dispatch -------------------------------------------------------------------------------

    async def handle(self, frame_body: bytes | bytearray | memoryview, conn: object) -> list[Chunk] | None:
        """Answers one request frame (without its size prefix): response chunks, or None. `conn` is
        the socket server's KafkaConnection, read through getattr (tests pass stand-ins)."""
        peer = getattr(conn, "peer", None)
        listener = getattr(getattr(conn, "server", None), "listener", None)  # None: no server (tests)
        try:
            api_key, version, correlation_id = wire.peek_api(frame_body)
        except ValueError:
            self.bad_input.warning("truncated", "closing connection from %s: truncated request header", peer)
            raise CloseConnection() from None
        lowest, highest = DATA_VERSIONS[ApiKey.API_VERSIONS]
        if api_key == ApiKey.API_VERSIONS and not lowest <= version <= highest:
            return self._api_versions_unsupported(correlation_id)
        supported = self.versions.get(api_key)
        if supported is None or not supported[0] <= version <= supported[1]:
            self.bad_input.warning(
                f"version-{api_key}" if api_key in self.versions else "version-unknown",
                "closing connection from %s: unsupported API key %d version %d",
                peer, api_key, version,
            )
            raise CloseConnection()
        legacy = self.legacy_requests.get((api_key, version))
        try:
            if legacy is produce_codec.decode_request:  # it rewrites the records in place
                header, request, schema = produce_codec.decode_request(frame_body)
            else:  # kio reads read-only buffers only
                body = frame_body if isinstance(frame_body, bytes) else memoryview(frame_body).toreadonly()
                header, request, schema = (legacy or wire.decode_request)(body)
        except (KeyError, ValueError) as e:
            self.bad_input.warning(
                f"malformed-{api_key}", "closing connection from %s: malformed request (API %d v%d): %s",
                peer, api_key, version, e,
            )
            raise CloseConnection() from None
        context = RequestContext(header, client_host(peer), listener or DEFAULT_LISTENER,
                                 str(getattr(conn, "principal", ANONYMOUS)),
                                 getattr(conn, "security_protocol", "PLAINTEXT"), len(frame_body))
        gate = CLUSTER_GATED_APIS.get(api_key)
        gate_refused = gate is not None and not authorize_cluster(self.authorizer, context, gate)
        if gate_refused and api_key not in control_plane.CONTROL_PLANE_APIS:
            flexible = wire.response_header_flexible(api_key, schema.__flexible__)
            return [wire.encode_response(error_response(request, ErrorCode.cluster_authorization_failed),
                                         correlation_id, flexible_header=flexible)]
        if api_key in control_plane.CONTROL_PLANE_APIS:
            guard = self.control_plane_guard
            code = (ErrorCode.cluster_authorization_failed if guard is None or gate_refused
                    else await guard.admit(request, listener))
            if code != ErrorCode.none:
                self.bad_input.warning(f"control-plane-{api_key}", "refusing API %d from %s on listener %s: %s",
                                       api_key, peer, listener, code.name)
                return [wire.encode_response(control_plane.refusal(api_key, code), correlation_id,
                                             flexible_header=False)]
        legacy_version = legacy_schemas.LEGACY.get((api_key, version))
        if legacy_version is not None and legacy_version.translated:
            # a version kio lacks: the handler sees its base version (common/legacy_schemas)
            request = legacy_schemas.upgrade(request)
            header = dataclasses.replace(header, request_api_version=i16(legacy_version.base))
            context = dataclasses.replace(context, header=header)
        timing = None
        if self.quotas is not None and self.quotas.request.enabled and api_key not in REQUEST_QUOTA_EXEMPT:
            timing = RequestTime(self.request_timer)
        try:
            call = self.handlers[api_key](context, request)
            result = await (call if timing is None else timing.run(call))
        except CloseConnection:
            raise
        except Exception as e:
            code = e.error_code if isinstance(e, KafkaError) else ErrorCode.unknown_server_error
            self.bad_input.warning(
                f"handler-{api_key}", "API %d v%d from %s failed; answering %s", api_key, version, peer, code.name,
                exc_info=True,
            )
            if api_key == ApiKey.PRODUCE and request.acks == 0:
                raise CloseConnection() from None
            try:
                result = error_response(request, code)
            except Exception:
                log.exception("cannot build an error response for API %d v%d; closing the connection", api_key, version)
                raise CloseConnection() from None
        if isinstance(result, Unanswered):  # acks=0 over its quota: no answer, muted all the same
            if hasattr(conn, "mute_for"):
                conn.mute_for(result.throttle_ms / 1000.0)
            return None
        if result is None:
            return None
        mute_ms = 0
        if timing is not None and not timing.recorded and self.quotas is not None:
            result, mute_ms = self._request_throttled(context, result, timing)
        if legacy_version is not None and legacy_version.translated and not isinstance(result, Body):
            result = legacy_schemas.downgrade(result, api_key, version)
        flexible = wire.response_header_flexible(api_key, schema.__flexible__)
        if isinstance(result, Body):
            if result.throttle_ms > 0 and hasattr(conn, "mute_for"):
                conn.mute_for(result.throttle_ms / 1000.0)  # KIP-219: answered, then muted that long
            return frame(response_header(correlation_id, flexible), result.chunks, result.size)
        throttle_time = getattr(result, "throttle_time", None)  # a handler's own (controller mutations)
        if isinstance(throttle_time, datetime.timedelta):
            mute_ms = max(mute_ms, wire.ms(throttle_time))
        if mute_ms > 0 and hasattr(conn, "mute_for"):
            conn.mute_for(mute_ms / 1000.0)  # KIP-219, a version without the field included
        return [wire.encode_response(result, correlation_id, flexible_header=flexible)]

    def _request_throttled(self, context: RequestContext, result: typing.Any,
                           timing: RequestTime) -> tuple[typing.Any, int]:
        """(the answer, how long to mute the connection after it) with the request quota's
        throttle time, when the handler did not charge it itself: in the throttle_time field, or
        the leading field of a hand-encoded body (a Body mutes by its own throttle_ms)."""
        assert self.quotas is not None
        throttle_ms = self.quotas.request_throttle(context.user, context.client_id, timing)
        if throttle_ms <= 0:
            return result, 0
        if isinstance(result, Body):
            since = LEADING_THROTTLE.get(int(context.header.request_api_key))
            first = result.chunks[0] if result.chunks else b""
            if since is not None and context.api_version >= since and isinstance(first, bytes) and len(first) >= 4:
                chunks = [throttle_ms.to_bytes(4, "big") + first[4:], *result.chunks[1:]]
                return Body(chunks, result.size, max(result.throttle_ms, throttle_ms)), 0
            return Body(result.chunks, result.size, max(result.throttle_ms, throttle_ms)), 0
        fields = dataclasses.fields(result) if dataclasses.is_dataclass(result) else ()
        if not isinstance(result, type) and any(f.name == "throttle_time" for f in fields):
            throttle_ms = max(throttle_ms, wire.ms(result.throttle_time))  # and a controller mutation's
            result = dataclasses.replace(result, throttle_time=i32Timedelta.parse(datetime.timedelta(
                milliseconds=throttle_ms)))
        return result, throttle_ms

    def _request_throttle(self, context: RequestContext) -> int:
        """A handler charging its request's time to the request quota itself (Produce, Fetch,
        ApiVersions combine it with their own answer): the throttle time, 0 without a quota."""
        if self.quotas is None:
            return 0
        return self.quotas.request_throttle(context.user, context.client_id)

    def unauthorized_topics(self, context: RequestContext, op: AclOperation, topics: Iterable[str]) -> set[str]:
        """The topics (each checked once) the principal may not `op` (AuthHelper.filterByAuthorized)."""
        if not self.authorizer.enabled:
            return set()
        auth = self.authorizer
        return {t for t in set(topics) if not auth.authorize(context, op, ResourceType.TOPIC, t)}

    # --- ApiVersions ----------------------------------------------------------------------------

    def _api_versions_payload(self, version: int, error_code: ErrorCode) -> typing.Any:
        mod = wire.response_module(ApiKey.API_VERSIONS, version)
        keys = tuple(
            mod.ApiVersion(api_key=i16(k), min_version=i16(lo), max_version=i16(hi))
            for k, (lo, hi) in sorted(self.versions.items())
        )
        fields = {"error_code": error_code, "api_keys": keys}
        if version >= 1:
            fields["throttle_time"] = wire.NO_THROTTLE
        return mod.ApiVersionsResponse(**fields)

    async def handle_api_versions(self, context: RequestContext, request: typing.Any) -> Body:
        version = context.api_version
        throttle_ms = self._request_throttle(context)
        if throttle_ms and version >= 1:
            payload = dataclasses.replace(self._api_versions_payload(version, ErrorCode.none),
                                          throttle_time=i32Timedelta.parse(datetime.timedelta(milliseconds=throttle_ms)))
            data = wire.encode_entity(payload)
            return Body([data], len(data), throttle_ms)
        body = self._api_versions_bodies.get(version)
        if body is None:
            data = wire.encode_entity(self._api_versions_payload(version, ErrorCode.none))
            body = self._api_versions_bodies[version] = Body([data], len(data))
        return Body(body.chunks, body.size, throttle_ms) if throttle_ms else body

    def _api_versions_unsupported(self, correlation_id: int) -> list[Chunk]:
        """A version newer than ours: UNSUPPORTED_VERSION and our list, as v0 (KIP-511)."""
        data = wire.encode_entity(self._api_versions_payload(0, ErrorCode.unsupported_version))
        return frame(response_header(correlation_id, False), [data], len(data))

    # --- Produce --------------------------------------------------------------------------------

    async def handle_produce(self, context: RequestContext, request: typing.Any) -> Body | Unanswered | None:
        version = context.api_version
        acks = int(request.acks)
        txn_id = request.transactional_id
        # Kafka: transactional records need WRITE on the request's transactional id (and one at all)
        untagged_transaction = (txn_id is None or self.authorizer.enabled) and any(
            produce_codec.is_transactional(p.records) for t in request.topic_data for p in t.partition_data) and (
            txn_id is None or not self.authorizer.authorize(context, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID,
                                                            txn_id))
        if untagged_transaction or acks not in (0, 1, -1):
            # Kafka's answers: transactional batches need the request's transactional id
            code = (
                ErrorCode.transactional_id_authorization_failed
                if untagged_transaction
                else ErrorCode.invalid_required_acks
            )
            if acks == 0:
                raise CloseConnection()
            failed = ProduceResult(error=code)
            topics = [(t.name, [(int(p.index), failed) for p in t.partition_data]) for t in request.topic_data]
        else:
            entries = [(t.name, int(p.index), p.records) for t in request.topic_data for p in t.partition_data]
            denied = self.unauthorized_topics(context, AclOperation.WRITE, [e[0] for e in entries])
            if denied:
                entries = [e for e in entries if e[0] not in denied]
            refused: dict[tuple[str, int], ErrorCode] = {}
            verified: dict[tuple[str, int], tuple[int, int]] | None = None
            if request.transactional_id is not None and self.transaction_verifier is not None:
                refused, verified = await self.transaction_verifier.verify(request.transactional_id, entries)
                entries = [e for e in entries if (e[0], e[1]) not in refused]
            results = await self.replica_manager.append_records(wire.ms(request.timeout), acks, entries,
                                                                verified=verified)
            for key, code in refused.items():
                results[key] = ProduceResult(error=code)
            for t in request.topic_data:
                if t.name in denied:
                    for p in t.partition_data:
                        results[(t.name, int(p.index))] = ProduceResult(error=ErrorCode.topic_authorization_failed)
            if acks == 0:
                if any(r.error != ErrorCode.none for r in results.values()):
                    raise CloseConnection()
                throttle_ms = self._produce_throttle(context)
                return Unanswered(throttle_ms) if throttle_ms else None
            topics = [
                (t.name, [(int(p.index), results[(t.name, int(p.index))]) for p in t.partition_data])
                for t in request.topic_data
            ]
        leaders: dict[tuple[str, int], tuple[int, int]] = {}
        endpoints: list[tuple[int, str, int, str | None]] = []
        if version >= 10:
            leaders, endpoints = self._leader_hints(
                context, [(name, index) for name, parts in topics for index, r in parts
                          if r.error == ErrorCode.not_leader_or_follower])
        throttle_ms = max(self._produce_throttle(context), self._request_throttle(context))
        chunks, size = produce_codec.encode_produce_response(version, topics, leaders, endpoints,
                                                             throttle_ms=throttle_ms)
        return Body(chunks, size, throttle_ms)

    def _produce_throttle(self, context: RequestContext) -> int:
        """The producer quota's throttle time for this request (its size counted), 0 without quotas."""
        if self.quotas is None or not self.quotas.produce.enabled:
            return 0
        return self.quotas.produce.record(context.user, context.client_id, context.size, self.clock())

    def _leader_hints(self, context: RequestContext, keys: Iterable[tuple[str, int]]
                      ) -> tuple[dict[tuple[str, int], tuple[int, int]], list[tuple[int, str, int, str | None]]]:
        """KIP-951: ({(topic, partition): (leader id, leader epoch)}, [(node, host, port, rack)])
        for partitions this broker does not lead, from the metadata cache, with the leaders'
        endpoints on the request's listener (Kafka's KafkaApis.getCurrentLeader)."""
        cache = self.replica_manager.metadata_cache
        brokers = cache.live_brokers()
        leaders: dict[tuple[str, int], tuple[int, int]] = {}
        nodes: dict[int, tuple[int, str, int, str | None]] = {}
        for topic, index in keys:
            state = cache.partition_state(topic, index)
            leader, epoch = (int(state.leader), int(state.leader_epoch)) if state is not None else (-1, -1)
            leaders[(topic, index)] = (leader, epoch)
            broker = brokers.get(leader)
            if broker is None:
                continue
            endpoint = broker_endpoint(broker, context.listener)
            if endpoint is not None:
                nodes[leader] = (leader, endpoint.host, int(endpoint.port), broker.rack)
        return leaders, list(nodes.values())

    # --- Fetch ----------------------------------------------------------------------------------

    async def handle_fetch(self, context: RequestContext, request: typing.Any) -> Body:
        """Fetch, sessionless or in a fetch session (KIP-227, v7+; rules in broker/fetch_session).

        The FetchManager decides what is read (an incremental request reads every partition of its
        session, listed or not: the long poll waits on them all, and a follower's fetch state sees
        them all) and what the response carries (incremental: only partitions with something to
        say). v4–v6 have no session fields: they are sessionless, as (session 0, FINAL epoch) is."""
        version = context.api_version
        replica_id = int(request.replica_state.replica_id if version >= 15 else request.replica_id)
        by_id: dict[uuid.UUID | None, str] = {}
        if version >= fetch_codec.TOPIC_IDS_VERSION:
            by_id = await self._topic_names(
                {t.topic_id for t in request.topics} | {t.topic_id for t in request.forgotten_topics_data})
        infos = [
            FetchInfo(
                by_id[t.topic_id] if by_id else t.topic,
                int(p.partition),
                int(p.fetch_offset),
                int(p.partition_max_bytes),
                int(getattr(p, "current_leader_epoch", -1)),
                int(getattr(p, "log_start_offset", -1)),
            )
            for t in request.topics
            for p in t.partitions
        ]
        max_wait_ms = wire.ms(request.max_wait)
        min_bytes = int(request.min_bytes)
        max_bytes = int(getattr(request, "max_bytes", 2**31 - 1))
        if replica_id < 0 and self.quotas is not None and self.quotas.fetch.enabled:
            # Kafka: a consumer fetches at most what its quota allows over the quota window
            window_bytes = self.quotas.fetch.max_value_in_quota_window(context.user, context.client_id)
            if window_bytes is not None:
                max_bytes = max(1, min(max_bytes, window_bytes))
                min_bytes = min(min_bytes, max_bytes)
        if version >= 7:
            session_id, epoch = int(request.session_id), int(request.session_epoch)
            to_forget = [(by_id[t.topic_id] if by_id else t.topic, int(p))
                         for t in request.forgotten_topics_data for p in t.partitions]
        else:
            session_id, epoch, to_forget = INVALID_SESSION_ID, FINAL_EPOCH, []
        fetch_context = self.fetch_manager.new_context(session_id, epoch, infos, to_forget, replica_id >= 0)
        results: list[FetchResult | None] = []
        # Kafka: a follower needs CLUSTER_ACTION on the Cluster, a consumer READ on each topic
        follower_ok = replica_id >= 0 and authorize_cluster(self.authorizer, context, AclOperation.CLUSTER_ACTION)
        session_watch = fetch_context.session_watch
        if session_watch is not None and not follower_ok:
            fetch_context.visit_all()  # what a refused follower is refused is its whole session
            session_watch = None
        if fetch_context.infos or session_watch is not None:
            if replica_id >= 0:
                denied = set() if follower_ok else {i.topic for i in fetch_context.infos}
            else:
                denied = self.unauthorized_topics(context, AclOperation.READ, [i.topic for i in fetch_context.infos])
            readable = [i for i in fetch_context.infos if i.topic not in denied] if denied else fetch_context.infos
            read: list[FetchResult | None] = []
            isolation = int(getattr(request, "isolation_level", 0))
            if session_watch is not None:
                # The part of a follower's session that may have news (broker/fetch_session): the
                # long poll waits on all of it, and fetch_context.infos follow what is read then.
                read = await self.replica_manager.fetch_messages(
                    replica_id, max_wait_ms, min_bytes, max_bytes, readable, fetch_context.unchanged, isolation,
                    session=session_watch)
            elif readable:
                read = await self.replica_manager.fetch_messages(
                    replica_id, max_wait_ms, min_bytes, max_bytes, readable, fetch_context.unchanged, isolation)
            found = iter(read)
            results = [FetchResult(error=ErrorCode.topic_authorization_failed) if i.topic in denied else next(found)
                       for i in fetch_context.infos]
        throttle_ms = 0
        if replica_id >= 0:
            if self.quotas is not None:
                self.quotas.exempt_request()  # replication is never throttled by client quotas
        elif self.quotas is not None and (self.quotas.fetch.enabled or self.quotas.request.enabled):
            throttle_ms = await self._fetch_throttle(context, fetch_context, results)
            if throttle_ms:
                # Kafka's getThrottledResponse: no partitions; the consumer fetches the same
                # offsets again once unmuted, so nothing is lost
                error, session_id = fetch_context.throttled()
                chunks, size = fetch_codec.encode_fetch_response(
                    version, [], error_code=int(error), session_id=session_id, throttle_ms=throttle_ms)
                return Body(chunks, size, throttle_ms)
        error, session_id, pairs = fetch_context.response(results)
        chunks, size = await self._encode_fetch(context, error, session_id, pairs)
        return Body(chunks, size, throttle_ms)

    async def _fetch_throttle(self, context: RequestContext, fetch_context: FetchContext,
                              results: Sequence[FetchResult | None]) -> int:
        """A consumer's Fetch against its quotas, as Kafka's handleFetchRequest: the response it
        would get (measured before any down-conversion) is charged to the fetch quota and the
        handler's time to the request quota; when either is violated the bytes are taken back
        (unrecordQuotaSensor: no data goes out) and the larger throttle time is answered."""
        assert self.quotas is not None
        request_ms = self.quotas.request_throttle(context.user, context.client_id)
        if not self.quotas.fetch.enabled:
            return request_ms
        _, size = await self._encode_fetch(context, ErrorCode.none, 0, fetch_context.preview(results), convert=False)
        now = self.clock()
        bandwidth_ms = self.quotas.fetch.record(context.user, context.client_id, size, now)
        throttle_ms = max(bandwidth_ms, request_ms)
        if throttle_ms:
            self.quotas.fetch.unrecord(context.user, context.client_id, size, now)
        return throttle_ms

    async def _encode_fetch(self, context: RequestContext, error: ErrorCode, session_id: int,
                            pairs: list[tuple[PartitionFetch, FetchResult]], convert: bool = True
                            ) -> tuple[list[Chunk], int]:
        """(chunks, size) of a FetchResponse carrying `pairs` ([(info, FetchResult)])."""
        version = context.api_version
        if version < 4 and convert:  # message formats v0/v1: the records down-converted
            pairs = [(info, down_converted(r, 0 if version < 2 else 1, info.fetch_offset)) for info, r in pairs]
        topics = fetch_codec.group_by_topic(pairs)
        topic_ids: dict[str, uuid.UUID] = {}
        if version >= fetch_codec.TOPIC_IDS_VERSION:
            topic_ids, topics = await self._with_topic_ids(topics)
        leaders: dict[tuple[str, int], tuple[int, int]] = {}
        endpoints: list[tuple[int, str, int, str | None]] = []
        if version >= 16:
            leaders, endpoints = self._leader_hints(context, [
                (name, index) for name, parts in topics for index, r in parts
                if getattr(r, "error", None) in (ErrorCode.not_leader_or_follower, ErrorCode.fenced_leader_epoch)])
        return fetch_codec.encode_fetch_response(
            version, topics, error_code=int(error), session_id=session_id, topic_ids=topic_ids, leaders=leaders,
            endpoints=endpoints,
        )

    async def _topic_names(self, ids: set[uuid.UUID | None]) -> dict[uuid.UUID | None, str]:
        """Fetch v13+: topic id → name. An id no topic has now gets a name no topic can have
        (it holds a NUL), so its partitions are read as unknown and answered UNKNOWN_TOPIC_ID."""
        names = self._names_by_id
        if any(i is not None and i not in names for i in ids) and self.metadata_apis is not None:
            names = await self.metadata_apis.topic_names_by_id()
            self._names_by_id = names
        out = {}
        for topic_id in ids:
            name = names.get(topic_id) if topic_id is not None else None  # kio reads the zero id as None
            if name is None or not self.replica_manager.metadata_cache.contains(name):
                name = f"{UNKNOWN_TOPIC_ID_PREFIX}{topic_id or ZERO_UUID}"
            out[topic_id] = name
        return out

    async def _with_topic_ids(self, topics: list[_TopicResults]) -> tuple[dict[str, uuid.UUID], list[_TopicResults]]:
        """The response's topic ids by name (an unknown id's partitions say UNKNOWN_TOPIC_ID)."""
        names = [name for name, _ in topics]
        known = [n for n in names if not n.startswith(UNKNOWN_TOPIC_ID_PREFIX)]
        ids = await self.metadata_apis.topic_ids(known) if self.metadata_apis is not None and known else {}
        out = []
        for name, parts in topics:
            if name.startswith(UNKNOWN_TOPIC_ID_PREFIX):
                ids[name] = uuid.UUID(name[len(UNKNOWN_TOPIC_ID_PREFIX):])
                parts = [(index, dataclasses.replace(r, error=ErrorCode.unknown_topic_id)
                          if r.error in (ErrorCode.unknown_topic_or_partition, ErrorCode.topic_authorization_failed)
                          else r) for index, r in parts]  # Kafka: unknown ids before any authorization
            out.append((name, parts))
        return dict(ids), out

    # --- ListOffsets ----------------------------------------------------------------------------

    async def handle_list_offsets(self, context: RequestContext, request: typing.Any) -> typing.Any:
        version = context.api_version
        mod = wire.response_module(ApiKey.LIST_OFFSETS, version)
        rm = self.replica_manager
        topics = []
        denied = self.unauthorized_topics(context, AclOperation.DESCRIBE, [t.name for t in request.topics])
        if version == 0:
            return self._list_offsets_v0(mod, request, denied)
        for t in request.topics:
            partitions = []
            for p in t.partitions:
                if t.name in denied:
                    partitions.append(wire.make_entity(
                        mod.ListOffsetsPartitionResponse, partition_index=p.partition_index,
                        error_code=ErrorCode.topic_authorization_failed, timestamp=i64(-1), offset=i64(-1),
                        leader_epoch=i32(-1)))
                    continue
                r = rm.fetch_offset_for_timestamp(
                    t.name, int(p.partition_index), int(p.timestamp), int(request.replica_id),
                    int(getattr(p, "current_leader_epoch", -1)), int(getattr(request, "isolation_level", 0)),
                )
                fields = dict(
                    partition_index=p.partition_index,
                    error_code=r.error,
                    timestamp=i64(r.timestamp),
                    offset=i64(r.offset),
                )
                if version >= 4:
                    fields["leader_epoch"] = i32(r.leader_epoch)
                partitions.append(mod.ListOffsetsPartitionResponse(**fields))
            topics.append(mod.ListOffsetsTopicResponse(name=t.name, partitions=tuple(partitions)))
        fields = {"topics": tuple(topics)}
        if version >= 2:
            fields["throttle_time"] = wire.NO_THROTTLE
        return mod.ListOffsetsResponse(**fields)

    def _list_offsets_v0(self, mod: ModuleType, request: typing.Any, denied: set[str]) -> object:
        """Kafka's handleListOffsetRequestV0: up to max_num_offsets segment start offsets before
        the time (-1 latest, -2 earliest; other negative times UNSUPPORTED_VERSION)."""
        topics = []
        for t in request.topics:
            partitions = []
            for p in t.partitions:
                timestamp = int(p.timestamp)
                offsets: list[int] = []
                if t.name in denied:
                    code = ErrorCode.topic_authorization_failed
                elif timestamp < -2:
                    code = ErrorCode.unsupported_version
                else:
                    code, offsets = self.replica_manager.legacy_fetch_offsets_before(
                        t.name, int(p.partition_index), timestamp, int(p.max_num_offsets), int(request.replica_id))
                partitions.append(mod.ListOffsetsPartitionResponse(
                    partition_index=p.partition_index, error_code=code, old_style_offsets=tuple(map(i64, offsets))))
            topics.append(mod.ListOffsetsTopicResponse(name=t.name, partitions=tuple(partitions)))
        return mod.ListOffsetsResponse(topics=tuple(topics))

    # --- FindCoordinator ------------------------------------------------------------------------

    async def handle_find_coordinator(self, context: RequestContext, request: typing.Any) -> typing.Any:
        """COORDINATOR_NOT_AVAILABLE for every key until the group coordinator exists.

        Advertised anyway because librdkafka (up to 2.11) enables lz4 and other features only when
        FindCoordinator v0 is in the ApiVersions list; clients retry this error, so consumers that
        assign partitions themselves work, and group members wait for the coordinator.
        """
        version = context.api_version
        mod = wire.response_module(ApiKey.FIND_COORDINATOR, version)
        code, message = ErrorCode.coordinator_not_available, None
        none = dict(node_id=i32(-1), host="", port=i32(-1), error_code=code)
        if version >= 4:
            coordinators = tuple(
                mod.Coordinator(key=key, error_message=message, **none) for key in request.coordinator_keys
            )
            return mod.FindCoordinatorResponse(throttle_time=wire.NO_THROTTLE, coordinators=coordinators)
        if version >= 1:
            return mod.FindCoordinatorResponse(throttle_time=wire.NO_THROTTLE, error_message=message, **none)
        return mod.FindCoordinatorResponse(**none)

    # --- InitProducerId -------------------------------------------------------------------------

    async def handle_init_producer_id(self, context: RequestContext, request: typing.Any) -> typing.Any:
        """A fresh producer id with epoch 0 for an idempotent producer (null transactional id), as
        Kafka's TransactionCoordinator.handleInitProducerId does: the id and epoch a v3+ request
        carries are only checked for shape (both or neither); the producer gets a new id either way.

        A transactional id goes to the transaction coordinator (TransactionApis). A block that
        cannot be claimed right now answers COORDINATOR_LOAD_IN_PROGRESS (retriable; Kafka 3.x's
        producer-id manager does the same).
        """
        mod = wire.response_module(ApiKey.INIT_PRODUCER_ID, context.api_version)

        def answer(code: ErrorCode, producer_id: int = NO_PRODUCER_ID, epoch: int = NO_PRODUCER_EPOCH) -> typing.Any:
            return mod.InitProducerIdResponse(
                throttle_time=wire.NO_THROTTLE, error_code=code, producer_id=i64(producer_id), producer_epoch=i16(epoch)
            )

        pid = int(getattr(request, "producer_id", NO_PRODUCER_ID))
        epoch = int(getattr(request, "producer_epoch", NO_PRODUCER_EPOCH))
        if (pid == NO_PRODUCER_ID) != (epoch == NO_PRODUCER_EPOCH):
            return answer(ErrorCode.invalid_request)
        if request.transactional_id is not None:
            if not self.authorizer.authorize(context, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID,
                                             request.transactional_id):
                return answer(ErrorCode.transactional_id_authorization_failed)
            if self.transaction_apis is None:
                return answer(ErrorCode.coordinator_not_available)
            return answer(*await self.transaction_apis.init_producer_id(request))
        if not (authorize_cluster(self.authorizer, context, AclOperation.IDEMPOTENT_WRITE)
                or self.authorizer.authorize_by_type(context, AclOperation.WRITE, ResourceType.TOPIC)):
            return answer(ErrorCode.cluster_authorization_failed)  # KIP-679: WRITE on any topic will do
        assert self.producer_id_manager is not None, "registered only with a producer id manager"
        try:
            producer_id = await self.producer_id_manager.generate_producer_id()
        except ProducerIdBlockUnavailableError as e:
            return answer(e.error_code)
        return answer(ErrorCode.none, producer_id, 0)

    # --- OffsetForLeaderEpoch -------------------------------------------------------------------

    # --- DeleteRecords --------------------------------------------------------------------------

    async def handle_delete_records(self, context: RequestContext, request: typing.Any) -> typing.Any:
        """Move log start offsets at the leaders, answer once every live replica followed (or at
        the timeout). A partition named twice counts once, the last offset winning (Kafka's map)."""
        mod = wire.response_module(ApiKey.DELETE_RECORDS, context.api_version)
        offsets: dict[tuple[str, int], int] = {}
        denied = self.unauthorized_topics(context, AclOperation.DELETE, [t.name for t in request.topics])
        for t in request.topics:
            for p in t.partitions:
                offsets[(t.name, int(p.partition_index))] = int(p.offset)
        allowed = {k: v for k, v in offsets.items() if k[0] not in denied}
        results = await self.replica_manager.delete_records(wire.ms(request.timeout), allowed) if allowed else {}
        by_topic: dict[str, list[typing.Any]] = {}
        for topic, index in offsets.keys() - allowed.keys():
            by_topic.setdefault(topic, []).append(mod.DeleteRecordsPartitionResult(
                partition_index=i32(index), low_watermark=i64(-1), error_code=ErrorCode.topic_authorization_failed))
        for (topic, index), r in results.items():
            by_topic.setdefault(topic, []).append(mod.DeleteRecordsPartitionResult(
                partition_index=i32(index), low_watermark=i64(r.low_watermark), error_code=r.error))
        topics = tuple(mod.DeleteRecordsTopicResult(name=name, partitions=tuple(parts))
                       for name, parts in by_topic.items())
        return mod.DeleteRecordsResponse(throttle_time=wire.NO_THROTTLE, topics=topics)

    async def handle_offset_for_leader_epoch(self, context: RequestContext, request: typing.Any) -> typing.Any:
        """Where each asked leader epoch ends in our log (followers truncate there)."""
        mod = wire.response_module(ApiKey.OFFSET_FOR_LEADER_EPOCH, context.api_version)
        rm = self.replica_manager
        topics = []
        # Kafka: a follower (replica id >= 0) needs CLUSTER_ACTION, a client DESCRIBE on each topic
        if int(getattr(request, "replica_id", -1)) >= 0:
            cluster_ok = authorize_cluster(self.authorizer, context, AclOperation.CLUSTER_ACTION)
            denied = set() if cluster_ok else {t.topic for t in request.topics}
            refusal = ErrorCode.cluster_authorization_failed
        else:
            denied = self.unauthorized_topics(context, AclOperation.DESCRIBE, [t.topic for t in request.topics])
            refusal = ErrorCode.topic_authorization_failed
        for t in request.topics:
            partitions = []
            for p in t.partitions:
                if t.topic in denied:
                    code, epoch, offset = refusal, -1, -1
                else:
                    code, epoch, offset = rm.last_offset_for_leader_epoch(
                        t.topic, int(p.partition), int(p.leader_epoch), int(p.current_leader_epoch)
                    )
                partitions.append(mod.EpochEndOffset(
                    error_code=code, partition=p.partition, leader_epoch=i32(epoch), end_offset=i64(offset)
                ))
            topics.append(mod.OffsetForLeaderTopicResult(topic=t.topic, partitions=tuple(partitions)))
        return mod.OffsetForLeaderEpochResponse(throttle_time=wire.NO_THROTTLE, topics=tuple(topics))

    # --- controller requests --------------------------------------------------------------------

    async def handle_leader_and_isr(self, context: RequestContext, request: LeaderAndIsrRequest) -> LeaderAndIsrResponse:
        response = await self.replica_manager.become_leader_or_follower(request)
        self._notify(self.leader_and_isr_listeners, request, response)
        return response

    async def handle_stop_replica(self, context: RequestContext, request: StopReplicaRequest) -> StopReplicaResponse:
        response = await self.replica_manager.stop_replicas(request)
        self._notify(self.stop_replica_listeners, request, response)
        return response

    @staticmethod
    def _notify(listeners: Sequence[Callable[[_Q, _A], None]], request: _Q, response: _A) -> None:
        for listener in listeners:
            try:
                listener(request, response)
            except Exception:
                log.exception("a %s listener failed", type(request).__name__)

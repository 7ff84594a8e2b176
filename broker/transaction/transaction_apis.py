"""TransactionApis: the handler table of the transaction APIs, merged into KafkaApis like
GroupApis' (translation between kio's request/response classes and the coordinator's calls).

Coordinator side: AddPartitionsToTxn (v0–3 from clients, v4 from partition leaders, verify-only
included), AddOffsetsToTxn, EndTxn, DescribeTransactions, ListTransactions; InitProducerId with a
transactional id comes here from KafkaApis. Partition side: WriteTxnMarkers and DescribeProducers.
"""

import asyncio
import datetime
import logging
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode
from kio.static.primitive import i16, i32, i32Timedelta, i64

from odradek.broker.admin_manager import AdminManager
from odradek.broker.authorizer.acl import AclOperation, ResourceType
from odradek.broker.authorizer.authorizer import ALLOW_ALL, Authorizer, authorize_cluster, authorized_names
from odradek.broker.metadata_cache import MetadataCache
from odradek.broker.replica_manager import ReplicaManager
from odradek.common.api_key import ApiKey
from odradek.common.network.request_context import Handler, RequestContext
from odradek.common.wire import NO_THROTTLE, make_entity, ms, response_module

from .marker_writer import MarkerWriter, TxnMarker
from .transaction_coordinator import TransactionCoordinator
from .transaction_state_manager import TRANSACTION_STATE_TOPIC_NAME

log = logging.getLogger(__name__)
_T = TypeVar("_T")

VERSIONS: dict[int, tuple[int, int]] = {
    ApiKey.ADD_PARTITIONS_TO_TXN: (0, 5),  # v5 adds TRANSACTION_ABORTABLE (never sent here)
    ApiKey.ADD_OFFSETS_TO_TXN: (0, 4),  # v4 adds TRANSACTION_ABORTABLE (never sent here)
    ApiKey.END_TXN: (0, 4),
    ApiKey.WRITE_TXN_MARKERS: (0, 1),  # v0 (common/legacy_schemas) is gone from Kafka 4; v2 is KIP-890's
    ApiKey.DESCRIBE_PRODUCERS: (0, 0),
    ApiKey.DESCRIBE_TRANSACTIONS: (0, 0),
    ApiKey.LIST_TRANSACTIONS: (0, 1),
}
KEY_TYPE_TRANSACTION = 1
PRODUCER_FENCED_SINCE: dict[int, int] = {
    ApiKey.ADD_PARTITIONS_TO_TXN: 2, ApiKey.ADD_OFFSETS_TO_TXN: 2, ApiKey.END_TXN: 2, ApiKey.INIT_PRODUCER_ID: 4}
"""The first version of each API whose clients know PRODUCER_FENCED (KIP-588); older ones get
INVALID_PRODUCER_EPOCH instead, as Kafka's KafkaApis answers them."""


def fenced_for_version(code: ErrorCode, api_key: int, version: int) -> ErrorCode:
    """`code`, with PRODUCER_FENCED as INVALID_PRODUCER_EPOCH for a version that predates it."""
    if code == ErrorCode.producer_fenced and version < PRODUCER_FENCED_SINCE[api_key]:
        return ErrorCode.invalid_producer_epoch
    return code


def _by_topic(pairs: Iterable[tuple[str, _T]]) -> dict[str, list[_T]]:
    out: dict[str, list[_T]] = {}
    for topic, item in pairs:
        out.setdefault(topic, []).append(item)
    return out


class TransactionApis:
    def __init__(self, coordinator: TransactionCoordinator, marker_writer: MarkerWriter, metadata_cache: MetadataCache,
                 replica_manager: ReplicaManager, offsets_partition_for: Callable[[str], int], admin: AdminManager,
                 *, authorizer: Authorizer = ALLOW_ALL):
        self.coordinator = coordinator
        self.authorizer = authorizer
        self.admin = admin
        self._creating: asyncio.Task[None] | None = None
        self.marker_writer = marker_writer
        self.metadata_cache = metadata_cache
        self.replica_manager = replica_manager
        self.offsets_partition_for = offsets_partition_for
        """group id → its `__consumer_offsets` partition (AddOffsetsToTxn adds that partition)."""
        self.versions: dict[int, tuple[int, int]] = dict(VERSIONS)
        self.handlers: dict[int, Handler] = {
            ApiKey.ADD_PARTITIONS_TO_TXN: self.handle_add_partitions_to_txn,
            ApiKey.ADD_OFFSETS_TO_TXN: self.handle_add_offsets_to_txn,
            ApiKey.END_TXN: self.handle_end_txn,
            ApiKey.WRITE_TXN_MARKERS: self.handle_write_txn_markers,
            ApiKey.DESCRIBE_PRODUCERS: self.handle_describe_producers,
            ApiKey.DESCRIBE_TRANSACTIONS: self.handle_describe_transactions,
            ApiKey.LIST_TRANSACTIONS: self.handle_list_transactions,
        }

    # --- FindCoordinator (key type 1, from GroupApis) -------------------------------------------

    def _ensure_topic(self) -> None:
        """Creates `__transaction_state` on first use (in the background; clients retry meanwhile)."""
        if self._creating is not None and not self._creating.done():
            return
        config = self.coordinator.config
        # a small cluster gets a smaller replication factor (create_internal_topic), and a min ISR
        # it can meet
        replicas = max(1, min(config.replication_factor, len(self.metadata_cache.live_brokers())))
        min_isr = max(1, min(config.min_isr, replicas))

        async def create() -> None:
            try:
                await self.admin.create_internal_topic(
                    TRANSACTION_STATE_TOPIC_NAME, config.num_partitions, config.replication_factor,
                    {"cleanup.policy": "compact", "compression.type": "producer",
                     "segment.bytes": str(config.segment_bytes), "min.insync.replicas": str(min_isr),
                     "unclean.leader.election.enable": "false"})
            except Exception:
                log.exception("creating %s failed", TRANSACTION_STATE_TOPIC_NAME)

        self._creating = asyncio.get_running_loop().create_task(create())

    def find_coordinator(self, transactional_id: str, listener: str = "PLAINTEXT") -> tuple[ErrorCode, int, str, int]:
        """The leader of the id's `__transaction_state` partition (its address on `listener`)."""
        if not transactional_id:
            return ErrorCode.invalid_request, -1, "", -1
        if not self.metadata_cache.contains(TRANSACTION_STATE_TOPIC_NAME):
            self._ensure_topic()
            return ErrorCode.coordinator_not_available, -1, "", -1
        endpoint = self.metadata_cache.leader_endpoint(TRANSACTION_STATE_TOPIC_NAME,
                                                       self.coordinator.state.partition_for(transactional_id), listener)
        if endpoint is None:
            return ErrorCode.coordinator_not_available, -1, "", -1
        node, host, port = endpoint
        return ErrorCode.none, node, host, port

    # --- InitProducerId (from KafkaApis, for a transactional id) --------------------------------

    async def init_producer_id(self, request: Any) -> tuple[ErrorCode, int, int]:
        """`request`: kio's InitProducerIdRequest of any version (its class differs per version)."""
        code, producer_id, epoch = await self.coordinator.init_producer_id(
            request.transactional_id, ms(request.transaction_timeout),
            int(getattr(request, "producer_id", -1)), int(getattr(request, "producer_epoch", -1)))
        return fenced_for_version(code, ApiKey.INIT_PRODUCER_ID, int(request.__version__)), producer_id, epoch

    # --- AddPartitionsToTxn ---------------------------------------------------------------------

    def _unknown(self, topic: str, partition: int) -> bool:
        parts = self.metadata_cache.topic_partitions(topic)
        return not parts or partition not in parts

    async def _add(self, transactional_id: str, producer_id: int, epoch: int, partitions: list[tuple[str, int]],
                   verify_only: bool) -> dict[tuple[str, int], ErrorCode]:
        """{(topic, partition): error} for one transaction of the request."""
        if verify_only:
            return self.coordinator.verify_partitions(transactional_id, producer_id, epoch, partitions)
        unknown = [p for p in partitions if self._unknown(*p)]
        if unknown:  # Kafka's answer: the unknown ones say so, the others were not attempted
            return {p: ErrorCode.unknown_topic_or_partition if p in unknown else ErrorCode.operation_not_attempted
                    for p in partitions}
        code = await self.coordinator.add_partitions(transactional_id, producer_id, epoch, partitions)
        return dict.fromkeys(partitions, code)

    async def handle_add_partitions_to_txn(self, context: RequestContext, request: Any) -> Any:
        version = context.api_version
        mod = response_module(ApiKey.ADD_PARTITIONS_TO_TXN, version)

        def topic_results(codes: dict[tuple[str, int], ErrorCode]) -> tuple[Any, ...]:
            return tuple(
                mod.AddPartitionsToTxnTopicResult(name=topic, results_by_partition=tuple(
                    mod.AddPartitionsToTxnPartitionResult(partition_index=i32(p), partition_error_code=code)
                    for p, code in items))
                for topic, items in _by_topic((t, (p, c)) for (t, p), c in codes.items()).items())

        if version <= 3:
            partitions = [(t.name, int(p)) for t in request.v3_and_below_topics for p in t.partitions]
            txn_id = request.v3_and_below_transactional_id
            unwritable = {t for t, _ in partitions} - authorized_names(
                self.authorizer, context, AclOperation.WRITE, ResourceType.TOPIC, {t for t, _ in partitions})
            if not self._may_write(context, txn_id):
                codes = dict.fromkeys(partitions, ErrorCode.transactional_id_authorization_failed)
            elif unwritable:  # Kafka: refused topics say so, unknown ones too, the rest are not attempted
                codes = {p: ErrorCode.topic_authorization_failed if p[0] in unwritable
                         else ErrorCode.unknown_topic_or_partition if self._unknown(*p)
                         else ErrorCode.operation_not_attempted for p in partitions}
            else:
                codes = await self._add(txn_id, int(request.v3_and_below_producer_id),
                                        int(request.v3_and_below_producer_epoch), partitions, False)
            codes = {k: fenced_for_version(c, ApiKey.ADD_PARTITIONS_TO_TXN, version) for k, c in codes.items()}
            return mod.AddPartitionsToTxnResponse(throttle_time=NO_THROTTLE, results_by_topic_v3_and_below=topic_results(codes))
        if not authorize_cluster(self.authorizer, context, AclOperation.CLUSTER_ACTION):  # v4: brokers only
            return mod.AddPartitionsToTxnResponse(throttle_time=NO_THROTTLE,
                                                  error_code=ErrorCode.cluster_authorization_failed,
                                                  results_by_transaction=())
        results = []
        for txn in request.transactions:
            partitions = [(t.name, int(p)) for t in txn.topics for p in t.partitions]
            codes = await self._add(txn.transactional_id, int(txn.producer_id), int(txn.producer_epoch), partitions,
                                    bool(txn.verify_only))
            results.append(mod.AddPartitionsToTxnResult(transactional_id=txn.transactional_id,
                                                        topic_results=topic_results(codes)))
        return mod.AddPartitionsToTxnResponse(throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
                                              results_by_transaction=tuple(results))

    async def handle_add_offsets_to_txn(self, context: RequestContext, request: Any) -> Any:
        mod = response_module(ApiKey.ADD_OFFSETS_TO_TXN, context.api_version)
        if not self._may_write(context, request.transactional_id):
            code = ErrorCode.transactional_id_authorization_failed
        elif not self.authorizer.authorize(context, AclOperation.READ, ResourceType.GROUP, request.group_id or ""):
            code = ErrorCode.group_authorization_failed
        elif not request.group_id:
            code = ErrorCode.invalid_group_id
        else:
            from odradek.broker.group.offsets_topic import GROUP_METADATA_TOPIC_NAME

            partition = (GROUP_METADATA_TOPIC_NAME, self.offsets_partition_for(request.group_id))
            code = await self.coordinator.add_partitions(request.transactional_id, int(request.producer_id),
                                                         int(request.producer_epoch), [partition])
        return mod.AddOffsetsToTxnResponse(throttle_time=NO_THROTTLE, error_code=fenced_for_version(
            code, ApiKey.ADD_OFFSETS_TO_TXN, context.api_version))

    async def handle_end_txn(self, context: RequestContext, request: Any) -> Any:
        mod = response_module(ApiKey.END_TXN, context.api_version)
        if not self._may_write(context, request.transactional_id):
            return make_entity(mod.EndTxnResponse, throttle_time=NO_THROTTLE,
                               error_code=ErrorCode.transactional_id_authorization_failed)
        code = await self.coordinator.end_transaction(request.transactional_id, int(request.producer_id),
                                                      int(request.producer_epoch), bool(request.committed))
        return make_entity(mod.EndTxnResponse, throttle_time=NO_THROTTLE,
                           error_code=fenced_for_version(code, ApiKey.END_TXN, context.api_version))

    def _may_write(self, context: RequestContext, transactional_id: str) -> bool:
        return self.authorizer.authorize(context, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id)

    # --- WriteTxnMarkers (partition leaders) ----------------------------------------------------

    async def handle_write_txn_markers(self, context: RequestContext, request: Any) -> Any:
        mod = response_module(ApiKey.WRITE_TXN_MARKERS, context.api_version)
        markers = [
            TxnMarker(int(m.producer_id), int(m.producer_epoch), int(m.coordinator_epoch), bool(m.transaction_result),
                      [(t.name, int(p)) for t in m.topics for p in t.partition_indexes])
            for m in request.markers
        ]
        outcomes = await self.marker_writer.write_all(markers)
        results = []
        for marker, codes in zip(request.markers, outcomes):
            topics = tuple(
                mod.WritableTxnMarkerTopicResult(name=t.name, partitions=tuple(
                    mod.WritableTxnMarkerPartitionResult(partition_index=i32(p), error_code=codes[(t.name, int(p))])
                    for p in t.partition_indexes))
                for t in marker.topics
            )
            results.append(mod.WritableTxnMarkerResult(producer_id=i64(marker.producer_id), topics=topics))
        return mod.WriteTxnMarkersResponse(markers=tuple(results))

    # --- tooling (KIP-664) ----------------------------------------------------------------------

    async def handle_describe_producers(self, context: RequestContext, request: Any) -> Any:
        """The producers a partition leader knows, with their open transactions."""
        mod = response_module(ApiKey.DESCRIBE_PRODUCERS, context.api_version)
        topics = []
        readable = authorized_names(self.authorizer, context, AclOperation.READ, ResourceType.TOPIC,
                                    [t.name for t in request.topics])
        for t in request.topics:
            partitions = []
            for index in t.partition_indexes:
                if t.name in readable:
                    p, error = self.replica_manager.leader_partition(t.name, int(index))
                else:
                    p, error = None, ErrorCode.topic_authorization_failed
                producers = ()
                if p is not None:
                    producers = tuple(
                        mod.ProducerState(producer_id=i64(e.producer_id), producer_epoch=i32(e.producer_epoch),
                                          last_sequence=i32(e.last_seq), last_timestamp=i64(e.last_timestamp),
                                          coordinator_epoch=i32(e.coordinator_epoch),
                                          current_txn_start_offset=i64(e.current_txn_first_offset))
                        for e in p.log.producer_state.producers.values())
                partitions.append(mod.PartitionResponse(partition_index=index, error_code=error, error_message=None,
                                                        active_producers=producers))
            topics.append(mod.TopicResponse(name=t.name, partitions=tuple(partitions)))
        return mod.DescribeProducersResponse(throttle_time=NO_THROTTLE, topics=tuple(topics))

    async def handle_describe_transactions(self, context: RequestContext, request: Any) -> Any:
        mod = response_module(ApiKey.DESCRIBE_TRANSACTIONS, context.api_version)
        out = []
        for txn_id in request.transactional_ids:
            if not self.authorizer.authorize(context, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, txn_id):
                code, m = ErrorCode.transactional_id_authorization_failed, None
            else:
                code, m = self.coordinator.describe(txn_id)
            if m is None:
                out.append(mod.TransactionState(
                    error_code=code, transactional_id=txn_id, transaction_state="",
                    transaction_timeout=_ms_delta(0), transaction_start_time=_time(-1), producer_id=i64(-1),
                    producer_epoch=i16(-1), topics=()))
                continue
            described = authorized_names(self.authorizer, context, AclOperation.DESCRIBE, ResourceType.TOPIC,
                                         {t for t, _ in m.partitions})
            topics = tuple(mod.TopicData(topic=topic, partitions=tuple(i32(p) for p in sorted(ps)))
                           for topic, ps in _by_topic(sorted(m.partitions)).items() if topic in described)
            out.append(mod.TransactionState(
                error_code=ErrorCode.none, transactional_id=txn_id, transaction_state=m.state.title,
                transaction_timeout=_ms_delta(m.txn_timeout_ms), transaction_start_time=_time(m.txn_start_timestamp),
                producer_id=i64(m.producer_id), producer_epoch=i16(max(m.producer_epoch, -1)), topics=topics))
        return mod.DescribeTransactionsResponse(throttle_time=NO_THROTTLE, transaction_states=tuple(out))

    async def handle_list_transactions(self, context: RequestContext, request: Any) -> Any:
        mod = response_module(ApiKey.LIST_TRANSACTIONS, context.api_version)
        code, found, unknown = self.coordinator.list_transactions(
            set(request.state_filters), {int(p) for p in request.producer_id_filters},
            int(getattr(request, "duration_filter", -1)))
        visible = authorized_names(self.authorizer, context, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID,
                                   [m.transactional_id for m in found])
        found = [m for m in found if m.transactional_id in visible]
        states = tuple(mod.TransactionState(transactional_id=m.transactional_id, producer_id=i64(m.producer_id),
                                            transaction_state=m.state.title) for m in found)
        return mod.ListTransactionsResponse(throttle_time=NO_THROTTLE, error_code=code,
                                            unknown_state_filters=tuple(unknown), transaction_states=states)


def _ms_delta(n: int) -> i32Timedelta:
    return i32Timedelta.parse(datetime.timedelta(milliseconds=n))


def _time(ms_since_epoch: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(ms_since_epoch / 1000, tz=datetime.UTC)

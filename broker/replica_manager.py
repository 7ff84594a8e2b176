"""ReplicaManager: the partitions this broker hosts, and the data path through them.

LeaderAndIsr and StopReplica (from the controller) decide which partitions are hosted and in which
role; Produce appends to leaders (acks=-1 waits in the produce purgatory until the high watermark
covers the batch); Fetch reads from leaders (long polls wait in the fetch purgatory until enough
data is there); ListOffsets answers from the leader's log. Every change that can complete a waiting
request (an append, a high-watermark move, a leadership change) re-checks the purgatories for that
partition, so no request waits by sleeping.
"""

import asyncio
import logging
from collections.abc import Awaitable, Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kio.schema.errors import ErrorCode
from kio.static.primitive import i32

from odradek.broker.admin_manager import INTERNAL_TOPICS
from odradek.broker.alter_partition_manager import AlterPartitionAnswer, AlterPartitionManager
from odradek.broker.delayed_operation import DelayedOperation, DelayedOperationPurgatory
from odradek.broker.fetch_session import PartitionFetch, SessionWatch, Unchanged
from odradek.broker.log import LogManager
from odradek.broker.log.checkpoint import read_offsets, write_offsets
from odradek.broker.log.errors import KafkaStorageError, LogError
from odradek.broker.log.local_log import FileRegion
from odradek.broker.log.log import Log
from odradek.broker.log.producer_state import AppendOrigin
from odradek.broker.log.record_batch import Buffer
from odradek.broker.log.transaction_index import AbortedTxn
from odradek.broker.metadata_cache import MetadataCache
from odradek.broker.metrics import BrokerTopicStats
from odradek.broker.partition import Partition, PendingIsrChange
from odradek.broker.replica_fetcher import ReplicaFetcherManager
from odradek.broker.replication_quota import ReplicationQuota, is_throttled
from odradek.broker.zk_client import BrokerZkClient
from odradek.common.clock import now_ms
from odradek.common.config import BrokerConfig
from odradek.common.log_summary import a_few
from odradek.common.messages import (
    LeaderAndIsrLiveLeader,
    LeaderAndIsrPartitionError,
    LeaderAndIsrPartitionState,
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
    StopReplicaPartitionError,
    StopReplicaRequest,
    StopReplicaResponse,
)
from odradek.common.security.channel import PLAINTEXT, ClientSecurity

log = logging.getLogger(__name__)

LATEST_TIMESTAMP, EARLIEST_TIMESTAMP, MAX_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP, LATEST_TIERED_TIMESTAMP = -1, -2, -3, -4, -5
"""ListOffsets' special timestamps: MAX_TIMESTAMP from v7 (KIP-734), the tiered-storage ones from v8/v9
(KIP-405, KIP-1005)."""
READ_UNCOMMITTED, READ_COMMITTED = 0, 1
"""Fetch and ListOffsets isolation levels."""
CONSUMER_REPLICA_ID = -1
DEBUGGING_REPLICA_ID = -2
"""ListOffsets/Fetch replica_id of tools that may read from a follower (Kafka's value)."""
HIGH_WATERMARK_CHECKPOINT = "replication-offset-checkpoint"
DELETE_TO_HIGH_WATERMARK = -1
"""DeleteRecords offset meaning "everything below the high watermark" (Kafka's HIGH_WATERMARK)."""
APPLY_SLICE_S = 0.05
"""Longest stretch of a LeaderAndIsr's partitions applied between two turns of the event loop
(checked every APPLY_CHECK partitions). A turn of the rest of the loop can take tens of
milliseconds at 18,000 partitions (follower fetches over sessions of thousands): yielding every
256 partitions made a 10,000-partition LeaderAndIsr wait 39 such turns, 3.5 s, for 0.1-0.3 s of
its own work."""
APPLY_CHECK = 64


def log_leadership_changes(leaders: list[Partition], followers: list[Partition]) -> None:
    """One INFO line for the partitions a LeaderAndIsr made us lead and one per leader we now
    follow, with counts and a few names: a controlled shutdown or a failover moves thousands at
    once, and a line each cost seconds (Kafka 1.1 cut this logging too). Per partition at DEBUG."""
    def names(ps: list[Partition]) -> str:
        return a_few(ps, lambda p: f"{p.topic}-{p.partition} at epoch {p.leader_epoch}")

    if leaders:
        log.info("now leader of %d partitions (%s)", len(leaders), names(leaders))
    by_leader: dict[int, list[Partition]] = {}
    for p in followers:
        by_leader.setdefault(p.leader_id, []).append(p)
    for leader_id, ps in sorted(by_leader.items()):
        log.info("now follower of %d for %d partitions (%s)", leader_id, len(ps), names(ps))


# --- results --------------------------------------------------------------------------------------


@dataclass
class ProduceResult:
    error: ErrorCode = ErrorCode.none
    base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    required_offset: int = -1
    """The offset the high watermark must reach before acks=-1 is satisfied."""
    pending: bool = False
    error_message: str | None = None
    record_errors: tuple[tuple[int, str], ...] = ()
    """(batch index, message) of the records that failed validation (Produce v8+)."""


@dataclass(frozen=True)
class FetchInfo:
    topic: str
    partition: int
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = -1
    log_start_offset: int = -1
    """The fetching follower's log start offset (kept in its fetch session; -1 from consumers)."""


@dataclass
class FetchResult:
    error: ErrorCode = ErrorCode.none
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    regions: list[FileRegion | bytes] = field(default_factory=list)
    """File regions to send as they are; bytes where the records were rewritten (down-converted)."""
    size: int = 0
    aborted_transactions: list[AbortedTxn] | None = None
    """read_committed: the aborted transactions overlapping what was read."""


@dataclass
class DeleteRecordsResult:
    error: ErrorCode = ErrorCode.none
    low_watermark: int = -1
    requested_offset: int = -1
    pending: bool = False
    """Waiting for every live replica's log start offset to reach `requested_offset`."""


@dataclass
class ListOffsetResult:
    error: ErrorCode = ErrorCode.none
    timestamp: int = -1
    offset: int = -1
    leader_epoch: int = -1


# --- delayed operations ---------------------------------------------------------------------------


class DelayedProduce(DelayedOperation):
    """acks=-1: completes when every appended partition's HW reaches its batch, or on timeout."""

    def __init__(self, delay_ms: float, manager: "ReplicaManager", results: dict[tuple[str, int], ProduceResult]):
        super().__init__(delay_ms)
        self.manager = manager
        self.results = results

    def try_complete(self) -> bool:
        for key, result in self.results.items():
            if not result.pending:
                continue
            partition = self.manager.get_partition(key)
            if partition is not None and partition.is_leader and partition.fenced:
                # appended, possibly replicated, not committed: possibly persisted, not refused
                result.error = ErrorCode.request_timed_out
                result.pending = False
            elif partition is None or not partition.is_leader:
                result.error = ErrorCode.not_leader_or_follower
                result.pending = False
            elif partition.log.high_watermark >= result.required_offset:
                # Kafka's checkEnoughReplicasReachOffset: replicated, but the ISR (maximal, while a
                # change is in flight) fell below min.insync.replicas meanwhile.
                if len(partition.maximal_isr) < partition.min_insync_replicas():
                    result.error = ErrorCode.not_enough_replicas_after_append
                result.pending = False
        if any(r.pending for r in self.results.values()):
            return False
        return self.force_complete()

    def on_complete(self) -> None:
        """Whatever is still pending was never replicated as asked: never answer it as success.
        Expired → REQUEST_TIMED_OUT; forced (the broker shutting down) → NOT_LEADER_OR_FOLLOWER,
        which sends the client to the new leader."""
        for result in self.results.values():
            if result.pending:
                result.error = ErrorCode.request_timed_out if self.expired else ErrorCode.not_leader_or_follower
                result.pending = False


class DelayedFetch(DelayedOperation):
    """A long poll: completes once min_bytes are readable, a partition changes role, or at max_wait."""

    def __init__(self, delay_ms: float, manager: "ReplicaManager", replica_id: int, min_bytes: int,
                 infos: Sequence[PartitionFetch],
                 isolation_level: int = READ_UNCOMMITTED):
        super().__init__(delay_ms)
        self.manager = manager
        self.replica_id = replica_id
        self.min_bytes = min_bytes
        self.infos = infos
        self.read_committed = isolation_level == READ_COMMITTED and replica_id < 0

    def try_complete(self) -> bool:
        # Checked on every append to any watched partition: a fetch session's idle partitions make
        # `infos` long, so the loop inlines leader_partition's checks.
        self.accumulated = 0
        for info in self.infos:
            if self._check(info):
                return self.force_complete()
        return False

    def try_complete_for(self, key: Hashable) -> bool:
        """Only `key` changed: with min_bytes 1 (followers, most consumers) only its partition is
        checked. A full fetch of thousands of partitions is watched under each of them, and every
        append or ISR change would otherwise re-check them all: O(partitions^2) while it waits."""
        if self.min_bytes > 1:
            return self.try_complete()  # bytes summed over every partition, as before
        if self._by_key is None:
            self._by_key = {(i.topic, i.partition): i for i in self.infos}
        info = self._by_key.get(key)
        if info is None:
            return self.try_complete()
        if not self.completed and self._check(info):
            return self.force_complete()
        return False

    _by_key: dict[Hashable, PartitionFetch] | None = None

    def partition_changed(self, info: PartitionFetch | None) -> None:
        """A long poll over a fetch session (SessionWatch) hears that one of its partitions
        changed: only that one is checked (its bytes add to what earlier ones found)."""
        if info is not None and not self.completed and self._check(info):
            self.force_complete()

    accumulated = 0
    """Bytes found readable so far (min_bytes above 1)."""

    def _check(self, info: PartitionFetch) -> bool:
        """True when `info`'s partition completes the fetch (news, an error, or enough bytes)."""
        partition = self.manager._partitions.get((info.topic, info.partition))
        if partition is None or not ((partition.is_leader and not partition.fenced)
                                     or self.replica_id == DEBUGGING_REPLICA_ID):
            return True
        plog = partition.log
        end = plog.log_end_offset if self.replica_id >= 0 else (
            plog.last_stable_offset if self.read_committed else plog.high_watermark)
        if info.fetch_offset > plog.log_end_offset or info.fetch_offset < plog.log_start_offset:
            return True
        if end <= info.fetch_offset:
            return False
        if self.min_bytes <= 1:
            return True
        try:
            data = plog.read(info.fetch_offset, info.max_bytes, max_offset=end, min_one_message=True)
        except Exception:
            return True
        self.accumulated += data.size
        return self.accumulated >= self.min_bytes


class DelayedDeleteRecords(DelayedOperation):
    """DeleteRecords: completes when every partition's low watermark (the smallest log start
    offset of its live replicas) reaches the asked offset, or at the timeout."""

    def __init__(self, delay_ms: float, manager: "ReplicaManager",
                 results: dict[tuple[str, int], DeleteRecordsResult]):
        super().__init__(delay_ms)
        self.manager = manager
        self.results = results

    def try_complete(self) -> bool:
        for key, result in self.results.items():
            if not result.pending:
                continue
            partition = self.manager.get_partition(key)
            if partition is None or not partition.is_leader or partition.fenced:
                result.error, result.pending = ErrorCode.not_leader_or_follower, False
                continue
            result.low_watermark = partition.low_watermark(self.manager.metadata_cache.is_alive)
            if result.low_watermark >= result.requested_offset:
                result.pending = False
        if any(r.pending for r in self.results.values()):
            return False
        return self.force_complete()

    def on_complete(self) -> None:
        """Expired → REQUEST_TIMED_OUT (the start moved on the leader; a replica was slow);
        forced (shutdown) → NOT_LEADER_OR_FOLLOWER."""
        for result in self.results.values():
            if result.pending:
                result.error = ErrorCode.request_timed_out if self.expired else ErrorCode.not_leader_or_follower
                result.pending = False


async def _every(stop: asyncio.Event, interval_s: float, action: Callable[[], Awaitable[None]], what: str) -> None:
    """Runs `await action()` every `interval_s` until `stop` is set; a failure is logged, not fatal."""
    while not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), interval_s)
        except TimeoutError:
            pass
        if stop.is_set():
            break
        try:
            await action()
        except Exception:
            log.exception("%s failed", what)


# --- the manager ----------------------------------------------------------------------------------


class ReplicaManager:
    def __init__(self, config: BrokerConfig, log_manager: LogManager, metadata_cache: MetadataCache,
                 zk: BrokerZkClient | None, *, clock: Callable[[], int] = now_ms,
                 leader_quota: ReplicationQuota | None = None, follower_quota: ReplicationQuota | None = None,
                 alter_partition_manager: AlterPartitionManager | None = None,
                 inter_broker_security: ClientSecurity = PLAINTEXT):
        self.config = config
        self.clock = clock
        """Wall-clock milliseconds for ISR lag, leader epochs and back-offs (injectable for tests)."""
        self.leader_quota = leader_quota
        """Bounds what throttled followers out of the ISR are served (broker/replication_quota)."""
        self.follower_quota = follower_quota
        """Bounds what this broker's fetchers take for throttled replicas."""
        self.broker_id = int(config.broker_id)
        self.log_manager = log_manager
        self.metadata_cache = metadata_cache
        self.zk = zk
        self._partitions: dict[tuple[str, int], Partition] = {}
        self.stats = BrokerTopicStats()
        self.controller_epoch = 0
        self.produce_purgatory = DelayedOperationPurgatory("Produce")
        self.fetch_purgatory = DelayedOperationPurgatory("Fetch")
        self.delete_records_purgatory = DelayedOperationPurgatory("DeleteRecords")
        self.partition_listeners: list[Callable[[tuple[str, int]], None]] = []
        """Called with a partition's key whenever something a fetch could report about it may have
        changed (records, high watermark, log start, leadership): the fetch sessions' notice."""
        self._state_change_lock = asyncio.Lock()
        self.fetcher_manager = ReplicaFetcherManager(self, config, inter_broker_security)
        self._written_hw: dict[Path, dict[tuple[str, int], int]] = {}
        self._checkpoint_lock = asyncio.Lock()
        """One HW checkpoint write at a time (they share a temp file)."""
        self.alter_partition_manager = alter_partition_manager
        """Sends ISR changes to the controller; without one ISRs never change here."""
        self.fenced = False
        """Set while the broker's ZooKeeper registration is lost (see set_fenced)."""
        self.offline_partitions: set[tuple[str, int]] = set()
        """Partitions whose log directory failed: KAFKA_STORAGE_ERROR until the broker restarts."""
        self.stopping = False
        """Set when the broker's shutdown begins: it starts no more fetchers (`add_fetchers`)."""
        self.log_dir_failure_listeners: list[Callable[[Path, list[tuple[str, int]]], None]] = []
        """Callables(log_dir, [(topic, partition)]) run after a failed directory's partitions are
        taken offline (the server tells the controller, the group coordinator resigns)."""
        if log_manager is not None:
            log_manager.log_dir_failure_listeners.append(self._on_log_dir_failure)
        try:
            self._loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            self._loop = None

    @property
    def broker_epoch(self) -> int:
        """This broker's registration epoch (czxid of `/brokers/ids/<id>`); -1 before it registers."""
        return -1 if self.zk is None else self.zk.broker_epoch

    def set_fenced(self, fenced: bool) -> None:
        """The broker lost (True) or regained (False) its ZooKeeper registration. Lost, the
        controller counts it dead and may have elected other leaders for its partitions, so until
        it has registered again it answers NOT_LEADER_OR_FOLLOWER for the partitions it leads and
        moves no high watermark; waiting acks=all produces and long polls end now."""
        if fenced == self.fenced:
            return
        self.fenced = fenced
        for p in self._partitions.values():
            p.fenced = fenced
        for key in list(self._partitions):
            self.complete_delayed_requests(key)

    def _on_log_dir_failure(self, log_dir: Path, keys: list[tuple[str, int]]) -> None:
        """The LogManager took `log_dir` offline (possibly in the middle of a request, or from a
        worker thread): handle it in its own task, between state changes."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        target = self._loop
        if target is None or target.is_closed():
            return  # not serving (start-up or shutdown): nothing to take offline
        if loop is target:
            target.create_task(self.handle_log_dir_failure(log_dir, keys))
        else:
            target.call_soon_threadsafe(lambda: target.create_task(self.handle_log_dir_failure(log_dir, keys)))

    async def handle_log_dir_failure(self, log_dir: Path, keys: list[tuple[str, int]]) -> None:
        """Kafka's handleLogDirFailure: the partitions of a failed directory stop fetching and
        serving (KAFKA_STORAGE_ERROR from now on, for LeaderAndIsr too), waiting requests on them
        end, and the listeners run (the controller, told through ZooKeeper, moves leaderships and
        takes this broker out of their ISRs)."""
        async with self._state_change_lock:
            self.remove_fetchers(keys)
            for key in keys:
                self._partitions.pop(key, None)
                self.offline_partitions.add(key)
                self.complete_delayed_requests(key)
            log.error("%d partitions offline with log directory %s: %s", len(keys), log_dir,
                      ", ".join(f"{t}-{p}" for t, p in keys[:20]) + (" ..." if len(keys) > 20 else ""))
        for listener in list(self.log_dir_failure_listeners):
            try:
                listener(log_dir, keys)
            except Exception:
                log.exception("log dir failure listener failed")

    # --- the hosted partitions -------------------------------------------------------------------

    def get_partition(self, key: tuple[str, int]) -> Partition | None:
        """The partition hosted here (leader or follower), or None (Kafka's getPartition)."""
        return self._partitions.get(key)

    def all_partitions(self) -> Iterable[Partition]:
        """Every partition hosted here (a live view: do not change the replica state meanwhile)."""
        return self._partitions.values()

    def local_log(self, key: tuple[str, int]) -> Log:
        """The log of a partition hosted here; KeyError if it is not (Kafka's localLogOrException)."""
        return self._partitions[key].log

    # --- high watermark checkpoints -------------------------------------------------------------

    def load_high_watermarks(self) -> None:
        """At start-up a log's HW is its checkpointed value (0 if none), never its log end offset:
        a record above the HW may not be on the other replicas, so it must not be served yet."""
        checkpoints = {}
        for log_dir in self.log_manager.online_dirs:
            try:
                checkpoints.update(read_offsets(log_dir / HIGH_WATERMARK_CHECKPOINT))
            except (ValueError, OSError) as e:
                log.warning("%s: unreadable %s (%s); high watermarks start at 0", log_dir, HIGH_WATERMARK_CHECKPOINT, e)
        for plog in self.log_manager.all_logs():
            plog.high_watermark = checkpoints.get((plog.topic, plog.partition), 0)

    def _high_watermarks_to_write(self, force: bool) -> dict[Path, dict[tuple[str, int], int]]:
        """{log dir: {(topic, partition): HW}} for the dirs whose HWs changed since written."""
        by_dir = {d: {k: plog.high_watermark for k, plog in logs.items()}
                  for d, logs in self.log_manager.logs_by_dir().items()}
        return {d: hws for d, hws in by_dir.items() if force or self._written_hw.get(d) != hws}

    def _write_high_watermarks(self, log_dir: Path, hws: dict[tuple[str, int], int]) -> None:
        write_offsets(log_dir / HIGH_WATERMARK_CHECKPOINT, hws)
        self._written_hw[log_dir] = hws

    async def checkpoint_high_watermarks(self, force: bool = False) -> None:
        """Writes `replication-offset-checkpoint` in every log dir whose HWs changed.

        The write and its fsyncs run in a worker thread: an fsync under a heavy write
        load can take hundreds of milliseconds, and on the event loop it stalls every request
        (Kafka checkpoints from its own scheduler thread too). The HWs are read on the loop."""
        async with self._checkpoint_lock:
            for log_dir, hws in self._high_watermarks_to_write(force).items():
                try:
                    await self.log_manager.io_threads.run(self._write_high_watermarks, log_dir, hws)
                except OSError as e:
                    log.error("cannot write %s in %s: %s", HIGH_WATERMARK_CHECKPOINT, log_dir, e)
                    self.log_manager.mark_offline(log_dir, e)

    async def run_background(self, stop: asyncio.Event) -> None:
        """HW checkpoints every replica.high.watermark.checkpoint.interval.ms, and the ISR
        expiration check every replica.lag.time.max.ms / 2 (Kafka's isr-expiration task)."""
        isr_interval = max(10, int(self.config.replica_lag_time_max_ms) // 2) / 1000
        checkpoint_interval = max(10, int(self.config.replica_high_watermark_checkpoint_interval_ms)) / 1000

        async def shrink_isr() -> None:
            self.maybe_shrink_isr()

        await asyncio.gather(_every(stop, isr_interval, shrink_isr, "ISR expiration check"),
                             _every(stop, checkpoint_interval, self.checkpoint_high_watermarks,
                                    "high watermark checkpoint"))

    # --- lookups --------------------------------------------------------------------------------

    def _unknown_partition_error(self, topic: str, partition: int) -> ErrorCode:
        """Kafka's rule: a partition the cluster knows but we don't host is 'not leader'; one
        whose log directory failed is KAFKA_STORAGE_ERROR."""
        if (topic, partition) in self.offline_partitions:
            return ErrorCode.kafka_storage_error
        state = self.metadata_cache.partition_state(topic, partition)
        if state is not None:
            return ErrorCode.not_leader_or_follower
        return ErrorCode.unknown_topic_or_partition

    def leader_partition(
        self, topic: str, partition: int, current_leader_epoch: int = -1, replica_id: int = CONSUMER_REPLICA_ID
    ) -> tuple[Partition | None, ErrorCode]:
        """The hosted partition a request may use, or why not: not hosted, not the leader (debugging
        tools may read a follower), or the request's leader epoch fenced (-1: not checked)."""
        p = self._partitions.get((topic, partition))
        if p is None:
            return None, self._unknown_partition_error(topic, partition)
        if (not p.is_leader or p.fenced) and replica_id != DEBUGGING_REPLICA_ID:
            return None, ErrorCode.not_leader_or_follower
        error = p.check_leader_epoch(current_leader_epoch)
        if error != ErrorCode.none:
            return None, error
        return p, ErrorCode.none

    def _partition_changed(self, key: tuple[str, int]) -> None:
        for listener in self.partition_listeners:
            listener(key)

    def complete_delayed_requests(self, key: tuple[str, int]) -> None:
        self._partition_changed(key)
        self.fetch_purgatory.check_and_complete(key)
        self.produce_purgatory.check_and_complete(key)
        self.delete_records_purgatory.check_and_complete(key)

    # --- controller requests --------------------------------------------------------------------

    def _fence(self, request: LeaderAndIsrRequest | StopReplicaRequest) -> ErrorCode:
        if request.controller_epoch < self.controller_epoch:
            log.warning(
                "ignoring %s from controller %d with epoch %d < %d",
                type(request).__name__, request.controller_id, request.controller_epoch, self.controller_epoch,
            )
            return ErrorCode.stale_controller_epoch
        if 0 <= request.broker_epoch < self.broker_epoch:
            log.warning(
                "ignoring %s for broker epoch %d < ours %d", type(request).__name__, request.broker_epoch, self.broker_epoch
            )
            return ErrorCode.stale_broker_epoch
        return ErrorCode.none

    async def become_leader_or_follower(self, request: LeaderAndIsrRequest) -> LeaderAndIsrResponse:
        async with self._state_change_lock:
            error = self._fence(request)
            if error != ErrorCode.none:
                return LeaderAndIsrResponse(error_code=error, partition_errors=())
            self.controller_epoch = int(request.controller_epoch)
            errors: dict[tuple[str, int], ErrorCode] = {}
            changed: list[tuple[Partition, LeaderAndIsrPartitionState]] = []

            def answer(topic: str, index: int, code: ErrorCode) -> None:
                errors[(topic, index)] = code

            unreadable = await self._read_topic_configs(request)
            for ts in request.topic_states:
                topic = ts.topic_name
                for ps in ts.partition_states:
                    index = int(ps.partition_index)
                    if self.broker_id not in ps.replicas:
                        answer(topic, index, ErrorCode.unknown_topic_or_partition)
                        continue
                    if (topic, index) in self.offline_partitions:
                        answer(topic, index, ErrorCode.kafka_storage_error)  # its log dir failed
                        continue
                    partition = self._partitions.get((topic, index))
                    if partition is not None and ps.leader_epoch <= partition.leader_epoch:
                        log.info(
                            "ignoring LeaderAndIsr for %s-%d: leader epoch %d not newer than %d",
                            topic, index, ps.leader_epoch, partition.leader_epoch,
                        )
                        answer(topic, index, ErrorCode.stale_controller_epoch)
                        continue
                    if partition is None:
                        try:
                            plog = self.log_manager.get_log(topic, index)
                            if plog is None:
                                if not ps.is_new and self.log_manager.offline_dirs:
                                    # Kafka's rule: an existing replica's log may be on the
                                    # failed directory; an empty new one would lose it.
                                    raise KafkaStorageError(
                                        f"no log for {topic}-{index} while {self.log_manager.offline_dirs} "
                                        "are offline")
                                if topic in unreadable:
                                    raise ConnectionError(f"the config of topic {topic} could not be read")
                                plog = await self.log_manager.get_or_create_log_async(
                                    topic, index, self.log_manager.log_config(topic)
                                )
                        except KafkaStorageError as e:
                            log.warning("cannot host %s-%d: %s", topic, index, e)
                            answer(topic, index, ErrorCode.kafka_storage_error)
                            continue
                        except Exception:
                            log.exception("cannot create the log of %s-%d", topic, index)
                            answer(topic, index, ErrorCode.unknown_server_error)
                            continue
                        partition = Partition(topic, index, self.broker_id, plog, fenced=self.fenced)
                        self._partitions[(topic, index)] = partition
                    changed.append((partition, ps))
                    answer(topic, index, ErrorCode.none)

            # no fetch of theirs may append once they lead
            self.remove_fetchers([p.key for p, ps in changed if ps.leader == self.broker_id and not p.is_leader])
            new_followers: list[Partition] = []
            new_leaders: list[Partition] = []
            await self._apply_leader_and_isr(changed, errors, new_leaders, new_followers)
            log_leadership_changes(new_leaders, new_followers)
            if new_followers:
                self.add_fetchers(new_followers, request.live_leaders)
            return LeaderAndIsrResponse(error_code=ErrorCode.none, partition_errors=tuple(
                LeaderAndIsrPartitionError(topic_name=t, partition_index=i32(i), error_code=code)
                for (t, i), code in errors.items()))

    async def _apply_leader_and_isr(self, changed: list[tuple[Partition, LeaderAndIsrPartitionState]],
                                    errors: dict[tuple[str, int], ErrorCode], new_leaders: list[Partition],
                                    new_followers: list[Partition]) -> None:
        """Apply each partition's new state. A new leader epoch enters the log's cache in memory,
        and appends go on at once: the checkpoint follows (leader_epoch)."""
        loop = asyncio.get_running_loop()
        due = loop.time() + APPLY_SLICE_S
        for n, (partition, ps) in enumerate(changed, 1):
            if n % APPLY_CHECK == 0 and loop.time() >= due:
                # Let the loop answer meanwhile: a peer taking over a dead broker's ~9,000
                # partitions at 18,000 applied them in one 30 s pass and answered no Metadata or
                # Fetch until done. Each partition is whole before and after its turn, as when
                # Kafka's request threads serve beside a LeaderAndIsr.
                await asyncio.sleep(0)
                due = loop.time() + APPLY_SLICE_S
            if partition.log.closed:  # its log dir failed meanwhile
                errors[partition.key] = ErrorCode.kafka_storage_error
                continue
            if ps.leader == self.broker_id:
                if partition.make_leader(ps, self.clock()):
                    new_leaders.append(partition)
                    log.debug("%s-%d: now leader at epoch %d, ISR %s", *partition.key, partition.leader_epoch,
                              partition.isr)
            else:
                partition.make_follower(ps)
                new_followers.append(partition)  # every new epoch: truncate, then fetch
                log.debug("%s-%d: now follower of %d at epoch %d", *partition.key, partition.leader_id,
                          partition.leader_epoch)
            self.complete_delayed_requests(partition.key)

    async def _read_topic_configs(self, request: LeaderAndIsrRequest) -> set[str]:
        """Read (in one go) the config of every topic of `request` whose log this broker is about
        to create, so that the new logs start with the topic's overrides. Returns the topics
        whose config could not be read: their logs are not created (never on defaults alone)."""
        lm = self.log_manager
        topics = {ts.topic_name for ts in request.topic_states
                  if any(self.broker_id in ps.replicas and lm.get_log(ts.topic_name, int(ps.partition_index)) is None
                         for ps in ts.partition_states)}
        if not topics:
            return set()
        try:
            assert self.zk is not None, "creating logs needs ZooKeeper's topic configs"
            reads = await self.zk.get_topic_configs(topics)
        except Exception:
            log.exception("cannot read the configs of topics %s", sorted(topics))
            return topics
        for topic, read in reads.items():
            lm.update_topic_config(topic, read.config, read.mzxid)
        return set()

    async def stop_replicas(self, request: StopReplicaRequest) -> StopReplicaResponse:
        async with self._state_change_lock:
            error = self._fence(request)
            if error != ErrorCode.none:
                return StopReplicaResponse(error_code=error, partition_errors=())
            self.controller_epoch = int(request.controller_epoch)
            keys = [(t.name, int(p)) for t in request.topics for p in t.partition_indexes]
            self.remove_fetchers(keys)
            errors = []
            for topic, index in keys:
                code = ErrorCode.none
                partition = self._partitions.get((topic, index))
                if request.delete_partitions:
                    self._partitions.pop((topic, index), None)
                    self.offline_partitions.discard((topic, index))  # its files stay on the failed disk
                    try:
                        if self.log_manager.get_log(topic, index) is not None:
                            self.log_manager.delete_log(topic, index)
                            log.info("%s-%d: deleted", topic, index)
                    except Exception:
                        log.exception("cannot delete the log of %s-%d", topic, index)
                        code = ErrorCode.kafka_storage_error
                elif partition is not None:
                    partition.make_offline()
                self.complete_delayed_requests((topic, index))
                errors.append(StopReplicaPartitionError(topic_name=topic, partition_index=i32(index), error_code=code))
            return StopReplicaResponse(error_code=ErrorCode.none, partition_errors=tuple(errors))

    # --- replica fetchers (issue 3) -------------------------------------------------------------

    def add_fetchers(self, partitions: list[Partition], live_leaders: Iterable[LeaderAndIsrLiveLeader]) -> None:
        """Followers (re)start fetching from their leader, found in the request's live_leaders.

        A partition without a leader (-1: its ISR is down, as while a cluster restarts) has nothing
        to fetch until the controller elects one and says so; that is normal and logged at DEBUG.
        A named leader missing from live_leaders is the controller contradicting itself: a warning.

        A stopping broker starts none: its controlled shutdown makes it follower of every partition
        it led (thousands), and those fetchers would only take the event loop from the handover
        (the first OffsetForLeaderEpoch of each, truncation) until the shutdown stops them. It is
        out of their ISRs already, so no leader waits for it; it catches up when it starts again."""
        if self.stopping:
            self.fetcher_manager.remove_fetchers([p.key for p in partitions])
            return
        endpoints = {int(b.broker_id): (b.host_name, int(b.port)) for b in live_leaders}
        targets = {}
        leaderless = []
        for p in partitions:
            endpoint = endpoints.get(p.leader_id)
            if endpoint is None:
                if p.leader_id < 0:
                    leaderless.append(p.key)
                else:
                    log.warning("%s-%d: leader %d is not among the live leaders; not fetching", *p.key, p.leader_id)
                self.fetcher_manager.remove_fetchers([p.key])
                continue
            targets[p.key] = (p.leader_id, endpoint[0], endpoint[1], p.leader_epoch)
        if leaderless:
            log.debug("%d follower partitions have no leader yet (e.g. %s-%d); not fetching them",
                      len(leaderless), *leaderless[0])
        if targets:
            self.fetcher_manager.add_fetchers(targets)

    def remove_fetchers(self, keys: Iterable[tuple[str, int]]) -> None:
        self.fetcher_manager.remove_fetchers(keys)

    # --- OffsetForLeaderEpoch -------------------------------------------------------------------

    def last_offset_for_leader_epoch(
        self, topic: str, index: int, leader_epoch: int, current_leader_epoch: int = -1
    ) -> tuple[ErrorCode, int, int]:
        """(error, epoch, end offset): where `leader_epoch` ends in the leader's log (KIP-101/279)."""
        p, error = self.leader_partition(topic, index, current_leader_epoch)
        if p is None:
            return error, -1, -1
        epoch, offset = p.log.leader_epoch_cache.end_offset_for(leader_epoch)
        return ErrorCode.none, epoch, offset

    # --- produce --------------------------------------------------------------------------------

    async def append_records(self, timeout_ms: int, required_acks: int,
                             entries: Iterable[tuple[str, int, Buffer | None]],
                             origin: AppendOrigin = AppendOrigin.CLIENT,
                             verified: dict[tuple[str, int], tuple[int, int]] | None = None
                             ) -> dict[tuple[str, int], ProduceResult]:
        """Appends `entries` [(topic, partition, records)] as leader; returns {(t, p): ProduceResult}.

        acks=-1 waits (up to timeout_ms) until the HW covers every successful append. `origin`
        COORDINATOR: transaction markers and the coordinators' own transactional writes.
        `verified` {(t, p): (producer id, last marker offset)}: partitions whose first transactional
        append the coordinator confirmed (KIP-890); a marker since then makes it INVALID_TXN_STATE.
        """
        results: dict[tuple[str, int], ProduceResult] = {}
        any_pending = False
        for topic, index, records in entries:
            key = (topic, index)
            partition, error = self.leader_partition(topic, index)
            if partition is None:
                results[key] = ProduceResult(error=error)
                continue
            if not records:
                results[key] = ProduceResult(error=ErrorCode.invalid_record)
                continue
            if verified and key in verified:
                producer_id, guard = verified[key]
                entry = partition.log.producer_state.last_entry(producer_id)
                opened = entry is not None and entry.current_txn_first_offset >= 0
                if not opened and (entry.last_marker_offset if entry is not None else -1) != guard:
                    results[key] = ProduceResult(error=ErrorCode.invalid_txn_state)
                    continue
            try:
                info = partition.append_records_to_leader(records, required_acks, origin)
            except LogError as e:
                log.debug("append to %s-%d rejected: %s", topic, index, e)
                results[key] = ProduceResult(
                    error=e.error_code, error_message=str(e),
                    record_errors=tuple(getattr(e, "record_errors", ())),  # KIP-467's per-record errors
                )
                continue
            except Exception:
                log.exception("append to %s-%d failed", topic, index)
                results[key] = ProduceResult(error=ErrorCode.unknown_server_error)
                continue
            if isinstance(info, ErrorCode):
                results[key] = ProduceResult(error=info)
                continue
            if not info.duplicate:
                self.stats.record_in(topic, info.num_records, info.valid_bytes)
            plog = partition.log
            result = ProduceResult(
                base_offset=info.first_offset,
                log_append_time=info.log_append_time,
                log_start_offset=plog.log_start_offset,
                required_offset=info.last_offset + 1,
                pending=required_acks == -1,
            )
            results[key] = result
            any_pending |= result.pending
            hw_moved = partition.maybe_increment_high_watermark()
            self._partition_changed(key)
            self.fetch_purgatory.check_and_complete(key)
            if hw_moved:
                self.produce_purgatory.check_and_complete(key)
        if any_pending:
            op = DelayedProduce(timeout_ms, self, results)
            keys = [k for k, r in results.items() if r.pending]
            if not self.produce_purgatory.try_complete_else_watch(op, keys):
                await op.wait()
        return results

    # --- fetch ----------------------------------------------------------------------------------

    def read_from_local_log(
        self, replica_id: int, fetch_max_bytes: int, infos: Sequence[PartitionFetch], unchanged: Unchanged | None = None,
        isolation_level: int = READ_UNCOMMITTED,
    ) -> list[FetchResult | None]:
        """Reads each partition in order within the byte limits (Kafka's readFromLocalLog).

        The first partition with data gets at least one whole batch even beyond the limits, so a
        consumer can always make progress; consumers read below the HW (read_committed: below the
        LSO, with the aborted transactions of what they read), followers to the LEO.
        With `unchanged(info, high_watermark, log_start_offset)` (a fetch session's), a partition
        with nothing to read that it calls unchanged gets None: there is nothing to tell.
        """
        remaining = max(0, fetch_max_bytes)
        min_one = True
        out: list[FetchResult | None] = []
        read_committed = isolation_level == READ_COMMITTED and replica_id < 0
        for info in infos:
            p, error = self.leader_partition(info.topic, info.partition, info.current_leader_epoch, replica_id)
            if unchanged is not None and p is not None and p.is_leader:
                plog = p.log
                end = plog.log_end_offset if replica_id >= 0 else (
                    plog.last_stable_offset if read_committed else plog.high_watermark)
                if info.fetch_offset == end and unchanged(info, plog.high_watermark, plog.log_start_offset):
                    out.append(None)
                    continue
            result = FetchResult(error=error)
            out.append(result)
            if p is None:
                continue
            plog = p.log
            hw = plog.high_watermark
            leo = plog.log_end_offset
            lso = plog.last_stable_offset
            result.high_watermark = hw
            result.last_stable_offset = lso
            result.log_start_offset = plog.log_start_offset
            offset = info.fetch_offset
            if offset < plog.log_start_offset or offset > leo:
                result.error = ErrorCode.offset_out_of_range
                continue
            end = leo if replica_id >= 0 else (lso if read_committed else hw)
            if offset >= end:
                continue
            quota = self.leader_quota if replica_id >= 0 and replica_id not in p.isr else None
            if quota is not None and not is_throttled(plog.config.leader_replication_throttled_replicas,
                                                      info.partition, self.broker_id):
                quota = None  # only the throttled replicas count against the quota
            if quota is not None and quota.is_exceeded():
                continue  # a moving replica waits for the next window (replication_quota)
            limit = min(max(0, info.max_bytes), remaining)
            if limit <= 0 and not min_one:
                continue
            try:
                data = plog.read(offset, limit, max_offset=None if replica_id >= 0 else end, min_one_message=min_one)
            except LogError as e:
                result.error = e.error_code
                continue
            except Exception:
                log.exception("read of %s-%d at %d failed", info.topic, info.partition, offset)
                result.error = ErrorCode.unknown_server_error
                continue
            result.regions = list(data.regions)
            result.size = data.size
            if quota is not None:
                quota.record(data.size)
            if read_committed and data.size:
                result.aborted_transactions = plog.collect_aborted_transactions(offset, end)
            if data.size:
                min_one = False
                remaining = max(0, remaining - data.size)
        return out

    async def fetch_messages(
        self, replica_id: int, max_wait_ms: int, min_bytes: int, max_bytes: int, infos: Sequence[PartitionFetch],
        unchanged: Unchanged | None = None, isolation_level: int = READ_UNCOMMITTED,
        session: SessionWatch | None = None,
    ) -> list[FetchResult | None]:
        """Reads `infos` (see read_from_local_log, also for `unchanged`), long-polling up to
        `max_wait_ms` for `min_bytes`; a follower's fetch offsets update its replica state.

        With `session` (`infos` is the part of a fetch session that may have news), the long poll
        waits on the whole session through it and then reads what it names: the results are
        those of `session.refresh()`."""
        results = self.read_from_local_log(replica_id, max_bytes, infos, unchanged, isolation_level)
        if replica_id >= 0:
            self._update_follower_fetch_state(replica_id, infos, results)
        total = sum(r.size for r in results if r is not None)
        if not (
            max_wait_ms <= 0
            or (not infos and session is None)
            or total >= min_bytes
            or any(r is not None and r.error != ErrorCode.none for r in results)
        ):
            if session is None:
                op = DelayedFetch(max_wait_ms, self, replica_id, min_bytes, infos, isolation_level)
                if not self.fetch_purgatory.try_complete_else_watch(op, [(i.topic, i.partition) for i in infos]):
                    await op.wait()
            else:
                # Nothing in `infos` completes it (just read); any partition of the session may.
                op = DelayedFetch(max_wait_ms, self, replica_id, min_bytes, (), isolation_level)
                session.watch(lambda key: op.partition_changed(session.lookup(key)))
                try:
                    # watched under its own key only, so that shutdown completes it too
                    if not self.fetch_purgatory.try_complete_else_watch(op, [op]):
                        await op.wait()
                finally:
                    session.watch(None)
                infos = session.refresh()
            results = self.read_from_local_log(replica_id, max_bytes, infos, unchanged, isolation_level)
        for info, result in zip(infos, results):
            if result is not None and result.size:
                self.stats.record_out(info.topic, result.size, replica_id >= 0)
        return results

    def _update_follower_fetch_state(
        self, replica_id: int, infos: Sequence[PartitionFetch], results: Sequence[FetchResult | None]
    ) -> None:
        now = self.clock()
        partitions = self._partitions
        p: Partition | None
        for info, result in zip(infos, results):
            if result is None:
                # caught up and nothing changed: only the time it was last seen caught up moves
                p = partitions[(info.topic, info.partition)]
                replica = p.remote_replicas.get(replica_id)
                if replica is not None and replica_id in p.isr:
                    replica.update_fetch_state(info.fetch_offset, p.log.log_end_offset, now)
                    if 0 <= info.log_start_offset != replica.log_start_offset:
                        replica.log_start_offset = info.log_start_offset
                        self.delete_records_purgatory.check_and_complete(p.key)
                    continue
            elif result.error != ErrorCode.none:
                continue
            p = partitions.get((info.topic, info.partition))
            if p is None:
                continue
            if p.update_follower_fetch_state(replica_id, info.fetch_offset, now, info.log_start_offset):
                self.complete_delayed_requests(p.key)
            else:
                self.delete_records_purgatory.check_and_complete(p.key)
            if self.alter_partition_manager is not None and replica_id not in p.isr:
                change = p.maybe_expand_isr(replica_id, now)
                if change is not None:
                    self.stats.isr_expands += 1
                    self._submit_isr_change(p, change)

    # --- ISR changes (AlterPartition) -----------------------------------------------------------

    def maybe_shrink_isr(self) -> None:
        """Propose removing lagging followers from every partition we lead."""
        if self.alter_partition_manager is None:
            return
        now = self.clock()
        lag = int(self.config.replica_lag_time_max_ms)
        for p in list(self._partitions.values()):
            if not p.is_leader:
                continue
            change = p.maybe_shrink_isr(now, lag)
            if change is not None:
                self.stats.isr_shrinks += 1
                self._submit_isr_change(p, change)

    def _submit_isr_change(self, partition: Partition, change: PendingIsrChange) -> None:
        # The maximal ISR may have grown (an expansion): HW and acks=all count it from now on.
        assert self.alter_partition_manager is not None, "callers check it is set"
        self.alter_partition_manager.submit(partition.key, change, self._on_isr_change_answer)

    def isr_change_still_wanted(self, key: tuple[str, int], change: object) -> bool:
        p = self._partitions.get(key)
        return p is not None and p.pending_isr_change is change

    def _on_isr_change_answer(self, key: tuple[str, int], change: object, answer: AlterPartitionAnswer) -> None:
        if not isinstance(change, PendingIsrChange) or not self.isr_change_still_wanted(key, change):
            return  # gone, or a LeaderAndIsr replaced the change
        p = self._partitions[key]
        p.on_alter_partition_answer(change, answer.error, answer.leader_epoch, answer.isr, answer.partition_epoch,
                                    now_ms=self.clock(), retry_after_ms=int(self.config.replica_lag_time_max_ms) // 2)
        # Committed or dropped, the maximal ISR changed: a shrink lets the HW pass a dead follower
        # (completing acks=all produces), a dropped expansion may too.
        p.maybe_increment_high_watermark()
        self.complete_delayed_requests(key)

    # --- delete records -------------------------------------------------------------------------

    async def delete_records(self, timeout_ms: int, offsets: dict[tuple[str, int], int]
                             ) -> dict[tuple[str, int], DeleteRecordsResult]:
        """Kafka's deleteRecords: move each leader's log start offset (-1: to the high watermark),
        then wait (up to timeout_ms) until every live replica's start has followed."""
        results = {key: self._delete_records_on_leader(*key, offset) for key, offset in offsets.items()}
        pending = [key for key, r in results.items() if r.pending]
        if pending:
            op = DelayedDeleteRecords(timeout_ms, self, results)
            if not self.delete_records_purgatory.try_complete_else_watch(op, pending):
                await op.wait()
        return results

    def _delete_records_on_leader(self, topic: str, index: int, offset: int) -> DeleteRecordsResult:
        if topic in INTERNAL_TOPICS:
            return DeleteRecordsResult(ErrorCode.invalid_topic_exception)
        p, error = self.leader_partition(topic, index)
        if p is None:
            return DeleteRecordsResult(error)
        plog = p.log
        if not plog.config.deletes:
            return DeleteRecordsResult(ErrorCode.policy_violation)
        requested = plog.high_watermark if offset == DELETE_TO_HIGH_WATERMARK else offset
        if requested < 0:
            return DeleteRecordsResult(ErrorCode.offset_out_of_range)
        try:
            if plog.maybe_increment_log_start_offset(requested):
                log.info("%s-%d: records below %d deleted (DeleteRecords)", topic, index, requested)
        except LogError as e:
            return DeleteRecordsResult(e.error_code)
        self.complete_delayed_requests(p.key)  # fetches waiting below the new start, and followers
        return DeleteRecordsResult(low_watermark=p.low_watermark(self.metadata_cache.is_alive),
                                   requested_offset=requested, pending=True)

    # --- list offsets ---------------------------------------------------------------------------

    def fetch_offset_for_timestamp(
        self, topic: str, index: int, timestamp: int, replica_id: int, current_leader_epoch: int = -1,
        isolation_level: int = READ_UNCOMMITTED,
    ) -> ListOffsetResult:
        p, error = self.leader_partition(topic, index, current_leader_epoch, replica_id)
        if p is None:
            return ListOffsetResult(error=error)
        plog = p.log
        # Consumers see only offsets below the high watermark (read_committed: the LSO);
        # followers and debugging tools see the whole log.
        if replica_id != CONSUMER_REPLICA_ID:
            last_fetchable = plog.log_end_offset
        elif isolation_level == READ_COMMITTED:
            last_fetchable = plog.last_stable_offset
        else:
            last_fetchable = plog.high_watermark
        found: tuple[int, ...] | None
        try:
            # No tiered storage: the local log is the whole log, and nothing is tiered (Kafka's
            # UnifiedLog answers -4 like -2, and -5 with offset -1 and epoch -1).
            if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
                return ListOffsetResult(offset=plog.log_start_offset, leader_epoch=plog.earliest_epoch())
            if timestamp == LATEST_TIMESTAMP:
                return ListOffsetResult(offset=last_fetchable, leader_epoch=p.leader_epoch)
            if timestamp == LATEST_TIERED_TIMESTAMP:
                return ListOffsetResult()
            if timestamp == MAX_TIMESTAMP:
                found = plog.fetch_offset_of_max_timestamp()
            elif timestamp < 0:
                return ListOffsetResult(error=ErrorCode.unsupported_version)
            else:
                found = plog.fetch_offset_by_timestamp(timestamp)
        except LogError as e:
            return ListOffsetResult(error=e.error_code)
        if found is None or found[0] >= last_fetchable:
            return ListOffsetResult()
        epoch = found[2] if len(found) > 2 else -1
        return ListOffsetResult(offset=int(found[0]), timestamp=int(found[1]), leader_epoch=epoch)

    def legacy_fetch_offsets_before(self, topic: str, index: int, timestamp: int, max_num_offsets: int,
                                    replica_id: int) -> tuple[ErrorCode, list[int]]:
        """ListOffsets v0 (Kafka's Partition.legacyFetchOffsetsForTimestamp): a consumer sees the
        high watermark in place of offsets past it."""
        p, error = self.leader_partition(topic, index, -1, replica_id)
        if p is None:
            return error, []
        try:
            offsets = p.log.legacy_fetch_offsets_before(timestamp, max_num_offsets, self.clock())
        except LogError as e:
            return e.error_code, []
        hw = p.log.high_watermark
        if replica_id == CONSUMER_REPLICA_ID and any(o > hw for o in offsets):
            offsets = [hw, *[o for o in offsets if o <= hw]]
        return ErrorCode.none, offsets

    # --- shutdown -------------------------------------------------------------------------------

    async def finish_handover(self) -> int:
        """The controller answered our controlled shutdown: every leadership of ours that can move
        has moved (its new leader is in ZooKeeper), and we are out of every ISR. Stop leading
        those partitions now, as the LeaderAndIsr saying so would (it comes after the answer,
        thousands of partitions long, perhaps not before we stop): a request still in flight or
        a coordinator's own write gets NOT_LEADER_OR_FOLLOWER, a write waiting for its followers
        is answered so, and nothing is appended here that the new leader would not have. A
        single-replica partition cannot move and stays. And stop fetching: no leader waits for
        us (the StopReplica saying so comes later too). Returns how many leaderships were given up."""
        await self.fetcher_manager.shutdown()
        async with self._state_change_lock:
            keys = [p.key for p in self._partitions.values() if p.is_leader and len(p.replicas) > 1]
            loop = asyncio.get_running_loop()
            due = loop.time() + APPLY_SLICE_S
            for n, key in enumerate(keys, 1):
                if n % APPLY_CHECK == 0 and loop.time() >= due:
                    await asyncio.sleep(0)
                    due = loop.time() + APPLY_SLICE_S
                partition = self._partitions.get(key)
                if partition is not None and partition.is_leader:
                    partition.make_offline()
                    self.complete_delayed_requests(key)
        return len(keys)

    async def shutdown_async(self) -> None:
        """Stop the fetchers and the purgatories, then checkpoint the HWs (logs are still open)."""
        await self.fetcher_manager.shutdown()
        self.produce_purgatory.shutdown()
        self.fetch_purgatory.shutdown()
        self.delete_records_purgatory.shutdown()
        await self.checkpoint_high_watermarks(force=True)

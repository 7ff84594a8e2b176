"""TransactionStateManager: the transactional ids this broker coordinates, kept in `__transaction_state`.

An id belongs to partition abs(javaHashCode(id)) % n of the topic, and the leader of that partition
is its coordinator; its leader epoch is the coordinator epoch markers carry. Every transit is
appended (acks=all) before it is applied; on election the partition is replayed (load), on
resignation its ids are forgotten. Like the GroupMetadataManager for `__consumer_offsets`.
"""

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from odradek.broker.group.offsets_topic import partition_for
from odradek.broker.log.record_batch import Record, build_batch, decode_records
from odradek.broker.replica_manager import ReplicaManager
from odradek.common.clock import now_ms

from . import transaction_log
from .transaction_metadata import TransactionMetadata, TransactionState, TxnTransit

log = logging.getLogger(__name__)

TRANSACTION_STATE_TOPIC_NAME = "__transaction_state"
OnLoaded = Callable[[int, int, list[TransactionMetadata]], None]
"""Called with (partition, coordinator epoch, the ids loaded) once a partition is loaded."""


@dataclass(frozen=True)
class TransactionConfig:
    """Kafka's transaction.* broker settings."""

    num_partitions: int = 50
    replication_factor: int = 3
    min_isr: int = 2
    segment_bytes: int = 104857600
    max_timeout_ms: int = 900_000
    abort_timed_out_interval_ms: int = 10_000
    id_expiration_ms: int = 7 * 24 * 3600 * 1000
    remove_expired_interval_ms: int = 3600_000
    request_timeout_ms: int = 30_000
    partition_verification: bool = True


def append_error_to_coordinator_error(code: ErrorCode) -> ErrorCode:
    """Kafka's mapping of a failed `__transaction_state` append (appendTransactionToLog)."""
    if code == ErrorCode.none:
        return code
    if code in (ErrorCode.unknown_topic_or_partition, ErrorCode.not_enough_replicas,
                ErrorCode.not_enough_replicas_after_append, ErrorCode.request_timed_out):
        return ErrorCode.coordinator_not_available
    if code in (ErrorCode.not_leader_or_follower, ErrorCode.kafka_storage_error):
        return ErrorCode.not_coordinator
    return ErrorCode.unknown_server_error


class TransactionStateManager:
    def __init__(self, replica_manager: ReplicaManager, partition_count: int | Callable[[], int],
                 config: TransactionConfig, *,
                 clock: Callable[[], int] = now_ms):
        """`partition_count`: an int, or a callable giving the topic's current partition count."""
        self.clock = clock
        """Wall-clock milliseconds for the records' timestamps (injectable for tests)."""
        self.replica_manager = replica_manager
        self._partition_count = partition_count
        self.config = config
        self.transactions: dict[str, TransactionMetadata] = {}
        self.owned: dict[int, int] = {}
        """Partitions this broker leads → the coordinator epoch (their leader epoch) it loaded them at."""
        self.loading: set[int] = set()
        self._load_tasks: dict[int, asyncio.Task[None]] = {}

    @property
    def partition_count(self) -> int:
        pc = self._partition_count
        return pc() if callable(pc) else pc

    def partition_for(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.partition_count)

    def lookup(self, transactional_id: str) -> tuple[ErrorCode, int, TransactionMetadata | None]:
        """(error, coordinator epoch, metadata or None): NOT_COORDINATOR unless this broker owns
        the id's partition, COORDINATOR_LOAD_IN_PROGRESS while it loads it."""
        p = self.partition_for(transactional_id)
        if p in self.loading:
            return ErrorCode.coordinator_load_in_progress, -1, None
        epoch = self.owned.get(p)
        if epoch is None:
            return ErrorCode.not_coordinator, -1, None
        return ErrorCode.none, epoch, self.transactions.get(transactional_id)

    def still_coordinator(self, transactional_id: str, coordinator_epoch: int) -> bool:
        return self.owned.get(self.partition_for(transactional_id)) == coordinator_epoch

    # --- storing --------------------------------------------------------------------------------

    def append(self, transactional_id: str, transit: TxnTransit, coordinator_epoch: int) -> "asyncio.Future[ErrorCode]":
        """Write `transit` (acks=all); resolves to the coordinator's error code. The write happens
        at call time (the task's first step), so transits land in call order."""
        return asyncio.ensure_future(self._append(transactional_id, transit, coordinator_epoch))

    async def _append(self, transactional_id: str, transit: TxnTransit, coordinator_epoch: int) -> ErrorCode:
        p = self.partition_for(transactional_id)
        record_value = None if transit.state == TransactionState.DEAD else transaction_log.value(transit)
        batch = build_batch([(transaction_log.key(transactional_id), record_value)], base_timestamp=self.clock())
        try:
            results = await self.replica_manager.append_records(
                self.config.request_timeout_ms, -1, [(TRANSACTION_STATE_TOPIC_NAME, p, batch)])
            code = append_error_to_coordinator_error(results[(TRANSACTION_STATE_TOPIC_NAME, p)].error)
        except Exception:
            log.exception("append to %s-%d failed", TRANSACTION_STATE_TOPIC_NAME, p)
            code = ErrorCode.unknown_server_error
        if code == ErrorCode.none and self.owned.get(p) != coordinator_epoch:
            code = ErrorCode.not_coordinator  # written, but we lost the partition meanwhile
        return code

    # --- loading --------------------------------------------------------------------------------

    def _load(self, partition: int) -> dict[str, TransactionMetadata]:
        loaded: dict[str, TransactionMetadata] = {}
        for info, batch in self.replica_manager.local_log((TRANSACTION_STATE_TOPIC_NAME, partition)).scan_batches():
            if not info.is_control:
                for rec in decode_records(batch):
                    self._replay(partition, loaded, rec)
        return loaded

    @staticmethod
    def _replay(partition: int, loaded: dict[str, TransactionMetadata], rec: Record) -> None:
        if rec.key is None:
            return
        try:
            txn_id = transaction_log.decode_key(rec.key)
            if txn_id is None:
                return
            if rec.value is None:
                loaded.pop(txn_id, None)
                return
            loaded[txn_id] = TransactionMetadata.from_transit(txn_id, transaction_log.decode_value(rec.value))
        except ValueError as e:
            log.warning("%s-%d: skipping the record at offset %d: %s", TRANSACTION_STATE_TOPIC_NAME, partition,
                        rec.offset, e)

    def on_election(self, partition: int, epoch: int, on_loaded: OnLoaded) -> None:
        """Becomes coordinator of `partition`'s ids: loads them (COORDINATOR_LOAD_IN_PROGRESS
        meanwhile), then `on_loaded(partition, epoch, transactions)`."""
        if self.owned.get(partition) == epoch:
            return
        self.on_resignation(partition)
        self.loading.add(partition)

        async def load() -> None:
            try:
                await asyncio.sleep(0)
                started = self.clock()
                loaded = self._load(partition)
                self.transactions.update(loaded)
                self.owned[partition] = epoch
                log.info("loaded %d transactional ids of %s-%d (coordinator epoch %d) in %.0f ms", len(loaded),
                         TRANSACTION_STATE_TOPIC_NAME, partition, epoch, self.clock() - started)
                on_loaded(partition, epoch, list(loaded.values()))
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("loading %s-%d failed", TRANSACTION_STATE_TOPIC_NAME, partition)
            finally:
                self.loading.discard(partition)
                self._load_tasks.pop(partition, None)

        self._load_tasks[partition] = asyncio.get_running_loop().create_task(load())

    def on_resignation(self, partition: int) -> None:
        task = self._load_tasks.pop(partition, None)
        if task is not None:
            task.cancel()
        self.loading.discard(partition)
        self.owned.pop(partition, None)
        for txn_id in [t for t in self.transactions if self.partition_for(t) == partition]:
            del self.transactions[txn_id]

    def owned_transactions(self) -> list[tuple[TransactionMetadata, int]]:
        """(metadata, coordinator epoch) of every loaded id."""
        out = []
        for txn_id, metadata in self.transactions.items():
            epoch = self.owned.get(self.partition_for(txn_id))
            if epoch is not None:
                out.append((metadata, epoch))
        return out

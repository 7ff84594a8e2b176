"""Producer state of one partition (Kafka's ProducerStateManager): per producer id, its epoch and
the metadata of its last 5 batches, so the leader can answer a retried batch with the offsets it
got the first time and refuse a batch that skips sequences.

The core is pure: `ProducerStateManager.prepare` checks batch headers against the current state
without changing it (a produce request is all or nothing), `update` applies what an append wrote.
Leaders validate (origin CLIENT); followers and log loading only replay headers (origin
REPLICATION), so a new leader knows what the old one acknowledged. Snapshot files
(`<offset>.snapshot`, what the state was with every batch below `offset` applied) spare a full log
scan at load; the functions at the bottom are the only I/O here.

Transactions: a producer's first transactional batch opens its transaction here, a marker
(COMMIT/ABORT control batch) closes it; the open ones and the completed ones the high watermark
has not passed yet give the first unstable offset, which bounds the last stable offset (LSO).
"""

import enum
import logging
import os
import struct
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from crc32c import crc32c
from kio.schema.errors import ErrorCode

from .control_batch import Marker
from .errors import InvalidRecordError, LogError

log = logging.getLogger(__name__)


class OutOfOrderSequenceError(LogError):
    """A batch whose sequence does not follow the producer's last one (a gap: something was lost)."""

    error_code = ErrorCode.out_of_order_sequence_number


class InvalidProducerEpochError(LogError):
    """A batch from an older epoch of the producer (Kafka 2.7+ answers produce with this code,
    not PRODUCER_FENCED, so the client may abort and retry)."""

    error_code = ErrorCode.invalid_producer_epoch


class InvalidTxnStateError(LogError):
    """A plain batch from a producer whose transaction is open (Kafka's check)."""

    error_code = ErrorCode.invalid_txn_state


class TransactionCoordinatorFencedError(LogError):
    """A marker from a coordinator older than the one that last wrote for this producer."""

    error_code = ErrorCode.transaction_coordinator_fenced

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NUM_BATCHES_TO_RETAIN = 5
"""Kafka's ProducerStateEntry.NumBatchesToRetain: a client has at most 5 requests in flight."""
MAX_SEQUENCE = 2**31 - 1
SNAPSHOT_SUFFIX = ".snapshot"


class AppendOrigin(enum.Enum):
    CLIENT = "client"
    """A produce request at the leader: sequences and epochs are checked."""
    COORDINATOR = "coordinator"
    """A transaction marker or a group coordinator's transactional offset commit: epochs are
    checked, sequences are not (Kafka's AppendOrigin.COORDINATOR)."""
    REPLICATION = "replication"
    """A follower append or a log load: the log is the truth, headers are replayed."""


def increment_sequence(sequence: int, increment: int) -> int:
    """`sequence + increment`, wrapping past 2^31-1 to 0 (DefaultRecordBatch.incrementSequence)."""
    if sequence > MAX_SEQUENCE - increment:
        return increment - (MAX_SEQUENCE - sequence) - 1
    return sequence + increment


def decrement_sequence(sequence: int, decrement: int) -> int:
    if sequence < decrement:
        return MAX_SEQUENCE - (decrement - sequence) + 1
    return sequence - decrement


def in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == MAX_SEQUENCE)


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    """What a retried duplicate is answered with."""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


class BatchRow(NamedTuple):
    """One producer batch of an append or a replay, as its header (and marker) tell it."""

    producer_id: int
    epoch: int
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int
    transactional: bool = False
    marker: Marker | None = None
    """A control batch's COMMIT/ABORT (then the other fields but epoch and offsets are unused)."""


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction a marker ended: [first_offset, last_offset], last_offset = the marker's."""

    producer_id: int
    first_offset: int
    last_offset: int
    aborted: bool


@dataclass(slots=True)
class ProducerStateEntry:
    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN))
    last_timestamp: int = -1
    """The newest batch's max timestamp: what producer.id.expiration.ms is measured from (Kafka's)."""
    current_txn_first_offset: int = -1
    """The first offset of the producer's open transaction here, -1 when none is open."""
    coordinator_epoch: int = -1
    """The epoch of the coordinator that wrote the producer's last marker (older ones are fenced)."""
    last_marker_offset: int = -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    def copy(self) -> "ProducerStateEntry":
        return ProducerStateEntry(self.producer_id, self.producer_epoch,
                                  deque(self.batches, maxlen=NUM_BATCHES_TO_RETAIN), self.last_timestamp,
                                  self.current_txn_first_offset, self.coordinator_epoch, self.last_marker_offset)

    def update_epoch(self, epoch: int) -> None:
        """A newer epoch forgets the older epoch's batches (Kafka's maybeUpdateProducerEpoch)."""
        if epoch != self.producer_epoch:
            self.batches.clear()
            self.producer_epoch = epoch

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        if epoch != self.producer_epoch:
            return None
        for meta in self.batches:
            if meta.first_seq == first_seq and meta.last_seq == last_seq:
                return meta
        return None

    def add_batch(self, epoch: int, meta: BatchMetadata) -> None:
        """A new epoch forgets the old epoch's batches (they can never be duplicates again)."""
        if epoch != self.producer_epoch:
            self.batches.clear()
            self.producer_epoch = epoch
        self.batches.append(meta)
        self.last_timestamp = meta.timestamp


ProducerRow = BatchRow | tuple[int, int, int, int, int, int, int]
"""A BatchRow, or the first seven fields of one (producer id, epoch, first sequence, last sequence,
first offset, last offset, max timestamp) for a plain batch."""


class BatchAppend(NamedTuple):
    """One batch of an append, to apply with `update` once it is written."""

    producer_id: int
    epoch: int
    meta: BatchMetadata
    transactional: bool = False
    marker: Marker | None = None


class ProducerStateManager:
    """Every producer's state in one partition, as of `map_end_offset` (the next offset to apply),
    and the transactions that keep the last stable offset (LSO) down: those still open, and those
    whose marker the high watermark has not passed yet (Kafka's ongoingTxns and unreplicatedTxns)."""

    def __init__(self, map_end_offset: int = 0):
        self.producers: dict[int, ProducerStateEntry] = {}
        self.map_end_offset = map_end_offset
        self.ongoing: dict[int, int] = {}
        """producer id → first offset of its open transaction."""
        self.unreplicated: list[CompletedTxn] = []
        """Completed transactions, in marker order, until the high watermark passes their marker."""

    def __len__(self) -> int:
        return len(self.producers)

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self.producers.get(producer_id)

    def prepare(self, batches: Sequence[ProducerRow], origin: AppendOrigin) -> BatchMetadata | list[BatchAppend]:
        """Check `batches` (BatchRow or tuples of its fields) in log order. Returns the first
        duplicate's metadata (Kafka then appends nothing and answers with it) or the updates to
        apply once the append is written.

        Raises OutOfOrderSequenceError / InvalidProducerEpochError / InvalidTxnStateError /
        TransactionCoordinatorFencedError; changes nothing itself.
        """
        updated: dict[int, ProducerStateEntry] = {}
        appends: list[BatchAppend] = []
        client = origin is AppendOrigin.CLIENT
        check = origin is not AppendOrigin.REPLICATION
        for row in batches:
            row = row if isinstance(row, BatchRow) else BatchRow(*row)
            producer_id, epoch, first_seq = row.producer_id, row.epoch, row.first_seq
            if producer_id < 0:
                continue
            current = self.producers.get(producer_id)
            if client and current is not None and row.marker is None:
                duplicate = current.find_duplicate(epoch, first_seq, row.last_seq)
                if duplicate is not None:
                    return duplicate
            entry = updated.get(producer_id)
            if entry is None:
                entry = current.copy() if current is not None else ProducerStateEntry(producer_id)
                updated[producer_id] = entry
            if row.marker is not None:
                if check:
                    self._check_marker(entry, epoch, row.marker)
            elif client:
                if first_seq < 0:
                    raise InvalidRecordError(f"producer {producer_id} sent a batch without a base sequence")
                self._check(entry, current, epoch, first_seq)
            elif check and epoch < entry.producer_epoch:
                raise InvalidProducerEpochError(
                    f"producer {producer_id}: epoch {epoch} is older than the current {entry.producer_epoch}")
            if check and row.marker is None and not row.transactional and entry.current_txn_first_offset >= 0:
                raise InvalidTxnStateError(
                    f"producer {producer_id}: a non-transactional batch while its transaction is open")
            meta = BatchMetadata(first_seq, row.last_seq, row.first_offset, row.last_offset, row.timestamp)
            append = BatchAppend(producer_id, epoch, meta, row.transactional, row.marker)
            _apply_to_entry(entry, append)
            appends.append(append)
        return appends

    @staticmethod
    def _check(entry: ProducerStateEntry, current: ProducerStateEntry | None, epoch: int, first_seq: int) -> None:
        """Kafka 3.x's checkProducerEpoch + checkSequence (after KIP-360): `entry` already holds
        the earlier batches of this request, `current` is the state before it."""
        if epoch < entry.producer_epoch:
            raise InvalidProducerEpochError(
                f"producer {entry.producer_id}: epoch {epoch} is older than the current {entry.producer_epoch}"
            )
        if epoch != entry.producer_epoch:
            # A new epoch restarts at 0, unless we know no epoch at all (state expired or deleted).
            if first_seq != 0 and entry.producer_epoch != NO_PRODUCER_EPOCH:
                raise OutOfOrderSequenceError(
                    f"producer {entry.producer_id}: new epoch {epoch} must start at sequence 0, not {first_seq}"
                )
            return
        known_epoch = current.producer_epoch if current is not None else NO_PRODUCER_EPOCH
        if known_epoch == NO_PRODUCER_EPOCH:
            return  # no state for this producer: any sequence is accepted (KIP-360)
        if not in_sequence(entry.last_seq, first_seq):
            raise OutOfOrderSequenceError(
                f"producer {entry.producer_id}: sequence {first_seq} does not follow {entry.last_seq}"
            )

    @staticmethod
    def _check_marker(entry: ProducerStateEntry, epoch: int, marker: Marker) -> None:
        """Kafka's appendEndTxnMarker checks: a marker of an older producer epoch or from an older
        coordinator must never end a newer transaction."""
        if epoch < entry.producer_epoch:
            raise InvalidProducerEpochError(
                f"producer {entry.producer_id}: marker epoch {epoch} is older than the current {entry.producer_epoch}")
        if marker.coordinator_epoch < entry.coordinator_epoch:
            raise TransactionCoordinatorFencedError(
                f"producer {entry.producer_id}: marker from coordinator epoch {marker.coordinator_epoch}, "
                f"older than {entry.coordinator_epoch}")

    def update(self, appends: list[BatchAppend], map_end_offset: int) -> list[CompletedTxn]:
        """Apply what an append wrote (from `prepare`); the state now covers offsets below
        `map_end_offset`. Returns the transactions its markers completed (the Log indexes aborts)."""
        completed = []
        for append in appends:
            producer_id = append.producer_id
            entry = self.producers.get(producer_id)
            if entry is None:
                entry = self.producers[producer_id] = ProducerStateEntry(producer_id)
            elif append.epoch < entry.producer_epoch:  # only replays get here: the log is the truth
                log.warning("producer %d: epoch %d in the log after epoch %d", producer_id, append.epoch,
                            entry.producer_epoch)
            first_before = entry.current_txn_first_offset
            _apply_to_entry(entry, append)
            if append.marker is not None:
                first = first_before if first_before >= 0 else append.meta.first_offset
                self.ongoing.pop(producer_id, None)
                txn = CompletedTxn(producer_id, first, append.meta.last_offset, not append.marker.commit)
                self.unreplicated.append(txn)
                completed.append(txn)
            elif first_before < 0 <= entry.current_txn_first_offset:
                self.ongoing[producer_id] = entry.current_txn_first_offset
        self.map_end_offset = max(self.map_end_offset, map_end_offset)
        return completed

    def replay(self, batches: Sequence[ProducerRow], map_end_offset: int) -> list[CompletedTxn]:
        """Replay headers from the log (a follower append, a load): never refuses anything, so
        the rows go straight into the entries (no checked copy as `prepare` makes)."""
        appends = []
        for row in batches:
            row = row if isinstance(row, BatchRow) else BatchRow(*row)
            if row.producer_id >= 0:
                appends.append(BatchAppend(row.producer_id, row.epoch, BatchMetadata(
                    row.first_seq, row.last_seq, row.first_offset, row.last_offset, row.timestamp),
                    row.transactional, row.marker))
        return self.update(appends, map_end_offset)

    # --- transactions and the last stable offset ----------------------------------------------

    def first_unstable_offset(self, high_watermark: int) -> int | None:
        """The first offset a read_committed reader may not see yet: the start of the oldest open
        transaction, or of a completed one whose marker is not below the high watermark."""
        unreplicated = self.unreplicated
        while unreplicated and unreplicated[0].last_offset < high_watermark:
            unreplicated.pop(0)
        first = min(self.ongoing.values(), default=None)
        for txn in unreplicated:
            if first is None or txn.first_offset < first:
                first = txn.first_offset
        return first

    def last_stable_offset_after(self, completed: CompletedTxn) -> int:
        """The LSO an abort leaves behind (stored with it in the transaction index; Kafka's
        lastStableOffset(completedTxn)): the oldest other open transaction, else past the marker."""
        others = [first for pid, first in self.ongoing.items() if pid != completed.producer_id]
        return min(others) if others else completed.last_offset + 1

    def open_transactions(self) -> dict[int, int]:
        return dict(self.ongoing)

    def remove_expired_producers(self, now_ms: int, expiration_ms: int) -> list[int]:
        """Forget producers whose newest batch is `expiration_ms` old (producer.id.expiration.ms);
        never one with an open transaction (Kafka's isProducerExpired)."""
        expired = [pid for pid, e in self.producers.items()
                   if now_ms - e.last_timestamp >= expiration_ms and e.current_txn_first_offset < 0]
        for pid in expired:
            del self.producers[pid]
        return expired

    def covers_up_to(self, offset: int) -> bool:
        """True if no producer has a batch or marker at or above `offset`: truncating there changes nothing."""
        return all(e.last_offset < offset and e.last_marker_offset < offset for e in self.producers.values())

    # --- snapshots (Kafka's file layout in spirit: a versioned, CRC-checked body) ---------------

    def to_bytes(self) -> bytes:
        body = bytearray(_SNAP_HEAD.pack(_SNAP_VERSION, self.map_end_offset, len(self.producers)))
        for e in self.producers.values():
            body += _SNAP_PRODUCER.pack(e.producer_id, e.producer_epoch, e.last_timestamp, len(e.batches),
                                        e.current_txn_first_offset, e.coordinator_epoch, e.last_marker_offset)
            for m in e.batches:
                body += _SNAP_BATCH.pack(m.first_seq, m.last_seq, m.first_offset, m.last_offset, m.timestamp)
        return _U32.pack(crc32c(body)) + bytes(body)

    @classmethod
    def from_bytes(cls, data: bytes) -> "ProducerStateManager":
        """ValueError for a torn or foreign file. Open transactions come back with their
        producers; completed ones are taken as replicated (a snapshot is below the HW's past)."""
        try:
            (crc,) = _U32.unpack_from(data, 0)
            body = memoryview(data)[4:]
            if crc32c(body) != crc:
                raise ValueError("snapshot fails its CRC32C")
            version, map_end_offset, count = _SNAP_HEAD.unpack_from(body, 0)
            if version != _SNAP_VERSION:
                raise ValueError(f"snapshot version {version} is not {_SNAP_VERSION}")
            pos = _SNAP_HEAD.size
            state = cls(map_end_offset)
            for _ in range(count):
                pid, epoch, last_ts, n, txn_first, coordinator_epoch, marker_offset = (
                    _SNAP_PRODUCER.unpack_from(body, pos))
                pos += _SNAP_PRODUCER.size
                entry = ProducerStateEntry(pid, epoch, last_timestamp=last_ts, current_txn_first_offset=txn_first,
                                           coordinator_epoch=coordinator_epoch, last_marker_offset=marker_offset)
                for _ in range(n):
                    entry.batches.append(BatchMetadata(*_SNAP_BATCH.unpack_from(body, pos)))
                    pos += _SNAP_BATCH.size
                state.producers[pid] = entry
                if txn_first >= 0:
                    state.ongoing[pid] = txn_first
            if pos != len(body):
                raise ValueError("snapshot has trailing bytes")
            return state
        except struct.error as exc:
            raise ValueError(f"snapshot is truncated: {exc}") from None


def _apply_to_entry(entry: ProducerStateEntry, append: BatchAppend) -> None:
    """One batch's effect on its producer's entry (Kafka's appendDataBatch / appendEndTxnMarker)."""
    meta = append.meta
    if append.marker is not None:
        entry.update_epoch(append.epoch)
        entry.coordinator_epoch = append.marker.coordinator_epoch
        entry.current_txn_first_offset = -1
        entry.last_marker_offset = meta.last_offset
        entry.last_timestamp = meta.timestamp
        return
    entry.add_batch(append.epoch, meta)
    if append.transactional and entry.current_txn_first_offset < 0:
        entry.current_txn_first_offset = meta.first_offset


_U32 = struct.Struct(">I")
_SNAP_VERSION = 2
_SNAP_HEAD = struct.Struct(">hqi")  # version, map end offset, producer count
_SNAP_PRODUCER = struct.Struct(">qhqiqiq")
"""producer id, epoch, last timestamp, batch count, open transaction's first offset, coordinator
epoch, last marker offset"""
_SNAP_BATCH = struct.Struct(">iiqqq")  # first/last sequence, first/last offset, timestamp


# --- snapshot files (the I/O shell) ---------------------------------------------------------------


def snapshot_path(directory: Path, offset: int) -> Path:
    return directory / f"{offset:020d}{SNAPSHOT_SUFFIX}"


def list_snapshots(directory: Path) -> list[tuple[int, Path]]:
    """(offset, path) of every snapshot file, oldest first."""
    out = []
    for name in os.listdir(directory):  # names, not Paths: a close lists every log's directory
        if name.endswith(SNAPSHOT_SUFFIX) and name[: -len(SNAPSHOT_SUFFIX)].isdigit():
            out.append((int(name[: -len(SNAPSHOT_SUFFIX)]), directory / name))
    return sorted(out)


def write_snapshot(directory: Path, state: ProducerStateManager, fsync: bool = False) -> Path:
    """Write `<map_end_offset>.snapshot` through a temp file and a rename (a torn write fails the CRC)."""
    path = snapshot_path(directory, state.map_end_offset)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(state.to_bytes())
        if fsync:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, path)
    return path


def load_latest_snapshot(directory: Path, low: int, high: int,
                         listed: list[tuple[int, Path]] | None = None) -> ProducerStateManager | None:
    """The newest readable snapshot with an offset in [low, high]; unreadable ones are deleted.
    `listed`: the snapshots as `list_snapshots` finds them, when the caller has listed them."""
    for offset, path in reversed(list_snapshots(directory) if listed is None else listed):
        if not low <= offset <= high:
            continue
        try:
            state = ProducerStateManager.from_bytes(path.read_bytes())
            if state.map_end_offset != offset:
                raise ValueError(f"holds offset {state.map_end_offset}")
            return state
        except (OSError, ValueError) as exc:
            log.warning("%s: unreadable producer snapshot (%s); deleting it", path, exc)
            path.unlink(missing_ok=True)
    return None


def delete_snapshots(directory: Path, *, below: int | None = None, above: int | None = None,
                     listed: list[tuple[int, Path]] | None = None) -> None:
    """Remove snapshots with offset < `below` or > `above` (`listed` as for `load_latest_snapshot`)."""
    for offset, path in list_snapshots(directory) if listed is None else listed:
        if (below is not None and offset < below) or (above is not None and offset > above):
            path.unlink(missing_ok=True)


def delete_snapshots_within(directory: Path, low: int, high: int) -> None:
    """Remove snapshots with `low` < offset < `high`: those of segments merged into the one at
    `low` (Kafka deletes a segment's snapshot with the segment), so that a compacted log, whose
    start never moves, keeps no more snapshots than segments."""
    for offset, path in list_snapshots(directory):
        if low < offset < high:
            path.unlink(missing_ok=True)

"""The log cleaner's pure core (Kafka's Cleaner, LogCleanerManager and CleanedTransactionMetadata):
which log to clean, which part of it, and what each batch and record of it becomes.

Nothing here does I/O: the functions take segment statistics, batch bytes and plain data, and
return decisions or bytes; `cleaner_worker` reads and writes the files, `log_cleaner` schedules.

Kafka's rules, as of its ZooKeeper era (2.x, no KIP-534 delete horizon in batch headers):

- Only compacted logs are cleaned, only below the first uncleanable offset: the active segment's
  base, the last stable offset (never an open or unreplicated transaction), and the first segment
  younger than min.compaction.lag.ms. A log is cleaned when its dirty share exceeds
  min.cleanable.dirty.ratio, or when max.compaction.lag.ms has passed for its first dirty segment.
- The offset map holds the last offset of every key in the dirty section (aborted transactions and
  control batches left out), bounded by log.cleaner.dedupe.buffer.size at 24 bytes an entry (a
  16-byte hash and an offset, as Kafka's SkimpyOffsetMap).
- A record survives when no later record of its key is in the map, it has a key, and it is not a
  tombstone past the delete horizon. Aborted transactions' batches go; a COMMIT marker goes once
  its transaction's batches are gone, an ABORT marker once the batches it aborted are gone, both
  only past the delete horizon. The last data batch of each producer stays (emptied if all its
  records go), so its sequence and epoch survive for idempotence.
- Offsets, timestamps, headers and lastOffsetDelta are kept: a compacted batch may hold fewer
  records than its offset range, and compressed batches are rewritten with their codec.

Three things Kafka does not do, for speed: the per-record loops are in C (_cleaner.c); the map
keeps a bitmap of the offsets it holds, so that a dirty batch none of whose records survives is
dropped, and one whose records all do is copied, without reading its records a second time; and
segments are grouped by what was written of the group so far (joins_group), so a log mostly
removed becomes a few segments rather than as many small ones as it had.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from crc32c import crc32c

from ._cleaner import count_latest, filter_records, map_keys
from .compression import compress, decompress
from .control_batch import read_marker
from .errors import CorruptRecordError
from .record_batch import (
    _I32,
    _U32,
    ATTRIBUTES_POS,
    COMPRESSION_MASK,
    CRC_POS,
    HEADER_SIZE,
    LENGTH_POS,
    LOG_OVERHEAD,
    BatchInfo,
    Buffer,
)
from .transaction_index import AbortedTxn

ENTRY_BYTES = 24
"""What Kafka's offset map spends per key: an MD5 hash (16 bytes) and an offset (8)."""
LATEST_MAX_BYTES = 32 << 20
"""The most an offset map spends on its bitmap of surviving offsets (one bit per offset of the
dirty section: 268 million offsets); a dirtier section is cleaned without it."""
LOAD_FACTOR = 0.9
"""log.cleaner.io.buffer.load.factor's default."""
MAX_RELATIVE_OFFSET = 2**31 - 1
_COUNT_POS = 57


# --- which log, which range ------------------------------------------------------------------


class SegmentStats(NamedTuple):
    """What the cleaner needs to know of one segment without reading it."""

    base_offset: int
    next_offset: int
    """The next segment's base (the log end offset for the active one)."""
    size: int
    largest_timestamp: int
    first_batch_timestamp: int
    """-1 when the segment is empty."""
    last_modified_ms: int


@dataclass(frozen=True)
class LogToClean:
    """One compacted log as the cleaner manager sees it (Kafka's LogToClean)."""

    key: tuple[str, int]
    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    cleanable_bytes: int
    needs_compaction_now: bool
    """max.compaction.lag.ms has passed for the first dirty segment: clean whatever the ratio."""

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def cleanable_ratio(self) -> float:
        return self.cleanable_bytes / self.total_bytes if self.total_bytes else 0.0


def first_dirty_offset(checkpoint: int | None, log_start_offset: int, log_end_offset: int) -> int:
    """Where the dirty section starts: the checkpoint, unless the log no longer holds it (Kafka
    resets a checkpoint below the log start or above the end to the log start)."""
    if checkpoint is None or checkpoint < log_start_offset or checkpoint > log_end_offset:
        return log_start_offset
    return checkpoint


def cleanable_offsets(segments: Sequence[SegmentStats], first_dirty: int, last_stable_offset: int, now: int,
                      min_compaction_lag_ms: int) -> int:
    """The first uncleanable offset (Kafka's cleanableOffsets), rounded down to a segment base: the
    cleaner rewrites whole segments only, all of them below the active segment, the last stable
    offset and the first dirty segment younger than min.compaction.lag.ms."""
    if not segments:
        return first_dirty
    bound = min(segments[-1].base_offset, last_stable_offset)
    if min_compaction_lag_ms > 0:
        for seg in segments:
            if seg.next_offset > first_dirty and seg.largest_timestamp > now - min_compaction_lag_ms:
                bound = min(bound, seg.base_offset)
                break
    uncleanable = first_dirty
    for seg in segments[:-1]:
        if seg.next_offset <= bound:
            uncleanable = max(uncleanable, seg.next_offset)
        else:
            break
    return uncleanable


def log_to_clean(key: tuple[str, int], segments: Sequence[SegmentStats], checkpoint: int | None,
                 log_start_offset: int, log_end_offset: int, last_stable_offset: int, now: int,
                 min_compaction_lag_ms: int, max_compaction_lag_ms: int) -> LogToClean:
    """The log's dirty share and whether it must be cleaned now (Kafka's LogToClean and
    maxCompactionDelay)."""
    first_dirty = first_dirty_offset(checkpoint, log_start_offset, log_end_offset)
    uncleanable = cleanable_offsets(segments, first_dirty, last_stable_offset, now, min_compaction_lag_ms)
    clean = sum(s.size for s in segments if s.next_offset <= first_dirty)
    cleanable = sum(s.size for s in segments if s.base_offset >= first_dirty and s.next_offset <= uncleanable)
    if segments and segments[0].base_offset < first_dirty < segments[0].next_offset:
        cleanable += segments[0].size  # the log start is inside the first segment
    due = False
    if max_compaction_lag_ms < 2**63 - 1 and uncleanable > first_dirty:
        for seg in segments:
            if seg.next_offset > first_dirty:
                due = 0 <= seg.first_batch_timestamp < now - max_compaction_lag_ms
                break
    return LogToClean(key, first_dirty, uncleanable, clean, cleanable, due)


def grab_filthiest(candidates: Sequence[LogToClean], min_ratios: Mapping[tuple[str, int], float]) -> LogToClean | None:
    """The log to clean next (Kafka's grabFilthiestCompactedLog): one that must be cleaned now, else
    the dirtiest above its min.cleanable.dirty.ratio; None when no log has anything to clean."""
    eligible = [c for c in candidates if c.first_uncleanable_offset > c.first_dirty_offset
                and c.cleanable_bytes > 0
                and (c.needs_compaction_now or c.cleanable_ratio > min_ratios.get(c.key, 0.5))]
    if not eligible:
        return None
    return max(eligible, key=lambda c: (c.needs_compaction_now, c.cleanable_ratio))


def delete_horizon_ms(segments: Sequence[SegmentStats], first_dirty: int, delete_retention_ms: int) -> int:
    """Tombstones and markers in segments last modified before this are removed (Kafka 2.x: the
    last clean segment's mtime minus delete.retention.ms; 0 when nothing was cleaned yet)."""
    clean = [s for s in segments if s.next_offset <= first_dirty]
    return clean[-1].last_modified_ms - delete_retention_ms if clean else 0


def joins_group(group_base: int, group_size: int, seg: SegmentStats, max_size: int, max_index_entries: int,
                index_interval_bytes: int) -> bool:
    """Whether `seg` is cleaned into the same segment as the group begun at `group_base`, which
    holds `group_size` bytes so far: together at most segment.bytes, an index that fits, offsets
    relative to the base that fit in 31 bits (Kafka's groupSegmentsBySize). The group's size is
    what was written of it, cleaned, and the segment counts whole (what it may still hold): so a
    log mostly removed is rewritten into few segments, where Kafka's grouping by the segments'
    sizes before cleaning writes as many small ones as it had."""
    size = group_size + seg.size
    return (size <= max_size and size // max(1, index_interval_bytes) < max_index_entries
            and seg.next_offset - 1 - group_base <= MAX_RELATIVE_OFFSET)


# --- records ---------------------------------------------------------------------------------


def records_section(batch: Buffer, info: BatchInfo) -> bytes | memoryview:
    """A whole batch's records, inflated (`batch` starts at the batch)."""
    payload = memoryview(batch)[HEADER_SIZE : info.size]
    return decompress(info.compression, payload) if info.compression else payload


def map_key(key: bytes) -> bytes:
    """What the offset map stores for a key: the key when it is no longer than a hash, else its
    MD5 (Kafka's SkimpyOffsetMap hashes every key; short ones need not be). The C loops
    (_cleaner.c) make the same keys, calling `_digest` for long ones."""
    return key if len(key) <= 16 else _digest(key)


def _digest(key: bytes) -> bytes:
    return hashlib.md5(key).digest()


# --- transactions ----------------------------------------------------------------------------


@dataclass
class CleanedTransactions:
    """Kafka's CleanedTransactionMetadata: walking batches in offset order, which belong to an
    aborted transaction, and which markers no longer have any batch of their transaction."""

    aborted: list[AbortedTxn]
    """The aborted transactions overlapping the range walked, by first offset."""
    ongoing_committed: set[int] = field(default_factory=set)
    ongoing_aborted: dict[int, bool] = field(default_factory=dict)
    """producer id → whether a batch of its aborted transaction was seen in this walk."""
    _next: int = 0

    def __post_init__(self) -> None:
        self.aborted = sorted(self.aborted, key=lambda t: t.first_offset)

    def _start_aborted_up_to(self, offset: int) -> None:
        while self._next < len(self.aborted) and self.aborted[self._next].first_offset <= offset:
            self.ongoing_aborted.setdefault(self.aborted[self._next].producer_id, False)
            self._next += 1

    def on_data_batch(self, info: BatchInfo, transactional: bool) -> bool:
        """True when the batch belongs to an aborted transaction (it is discarded)."""
        self._start_aborted_up_to(info.last_offset)
        if not transactional:
            return False
        if info.producer_id in self.ongoing_aborted:
            self.ongoing_aborted[info.producer_id] = True
            return True
        self.ongoing_committed.add(info.producer_id)
        return False

    def on_control_batch(self, info: BatchInfo, commit: bool | None) -> bool:
        """True when the marker may go: none of its transaction's batches was seen in this walk
        (they were removed before). `commit` None: a control batch of another kind."""
        self._start_aborted_up_to(info.last_offset)
        pid = info.producer_id
        if commit is None:
            return True
        if commit:
            seen = pid in self.ongoing_committed
            self.ongoing_committed.discard(pid)
            return not seen
        return not self.ongoing_aborted.pop(pid, False)


# --- the offset map --------------------------------------------------------------------------


def map_capacity(dedupe_buffer_size: int, threads: int) -> int:
    """Keys one cleaning may map (Kafka: the buffer shared by the threads, 24 bytes a key, 90% full)."""
    return max(1, int(dedupe_buffer_size / max(1, threads) / ENTRY_BYTES * LOAD_FACTOR))


@dataclass
class OffsetMap:
    """The last offset of each key of the dirty section (Kafka's SkimpyOffsetMap)."""

    capacity: int
    offsets: dict[bytes, int] = field(default_factory=dict)
    end: int = -1
    """One past the last offset mapped: records from here on are kept as they are."""
    latest: bytearray | None = None
    """One bit per offset from `latest_base`, set for the offsets the map holds: a batch the map
    saw whole is dropped or kept whole by counting them, without reading its records again."""
    latest_base: int = 0

    @classmethod
    def for_range(cls, capacity: int, first_dirty: int, first_uncleanable: int) -> OffsetMap:
        """An empty map of the dirty section [first_dirty, first_uncleanable), with the bitmap of
        surviving offsets when it is at most LATEST_MAX_BYTES."""
        size = (first_uncleanable - first_dirty + 7) // 8
        latest = bytearray(size) if 0 < size <= LATEST_MAX_BYTES else None
        return cls(capacity, end=first_dirty, latest=latest, latest_base=first_dirty)

    def survivors(self, info: BatchInfo) -> int | None:
        """How many records of the batch are the latest of their key, when the map saw the whole
        batch; None when it cannot say (the records must be read)."""
        latest, base = self.latest, self.latest_base
        if (latest is None or info.base_offset < base or info.next_offset > self.end
                or info.next_offset - base > 8 * len(latest)):
            return None
        return count_latest(latest, info.base_offset - base, info.next_offset - base)

    def __len__(self) -> int:
        return len(self.offsets)

    @property
    def full(self) -> bool:
        return len(self.offsets) >= self.capacity

    def get(self, key: bytes) -> int:
        return self.offsets.get(map_key(key), -1)


def add_batch_to_map(offset_map: OffsetMap, batch: Buffer, info: BatchInfo, txns: CleanedTransactions,
                     first_dirty: int, transactional: bool) -> None:
    """Map the keys of one dirty batch (not a marker, not an aborted transaction's); the map's end
    moves past it. Call in offset order while the map is not full."""
    if info.is_control:
        txns.on_control_batch(info, None)
    elif not txns.on_data_batch(info, transactional) and info.records_count:
        try:  # in C: every record of the dirty section passes here
            if offset_map.latest is None:
                map_keys(records_section(batch, info), info.records_count, info.base_offset, first_dirty,
                         offset_map.offsets, _digest)
            else:
                map_keys(records_section(batch, info), info.records_count, info.base_offset, first_dirty,
                         offset_map.offsets, _digest, offset_map.latest, offset_map.latest_base)
        except ValueError as exc:
            raise CorruptRecordError(f"stored record batch does not parse: {exc}") from None
    offset_map.end = max(offset_map.end, info.next_offset)


# --- one batch -------------------------------------------------------------------------------


@dataclass(frozen=True)
class BatchContext:
    """What the decision on one batch depends on besides the batch."""

    offset_map: OffsetMap
    retain_deletes: bool
    """The batch's segment is newer than the delete horizon: tombstones and markers stay."""
    last_data_offsets: Mapping[int, int]
    """producer id → last offset of its last data batch (Kafka's lastRecordsOfActiveProducers)."""


class BatchOutcome(NamedTuple):
    data: bytes | None
    """The batch to write (the original bytes, a rewritten batch, an emptied one), None to drop it."""
    kept_records: int
    removed_records: int


def clean_batch(batch: bytes, info: BatchInfo, ctx: BatchContext, txns: CleanedTransactions,
                transactional: bool) -> BatchOutcome:
    """Kafka's cleanInto filter for one batch; `batch` is exactly the batch's bytes."""
    if info.base_offset >= ctx.offset_map.end:
        return BatchOutcome(batch, info.records_count, 0)  # past what was mapped: untouched
    pid = info.producer_id
    if info.is_control:
        marker = read_marker(batch, 0, info.size)
        can_discard = txns.on_control_batch(info, None if marker is None else marker.commit)
        discard = can_discard and not ctx.retain_deletes
    else:
        discard = txns.on_data_batch(info, transactional)
    producers_last = pid >= 0 and not info.is_control and ctx.last_data_offsets.get(pid) == info.last_offset
    if discard and not producers_last:
        return BatchOutcome(None, 0, info.records_count)
    if info.is_control:
        return BatchOutcome(batch, info.records_count, 0)
    kept, records = 0, b""
    survivors = None if discard else ctx.offset_map.survivors(info)
    if survivors == info.records_count and ctx.retain_deletes:
        return BatchOutcome(batch, survivors, 0)  # every record is its key's latest, tombstones stay
    if not discard and survivors != 0:
        try:  # in C: every record of the cleaned segments passes here
            kept, kept_bytes = filter_records(records_section(batch, info), info.records_count, info.base_offset,
                                              ctx.offset_map.offsets, ctx.offset_map.end, ctx.retain_deletes, _digest)
        except ValueError as exc:
            raise CorruptRecordError(f"stored record batch does not parse: {exc}") from None
        if kept_bytes is None:
            return BatchOutcome(batch, kept, 0)
        records = kept_bytes
    removed = info.records_count - kept
    if not removed:
        return BatchOutcome(batch, kept, 0)
    if not kept and not producers_last:
        return BatchOutcome(None, 0, removed)
    return BatchOutcome(rebuild_batch(batch, info, records, kept), kept, removed)


def rebuild_batch(batch: bytes, info: BatchInfo, records: bytes, kept: int) -> bytes:
    """The batch with only the `kept` records `records` (their bytes as they were: deltas are
    relative to the header, which keeps its base offset, lastOffsetDelta, timestamps and producer
    fields), compressed again with its codec; an empty batch when nothing is kept (Kafka's empty
    header, which keeps a producer's sequence)."""
    codec = info.compression if kept else 0
    payload = compress(codec, records) if codec else records
    out = bytearray(batch[:HEADER_SIZE])
    out += payload
    _I32.pack_into(out, LENGTH_POS, len(out) - LOG_OVERHEAD)
    attributes = struct.unpack_from(">h", out, ATTRIBUTES_POS)[0]
    struct.pack_into(">h", out, ATTRIBUTES_POS, (attributes & ~COMPRESSION_MASK) | codec)
    _I32.pack_into(out, _COUNT_POS, kept)
    _U32.pack_into(out, CRC_POS, crc32c(memoryview(out)[ATTRIBUTES_POS:]))
    return bytes(out)

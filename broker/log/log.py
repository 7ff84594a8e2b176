"""Log: one partition's replica, the offsets layer over its LocalLog (Kafka's UnifiedLog).

It owns what the segment files do not: the log start offset, the high watermark and last stable
offset, the leader epoch cache and producer state. Appends take batches as bytes, validate their
headers and CRC, assign offsets in place and write them with one pwrite; reads hand back file
regions for sendfile. Loading is LogLoader's, the segment files are LocalLog's. Not thread-safe:
the broker calls it from its event loop (only fsyncs run in a worker thread, see `flush_async`).
"""

import itertools
import logging
import os
import re
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import NamedTuple

from odradek.common.clock import now_ms
from odradek.common.executors import BlockingExecutor, run_blocking

from .cleaner import SegmentStats
from .config import LogConfig
from .control_batch import TRANSACTIONAL_MASK, read_marker
from .errors import (
    InvalidRecordError,
    KafkaStorageError,
    LogError,
    OffsetOutOfRangeError,
    RecordBatchTooLargeError,
    UnexpectedAppendOffsetError,
)
from .leader_epoch import FILE_NAME as EPOCH_FILE
from .leader_epoch import LeaderEpochFileCache
from .local_log import FetchDataInfo, LocalLog, open_segment
from .log_loader import LogLoader
from .log_validator import validate_client_batch
from .producer_state import (
    AppendOrigin,
    BatchAppend,
    BatchMetadata,
    BatchRow,
    CompletedTxn,
    ProducerStateManager,
    delete_snapshots,
    list_snapshots,
    load_latest_snapshot,
    snapshot_path,
    write_snapshot,
)
from .record_batch import (
    NO_TIMESTAMP,
    BatchInfo,
    Buffer,
    assign_offset,
    decode_records,
    iter_batches,
    record_timestamps,
    set_log_append_time,
    validate_batches,
)
from .segment import LogSegment
from .transaction_index import AbortedTxn

log = logging.getLogger(__name__)

_MAX_RELATIVE_OFFSET = 2**31 - 1
_REPLAY_CHUNK = 4096
CLOSE_SNAPSHOT_MIN_RECORDS = 16
"""A log closes without a producer snapshot while at most this many records follow its newest
one (or its start): loading replays them from their batch headers (about 11 us a batch here) in
less time than creating the snapshot's file takes (about 200 us on this machine's ext4): 6,000
one-record logs closed in 1.4-1.8 s instead of 2.5-2.6 s (bench/RESULTS.md, scale.py)."""
_DIR_NAME = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)$")


def parse_dir_name(name: str) -> tuple[str, int] | None:
    """`<topic>-<partition>` → (topic, partition); None for anything else."""
    m = _DIR_NAME.match(name)
    return (m["topic"], int(m["partition"])) if m else None


class LogAppendInfo(NamedTuple):
    """What an append did (a tuple: cheap to build once per produce)."""

    first_offset: int  # -1 when nothing was appended
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    log_append_time: int  # -1 unless the topic uses LogAppendTime
    num_records: int
    valid_bytes: int
    duplicate: bool = False
    """A retried batch of an idempotent producer: nothing was appended, the offsets are the
    ones it got the first time (Kafka answers it as a success)."""


class Log:
    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        *,
        recovery_point: int = 0,
        had_clean_shutdown: bool = False,
        log_start_offset: int = 0,
        clock: Callable[[], int] = now_ms,
        io_threads: BlockingExecutor | None = None,
    ):
        """`io_threads`: where its blocking disk work runs (LogManager's), asyncio's default without."""
        self.clock = clock
        self.io_threads = io_threads
        """Wall-clock milliseconds (injectable: tests move time by hand)."""
        self.dir = Path(directory)
        parsed = parse_dir_name(self.dir.name)
        if parsed is None:
            raise ValueError(f"{self.dir} is not named <topic>-<partition>")
        self.topic, self.partition = parsed
        self.on_truncate: Callable[[Log], None] | None = None
        """Called after a truncation lowered the recovery point (LogManager checkpoints it)."""
        self.on_storage_error: Callable[[Log, BaseException], None] | None = None
        """Called when an I/O error hits this log's files (LogManager: the directory goes offline)."""
        self.on_change: Callable[[Log], None] | None = None
        """Called when the background pass has work here: a segment rolled (to flush), files to
        delete, a recovery point or log start offset moved (to checkpoint)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        self.leader_epoch_cache = LeaderEpochFileCache(self.dir / EPOCH_FILE, lambda: self.log_end_offset)
        loaded = LogLoader(
            self.dir, lambda base: open_segment(self.dir, base, config, clock), self.leader_epoch_cache,
            recovery_point=recovery_point, log_start_offset=log_start_offset, had_clean_shutdown=had_clean_shutdown,
        ).load()
        self._segments = loaded.segments
        self._local = LocalLog(
            self.dir, config, loaded.segments, recovery_point=loaded.recovery_point,
            log_end_offset=loaded.log_end_offset, clock=clock, on_storage_error=self._report_storage_error,
            on_change=self._report_change, io_threads=io_threads,
        )
        self._log_start_offset = loaded.log_start_offset
        self.leader_epoch_cache.on_change = self._report_change
        self._high_watermark = loaded.log_end_offset
        self.producer_state = ProducerStateManager(self.log_start_offset)
        self._load_producer_state(loaded.replay_at_most_from, loaded.snapshots)

    # --- properties -----------------------------------------------------------------------

    @property
    def config(self) -> LogConfig:
        return self._local.config

    @config.setter
    def config(self, config: LogConfig) -> None:
        self._local.config = config
        self._segments.active_segment.index_interval_bytes = config.index_interval_bytes

    @property
    def log_end_offset(self) -> int:
        return self._local.log_end_offset

    @property
    def recovery_point(self) -> int:
        return self._local.recovery_point

    @recovery_point.setter
    def recovery_point(self, offset: int) -> None:
        self._local.recovery_point = offset

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @log_start_offset.setter
    def log_start_offset(self, offset: int) -> None:
        if offset != self._log_start_offset:
            self._log_start_offset = offset
            self._report_change()

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @high_watermark.setter
    def high_watermark(self, offset: int) -> None:
        self._high_watermark = max(self.log_start_offset, min(offset, self._local.log_end_offset))

    @property
    def segments(self) -> Sequence[LogSegment]:
        """Every segment, oldest first (read only)."""
        return self._segments.values()

    @property
    def active_segment(self) -> LogSegment:
        return self._segments.active_segment

    @property
    def size(self) -> int:
        return self._segments.size_in_bytes()

    @property
    def unflushed_messages(self) -> int:
        return self._local.unflushed_messages

    @property
    def closed(self) -> bool:
        return self._local.closed

    @closed.setter
    def closed(self, closed: bool) -> None:
        """The LogManager closes a log it takes out of service without touching its files."""
        self._local.closed = closed

    def __repr__(self) -> str:
        return f"Log({self.topic}-{self.partition}, start={self.log_start_offset}, end={self.log_end_offset})"

    # --- appending ------------------------------------------------------------------------

    def append_as_leader(self, records: Buffer, leader_epoch: int, now: int | None = None,
                         origin: AppendOrigin = AppendOrigin.CLIENT) -> LogAppendInfo:
        """Validate, assign offsets (rewriting the batch headers in place) and append atomically.

        A bytearray or writable memoryview is rewritten in place; other buffers are copied once.
        Only the COORDINATOR origin may append control batches (transaction markers).
        """
        local = self._local
        local.check_open()
        if isinstance(records, bytearray) or (isinstance(records, memoryview) and not records.readonly):
            buf = records
        else:
            buf = bytearray(records)
        config = local.config
        batches = validate_batches(buf, max_batch_bytes=config.max_message_bytes)
        if origin is AppendOrigin.CLIENT:  # the coordinators write markers and their own batches
            compacted = config.compacts
            for info in batches:
                validate_client_batch(buf, info, compacted, f"{self.topic}-{self.partition}")
        if not batches:
            return LogAppendInfo(-1, -1, NO_TIMESTAMP, -1, -1, 0, 0)
        if len(buf) > config.segment_bytes:
            raise RecordBatchTooLargeError(
                f"message set of {len(buf)} bytes exceeds segment.bytes {config.segment_bytes}"
            )
        if now is None:
            now = self.clock()
        append_time = now if config.log_append_time else None
        first = offset = local.log_end_offset
        producer_appends = None
        if any(info.producer_id >= 0 for info in batches):
            outcome = self._analyze_producer_state(buf, batches, first, append_time, origin)
            if isinstance(outcome, BatchMetadata):
                return LogAppendInfo(
                    outcome.first_offset, outcome.last_offset, outcome.timestamp, outcome.last_offset,
                    outcome.timestamp if append_time is not None else -1, 0, 0, True,
                )
            producer_appends = outcome
        bases = []
        max_ts, offset_of_max, count = NO_TIMESTAMP, first, 0
        for info in batches:
            assign_offset(buf, info.position, offset, leader_epoch)
            bases.append(offset)
            if append_time is not None:
                set_log_append_time(buf, info.position, info.size, append_time)
                ts = append_time
            else:
                ts = info.max_timestamp
            if ts > max_ts:
                max_ts, offset_of_max = ts, offset
            count += info.records_count
            offset += info.last_offset_delta + 1
        try:
            if leader_epoch > self.leader_epoch_cache.latest_epoch:
                self.leader_epoch_cache.assign(leader_epoch, first)
            segment = self._maybe_roll(len(buf), max_ts, first, offset - 1, now)
            segment.append(buf, batches, bases, append_time)
        except KafkaStorageError as exc:  # a segment write (it truncated what it had written)
            self.storage_error(exc, "append")
            raise
        except OSError as exc:
            raise self.storage_error(exc, "append") from exc
        local.log_end_offset = offset
        if producer_appends:
            self._index_aborts(self.producer_state, self.producer_state.update(producer_appends, offset))
        else:
            self.producer_state.map_end_offset = offset
        self._after_append()
        return LogAppendInfo(
            first, offset - 1, max_ts, offset_of_max, append_time if append_time is not None else -1, count, len(buf)
        )

    def _analyze_producer_state(
        self, buf: Buffer, batches: list[BatchInfo], first: int, append_time: int | None, origin: AppendOrigin
    ) -> BatchMetadata | list[BatchAppend]:
        """Kafka's analyzeAndValidateProducerState for a leader append: the first duplicate's
        BatchMetadata, or the updates to apply after the write; raises on a sequence gap, an old
        epoch or a fenced marker. Offsets are the ones the batches are about to get."""
        rows, offset = [], first
        for info in batches:
            last = offset + info.last_offset_delta
            ts = append_time if append_time is not None else info.max_timestamp
            row = _producer_row(buf, info, offset, last, ts)
            if row is not None:
                rows.append(row)
            offset = last + 1
        return self.producer_state.prepare(rows, origin)

    def _index_aborts(self, state: ProducerStateManager, completed: list[CompletedTxn],
                      segment: LogSegment | None = None) -> None:
        """Aborted transactions go to the transaction index of the segment holding their marker,
        with the LSO the abort left (taken right after it: at most one marker per call)."""
        for txn in completed:
            if txn.aborted:
                seg = segment or self._segments.floor_segment(txn.last_offset)
                seg.txn_index.append(AbortedTxn(txn.producer_id, txn.first_offset, txn.last_offset,
                                                state.last_stable_offset_after(txn)))

    def _replay_rows(self, state: ProducerStateManager, rows: list[BatchRow], map_end: int,
                     segment: LogSegment | None = None) -> None:
        """Replay rows, one marker at a time (each abort's LSO is the one right after it)."""
        chunk = []
        for row in rows:
            chunk.append(row)
            if row.marker is not None:
                self._index_aborts(state, state.replay(chunk, row.last_offset + 1), segment)
                chunk = []
        state.replay(chunk, map_end)

    def append_as_follower(self, records: Buffer) -> LogAppendInfo:
        """Append batches fetched from the leader with their offsets and epochs as sent.

        A partial batch at the end (a fetch cut short) is dropped; every whole batch is checked.
        """
        local = self._local
        local.check_open()
        batches = validate_batches(records, allow_partial_tail=True)
        if not batches:
            return LogAppendInfo(-1, -1, NO_TIMESTAMP, -1, -1, 0, 0)
        first = batches[0].base_offset
        if first < local.log_end_offset:
            raise UnexpectedAppendOffsetError(
                f"follower append starts at offset {first}, below the log end offset {local.log_end_offset}"
            )
        valid_bytes = batches[-1].position + batches[-1].size
        cache = self.leader_epoch_cache
        expected, max_ts, offset_of_max, count, bases = first, NO_TIMESTAMP, first, 0, []
        for info in batches:
            if info.base_offset < expected:
                raise InvalidRecordError(f"out of order offsets: batch at {info.base_offset} after {expected - 1}")
            if info.max_timestamp > max_ts:
                max_ts, offset_of_max = info.max_timestamp, info.base_offset
            bases.append(info.base_offset)
            count += info.records_count
            expected = info.next_offset
        view = memoryview(records)
        rows = _producer_rows(records, batches)
        try:
            for info in batches:
                if info.partition_leader_epoch > cache.latest_epoch:
                    cache.assign(info.partition_leader_epoch, info.base_offset)
            now = self.clock()
            for chunk in _segment_chunks(batches, local.config.segment_bytes):
                start, end = chunk[0].position, chunk[-1].position + chunk[-1].size
                segment = self._maybe_roll(end - start, max(b.max_timestamp for b in chunk), chunk[0].base_offset,
                                           chunk[-1].last_offset, now)
                segment.append(view[start:end], chunk, [b.base_offset for b in chunk], None, position_base=start)
                local.log_end_offset = chunk[-1].next_offset
        except KafkaStorageError as exc:  # a segment write (it truncated what it had written)
            self.storage_error(exc, "append")
            raise
        except OSError as exc:
            raise self.storage_error(exc, "append") from exc
        self._replay_rows(self.producer_state, rows, expected)
        self._after_append()
        return LogAppendInfo(first, expected - 1, max_ts, offset_of_max, -1, count, valid_bytes)

    def _after_append(self) -> None:
        local = self._local
        if local.log_end_offset - local.recovery_point >= local.config.flush_messages:
            self.flush()

    def _maybe_roll(self, size: int, max_timestamp: int, first_offset: int, last_offset: int, now: int) -> LogSegment:
        seg = self._segments.values()[-1]
        config = self._local.config
        if (
            seg.size > config.segment_bytes - size
            or (seg.size > 0 and seg.time_waited_for_roll(now, max_timestamp) > config.segment_ms)
            or seg.index.is_full
            or seg.time_index.is_full
            or last_offset - seg.base_offset > _MAX_RELATIVE_OFFSET
        ):
            return self.roll(max(first_offset, self._local.log_end_offset))
        return seg

    def roll(self, new_base: int | None = None) -> LogSegment:
        """Start a new active segment at `new_base` (default: the log end offset), with a
        producer snapshot at it when the old one holds records."""
        self._local.check_open()
        new_base = self._local.log_end_offset if new_base is None else new_base
        active = self._segments.active_segment
        if active.base_offset == new_base:
            return active  # never two segments with one base offset
        if active.size != 0:
            self._take_producer_snapshot(new_base)
        seg = self._local.roll(new_base)
        if self._segments.first_segment is seg:
            self.log_start_offset = new_base  # the replaced empty segment was the whole log
        return seg

    # --- reading --------------------------------------------------------------------------

    def scan_batches(self, chunk_bytes: int = 4 * 1024 * 1024) -> Iterator[tuple[BatchInfo, bytes]]:
        """Every batch from the log start to the log end as of the call, with its bytes, read a
        chunk at a time: what a coordinator replays when it takes over its partition. CRCs are
        left to the reader (decode_records checks each batch's)."""
        offset, end = self.log_start_offset, self.log_end_offset
        while offset < end:
            data = self.read(offset, chunk_bytes, max_offset=end, min_one_message=True).read_bytes()
            before = offset
            for info in iter_batches(data, verify_crc=False):
                yield info, data[info.position : info.position + info.size]
                offset = info.next_offset
            if offset == before:  # nothing whole to read (a torn tail): stop rather than spin
                return

    def read(self, start_offset: int, max_bytes: int, max_offset: int | None = None,
             min_one_message: bool = True) -> FetchDataInfo:
        """Whole batches from one segment, starting with the batch that holds `start_offset`.

        `max_offset` is exclusive (the high watermark for consumers).
        """
        local = self._local
        local.check_open()
        end = local.log_end_offset
        if start_offset < self.log_start_offset or start_offset > end:
            raise OffsetOutOfRangeError(
                f"offset {start_offset} is outside [{self.log_start_offset}, {end}] for {self.topic}-{self.partition}"
            )
        return local.read(start_offset, max_bytes, max_offset, min_one_message)

    # --- transactions ---------------------------------------------------------------------

    @property
    def first_unstable_offset(self) -> int | None:
        return self.producer_state.first_unstable_offset(self._high_watermark)

    @property
    def last_stable_offset(self) -> int:
        """What read_committed readers may read below: the high watermark, or the start of the
        oldest transaction that is open or whose marker is not yet replicated, if lower."""
        first = self.producer_state.first_unstable_offset(self._high_watermark)
        hw = self._high_watermark
        return hw if first is None or first > hw else max(first, self.log_start_offset)

    def collect_aborted_transactions(self, start_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping [start_offset, upper_bound) (Kafka's
        collectAbortedTransactions): from the segment of `start_offset` on, until an abort's LSO
        shows that no older transaction can overlap the range."""
        out: list[AbortedTxn] = []
        for seg in self._segments.values_from(start_offset):
            found, complete = seg.txn_index.collect(start_offset, upper_bound)
            out.extend(found)
            if complete:
                break
        return out

    # --- offsets by timestamp -------------------------------------------------------------

    def legacy_fetch_offsets_before(self, timestamp: int, max_num_offsets: int, now: int) -> list[int]:
        """ListOffsets v0 (Kafka's legacyFetchOffsetsBefore): segment start offsets (and the log end
        offset, the last segment being non-empty) whose segment was last modified at or before
        `timestamp`, newest first, at most `max_num_offsets`; -1 latest, -2 earliest."""
        self._local.check_open()
        segments = self._segments
        points = [(max(seg.base_offset, self.log_start_offset), int(os.fstat(seg.file.fileno()).st_mtime * 1000))
                  for seg in segments]
        if segments.active_segment.size > 0:
            points.append((self.log_end_offset, now))
        if timestamp == -1:
            start = len(points) - 1
        elif timestamp == -2:
            start = 0
        else:
            start = len(points) - 1
            while start >= 0 and points[start][1] > timestamp:
                start -= 1
        return [points[i][0] for i in range(start, start - min(max_num_offsets, start + 1), -1)]

    def fetch_offset_by_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= `timestamp_ms`; None if none."""
        self._local.check_open()
        for seg in self._segments:
            if seg.max_timestamp < timestamp_ms:
                continue
            info = seg.find_timestamp(timestamp_ms)
            if info is not None:
                return self._first_record_at_or_after(seg, info, timestamp_ms)
        return None

    def fetch_offset_of_max_timestamp(self) -> tuple[int, int, int] | None:
        """(offset, timestamp, leader epoch or -1) of the first record carrying the log's largest
        timestamp (ListOffsets MAX_TIMESTAMP, KIP-734): the first segment with the largest max
        timestamp, its first batch reaching it, that batch's first record with it. None when no
        record has a timestamp (an empty log)."""
        self._local.check_open()
        seg = max(self._segments, key=lambda s: s.max_timestamp)  # the first of equals, as Kafka's maxBy
        if seg.max_timestamp < 0:
            return None
        info = seg.find_timestamp(seg.max_timestamp)
        if info is None:
            return None
        offset, timestamp = self._first_record_at_or_after(seg, info, seg.max_timestamp)
        return offset, timestamp, max(-1, info.partition_leader_epoch)

    def earliest_epoch(self) -> int:
        """The leader epoch of the log start offset when the epoch cache knows it, else -1 (Kafka's
        answer to ListOffsets EARLIEST)."""
        entry = self.leader_epoch_cache.earliest_entry
        return entry.epoch if entry is not None and entry.start_offset <= self.log_start_offset else -1

    @staticmethod
    def _first_record_at_or_after(seg: LogSegment, info: BatchInfo, timestamp_ms: int) -> tuple[int, int]:
        if info.is_log_append_time:
            return info.base_offset, info.max_timestamp
        if info.base_timestamp >= timestamp_ms:
            return info.base_offset, info.base_timestamp
        data = seg.read_bytes(info.position, info.size)
        try:
            if info.compression:
                pairs = [(r.offset, r.timestamp) for r in decode_records(data)]
            else:
                pairs = record_timestamps(data)
        except (ValueError, LogError, IndexError) as exc:
            log.debug("timestamp lookup falls back to the batch base offset: %s", exc)
            return info.base_offset, info.max_timestamp
        for offset, ts in pairs:
            if ts >= timestamp_ms:
                return offset, ts
        return info.base_offset, info.max_timestamp

    # --- flushing -------------------------------------------------------------------------

    def flush(self, offset: int | None = None) -> None:
        """fsync everything below `offset` (default: all) and move the recovery point there. The
        leader-epoch checkpoint is written first: a load recovers (and rebuilds the epochs of)
        only what lies past the recovery point."""
        self._flush_epochs()
        self._local.flush(offset)

    async def flush_async(self, offset: int | None = None) -> None:
        """`flush` with the fsyncs in a worker thread, so the event loop keeps serving."""
        local, cache = self._local, self.leader_epoch_cache
        if cache.dirty and not local.closed:
            # Entries assigned while the snapshot is written start at or past this end: the flush
            # stops there. A truncation meanwhile may have rewritten what lies below: next pass.
            offset = local.log_end_offset if offset is None else min(offset, local.log_end_offset)
            generation = local.truncations
            try:
                await run_blocking(self.io_threads, cache.write, cache.snapshot())
            except OSError as exc:
                if local.closed:
                    return
                raise self.storage_error(exc, "leader epoch checkpoint") from exc
            if generation != local.truncations:
                return
        await local.flush_async(offset)

    def _flush_epochs(self) -> None:
        try:
            self.leader_epoch_cache.flush()
        except OSError as exc:
            raise self.storage_error(exc, "leader epoch checkpoint") from exc

    def needs_time_flush(self, now: int) -> bool:
        return self._local.needs_time_flush(now)

    # --- retention and deletion -----------------------------------------------------------

    def delete_old_segments(self, now: int | None = None) -> int:
        """Retention by time and size (cleanup.policy delete); returns the segments deleted.

        Like Kafka: oldest first, only segments wholly below the high watermark, and when every
        segment goes the log rolls first so an (empty) active segment remains.
        """
        self._local.check_open()
        config = self._local.config
        if not config.deletes:
            return 0
        now = self.clock() if now is None else now
        deleted = 0
        retention_ms = config.retention_ms
        if retention_ms >= 0:
            deleted += self._delete_segments(lambda seg: now - seg.largest_timestamp > retention_ms, now)
        retention_bytes = config.retention_bytes
        if retention_bytes >= 0:
            excess = [self.size - retention_bytes]

            def over_size(seg: LogSegment) -> bool:
                if excess[0] - seg.size >= 0:
                    excess[0] -= seg.size
                    return True
                return False

            deleted += self._delete_segments(over_size, now)
        return deleted

    def maybe_increment_log_start_offset(self, offset: int, now: int | None = None) -> bool:
        """Move the log start offset up to `offset` (DeleteRecords at the leader; a follower
        following its leader's start): the records below it are gone for every reader at once, and
        the whole segments below it are deleted (the segment holding it stays, as in Kafka). A
        start above the high watermark is refused (OffsetOutOfRangeError). True when it moved."""
        self._local.check_open()
        if offset > self._high_watermark:
            raise OffsetOutOfRangeError(
                f"cannot move the log start offset of {self.topic}-{self.partition} to {offset}: "
                f"it is above the high watermark {self._high_watermark}")
        if offset <= self.log_start_offset:
            return False
        self.log_start_offset = offset
        self.leader_epoch_cache.truncate_from_start(offset)
        bases = self._segments.base_offsets()
        next_base = dict(itertools.pairwise(bases))
        self._delete_segments(lambda seg: next_base.get(seg.base_offset, offset + 1) <= offset,
                              self.clock() if now is None else now)
        log.info("%s: log start offset now %d", self.dir.name, offset)
        return True

    def _delete_segments(self, predicate: Callable[[LogSegment], bool], now: int) -> int:
        segments = self._segments
        doomed = []
        for i, seg in enumerate(segments):
            upper = segments.next_base_offset(i)
            last = upper is None
            if self._high_watermark >= (self.log_end_offset if upper is None else upper) \
                    and not (last and seg.size == 0) and predicate(seg):
                doomed.append(seg)
            else:
                break
        if not doomed:
            return 0
        if len(doomed) == len(segments):
            self.roll()
        self._local.remove_and_delete_segments(doomed, now)
        self.log_start_offset = max(self.log_start_offset, segments.first_segment.base_offset)
        self._high_watermark = max(self._high_watermark, self.log_start_offset)
        self._local.recovery_point = max(self._local.recovery_point, self.log_start_offset)
        self.leader_epoch_cache.truncate_from_start(self.log_start_offset)
        delete_snapshots(self.dir, below=self.log_start_offset)
        log.info("%s: deleted %d old segment(s), log start offset %d", self.dir.name, len(doomed), self.log_start_offset)
        return len(doomed)

    @property
    def has_pending_deletes(self) -> bool:
        return self._local.has_pending_deletes

    def delete_pending_files(self, now: int | None = None, force: bool = False) -> int:
        """Close and unlink segments whose file.delete.delay.ms has passed (all with `force`)."""
        return self._local.delete_pending_files(now, force)

    # --- compaction -----------------------------------------------------------------------

    def segment_stats(self) -> list[SegmentStats]:
        """What the cleaner decides on, per segment (the active one last)."""
        return self._local.segment_stats()

    def last_data_offsets(self) -> dict[int, int]:
        """producer id → the last offset of its last data batch: the cleaner keeps that batch."""
        return {pid: entry.last_offset for pid, entry in self.producer_state.producers.items() if entry.batches}

    @property
    def truncation_count(self) -> int:
        """Truncations so far: a cleaning planned before one is thrown away."""
        return self._local.truncations

    def discard_cleaned(self, base: int) -> None:
        """Remove the cleaned files of `base` that will not be swapped in."""
        self._local.discard_cleaned(base)

    def replace_segments(self, base: int, old_bases: list[int], old_sizes: list[int], end: int) -> bool:
        """Swap cleaned segment files in for the segments `old_bases` (LocalLog.replace_segments)."""
        return self._local.replace_segments(base, old_bases, old_sizes, end)

    async def replace_segments_async(self, base: int, old_bases: list[int], old_sizes: list[int], end: int) -> bool:
        """`replace_segments` with its fsyncs in a worker thread."""
        return await self._local.replace_segments_async(base, old_bases, old_sizes, end)

    # --- truncation -----------------------------------------------------------------------

    def truncate_to(self, offset: int) -> bool:
        """Remove every batch holding an offset >= `offset` (a follower before fetching)."""
        self._local.check_open()
        if offset >= self.log_end_offset:
            return False
        if offset < self.log_start_offset:
            self.truncate_fully_and_start_at(offset)
            return True
        try:
            self._local.truncate_to(offset)
            self._truncate_producer_state()
            self._after_truncate()
        except OSError as exc:
            raise self.storage_error(exc, "truncation") from exc
        return True

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop everything; the log restarts empty at `offset`."""
        self._local.check_open()
        self._local.truncate_fully_and_start_at(offset)
        self.log_start_offset = offset
        self.leader_epoch_cache.clear()
        delete_snapshots(self.dir)
        self.producer_state = ProducerStateManager(offset)
        self._after_truncate()

    def _after_truncate(self) -> None:
        self._high_watermark = max(self.log_start_offset, min(self._high_watermark, self.log_end_offset))
        self.leader_epoch_cache.truncate_from_end(self.log_end_offset)
        if self.on_truncate is not None:
            self.on_truncate(self)

    # --- producer state -------------------------------------------------------------------

    def _load_producer_state(self, replay_at_most_from: int | None = None,
                             listed: list[tuple[int, Path]] | None = None) -> None:
        """The newest snapshot at or below the log end (one is written at every roll and at
        close), then the batch headers after it: after a clean shutdown that is nothing. After an
        unclean one, from no later than `replay_at_most_from` (the first recovered segment).
        `listed`: the snapshot files as loading found them (else the directory is listed)."""
        end = self.log_end_offset
        high = end if replay_at_most_from is None else min(end, replay_at_most_from)
        try:
            delete_snapshots(self.dir, above=end, listed=listed)
            # those above the end are gone now, and out of [start, high] anyway
            state = load_latest_snapshot(self.dir, self.log_start_offset, high, listed)
        except OSError as exc:
            log.warning("%s: cannot read producer snapshots (%s); scanning the log", self.dir.name, exc)
            state = None
        if state is None:
            state = ProducerStateManager(self.log_start_offset)
        self._replay(state, state.map_end_offset)
        self.producer_state = state

    def _replay(self, state: ProducerStateManager, start: int) -> None:
        """Apply the producer batches of [start, log end) from their headers (no CRC check:
        loading has checked what it had to), markers included; the transaction indexes are
        rebuilt from `start` on as the markers come by."""
        end = self.log_end_offset
        for seg in self._segments.values_from(start):
            seg.txn_index.truncate_to(start)
            if seg.size == 0:
                continue
            position = 0
            if seg.base_offset < start:
                first = seg.translate_offset(start)
                if first is None:
                    continue
                position = first.position
            rows = []
            for info in seg.scan(position):
                if info.producer_id >= 0 and info.base_offset >= start:
                    data = seg.read_bytes(info.position, info.size) if info.is_control else b""
                    row = _producer_row(data, info._replace(position=0), info.base_offset, info.last_offset,
                                        info.max_timestamp)
                    if row is not None:
                        rows.append(row)
                    if len(rows) >= _REPLAY_CHUNK:
                        self._replay_rows(state, rows, info.next_offset, seg)
                        rows = []
            self._replay_rows(state, rows, start, seg)
        state.map_end_offset = end

    def _truncate_producer_state(self) -> None:
        """Kafka's truncateAndReload: state beyond the new end goes. When no producer wrote at or
        above it nothing changes; else rebuild from the newest snapshot below it."""
        end = self.log_end_offset
        delete_snapshots(self.dir, above=end)
        if self.producer_state.covers_up_to(end):
            self.producer_state.map_end_offset = end
            return
        self._load_producer_state()

    def _take_producer_snapshot(self, offset: int, fsync: bool = False) -> None:
        """A snapshot at `offset` (= the log end): loading then scans only what follows it."""
        state = self.producer_state
        if state.map_end_offset != offset or (offset <= self.log_start_offset and not len(state)):
            return  # stale, or nothing a load could skip (Kafka: only when the state moved)
        try:
            if snapshot_path(self.dir, offset).exists():
                return  # Kafka's rule: a snapshot only past the last one (the same batches applied)
            write_snapshot(self.dir, state, fsync=fsync)
        except OSError as exc:
            log.warning("%s: cannot write a producer snapshot: %s", self.dir.name, exc)
            self.storage_error(exc, "producer snapshot")

    def remove_expired_producers(self, now: int, expiration_ms: int) -> int:
        """producer.id.expiration.ms: forget producers idle that long; returns how many."""
        expired = self.producer_state.remove_expired_producers(now, expiration_ms)
        if expired:
            log.info("%s: expired %d producer id(s)", self.dir.name, len(expired))
        return len(expired)

    # --- closing --------------------------------------------------------------------------

    def close(self, fsync: bool = True) -> None:
        """Write out the indexes, the leader-epoch checkpoint and a producer snapshot unless few
        records follow the last one (CLOSE_SNAPSHOT_MIN_RECORDS), close the files (no fsync of
        the log: see `flush`; none of the snapshot either without `fsync`: the caller syncs)."""
        if self._local.closed:
            return
        self._flush_epochs()
        if self._records_since_snapshot() > CLOSE_SNAPSHOT_MIN_RECORDS:
            self._take_producer_snapshot(self.log_end_offset, fsync=fsync)
        self._local.close()

    def _records_since_snapshot(self) -> int:
        """Offsets a load would replay: from the newest snapshot it would use (at or below the
        end, not below the log start) or from the log start."""
        end, start = self.log_end_offset, self.log_start_offset
        if end - start <= CLOSE_SNAPSHOT_MIN_RECORDS:
            return end - start  # no snapshot could matter: no listing (most logs of a big broker)
        try:
            newest = max((o for o, _ in list_snapshots(self.dir) if start <= o <= end), default=start)
        except OSError:
            newest = start
        return end - newest

    def storage_error(self, exc: BaseException, what: str) -> KafkaStorageError:
        """An I/O error on this log's disk: tell `on_storage_error` (the LogManager takes the whole
        log directory offline, as Kafka does) and return the error to raise."""
        return self._local.storage_error(exc, what)

    def _report_change(self) -> None:
        if self.on_change is not None:
            self.on_change(self)

    def _report_storage_error(self, exc: BaseException) -> None:
        if self.on_storage_error is not None:
            self.on_storage_error(self, exc)


def _segment_chunks(batches: list[BatchInfo], segment_bytes: int) -> list[list[BatchInfo]]:
    """Consecutive batches grouped so that each group fits one segment: a follower's fetch may
    bring more than segment.bytes (or, after segment.bytes was lowered, one batch larger than it:
    the leader has it, so the follower must take it, alone in its segment)."""
    chunks: list[list[BatchInfo]] = []
    size = 0
    for info in batches:
        if chunks and size + info.size <= segment_bytes:
            chunks[-1].append(info)
            size += info.size
        else:
            chunks.append([info])
            size = info.size
    return chunks


def _producer_row(buf: Buffer, info: BatchInfo, first: int, last: int, timestamp: int) -> BatchRow | None:
    """The producer-state row of one batch; a control batch's marker is read from `buf` (None
    for a control batch of another kind: it changes no producer state)."""
    marker = None
    if info.is_control:
        marker = read_marker(buf, info.position, info.size)
        if marker is None:
            return None
    return BatchRow(info.producer_id, info.producer_epoch, info.base_sequence, info.last_sequence, first, last,
                    timestamp, bool(info.attributes & TRANSACTIONAL_MASK), marker)


def _producer_rows(buf: Buffer, batches: list[BatchInfo]) -> list[BatchRow]:
    """The producer-state rows of appended batches (offsets as in their headers)."""
    rows = (_producer_row(buf, b, b.base_offset, b.last_offset, b.max_timestamp) for b in batches
            if b.producer_id >= 0)
    return [row for row in rows if row is not None]

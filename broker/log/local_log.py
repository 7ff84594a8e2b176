"""LocalLog: a log's segment files on one disk (Kafka's LocalLog).

What is below the offsets layer (the Log, Kafka's UnifiedLog): the segments, the log end offset
and the recovery point; reading whole batches as file regions, rolling, flushing, truncating,
deleting segment files after file.delete.delay.ms and swapping cleaned segments in. It knows no
high watermark, log start offset or producer state.
"""

import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from odradek.common.executors import BlockingExecutor, run_blocking

from .checkpoint import fsync_path
from .cleaner import SegmentStats
from .config import LogConfig
from .errors import KafkaStorageError
from .log_segments import LogSegments
from .producer_state import delete_snapshots_within
from .record_batch import HEADER_SIZE, read_header
from .segment import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, LogSegment, file_name
from .segment_swap import CLEANED_SUFFIX, SWAP_SUFFIX, rename_suffix, write_swap_end
from .transaction_index import TXN_INDEX_SUFFIX

log = logging.getLogger(__name__)

_SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)


class FileRegion:
    """A byte range of an open segment file, for `loop.sendfile(transport, file, position, size)`.

    The file object is shared by every region of its segment: use explicit offsets (sendfile,
    pread), never its file position.
    """

    __slots__ = ("file", "position", "size")

    def __init__(self, file: BinaryIO, position: int, size: int):
        self.file, self.position, self.size = file, position, size

    def read_bytes(self) -> bytes:
        chunks, done = [], 0
        while done < self.size:
            chunk = os.pread(self.file.fileno(), self.size - done, self.position + done)
            if not chunk:
                break
            chunks.append(chunk)
            done += len(chunk)
        return b"".join(chunks)

    def __repr__(self) -> str:
        return f"FileRegion({getattr(self.file, 'name', '?')}, {self.position}, {self.size})"


@dataclass(slots=True)
class FetchDataInfo:
    regions: list[FileRegion] = field(default_factory=list)
    size: int = 0
    first_offset: int = -1  # base offset of the first batch served (the fetch offset when empty)

    def read_bytes(self) -> bytes:
        return b"".join(region.read_bytes() for region in self.regions)


def open_segment(directory: Path, base_offset: int, config: LogConfig, clock: Callable[[], int]) -> LogSegment:
    return LogSegment(
        directory,
        base_offset,
        index_interval_bytes=config.index_interval_bytes,
        max_index_entries=config.max_index_entries,
        clock=clock,
    )


class LocalLog:
    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        segments: LogSegments,
        *,
        recovery_point: int,
        log_end_offset: int,
        clock: Callable[[], int],
        on_storage_error: Callable[[BaseException], None],
        on_change: Callable[[], None] = lambda: None,
        io_threads: BlockingExecutor | None = None,
    ):
        self.dir = directory
        self.io_threads = io_threads
        self.config = config
        self.segments = segments
        self._on_change = on_change
        """Told of work for the background pass: a roll to flush, files to delete, a moved
        recovery point to checkpoint (it then visits only the logs that told it)."""
        self._recovery_point = recovery_point
        self.log_end_offset = log_end_offset
        self.clock = clock
        self._on_storage_error = on_storage_error
        self.last_flush_ms = clock()
        self._pending_deletes: list[tuple[int, LogSegment]] = []
        self.truncations = 0
        """Truncations so far: a flush or cleaning planned before one is thrown away."""
        self.closed = False

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @recovery_point.setter
    def recovery_point(self, offset: int) -> None:
        if offset != self._recovery_point:
            self._recovery_point = offset
            self._on_change()

    def new_segment(self, base_offset: int) -> LogSegment:
        return open_segment(self.dir, base_offset, self.config, self.clock)

    # --- reading --------------------------------------------------------------------------

    def read(self, start_offset: int, max_bytes: int, max_offset: int | None, min_one_message: bool) -> FetchDataInfo:
        """Whole batches from one segment, starting with the batch that holds `start_offset`
        (which the caller checked is in the log); `max_offset` is exclusive."""
        end = self.log_end_offset
        if start_offset == end or (max_offset is not None and start_offset >= max_offset):
            return FetchDataInfo([], 0, start_offset)
        segments = self.segments
        values = segments.values()
        try:
            i = segments.floor_index(start_offset)
            while i < len(values):
                seg = values[i]
                first = seg.translate_offset(start_offset)
                if first is None:
                    i += 1
                    continue
                max_position = seg.size
                next_base = segments.next_base_offset(i)
                if max_offset is not None and max_offset < end and (next_base is None or max_offset < next_base):
                    bound = seg.translate_offset(max_offset, first.position)
                    if bound is not None:
                        max_position = bound.position
                size = seg.read_range(first, max_bytes, max_position, min_one_message)
                if size == 0:
                    return FetchDataInfo([], 0, start_offset)
                return FetchDataInfo([FileRegion(seg.file, first.position, size)], size, first.base_offset)
        except OSError as exc:
            raise self.storage_error(exc, "read") from exc
        return FetchDataInfo([], 0, start_offset)

    def segment_stats(self) -> list[SegmentStats]:
        """What the cleaner decides on, per segment (the active one last)."""
        out = []
        for i, seg in enumerate(self.segments):
            next_offset = self.segments.next_base_offset(i)
            first_ts = -1
            if seg.size >= HEADER_SIZE:
                first_ts = read_header(seg.read_bytes(0, HEADER_SIZE), 0, 0).max_timestamp
            mtime = int(os.fstat(seg.file.fileno()).st_mtime * 1000)
            out.append(SegmentStats(seg.base_offset, self.log_end_offset if next_offset is None else next_offset,
                                    seg.size, seg.max_timestamp, first_ts, mtime))
        return out

    # --- rolling --------------------------------------------------------------------------

    def roll(self, new_base: int) -> LogSegment:
        """Start a new active segment at `new_base`; an empty active segment is replaced."""
        active = self.segments.active_segment
        if active.base_offset == new_base:
            return active  # never two segments with one base offset
        if active.size == 0:
            active.delete_files()  # an empty segment at the wrong base holds nothing
            self.segments.pop_last()
        else:
            active.on_become_inactive()
        for suffix in _SEGMENT_SUFFIXES:
            (self.dir / file_name(new_base, suffix)).unlink(missing_ok=True)  # stale leftovers above the end
        seg = self.new_segment(new_base)
        self.segments.add(seg)
        self._on_change()  # the rolled segment is flushed by the background pass
        return seg

    # --- flushing -------------------------------------------------------------------------

    @property
    def unflushed_messages(self) -> int:
        return self.log_end_offset - self.recovery_point

    def flush(self, offset: int | None = None) -> None:
        """fsync everything below `offset` (default: all) and move the recovery point there."""
        self.check_open()
        offset = self.log_end_offset if offset is None else min(offset, self.log_end_offset)
        if offset <= self.recovery_point:
            return
        try:
            active = self.segments.active_segment
            for seg in self.segments.values_between(self.recovery_point, offset):
                if seg is not active:
                    seg.write_indexes(fsync=True)
                seg.fsync()
        except OSError as exc:
            raise self.storage_error(exc, "flush") from exc
        self.recovery_point = offset
        self.last_flush_ms = self.clock()

    async def flush_async(self, offset: int | None = None) -> None:
        """`flush` with the fsyncs in a worker thread, so the event loop keeps serving."""
        offset = self.log_end_offset if offset is None else min(offset, self.log_end_offset)
        if offset <= self.recovery_point or self.closed:
            return
        segments = self.segments.values_between(self.recovery_point, offset)
        active = self.segments.active_segment
        for seg in segments:
            if seg is not active:
                seg.write_indexes()
        generation = self.truncations

        def fsync_all() -> None:
            for seg in segments:
                seg.fsync()
                if seg is not active:
                    seg.write_indexes(fsync=True)

        try:
            await run_blocking(self.io_threads, fsync_all)
        except ValueError as exc:  # a file closed meanwhile (the log deleted or closed)
            log.warning("%s: background flush failed: %s", self.dir.name, exc)
            return
        except OSError as exc:
            if self.closed:
                return
            raise self.storage_error(exc, "flush") from exc
        if generation == self.truncations and not self.closed:
            self.recovery_point = max(self.recovery_point, min(offset, self.log_end_offset))
            self.last_flush_ms = self.clock()

    def needs_time_flush(self, now: int) -> bool:
        return self.unflushed_messages > 0 and now - self.last_flush_ms >= self.config.flush_ms

    # --- truncation -----------------------------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        """Remove every batch holding an offset >= `offset` (below the log end, in the log)."""
        while len(self.segments) > 1 and self.segments.active_segment.base_offset > offset:
            self.schedule_delete(self.segments.pop_last())
        self.log_end_offset = self.segments.active_segment.truncate_to(offset)
        self._after_truncate()

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop every segment; the log restarts empty at `offset`."""
        for seg in self.segments:
            self.schedule_delete(seg)
        self.segments.reset(self.new_segment(offset))
        self.log_end_offset = offset
        self._after_truncate()

    def _after_truncate(self) -> None:
        self.truncations += 1
        self.recovery_point = min(self.recovery_point, self.log_end_offset)

    # --- deleting segments ----------------------------------------------------------------

    def remove_and_delete_segments(self, doomed: Sequence[LogSegment], now: int) -> None:
        """The oldest `len(doomed)` segments (which are `doomed`) leave the log; their files are
        renamed `.deleted` and unlinked after file.delete.delay.ms."""
        for seg in doomed:
            self.schedule_delete(seg, now)
        self.segments.remove_first(len(doomed))

    def schedule_delete(self, seg: LogSegment, now: int | None = None) -> None:
        seg.rename_to_deleted()
        due = (self.clock() if now is None else now) + self.config.file_delete_delay_ms
        self._pending_deletes.append((due, seg))
        self._on_change()

    @property
    def has_pending_deletes(self) -> bool:
        return bool(self._pending_deletes)

    def delete_pending_files(self, now: int | None = None, force: bool = False) -> int:
        """Close and unlink segments whose file.delete.delay.ms has passed (all with `force`)."""
        now = self.clock() if now is None else now
        keep, count = [], 0
        for due, seg in self._pending_deletes:
            if force or due <= now:
                seg.delete_files()
                count += 1
            else:
                keep.append((due, seg))
        self._pending_deletes = keep
        return count

    # --- swapping cleaned segments in -----------------------------------------------------

    def discard_cleaned(self, base: int) -> None:
        """Remove the cleaned files of `base` that will not be swapped in."""
        for suffix in _SEGMENT_SUFFIXES:
            (self.dir / (file_name(base, suffix) + CLEANED_SUFFIX)).unlink(missing_ok=True)

    def replace_segments(self, base: int, old_bases: list[int], old_sizes: list[int], end: int) -> bool:
        """Swap the cleaned `<base>.*.cleaned` files in for the segments `old_bases` (crash-safe:
        segment_swap). Refused (False, the cleaned files removed) when those segments are no
        longer exactly what was cleaned: retention, a truncation or DeleteRecords got there first."""
        if self._swap_range(base, old_bases, old_sizes, end) is None:
            self.discard_cleaned(base)
            return False
        try:
            swap_end = self._decide_swap(self.dir, base, end)
        except OSError as exc:
            raise self.storage_error(exc, "segment swap") from exc
        self._finish_swap(base, old_bases, old_sizes, end)
        try:
            self._forget_swap(self.dir, swap_end)
        except OSError as exc:
            raise self.storage_error(exc, "segment swap") from exc
        return True

    async def replace_segments_async(self, base: int, old_bases: list[int], old_sizes: list[int], end: int) -> bool:
        """`replace_segments` with its fsyncs in a worker thread: on a disk busy writing back, each
        costs tens of milliseconds the event loop would not serve requests."""
        if self._swap_range(base, old_bases, old_sizes, end) is None:
            self.discard_cleaned(base)
            return False
        try:
            swap_end = await run_blocking(self.io_threads, self._decide_swap, self.dir, base, end)
        except OSError as exc:
            raise self.storage_error(exc, "segment swap") from exc
        if self._swap_range(base, old_bases, old_sizes, end) is None:  # changed meanwhile: undo, durably
            if self.closed:  # deleted or offline: load completes the swap of the unchanged segments, if ever
                return False
            try:
                for suffix in _SEGMENT_SUFFIXES:
                    (self.dir / (file_name(base, suffix) + SWAP_SUFFIX)).unlink(missing_ok=True)
                fsync_path(self.dir)
                swap_end.unlink(missing_ok=True)
            except OSError as exc:
                raise self.storage_error(exc, "segment swap") from exc
            return False
        self._finish_swap(base, old_bases, old_sizes, end)
        try:
            await run_blocking(self.io_threads, self._forget_swap, self.dir, swap_end)
        except OSError as exc:
            raise self.storage_error(exc, "segment swap") from exc
        return True

    def _swap_range(self, base: int, old_bases: list[int], old_sizes: list[int], end: int) -> tuple[int, int] | None:
        """The index range of the segments a swap replaces, None when they are not exactly the
        ones cleaned (or the log is closed)."""
        bases = self.segments.base_offsets()
        i = self.segments.index_of_base(base)
        j = i + len(old_bases)
        unchanged = (
            not self.closed
            and j < len(bases)  # never the active segment
            and bases[i:j] == old_bases
            and [seg.size for seg in self.segments.values()[i:j]] == old_sizes
            and bases[j] == end
        )
        return (i, j) if unchanged else None

    @staticmethod
    def _decide_swap(directory: Path, base: int, end: int) -> Path:
        """Steps 1-2 of segment_swap: from here on a crash completes the swap."""
        swap_end = write_swap_end(directory, base, end)
        rename_suffix(directory, base, CLEANED_SUFFIX, SWAP_SUFFIX)
        fsync_path(directory)
        return swap_end

    def _finish_swap(self, base: int, old_bases: list[int], old_sizes: list[int], end: int) -> None:
        """Steps 3-4 (renames only) and the swap in memory; the producer snapshots inside the
        cleaned range go with the segment boundaries they were taken at."""
        i, j = self._swap_range(base, old_bases, old_sizes, end) or (0, 0)
        try:
            for seg in self.segments.values()[i:j]:
                self.schedule_delete(seg)
            rename_suffix(self.dir, base, SWAP_SUFFIX, "", log_first=True)
            cleaned = self.new_segment(base)
            cleaned.load(is_active=False)
        except OSError as exc:
            raise self.storage_error(exc, "segment swap") from exc
        self.segments.replace(i, j, cleaned)
        try:
            delete_snapshots_within(self.dir, base, end)
        except OSError as exc:
            raise self.storage_error(exc, "producer snapshot") from exc

    @staticmethod
    def _forget_swap(directory: Path, swap_end: Path) -> None:
        fsync_path(directory)
        swap_end.unlink()

    # --- closing and errors ---------------------------------------------------------------

    def close(self) -> None:
        """Close the segment files (indexes written out, no fsync of the log: see `flush`) and
        delete the segments waiting for file.delete.delay.ms."""
        for seg in self.segments:
            seg.close()
        self.delete_pending_files(force=True)
        self.closed = True

    def storage_error(self, exc: BaseException, what: str) -> KafkaStorageError:
        """An I/O error on this log's disk: tell the hook (the LogManager takes the whole log
        directory offline, as Kafka does) and return the error to raise."""
        try:
            self._on_storage_error(exc)
        except Exception:
            log.exception("%s: storage error hook failed", self.dir.name)
        return exc if isinstance(exc, KafkaStorageError) else KafkaStorageError(f"{what} in {self.dir} failed: {exc}")

    def check_open(self) -> None:
        if self.closed:
            raise KafkaStorageError(f"log {self.dir.name} is closed")

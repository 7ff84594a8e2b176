"""One cleaning of one log, as files: read the segments, write the cleaned ones aside.

The work is CPU-bound (every record of the log is parsed, compressed batches are inflated and
compressed again), so the broker runs it in a child process (`python -m
odradek.broker.log.cleaner_worker`, a CleanTask as JSON on stdin, a CleanResult as JSON on
stdout): the GIL would otherwise take it from the event loop. The child only reads segments the
broker no longer writes (never the active one) and only writes `<base>.*.cleaned` files; the
broker swaps them in (Log.replace_segments) after checking that the log did not change meanwhile,
and deletes leftovers of a child that died. log.cleaner.io.max.bytes.per.second throttles reads
and writes together, as Kafka's Throttler.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from odradek.common.clock import monotonic_s

from .cleaner import (
    BatchContext,
    CleanedTransactions,
    OffsetMap,
    SegmentStats,
    add_batch_to_map,
    clean_batch,
    delete_horizon_ms,
    joins_group,
)
from .control_batch import TRANSACTIONAL_MASK
from .errors import CorruptRecordError
from .record_batch import BatchInfo, check_batch
from .segment import LOG_SUFFIX, LogSegment, file_name
from .transaction_index import AbortedTxn

CLEANED_SUFFIX = ".cleaned"
_READ_CHUNK = 1 << 20
_WRITE_CHUNK = 1 << 20
_FSYNC_THREADS = 8


@dataclass
class CleanTask:
    """Everything one cleaning needs, as plain data (it crosses a process boundary as JSON)."""

    directory: str
    segments: list[SegmentStats]
    """The log's segments from its start up to the first uncleanable offset (never the active one)."""
    log_start_offset: int
    first_dirty_offset: int
    first_uncleanable_offset: int
    map_capacity: int
    delete_retention_ms: int
    last_data_offsets: dict[int, int]
    aborted: list[AbortedTxn]
    """The aborted transactions overlapping [log start, first uncleanable offset)."""
    txn_entries: dict[int, list[AbortedTxn]]
    """Each segment's transaction index, by base offset."""
    max_segment_bytes: int
    max_index_entries: int
    index_interval_bytes: int
    io_max_bytes_per_second: float = float("inf")
    parent_pid: int = 0

    def to_json(self) -> str:
        data = asdict(self)
        data["io_max_bytes_per_second"] = min(self.io_max_bytes_per_second, 1e300)
        return json.dumps(data)

    @classmethod
    def from_json(cls, text: str) -> CleanTask:
        data = json.loads(text)
        data["segments"] = [SegmentStats(*s) for s in data["segments"]]
        data["last_data_offsets"] = {int(k): v for k, v in data["last_data_offsets"].items()}
        data["aborted"] = [AbortedTxn(*t) for t in data["aborted"]]
        data["txn_entries"] = {int(k): [AbortedTxn(*t) for t in v] for k, v in data["txn_entries"].items()}
        return cls(**data)


@dataclass
class CleanedGroup:
    base_offset: int
    old_bases: list[int]
    old_sizes: list[int]
    end_offset: int
    """The base of the segment after the group: the swap replaces every segment in [base, end)."""
    size: int


@dataclass
class CleanResult:
    end_offset: int
    """Where the next cleaning's dirty section starts (the cleaner-offset-checkpoint)."""
    groups: list[CleanedGroup] = field(default_factory=list)
    bytes_read: int = 0
    bytes_written: int = 0
    records_removed: int = 0
    map_size: int = 0

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> CleanResult:
        data = json.loads(text)
        data["groups"] = [CleanedGroup(**g) for g in data["groups"]]
        return cls(**data)


class Throttler:
    """Sleeps when more than `rate` bytes a second went by (Kafka's Throttler)."""

    def __init__(self, rate: float):
        self.rate = rate
        self.start = monotonic_s()
        self.done = 0

    def __call__(self, n: int) -> None:
        self.done += n
        if self.rate == float("inf") or self.rate <= 0:
            return
        ahead = self.done / self.rate - (monotonic_s() - self.start)
        if ahead > 0.001:
            time.sleep(ahead)


def read_batches(path: Path, size: int, throttle: Throttler) -> Iterator[tuple[bytes, BatchInfo]]:
    """(bytes, header) of each batch of a segment's first `size` bytes, CRC checked: the cleaner
    never rewrites a corrupt batch (CorruptRecordError stops the cleaning of the log)."""
    with open(path, "rb", buffering=0) as f:
        buf, offset, pos = b"", 0, 0  # buf holds the file from `offset`
        while offset + pos < size:
            info = check_batch(buf, pos, len(buf))
            if info is None:
                rest = buf[pos:]
                want = max(_READ_CHUNK, len(rest) + 1)
                chunk = os.pread(f.fileno(), min(want, size - offset - len(buf)), offset + len(buf))
                if not chunk:
                    raise CorruptRecordError(f"{path}: ends inside a batch at {offset + pos}")
                throttle(len(chunk))
                offset, buf, pos = offset + pos, rest + chunk, 0
                continue
            yield buf[pos : pos + info.size], info._replace(position=0)
            pos += info.size


def build_offset_map(task: CleanTask, throttle: Throttler) -> OffsetMap:
    """The dirty section's keys, segment by segment until the map is full (Kafka's buildOffsetMap)."""
    offset_map = OffsetMap.for_range(task.map_capacity, task.first_dirty_offset, task.first_uncleanable_offset)
    txns = CleanedTransactions(list(task.aborted))
    directory = Path(task.directory)
    for seg in task.segments:
        if seg.next_offset <= task.first_dirty_offset:
            continue
        for data, info in read_batches(directory / file_name(seg.base_offset, LOG_SUFFIX), seg.size, throttle):
            if info.next_offset <= task.first_dirty_offset:
                continue
            add_batch_to_map(offset_map, data, info, txns, task.first_dirty_offset,
                             bool(info.attributes & TRANSACTIONAL_MASK))
            if offset_map.full:
                return offset_map
        offset_map.end = max(offset_map.end, seg.next_offset)
    offset_map.end = max(offset_map.end, task.first_uncleanable_offset)
    return offset_map


def clean(task: CleanTask) -> CleanResult:
    """Clean the log's segments below the end of the offset map into `<base>.*.cleaned` files."""
    throttle = Throttler(task.io_max_bytes_per_second)
    directory = Path(task.directory)
    offset_map = build_offset_map(task, throttle)
    result = CleanResult(offset_map.end, map_size=len(offset_map))
    horizon = delete_horizon_ms(task.segments, task.first_dirty_offset, task.delete_retention_ms)
    txns = CleanedTransactions(list(task.aborted))
    group: _CleanedSegment | None = None
    try:
        for seg in task.segments:
            if seg.base_offset >= offset_map.end:
                break
            if group is not None and not joins_group(group.base, group.size, seg, task.max_segment_bytes,
                                                     task.max_index_entries, task.index_interval_bytes):
                result.groups.append(group.close())
                group = None
            if group is None:
                group = _CleanedSegment(task, directory, seg.base_offset, throttle, result)
            group.add(seg, BatchContext(offset_map, seg.last_modified_ms > horizon, task.last_data_offsets), txns)
        if group is not None:
            result.groups.append(group.close())
            group = None
    finally:
        if group is not None:
            group.abandon()
    fsync_all([directory / (file_name(g.base_offset, suffix) + CLEANED_SUFFIX) for g in result.groups
               for suffix in (".log", ".index", ".timeindex", ".txnindex")])
    result.bytes_read = throttle.done - result.bytes_written
    return result


class _CleanedSegment:
    """One cleaned segment being written: the segments of its group are added one by one."""

    def __init__(self, task: CleanTask, directory: Path, base: int, throttle: Throttler, result: CleanResult):
        self.task, self.base, self.throttle, self.result = task, base, throttle, result
        for suffix in (".log", ".index", ".timeindex", ".txnindex"):
            (directory / (file_name(base, suffix) + CLEANED_SUFFIX)).unlink(missing_ok=True)
        self.out = LogSegment(directory, base, index_interval_bytes=task.index_interval_bytes,
                              max_index_entries=task.max_index_entries, file_suffix=CLEANED_SUFFIX)
        self.segments: list[SegmentStats] = []
        self.directory = directory
        self.pending: list[bytes] = []
        self.infos: list[BatchInfo] = []
        self.pending_size = 0
        self.markers_kept: set[int] = set()

    @property
    def size(self) -> int:
        """Bytes written so far, pending ones included."""
        return self.out.size + self.pending_size

    def _flush(self) -> None:
        if self.pending:
            self.out.append(b"".join(self.pending), self.infos, [i.base_offset for i in self.infos], None)
            self.throttle(self.pending_size)
            self.result.bytes_written += self.pending_size
        self.pending, self.infos, self.pending_size = [], [], 0

    def add(self, seg: SegmentStats, ctx: BatchContext, txns: CleanedTransactions) -> None:
        self.segments.append(seg)
        task, result = self.task, self.result
        path = self.directory / file_name(seg.base_offset, LOG_SUFFIX)
        for data, info in read_batches(path, seg.size, self.throttle):
            if info.base_offset < task.log_start_offset and info.next_offset <= task.log_start_offset:
                result.records_removed += info.records_count  # below the log start: gone
                continue
            outcome = clean_batch(data, info, ctx, txns, bool(info.attributes & TRANSACTIONAL_MASK))
            result.records_removed += outcome.removed_records
            if outcome.data is None:
                continue
            if info.is_control:
                self.markers_kept.add(info.base_offset)
            kept = info if outcome.data is data else check_batch(outcome.data, 0, len(outcome.data))
            assert kept is not None
            self.infos.append(kept._replace(position=self.pending_size))
            self.pending.append(outcome.data)
            self.pending_size += len(outcome.data)
            if self.pending_size >= _WRITE_CHUNK:
                self._flush()

    def close(self) -> CleanedGroup:
        out = self.out
        try:
            self._flush()
            for seg in self.segments:
                for txn in self.task.txn_entries.get(seg.base_offset, []):
                    if txn.last_offset in self.markers_kept:
                        out.txn_index.append(txn)
            out.on_become_inactive()
            out.write_indexes()
            size = out.size
        finally:
            self.abandon()
        mtime = self.segments[-1].last_modified_ms / 1000
        os.utime(out.log_path, (mtime, mtime))  # retention and the delete horizon go by the old segments' age
        return CleanedGroup(self.base, [s.base_offset for s in self.segments], [s.size for s in self.segments],
                            self.segments[-1].next_offset, size)

    def abandon(self) -> None:
        """Closes the file (a failed cleaning's leftovers are deleted by the broker)."""
        if not self.out.closed:
            self.out.file.close()
            self.out.closed = True


def fsync_all(paths: list[Path]) -> None:
    """fsync the files that exist, several at once: the filesystem's journal commits then serve
    many (one after the other they cost a commit each)."""

    def sync(path: Path) -> None:
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    with ThreadPoolExecutor(max_workers=_FSYNC_THREADS) as pool:
        list(pool.map(sync, paths))


def _die_with_parent(parent_pid: int) -> None:
    """A broker killed mid-cleaning must not leave a child writing into its log directory."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if parent_pid and os.getppid() != parent_pid:
        os._exit(1)


WORKER_NICENESS = 19
"""The cleaner is background work: when the broker's event loop and a cleaning both want a core,
the scheduler gives it to the broker (CFS weights 1024 to 15), so produce latency stays."""


def main() -> int:
    task = CleanTask.from_json(sys.stdin.read())
    _die_with_parent(task.parent_pid)
    try:
        os.nice(WORKER_NICENESS)
    except OSError:
        pass
    try:
        result = clean(task)
    except (CorruptRecordError, OSError) as exc:
        sys.stdout.write(json.dumps({"error": f"{type(exc).__name__}: {exc}"}))
        return 1
    sys.stdout.write(result.to_json())
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""LeaderEpochFileCache: which leader epoch started at which offset, for truncation by epoch.

A follower asks its new leader for the end offset of its own latest epoch (OffsetForLeaderEpoch)
and truncates there; this cache answers that question (from memory) and is persisted in the
partition's `leader-epoch-checkpoint`.

Changes are made in memory only, and the file may lag them: it is written before the log's
recovery point moves (`Log.flush`), when the log closes, and by the LogManager's background pass
soon after any change. That is enough, because every batch carries its leader epoch: a load after
a crash drops the entries at or after the first segment it recovers and rebuilds them from the
batches there (LogLoader), and what lies below the recovery point had its entries written first.
So no leadership change or append waits for a file: a broker taking over 9,000 leaderships wrote
9,000 checkpoints (a new file, two fsyncs and a rename each) before leading any of them. Only
entries with no batch after them can be lost in a crash (a leader's epoch begun at the log end with
nothing appended under it); no answer depends on them after a restart, which brings a newer epoch.
"""

import asyncio
import bisect
import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from odradek.common.executors import BlockingExecutor, run_blocking

from .checkpoint import read_checkpoint, write_checkpoint

log = logging.getLogger(__name__)

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1
FILE_NAME = "leader-epoch-checkpoint"


class EpochEntry(NamedTuple):
    epoch: int
    start_offset: int


class LeaderEpochFileCache:
    def __init__(self, path: Path, log_end_offset: Callable[[], int]):
        self.path = path
        self._log_end_offset = log_end_offset
        self.entries: list[EpochEntry] = []
        self._version = 0
        """Bumped by every change; `_written` is the version the file holds."""
        self._written = 0
        self._write_lock = threading.Lock()
        self.on_change: Callable[[], None] | None = None
        """Told when the entries change (the log's owner then writes the file in the background)."""
        try:
            rows = read_checkpoint(path) or []
            self.entries = [EpochEntry(int(e), int(o)) for e, o in rows]
        except (ValueError, OSError) as exc:
            # A damaged cache only costs precision: followers then truncate to the high watermark.
            log.warning("ignoring unreadable %s: %s", path, exc)

    @property
    def latest_epoch(self) -> int:
        return self.entries[-1].epoch if self.entries else UNDEFINED_EPOCH

    @property
    def earliest_entry(self) -> EpochEntry | None:
        return self.entries[0] if self.entries else None

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that `epoch` starts at `start_offset`; only a newer epoch adds an entry (True).

        Entries starting at or after `start_offset` conflict with the new one and are dropped.
        """
        if epoch < 0 or epoch <= self.latest_epoch:
            return False
        while self.entries and self.entries[-1].start_offset >= start_offset:
            self.entries.pop()
        self.entries.append(EpochEntry(epoch, start_offset))
        self._bump()
        return True

    def end_offset_for(self, requested_epoch: int) -> tuple[int, int]:
        """(epoch, end offset) as OffsetForLeaderEpoch answers it (Kafka's endOffsetFor)."""
        if requested_epoch == UNDEFINED_EPOCH or not self.entries:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if requested_epoch == self.latest_epoch:
            return requested_epoch, self._log_end_offset()
        epochs = [e.epoch for e in self.entries]
        i = bisect.bisect_right(epochs, requested_epoch)  # first entry with a larger epoch
        if i == len(self.entries):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if i == 0:
            return requested_epoch, self.entries[0].start_offset
        return self.entries[i - 1].epoch, self.entries[i].start_offset

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop entries starting at or after `end_offset` (the log was truncated there)."""
        if self.entries and self.entries[-1].start_offset >= end_offset:
            self.entries = [e for e in self.entries if e.start_offset < end_offset]
            self._bump()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at `start_offset`: older entries go, the one covering it is moved up."""
        keep = [e for e in self.entries if e.start_offset >= start_offset]
        older = [e for e in self.entries if e.start_offset < start_offset]
        if not older:
            return
        if not keep or keep[0].start_offset > start_offset:
            keep.insert(0, EpochEntry(older[-1].epoch, start_offset))
        self.entries = keep
        self._bump()

    def _bump(self) -> None:
        self._version += 1
        if self.on_change is not None:
            self.on_change()

    @property
    def dirty(self) -> bool:
        """Changed since the file was last written (a write is due)."""
        return self._version > self._written

    def clear(self) -> None:
        if self.entries:
            self.entries = []
            self._bump()

    def flush(self) -> None:
        """Write the file now if it lags the entries (blocks: two fsyncs)."""
        if self.dirty:
            self.write(self.snapshot())

    def snapshot(self) -> tuple[int, list[str]]:
        """(version, checkpoint lines) of the entries now; taken on the owner's thread."""
        return self._version, [f"{e.epoch} {e.start_offset}" for e in self.entries]

    def write(self, snapshot: tuple[int, list[str]]) -> None:
        """Write a snapshot unless a newer one is already on disk (safe from any thread)."""
        version, lines = snapshot
        with self._write_lock:
            if version <= self._written:
                return
            write_checkpoint(self.path, lines)
            self._written = version


WRITE_JOBS = 16
"""Parallel jobs writing many checkpoints at once (the LogManager's background pass after a
LeaderAndIsr or a load changed thousands): each write is two fsyncs that release the GIL, 6.5 ms
each in sequence on a busy disk here and 0.33 ms each with 16 threads. The jobs run on the logs'
own threads (LogManager.io_threads), which has more, so other log work is not shut out."""

Snapshot = tuple[LeaderEpochFileCache, tuple[int, list[str]]]


def write_snapshots(snapshots: list[Snapshot]) -> dict[LeaderEpochFileCache, OSError]:
    """Write (cache, `cache.snapshot()`) pairs one after another; blocks. Returns the caches whose
    write failed, with the error (each is tried: one failed disk must not stop the others)."""
    failed: dict[LeaderEpochFileCache, OSError] = {}
    for cache, snapshot in snapshots:
        try:
            cache.write(snapshot)
        except OSError as e:
            failed[cache] = e
    return failed


async def write_in_worker(caches: list[LeaderEpochFileCache],
                          io_threads: BlockingExecutor | None = None) -> dict[LeaderEpochFileCache, OSError]:
    """Write the caches' current snapshots (taken here, on the owner's thread) in up to
    WRITE_JOBS jobs on `io_threads` (the logs' own; asyncio's default executor without): the
    fsyncs run side by side, never on the event loop. Returns the failed ones, as `write_snapshots`."""
    snapshots = [(cache, cache.snapshot()) for cache in caches]
    jobs = [snapshots[i::WRITE_JOBS] for i in range(min(WRITE_JOBS, len(snapshots)))]
    failed: dict[LeaderEpochFileCache, OSError] = {}
    for result in await asyncio.gather(*(run_blocking(io_threads, write_snapshots, job) for job in jobs)):
        failed.update(result)
    return failed

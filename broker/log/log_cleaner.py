"""LogCleaner: compaction of the broker's `cleanup.policy=compact` logs (Kafka's LogCleaner and
LogCleanerManager), the shell around the pure core in `cleaner`.

A pass picks the dirtiest log (`cleaner.grab_filthiest`), hands one cleaning of it to a worker
process (`cleaner_worker`: CPU-bound work the GIL would otherwise take from the event loop),
swaps the cleaned segments in (Log.replace_segments) and records how far the log is clean in
each log directory's `cleaner-offset-checkpoint`. `log.cleaner.threads` cleanings run at once,
never two of one log; the count is dynamic, as Kafka's (at most doubled or halved per change). A
cleaning is thrown away when its log was truncated meanwhile (the records that made older ones
obsolete may be gone); a disk error takes the log directory offline.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from odradek.common.clock import monotonic_s, now_ms
from odradek.common.config import BrokerConfig
from odradek.common.config_def import ConfigException
from odradek.common.executors import BlockingExecutor, run_blocking

from .checkpoint import read_offsets, write_offsets
from .cleaner import LogToClean, grab_filthiest, log_to_clean, map_capacity
from .cleaner_worker import CleanResult, CleanTask
from .log import Log

log = logging.getLogger(__name__)

CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
_WORKER_MODULE = "odradek.broker.log.cleaner_worker"
_KILL_WAIT_S = 5


@dataclass(frozen=True)
class CleanerConfig:
    """The broker's log.cleaner.* settings."""

    enable: bool = True
    threads: int = 1
    dedupe_buffer_size: int = 128 * 1024 * 1024
    io_max_bytes_per_second: float = float("inf")
    backoff_ms: int = 15_000

    @classmethod
    def from_broker(cls, config: BrokerConfig) -> CleanerConfig:
        return cls(config.log_cleaner_enable, config.log_cleaner_threads, config.log_cleaner_dedupe_buffer_size,
                   config.log_cleaner_io_max_bytes_per_second, config.log_cleaner_backoff_ms)


def validate_threads(current: int, new: int) -> None:
    """Kafka's LogCleaner.validateReconfiguration: at least one, and a change neither more than
    doubles nor less than halves the count (ConfigException otherwise)."""
    if new < 1:
        raise ConfigException("log.cleaner.threads", message="Log cleaner threads should be at least 1")
    if new < current // 2:
        raise ConfigException("log.cleaner.threads", message=(
            f"Log cleaner threads cannot be reduced to less than half the current value {current}"))
    if new > current * 2:
        raise ConfigException("log.cleaner.threads", message=(
            f"Log cleaner threads cannot be increased to more than double the current value {current}"))


def plan(partition_log: Log, checkpoint: int | None, now: int) -> LogToClean:
    """The log's cleanable state now."""
    config = partition_log.config
    return log_to_clean(
        (partition_log.topic, partition_log.partition), partition_log.segment_stats(), checkpoint,
        partition_log.log_start_offset, partition_log.log_end_offset, partition_log.last_stable_offset, now,
        config.min_compaction_lag_ms, config.max_compaction_lag_ms,
    )


def make_task(partition_log: Log, to_clean: LogToClean, cleaner: CleanerConfig) -> CleanTask:
    """The worker's task for cleaning `partition_log` up to `to_clean.first_uncleanable_offset`."""
    config = partition_log.config
    stats = [s for s in partition_log.segment_stats()[:-1] if s.next_offset <= to_clean.first_uncleanable_offset]
    start, end = partition_log.log_start_offset, to_clean.first_uncleanable_offset
    txn_entries = {seg.base_offset: list(seg.txn_index.entries) for seg in partition_log.segments[: len(stats)]
                   if seg.txn_index.entries}
    return CleanTask(
        directory=str(partition_log.dir), segments=stats, log_start_offset=start,
        first_dirty_offset=to_clean.first_dirty_offset, first_uncleanable_offset=end,
        map_capacity=map_capacity(cleaner.dedupe_buffer_size, cleaner.threads),
        delete_retention_ms=config.delete_retention_ms, last_data_offsets=partition_log.last_data_offsets(),
        aborted=partition_log.collect_aborted_transactions(start, end), txn_entries=txn_entries,
        max_segment_bytes=config.segment_bytes, max_index_entries=config.max_index_entries,
        index_interval_bytes=config.index_interval_bytes,
        io_max_bytes_per_second=cleaner.io_max_bytes_per_second / max(1, cleaner.threads), parent_pid=os.getpid(),
    )


def apply_result(partition_log: Log, result: CleanResult, truncations: int) -> bool:
    """Swap the cleaned groups in, oldest first; False (the rest discarded) when the log was
    truncated since the task was made or a group no longer matches its segments."""
    swapped = partition_log.truncation_count == truncations
    for group in result.groups:
        if swapped:
            swapped = partition_log.replace_segments(group.base_offset, group.old_bases, group.old_sizes,
                                                     group.end_offset)
        if not swapped:
            partition_log.discard_cleaned(group.base_offset)
    return swapped


async def apply_result_async(partition_log: Log, result: CleanResult, truncations: int) -> bool:
    """`apply_result` with the swaps' fsyncs off the event loop."""
    swapped = True
    for group in result.groups:
        if swapped:
            swapped = partition_log.truncation_count == truncations and await partition_log.replace_segments_async(
                group.base_offset, group.old_bases, group.old_sizes, group.end_offset)
        if not swapped:
            partition_log.discard_cleaned(group.base_offset)
    return swapped


def clean_now(partition_log: Log, checkpoint: int | None = None, now: int | None = None,
              cleaner: CleanerConfig = CleanerConfig()) -> CleanResult | None:
    """One cleaning in this process, whatever the dirty ratio (tests, tools); None when there is
    nothing to clean or it was thrown away."""
    from .cleaner_worker import clean

    to_clean = plan(partition_log, checkpoint, partition_log.clock() if now is None else now)
    if to_clean.first_uncleanable_offset <= to_clean.first_dirty_offset:
        return None
    truncations = partition_log.truncation_count
    result = clean(make_task(partition_log, to_clean, cleaner))
    return result if apply_result(partition_log, result, truncations) else None


class LogCleaner:
    """The background cleaner of one broker's logs."""

    def __init__(self, logs: Callable[[], list[tuple[Path, Log]]], config: CleanerConfig,
                 on_dir_failure: Callable[[Path, BaseException], None] | None = None, *,
                 clock: Callable[[], int] = now_ms, io_threads: BlockingExecutor | None = None):
        self.clock = clock
        self.io_threads = io_threads
        """Wall-clock milliseconds for the compaction lag (injectable for tests)."""
        self._logs = logs
        """(log dir, log) of every online log."""
        self.config = config
        self._on_dir_failure = on_dir_failure
        self._checkpoints: dict[Path, dict[tuple[str, int], int]] = {}
        self._in_progress: set[tuple[str, int]] = set()
        self._uncleanable: set[tuple[str, int]] = set()
        """Logs whose cleaning met a corrupt batch: left alone until the broker restarts (Kafka's)."""
        self._procs: set[asyncio.subprocess.Process] = set()
        self._loops: dict[int, asyncio.Task[None]] = {}
        self._reconfigured = asyncio.Event()
        self.cleanings = 0
        """Cleanings swapped in since start (for tests and metrics)."""
        self.last_result: CleanResult | None = None

    # --- checkpoints ------------------------------------------------------------------------

    def load_checkpoints(self, log_dirs: list[Path]) -> None:
        for d in log_dirs:
            try:
                self._checkpoints[d] = read_offsets(d / CLEANER_OFFSET_CHECKPOINT)
            except (ValueError, OSError) as exc:
                log.warning("%s: unreadable %s (%s): every compacted log is dirty", d, CLEANER_OFFSET_CHECKPOINT, exc)
                self._checkpoints[d] = {}

    def checkpoint(self, log_dir: Path, key: tuple[str, int]) -> int | None:
        return self._checkpoints.get(log_dir, {}).get(key)

    async def _write_checkpoint(self, log_dir: Path, key: tuple[str, int], offset: int) -> None:
        live = {(lg.topic, lg.partition) for d, lg in self._logs() if d == log_dir}
        offsets = {k: v for k, v in self._checkpoints.setdefault(log_dir, {}).items() if k in live}
        offsets[key] = offset
        self._checkpoints[log_dir] = offsets
        try:
            await run_blocking(self.io_threads, write_offsets, log_dir / CLEANER_OFFSET_CHECKPOINT, dict(offsets))
        except OSError as exc:
            self._dir_failed(log_dir, exc)

    def truncate_checkpoint(self, log_dir: Path, key: tuple[str, int], end: int) -> None:
        """A truncated log is dirty again from its new end (Kafka's maybeTruncateCheckpoint); the
        file follows at the next cleaning."""
        offsets = self._checkpoints.get(log_dir, {})
        if offsets.get(key, -1) > end:
            offsets[key] = end

    def _dir_failed(self, log_dir: Path, exc: BaseException) -> None:
        if self._on_dir_failure is not None:
            self._on_dir_failure(log_dir, exc)

    # --- choosing ---------------------------------------------------------------------------

    def grab_filthiest(self, now: int) -> tuple[Path, Log, LogToClean] | None:
        """The log to clean next, if any (Kafka's grabFilthiestCompactedLog)."""
        candidates, found, ratios = [], {}, {}
        for log_dir, partition_log in self._logs():
            key = (partition_log.topic, partition_log.partition)
            if (partition_log.closed or key in self._in_progress or key in self._uncleanable
                    or not partition_log.config.compacts):
                continue
            to_clean = plan(partition_log, self.checkpoint(log_dir, key), now)
            candidates.append(to_clean)
            found[key] = (log_dir, partition_log)
            ratios[key] = partition_log.config.min_cleanable_dirty_ratio
        chosen = grab_filthiest(candidates, ratios)
        return None if chosen is None else (*found[chosen.key], chosen)

    # --- running ----------------------------------------------------------------------------

    def reconfigure(self, config: CleanerConfig) -> None:
        """New settings, from each loop's next cleaning; a new thread count starts loops or
        retires the extra ones once their current cleaning is done."""
        self.config = config
        self._reconfigured.set()

    @property
    def threads_running(self) -> int:
        return sum(not task.done() for task in self._loops.values())

    async def run(self, stop: asyncio.Event) -> None:
        """`log.cleaner.threads` loops until `stop` is set; the worker processes are killed then."""
        if not self.config.enable:
            return
        try:
            while not stop.is_set():
                self._reconfigured.clear()
                for i in range(self.config.threads):
                    if i not in self._loops or self._loops[i].done():
                        self._loops[i] = asyncio.create_task(self._loop(stop, i), name=f"log-cleaner-{i}")
                waits = [asyncio.create_task(stop.wait()), asyncio.create_task(self._reconfigured.wait())]
                try:
                    await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    for waiter in waits:
                        waiter.cancel()
        finally:
            for proc in list(self._procs):
                if proc.returncode is None:
                    proc.kill()
            loops = list(self._loops.values())
            for task in loops:
                task.cancel()
            await asyncio.gather(*loops, return_exceptions=True)

    async def _loop(self, stop: asyncio.Event, index: int) -> None:
        """Cleaning after cleaning while this loop is among the first `log.cleaner.threads`."""
        while not stop.is_set() and index < self.config.threads:
            try:
                cleaned = await self.clean_filthiest()
            except Exception:
                log.exception("log cleaning failed")
                cleaned = False
            if not cleaned:
                try:
                    await asyncio.wait_for(stop.wait(), self.config.backoff_ms / 1000)
                except TimeoutError:
                    pass

    async def clean_filthiest(self) -> bool:
        """Clean the dirtiest log once; False when no log needed it."""
        chosen = self.grab_filthiest(self.clock())
        if chosen is None:
            return False
        log_dir, partition_log, to_clean = chosen
        key = to_clean.key
        self._in_progress.add(key)
        try:
            return await self._clean(log_dir, partition_log, to_clean)
        finally:
            self._in_progress.discard(key)

    async def _clean(self, log_dir: Path, partition_log: Log, to_clean: LogToClean) -> bool:
        started = monotonic_s()
        truncations = partition_log.truncation_count
        task = make_task(partition_log, to_clean, self.config)
        log.info("cleaning %r from %d to %d (dirty ratio %.2f)", partition_log, to_clean.first_dirty_offset,
                 to_clean.first_uncleanable_offset, to_clean.cleanable_ratio)
        result = await self._run_worker(log_dir, partition_log, task)
        if result is None or partition_log.closed:
            return False
        if not await apply_result_async(partition_log, result, truncations):
            log.info("%r changed while it was cleaned; the cleaning was thrown away", partition_log)
            return False
        key = (partition_log.topic, partition_log.partition)
        await self._write_checkpoint(log_dir, key, result.end_offset)
        self.cleanings += 1
        self.last_result = result
        elapsed = monotonic_s() - started
        log.info("cleaned %r up to %d in %.2f s: %d records removed, %.1f MB read, %.1f MB written, %d keys mapped",
                 partition_log, result.end_offset, elapsed, result.records_removed, result.bytes_read / 1e6,
                 result.bytes_written / 1e6, result.map_size)
        return True

    async def _run_worker(self, log_dir: Path, partition_log: Log, task: CleanTask) -> CleanResult | None:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", _WORKER_MODULE, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        self._procs.add(proc)
        try:
            out, err = await proc.communicate(task.to_json().encode())
        except asyncio.CancelledError:
            if proc.returncode is None:
                proc.kill()
                try:
                    await asyncio.wait_for(proc.wait(), _KILL_WAIT_S)
                except TimeoutError:
                    log.warning("cleaner worker %d did not exit after SIGKILL", proc.pid)
            raise
        finally:
            self._procs.discard(proc)
        if proc.returncode == 0:
            return CleanResult.from_json(out.decode())
        message = out.decode(errors="replace") or err.decode(errors="replace")[-2000:]
        if partition_log.closed:
            return None
        if "OSError" in message and "FileNotFoundError" not in message:
            log.error("cleaning %r failed on its disk: %s", partition_log, message)
            self._dir_failed(log_dir, OSError(message))
        else:
            log.error("cleaning %r failed (exit %s): %s; it is left uncleaned until restart", partition_log,
                      proc.returncode, message)
            self._uncleanable.add((partition_log.topic, partition_log.partition))
        for group_base in _cleaned_bases(partition_log.dir):
            partition_log.discard_cleaned(group_base)
        return None


def _cleaned_bases(directory: Path) -> set[int]:
    try:
        names = os.listdir(directory)
    except OSError:
        return set()
    return {int(n.split(".", 1)[0]) for n in names if n.endswith(".cleaned") and n.split(".", 1)[0].isdigit()}

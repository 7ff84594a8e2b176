"""LogManager: every partition log in the broker's `log.dirs`, and the background work on them.

It owns the per-directory files Kafka keeps: the clean-shutdown marker (skip recovery when
present) and `recovery-point-offset-checkpoint` (recover only what was not flushed), and the
log cleaner (which keeps `cleaner-offset-checkpoint`).

A log directory whose disk fails (any I/O error, ENOSPC included) goes offline as a whole, as in
Kafka (KIP-112): its logs are dropped and never touched again until the broker restarts, new logs
go to the other directories, and `log_dir_failure_listeners` hear of it (the ReplicaManager then
answers KAFKA_STORAGE_ERROR for those partitions and tells the controller).
"""

import asyncio
import logging
import os
import re
import shutil
import threading
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from odradek.common.clock import monotonic_s, now_ms
from odradek.common.config import BrokerConfig
from odradek.common.executors import BlockingExecutor

from .checkpoint import can_sync_filesystem, fsync_path, read_offsets, sync_filesystem, write_offsets
from .config import LogConfig
from .errors import KafkaStorageError
from .leader_epoch import write_in_worker
from .log import Log, parse_dir_name
from .log_cleaner import CleanerConfig, LogCleaner

log = logging.getLogger(__name__)

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
"""Where DeleteRecords (and followers following it) moved a log's start inside its first segment."""


class DuplicateLogError(KafkaStorageError):
    """One partition in two log directories: a configuration error, not a disk failure."""


_DELETE_DIR = re.compile(r"^(?P<name>.+-\d+)\.(?P<uuid>[0-9a-f]{32})-delete$")
_MAX_TICK_MS = 1000
SHUTDOWN_THREADS = 64
"""Threads flushing and closing the logs at shutdown without syncfs: their fsyncs overlap, and
ext4 commits concurrent ones together (3,000 small writes and fsyncs here: 0.37-0.46 s on 16 threads,
0.24-0.27 s on 64, no better on 128); 2 fsyncs a log, 9,000 logs took 2.3 s on 16."""
SYNCFS_SHUTDOWN_THREADS = 4
"""The same when one syncfs makes the closes durable: a close is then mostly Python (indexes
written out, files closed, 90 us a log here), which more threads only slow down on the GIL
(6,000 logs: 0.83 s on one thread, 1.51 s on 64); a few still overlap the files a close
creates (a snapshot, an epoch checkpoint)."""
LOG_IO_THREADS = 24
"""The logs' own worker threads for blocking disk work (Kafka's background.threads, the scheduler
that runs its log flushes and checkpoints, is 10): a batch of leader-epoch checkpoints takes up to
WRITE_JOBS (16) of them and the flushes, creations and swaps keep the rest."""
_MIN_TICK_MS = 10


class LogManager:
    def __init__(self, log_dirs: list[Path], broker_config: BrokerConfig, *, clock: Callable[[], int] = now_ms):
        if not log_dirs:
            raise ValueError("at least one log dir is needed")
        self.clock = clock
        """Wall-clock milliseconds for the logs and the background work (injectable for tests)."""
        self.log_dirs = [Path(d) for d in log_dirs]
        self.broker_config = broker_config
        self.default_config = LogConfig.from_broker(broker_config, {})
        self._topic_overrides: dict[str, tuple[int, dict[str, str]]] = {}
        """topic → (zxid, overrides) of the newest read of its `/config/topics/<t>` applied here."""
        self._topic_configs: dict[str, LogConfig] = {}
        """topic → its LogConfig (broker defaults + overrides), computed once per change."""
        self._logs: dict[tuple[str, int], Log] = {}
        self._dir_of: dict[tuple[str, int], Path] = {}
        self._doomed_dirs: list[tuple[int, Path, Log | None]] = []
        self._written_checkpoints: dict[Path, dict[tuple[str, int], int]] = {}
        self._written_start_offsets: dict[Path, dict[tuple[str, int], int]] = {}
        self._checkpoint_lock = threading.Lock()
        """One recovery-point write at a time: the background pass writes from a worker thread
        while a deletion or truncation may write from the event loop (they share a temp file)."""
        self._offline_lock = threading.Lock()
        self._dir_fds: dict[Path, int] = {}
        """A descriptor of each loaded directory, opened at load where `sync_filesystem` exists:
        the shutdown's syncfs through it also reports every write-back error since then."""
        self.offline_dirs: set[Path] = set()
        """Directories taken offline by an I/O error; they stay so until the broker restarts."""
        self.io_threads = BlockingExecutor("log-io", LOG_IO_THREADS)
        """The logs' blocking disk work (flush fsyncs, checkpoints, creation, cleaner swaps):
        threads of their own, so it never holds the ones other work needs (closed by the owner
        after shutdown)."""
        self.cleaner = LogCleaner(self.logs_with_dirs, CleanerConfig.from_broker(broker_config), self.mark_offline,
                                  clock=self.clock, io_threads=self.io_threads)
        """Compaction of the cleanup.policy=compact logs (run by `run_background`)."""
        self.log_dir_failure_listeners: list[Callable[[Path, list[tuple[str, int]]], None]] = []
        """Callables(log_dir, [(topic, partition)]) run (on the event loop) when a directory goes
        offline, with the partitions it held."""

    # --- lifecycle ------------------------------------------------------------------------

    def topics_on_disk(self) -> set[str]:
        """The topics of the partition directories in log.dirs: what `startup` will load."""
        topics = set()
        for log_dir in self.log_dirs:
            if log_dir.is_dir():
                for path in log_dir.iterdir():
                    key = parse_dir_name(path.name) if path.is_dir() and not _DELETE_DIR.match(path.name) else None
                    if key is not None:
                        topics.add(key[0])
        return topics

    def startup(self, topic_overrides: Mapping[str, tuple[int, dict[str, str]]] | None = None) -> None:
        """Load every partition directory, recovering what an unclean stop may have torn. A
        directory that cannot be loaded (an I/O error) starts offline; the others are served.

        `topic_overrides` (topic → (zxid, overrides), read from ZooKeeper before) gives each log
        its topic's config: a log never runs on the broker defaults alone after a restart."""
        for topic, (zxid, overrides) in (topic_overrides or {}).items():
            self.update_topic_config(topic, overrides, zxid)
        for log_dir in self.log_dirs:
            try:
                self._load_dir(log_dir)
            except (OSError, KafkaStorageError) as exc:
                if isinstance(exc, DuplicateLogError):
                    raise
                self.mark_offline(log_dir, exc)
        if not self.online_dirs:
            raise KafkaStorageError(f"no log directory could be loaded ({', '.join(map(str, self.log_dirs))})")
        self.cleaner.load_checkpoints(self.online_dirs)
        log.info("loaded %d logs from %s", len(self._logs), ", ".join(map(str, self.online_dirs)))

    def _load_dir(self, log_dir: Path) -> None:
        log_dir.mkdir(parents=True, exist_ok=True)
        if can_sync_filesystem() and log_dir not in self._dir_fds:
            self._dir_fds[log_dir] = os.open(log_dir, os.O_RDONLY)
        marker = log_dir / CLEAN_SHUTDOWN_FILE
        clean = marker.exists()
        recovery_points = self._read_recovery_points(log_dir)
        start_offsets = self._read_log_start_offsets(log_dir)
        for path in sorted(log_dir.iterdir()):
            if not path.is_dir():
                continue
            if _DELETE_DIR.match(path.name):
                self._doomed_dirs.append((0, path, None))
                continue
            key = parse_dir_name(path.name)
            if key is None:
                log.warning("ignoring %s: not a <topic>-<partition> directory", path)
                continue
            if key in self._logs:
                raise DuplicateLogError(f"{key[0]}-{key[1]} exists in both {self._dir_of[key]} and {log_dir}")
            started = monotonic_s()
            partition_log = Log(
                path, self.log_config(key[0]), recovery_point=recovery_points.get(key, 0), had_clean_shutdown=clean,
                log_start_offset=start_offsets.get(key, 0), clock=self.clock, io_threads=self.io_threads,
            )
            self._add(key, log_dir, partition_log)
            if not clean:
                log.info("recovered %r in %.3f s", partition_log, monotonic_s() - started)
        if clean:
            marker.unlink()
            fsync_path(log_dir)
        self._write_recovery_points(log_dir, self._recovery_points_to_write(log_dir, True)[log_dir])
        self.checkpoint_log_start_offsets(log_dir, force=True)

    @property
    def online_dirs(self) -> list[Path]:
        return [d for d in self.log_dirs if d not in self.offline_dirs]

    def mark_offline(self, log_dir: Path, cause: BaseException | str) -> None:
        """Take `log_dir` offline after an I/O error (Kafka's LogDirFailureChannel): its logs are
        closed to the API and forgotten, nothing is written there any more (not even at shutdown),
        and the listeners hear which partitions went with it. Runs on the event loop (and in the
        shutdown's threads, hence the lock)."""
        log_dir = Path(log_dir)
        with self._offline_lock:
            if log_dir in self.offline_dirs or log_dir not in self.log_dirs:
                return
            self.offline_dirs.add(log_dir)
            keys = sorted(k for k, d in self._dir_of.items() if d == log_dir)
            for key in keys:
                self._dir_of.pop(key)
                self._logs.pop(key).closed = True  # its files stay as they are for recovery at restart
            self._written_checkpoints.pop(log_dir, None)
        log.error("log directory %s is offline after an I/O error (%s); %d partitions with it%s",
                  log_dir, cause, len(keys), "" if self.online_dirs else "; no log directory is left online")
        for listener in list(self.log_dir_failure_listeners):
            try:
                listener(log_dir, keys)
            except Exception:
                log.exception("log dir failure listener failed")

    def dir_of(self, topic: str, partition: int) -> Path | None:
        return self._dir_of.get((topic, partition))

    def shutdown(self) -> None:
        """Close every log, make the directories durable, checkpoint, then mark each online
        directory cleanly shut down (an offline one is left as it is: its logs are recovered at
        the next start). With syncfs the logs close without an fsync each and one syncfs per
        directory makes all of it durable: 18,000 fsyncs were most of a shutdown's close (each
        a journal commit, which threads barely overlap); without it each log is flushed."""
        failed: set[Path] = set()
        whole_fs = all(d in self._dir_fds for d in self.online_dirs)

        def close(item: tuple[Path, Log]) -> Path | None:
            log_dir, partition_log = item
            try:
                if not whole_fs:
                    partition_log.flush()
                partition_log.close(fsync=not whole_fs)
                return None
            except Exception:
                log.exception("closing %r at shutdown failed", partition_log)
                return log_dir

        def close_all(chunk: list[tuple[Path, Log]]) -> list[Path]:
            return [d for d in map(close, chunk) if d is not None]

        items = [(self._dir_of[key], partition_log) for key, partition_log in self._logs.items()]
        threads = min(SYNCFS_SHUTDOWN_THREADS if whole_fs else SHUTDOWN_THREADS, len(items))
        with ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
            for result in pool.map(close_all, [items[i::threads] for i in range(threads)]):
                failed.update(result)
        self._remove_doomed_dirs(force=True)
        by_dir = self.logs_by_dir()
        for log_dir in self.online_dirs:
            if log_dir in failed:
                continue
            try:
                if whole_fs:
                    sync_filesystem(self._dir_fds[log_dir])
                    for partition_log in by_dir.get(log_dir, {}).values():
                        partition_log.recovery_point = partition_log.log_end_offset  # all of it is on disk
                self.checkpoint_recovery_points(log_dir, force=True)
                self.checkpoint_log_start_offsets(log_dir, force=True)
                if log_dir in self.offline_dirs:
                    continue  # a checkpoint failed: recovered at the next start
                (log_dir / CLEAN_SHUTDOWN_FILE).touch()
                fsync_path(log_dir)
            except OSError:
                log.exception("could not mark %s cleanly shut down", log_dir)
        for fd in self._dir_fds.values():
            os.close(fd)
        self._dir_fds.clear()

    # --- configs --------------------------------------------------------------------------

    def log_config(self, topic: str) -> LogConfig:
        """The topic's config: the broker's defaults with the topic's overrides as last applied."""
        config = self._topic_configs.get(topic)
        return self.default_config if config is None else config

    def update_topic_config(self, topic: str, overrides: dict[str, str], zxid: int) -> bool:
        """Apply the topic's overrides, read from ZooKeeper at `zxid`, to every log of the topic
        now. A read older than one applied already changes nothing (a LeaderAndIsr and a config
        change notification may read concurrently). True when applied."""
        known = self._topic_overrides.get(topic)
        if known is not None and zxid < known[0]:
            return False
        self._topic_overrides[topic] = (zxid, dict(overrides))
        config = self._topic_configs[topic] = LogConfig.from_broker(self.broker_config, overrides)
        for (t, _), partition_log in self._logs.items():
            if t == topic:
                partition_log.config = config
        return True

    def topics_with_overrides(self) -> set[str]:
        """Topics whose config was applied here (hosted or about to be)."""
        return set(self._topic_overrides)

    def reconfigure(self, broker_config: BrokerConfig) -> None:
        """New broker-level defaults (dynamic broker configs): every log's config is recomputed,
        the cleaner's settings apply from its next cleaning."""
        self.broker_config = broker_config
        self.cleaner.reconfigure(CleanerConfig.from_broker(broker_config))
        self.default_config = LogConfig.from_broker(broker_config, {})
        self._topic_configs = {t: LogConfig.from_broker(broker_config, o) for t, (_, o) in self._topic_overrides.items()}
        for (topic, _), partition_log in self._logs.items():
            partition_log.config = self.log_config(topic)

    # --- logs -----------------------------------------------------------------------------

    def logs_with_dirs(self) -> list[tuple[Path, Log]]:
        """(log dir, log) of every online log."""
        return [(self._dir_of[key], lg) for key, lg in self._logs.items()]

    def logs_by_dir(self) -> dict[Path, Mapping[tuple[str, int], Log]]:
        """Each online directory's logs by (topic, partition), for the checkpoints written every
        second: with one log directory (the usual case) no path is made or hashed per log, which
        was a fifth of a broker's event loop at 9,000 partitions. Callers only read."""
        online = self.online_dirs
        if len(online) == 1 and len(self.log_dirs) == 1:
            return {online[0]: self._logs}
        out: dict[Path, dict[tuple[str, int], Log]] = {d: {} for d in online}
        for key, partition_log in self._logs.items():
            bucket = out.get(self._dir_of[key])
            if bucket is not None:
                bucket[key] = partition_log
        return dict(out)

    def get_log(self, topic: str, partition: int) -> Log | None:
        return self._logs.get((topic, partition))

    def all_logs(self) -> list[Log]:
        return list(self._logs.values())

    def get_or_create_log(self, topic: str, partition: int, config: LogConfig) -> Log:
        """The partition's log, created in the least-loaded log dir if new; its config is updated."""
        existing = self._existing(topic, partition, config)
        if existing is not None:
            return existing
        log_dir = self._least_loaded_dir()
        try:
            created = self._new_log(log_dir, topic, partition, config)
        except KafkaStorageError as exc:
            self.mark_offline(log_dir, exc)
            raise
        return self._add((topic, partition), log_dir, created)

    async def get_or_create_log_async(self, topic: str, partition: int, config: LogConfig) -> Log:
        """The same, with a new log's files made in a worker thread: a LeaderAndIsr for a topic of
        hundreds of partitions would otherwise hold the event loop for all of their mkdirs and
        opens."""
        existing = self._existing(topic, partition, config)
        if existing is not None:
            return existing
        log_dir = self._least_loaded_dir()
        try:
            created = await self.io_threads.run(self._new_log, log_dir, topic, partition, config)
        except KafkaStorageError as exc:
            self.mark_offline(log_dir, exc)
            raise
        if log_dir in self.offline_dirs:  # failed meanwhile: a log there would never be used
            created.closed = True
            raise KafkaStorageError(f"log directory {log_dir} went offline while creating {topic}-{partition}")
        raced = self._logs.get((topic, partition))
        if raced is not None:  # created by another caller meanwhile: keep that one
            created.close()
            return raced
        return self._add((topic, partition), log_dir, created)

    def _existing(self, topic: str, partition: int, config: LogConfig) -> Log | None:
        existing = self._logs.get((topic, partition))
        if existing is not None:
            existing.config = config
        return existing

    def _least_loaded_dir(self) -> Path:
        online = self.online_dirs
        if not online:
            raise KafkaStorageError("every log directory is offline")
        counts = dict.fromkeys(online, 0)
        for d in self._dir_of.values():
            counts[d] = counts.get(d, 0) + 1
        return min(online, key=lambda d: counts[d])

    def _new_log(self, log_dir: Path, topic: str, partition: int, config: LogConfig) -> Log:
        try:
            partition_log = Log(log_dir / f"{topic}-{partition}", config, had_clean_shutdown=True, clock=self.clock,
                                io_threads=self.io_threads)
        except OSError as exc:
            raise KafkaStorageError(f"cannot create log {topic}-{partition} in {log_dir}: {exc}") from exc
        log.info("created log %s-%d in %s", topic, partition, log_dir)
        return partition_log

    def delete_log(self, topic: str, partition: int) -> None:
        """Rename the directory to `<topic>-<p>.<uuid>-delete` now; close and remove it later.

        Fetches in flight keep their file regions readable until file.delete.delay.ms passes.
        """
        key = (topic, partition)
        partition_log = self._logs.pop(key, None)
        if partition_log is None:
            return
        log_dir = self._dir_of.pop(key)
        partition_log.closed = True  # no more appends or reads through the API
        target = log_dir / f"{topic}-{partition}.{uuid.uuid4().hex}-delete"
        try:
            partition_log.dir.rename(target)
            fsync_path(log_dir)
        except OSError as exc:
            raise KafkaStorageError(f"cannot delete log {topic}-{partition}: {exc}") from exc
        due = self.clock() + partition_log.config.file_delete_delay_ms
        self._doomed_dirs.append((due, target, partition_log))
        if not any(t == topic for t, _ in self._logs):
            self._topic_overrides.pop(topic, None)
            self._topic_configs.pop(topic, None)
        self.checkpoint_recovery_points(log_dir)
        log.info("scheduled deletion of log %s-%d (%s)", topic, partition, target.name)

    def _add(self, key: tuple[str, int], log_dir: Path, partition_log: Log) -> Log:
        if key[0] in self._topic_configs:  # a change applied while the log was being made
            partition_log.config = self._topic_configs[key[0]]
        self._logs[key] = partition_log
        self._dir_of[key] = log_dir
        partition_log.on_truncate = lambda lg, d=log_dir: self._on_truncate(d, lg)
        partition_log.on_storage_error = lambda _log, exc, d=log_dir: self.mark_offline(d, exc)
        return partition_log

    def _on_truncate(self, log_dir: Path, partition_log: Log) -> None:
        self.cleaner.truncate_checkpoint(log_dir, (partition_log.topic, partition_log.partition),
                                         partition_log.log_end_offset)
        self.checkpoint_recovery_points(log_dir)

    def _remove_doomed_dirs(self, now: int | None = None, force: bool = False) -> None:
        now = self.clock() if now is None else now
        keep = []
        for due, path, partition_log in self._doomed_dirs:
            if not force and due > now:
                keep.append((due, path, partition_log))
                continue
            if partition_log is not None:
                for seg in partition_log.segments:
                    seg.delete_files()
                partition_log.delete_pending_files(force=True)
            shutil.rmtree(path, ignore_errors=True)
            log.info("removed %s", path)
        self._doomed_dirs = keep

    # --- recovery points ------------------------------------------------------------------

    @staticmethod
    def _read_recovery_points(log_dir: Path) -> dict[tuple[str, int], int]:
        try:
            return read_offsets(log_dir / RECOVERY_POINT_CHECKPOINT)
        except (ValueError, OSError) as exc:
            log.warning("%s: unreadable %s (%s): recovering every log", log_dir, RECOVERY_POINT_CHECKPOINT, exc)
            return {}

    def _recovery_points_to_write(self, log_dir: Path | None, force: bool) -> dict[Path, dict[tuple[str, int], int]]:
        """{dir: {(topic, partition): recovery point}} for the dirs whose points changed."""
        out = {}
        by_dir = self.logs_by_dir()
        for d in [log_dir] if log_dir is not None else self.online_dirs:
            if d in self.offline_dirs:
                continue
            points = {k: lg.recovery_point for k, lg in by_dir.get(d, {}).items()}
            if force or self._written_checkpoints.get(d) != points:
                out[d] = points
        return out

    def _write_recovery_points(self, log_dir: Path, points: dict[tuple[str, int], int]) -> None:
        with self._checkpoint_lock:
            write_offsets(log_dir / RECOVERY_POINT_CHECKPOINT, points)
            self._written_checkpoints[log_dir] = points

    def checkpoint_recovery_points(self, log_dir: Path | None = None, force: bool = False) -> None:
        """Write each dir's recovery points when they changed (all dirs if `log_dir` is None); a
        dir whose write fails goes offline."""
        for d, points in self._recovery_points_to_write(log_dir, force).items():
            try:
                self._write_recovery_points(d, points)
            except OSError as exc:
                self.mark_offline(d, exc)

    async def checkpoint_recovery_points_async(self) -> None:
        """The periodic checkpoint, its fsyncs in a worker thread so the event loop keeps serving."""
        for d, points in self._recovery_points_to_write(None, False).items():
            try:
                await self.io_threads.run(self._write_recovery_points, d, points)
            except OSError as exc:
                self.mark_offline(d, exc)

    # --- log start offsets ----------------------------------------------------------------

    @staticmethod
    def _read_log_start_offsets(log_dir: Path) -> dict[tuple[str, int], int]:
        try:
            return read_offsets(log_dir / LOG_START_OFFSET_CHECKPOINT)
        except (ValueError, OSError) as exc:
            log.warning("%s: unreadable %s (%s): logs start at their first segment", log_dir,
                        LOG_START_OFFSET_CHECKPOINT, exc)
            return {}

    def _log_start_offsets_to_write(self, log_dir: Path | None, force: bool) -> dict[Path, dict[tuple[str, int], int]]:
        """{dir: {(topic, partition): log start offset}} for the dirs whose offsets changed; only
        starts inside a log's first segment are kept (Kafka's rule: the others need no file)."""
        out = {}
        by_dir = self.logs_by_dir()
        for d in [log_dir] if log_dir is not None else self.online_dirs:
            offsets = {k: lg.log_start_offset for k, lg in by_dir.get(d, {}).items()
                       if lg.log_start_offset > lg.segments[0].base_offset}
            if force or self._written_start_offsets.get(d) != offsets:
                out[d] = offsets
        return out

    def _write_log_start_offsets(self, log_dir: Path, offsets: dict[tuple[str, int], int]) -> None:
        with self._checkpoint_lock:
            write_offsets(log_dir / LOG_START_OFFSET_CHECKPOINT, offsets)
            self._written_start_offsets[log_dir] = offsets

    def checkpoint_log_start_offsets(self, log_dir: Path | None = None, force: bool = False) -> None:
        for d, offsets in self._log_start_offsets_to_write(log_dir, force).items():
            try:
                self._write_log_start_offsets(d, offsets)
            except OSError as exc:
                self.mark_offline(d, exc)

    async def checkpoint_log_start_offsets_async(self) -> None:
        """Written at every background pass when changed (Kafka waits for
        log.flush.start.offset.checkpoint.interval.ms, a minute; a DeleteRecords is rare)."""
        for d, offsets in self._log_start_offsets_to_write(None, False).items():
            try:
                await self.io_threads.run(self._write_log_start_offsets, d, offsets)
            except OSError as exc:
                self.mark_offline(d, exc)

    # --- background -----------------------------------------------------------------------

    async def run_background(self, stop: asyncio.Event) -> None:
        """Retention, time-based and post-roll flushes, delayed file deletion, and the log
        cleaner; until `stop` is set."""
        cleaner = asyncio.get_running_loop().create_task(self.cleaner.run(stop), name="log-cleaner")
        try:
            await self._run_background(stop)
        finally:
            stop.set()
            await cleaner

    async def write_epoch_checkpoints(self) -> None:
        """Write the leader-epoch checkpoints that lag their cache (a LeaderAndIsr, a follower's
        fetch or a load changed them: see leader_epoch), in threads, many at once. A log deleted
        meanwhile is skipped; a failed write takes its directory offline."""
        pending = [(key, lg) for key, lg in self._logs.items() if lg.leader_epoch_cache.dirty and not lg.closed]
        if not pending:
            return
        failed = await write_in_worker([lg.leader_epoch_cache for _, lg in pending], self.io_threads)
        for key, lg in pending:
            error = failed.get(lg.leader_epoch_cache)
            if error is not None and not lg.closed and self._logs.get(key) is lg:
                self.mark_offline(self._dir_of[key], error)

    async def _run_background(self, stop: asyncio.Event) -> None:
        retention_interval = self.broker_config.log_retention_check_interval_ms
        next_retention = self.clock() + retention_interval
        expiry_interval = self.broker_config.producer_id_expiration_check_interval_ms
        next_expiry = self.clock() + expiry_interval
        while not stop.is_set():
            now = self.clock()
            try:
                await self._background_pass(now, run_retention=now >= next_retention)
            except Exception:
                log.exception("log background pass failed")
            if now >= next_retention:
                next_retention = now + retention_interval
            if now >= next_expiry:
                self.remove_expired_producers(now)
                next_expiry = now + expiry_interval
            tick = min([_MAX_TICK_MS, retention_interval] + [lg.config.flush_ms for lg in self._logs.values()])
            try:
                await asyncio.wait_for(stop.wait(), max(tick, _MIN_TICK_MS) / 1000)
            except TimeoutError:
                pass

    def remove_expired_producers(self, now: int) -> None:
        """Kafka's producer-id expiration task (every producer.id.expiration.check.interval.ms)."""
        expiration_ms = self.broker_config.producer_id_expiration_ms
        for partition_log in list(self._logs.values()):
            if not partition_log.closed:
                partition_log.remove_expired_producers(now, expiration_ms)

    async def _background_pass(self, now: int, run_retention: bool) -> None:
        self._remove_doomed_dirs(now)
        await self.write_epoch_checkpoints()
        for partition_log in list(self._logs.values()):
            if partition_log.closed:
                continue
            partition_log.delete_pending_files(now)
            active_base = partition_log.active_segment.base_offset
            if partition_log.recovery_point < active_base:
                await partition_log.flush_async(active_base)  # segments rolled since the last flush
            if partition_log.needs_time_flush(now):
                await partition_log.flush_async()
            if run_retention:
                partition_log.delete_old_segments(now)
        await self.checkpoint_recovery_points_async()
        await self.checkpoint_log_start_offsets_async()

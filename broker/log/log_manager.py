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
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from odradek.common.clock import monotonic_s, now_ms
from odradek.common.config import BrokerConfig
from odradek.common.config_def import LONG_MAX
from odradek.common.executors import BlockingExecutor

from .checkpoint import OffsetsCheckpoints, can_sync_filesystem, fsync_path, read_offsets, sync_filesystem
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
MAX_DIR_NAME = 255
"""The longest file name (bytes) the file systems Kafka runs on allow."""


def delete_dir_name(topic: str, partition: int, unique_id: str) -> str:
    """Kafka's logDeleteDirName: `<topic>-<p>.<uuid>-delete`, the topic cut short so the name
    fits MAX_DIR_NAME (a legal 249-character topic's `<topic>-<p>` fits, with the suffix not)."""
    suffix = f"-{partition}.{unique_id}-delete"
    return topic[:max(0, MAX_DIR_NAME - len(suffix))] + suffix


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
        self._logs_in_dir: dict[Path, int] = {}
        self._logs_of_topic: dict[str, int] = {}
        self._doomed_dirs: list[tuple[int, Path, Log | None]] = []
        self._changed: set[tuple[str, int]] = set()
        """Logs that told of background work (Log.on_change) since the pass last visited them:
        the pass visits these, not every log (a scan of 18,000 logs every second was a sixth of a
        stopping broker's event loop)."""
        self._moved: set[tuple[str, int]] = set()
        """Logs that told of a change since the checkpoint copies below last read them."""
        self._recovery_points = OffsetsCheckpoints(RECOVERY_POINT_CHECKPOINT)
        self._start_offsets = OffsetsCheckpoints(LOG_START_OFFSET_CHECKPOINT)
        """Each directory's recovery points, and log starts inside a first segment (the others need
        no entry: Kafka's rule), brought up to date from `_moved` before a write."""
        self._timed_flush: dict[tuple[str, int], Log] = {}
        """Logs with a finite flush.ms (none by default): the only ones a pass checks for it."""
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
        self.checkpoint_recovery_points(log_dir, force=True)
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
                self._forget(key).closed = True  # its files stay as they are for recovery at restart
            self._recovery_points.forget(log_dir)
            self._start_offsets.forget(log_dir)
        log.error("log directory %s is offline after an I/O error (%s); %d partitions with it%s",
                  log_dir, cause, len(keys), "" if self.online_dirs else "; no log directory is left online")
        for listener in list(self.log_dir_failure_listeners):
            try:
                listener(log_dir, keys)
            except Exception:
                log.exception("log dir failure listener failed")

    def dir_of(self, topic: str, partition: int) -> Path | None:
        return self._dir_of.get((topic, partition))

    def write_back(self) -> None:
        """Early in a shutdown (while the partitions are handed over): a syncfs of each online
        directory, so that the one after the closes finds little left to write (0.6 s of an
        18,000-log shutdown here). Through a descriptor of its own: the one opened at load keeps
        its report of write-back errors for that final syncfs, which alone decides."""
        for log_dir in self.online_dirs:
            if log_dir not in self._dir_fds:
                continue
            try:
                fd = os.open(log_dir, os.O_RDONLY)
                try:
                    sync_filesystem(fd)
                finally:
                    os.close(fd)
            except OSError as exc:
                log.info("%s: early write-back failed (%s); the shutdown's syncfs decides", log_dir, exc)

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

        started = monotonic_s()
        items = [(self._dir_of[key], partition_log) for key, partition_log in self._logs.items()]
        threads = min(SYNCFS_SHUTDOWN_THREADS if whole_fs else SHUTDOWN_THREADS, len(items))
        with ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
            for result in pool.map(close_all, [items[i::threads] for i in range(threads)]):
                failed.update(result)
        closed = monotonic_s()
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
        log.info("closed %d logs in %.2f s on %d threads (%s); directories made durable and checkpointed in %.2f s",
                 len(items), closed - started, threads, "one syncfs a directory" if whole_fs else "each flushed",
                 monotonic_s() - closed)
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
        for key, partition_log in self._logs.items():
            if key[0] == topic:
                self._set_config(key, partition_log, config)
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
        for key, partition_log in self._logs.items():
            self._set_config(key, partition_log, self.log_config(key[0]))

    def _set_config(self, key: tuple[str, int], partition_log: Log, config: LogConfig) -> None:
        partition_log.config = config
        if config.flush_ms < LONG_MAX:
            self._timed_flush[key] = partition_log
        else:
            self._timed_flush.pop(key, None)

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
            self._set_config((topic, partition), existing, config)
        return existing

    def _least_loaded_dir(self) -> Path:
        online = self.online_dirs
        if not online:
            raise KafkaStorageError("every log directory is offline")
        return min(online, key=lambda d: self._logs_in_dir.get(d, 0))

    def _new_log(self, log_dir: Path, topic: str, partition: int, config: LogConfig) -> Log:
        try:
            partition_log = Log(log_dir / f"{topic}-{partition}", config, had_clean_shutdown=True, clock=self.clock,
                                io_threads=self.io_threads)
        except OSError as exc:
            raise KafkaStorageError(f"cannot create log {topic}-{partition} in {log_dir}: {exc}") from exc
        log.info("created log %s-%d in %s", topic, partition, log_dir)
        return partition_log

    def delete_log(self, topic: str, partition: int) -> None:
        """Rename the directory to `<topic>-<p>.<uuid>-delete` (delete_dir_name) now; close and
        remove it later.

        Fetches in flight keep their file regions readable until file.delete.delay.ms passes.
        """
        key = (topic, partition)
        log_dir = self._dir_of.get(key)
        if log_dir is None:
            return
        partition_log = self._forget(key)
        partition_log.closed = True  # no more appends or reads through the API
        self._recovery_points.set(log_dir, key, None)
        self._start_offsets.set(log_dir, key, None)
        target = log_dir / delete_dir_name(topic, partition, uuid.uuid4().hex)
        try:
            partition_log.dir.rename(target)
            fsync_path(log_dir)
        except OSError as exc:
            raise KafkaStorageError(f"cannot delete log {topic}-{partition}: {exc}") from exc
        due = self.clock() + partition_log.config.file_delete_delay_ms
        self._doomed_dirs.append((due, target, partition_log))
        if topic not in self._logs_of_topic:
            self._topic_overrides.pop(topic, None)
            self._topic_configs.pop(topic, None)
        self.checkpoint_recovery_points(log_dir)
        log.info("scheduled deletion of log %s-%d (%s)", topic, partition, target.name)

    def _add(self, key: tuple[str, int], log_dir: Path, partition_log: Log) -> Log:
        config = self._topic_configs.get(key[0], partition_log.config)  # a change applied meanwhile
        self._set_config(key, partition_log, config)
        self._logs[key] = partition_log
        self._dir_of[key] = log_dir
        self._logs_in_dir[log_dir] = self._logs_in_dir.get(log_dir, 0) + 1
        self._logs_of_topic[key[0]] = self._logs_of_topic.get(key[0], 0) + 1
        partition_log.on_truncate = lambda lg, d=log_dir: self._on_truncate(d, lg)
        partition_log.on_storage_error = lambda _log, exc, d=log_dir: self.mark_offline(d, exc)
        partition_log.on_change = lambda _log, k=key: self._on_change(k)
        self._on_change(key)  # a load may have left work (an epoch cache to write)
        return partition_log

    def _forget(self, key: tuple[str, int]) -> Log:
        """Take a log out of the manager's books (deleted, or its directory offline)."""
        partition_log = self._logs.pop(key)
        log_dir = self._dir_of.pop(key)
        self._logs_in_dir[log_dir] -= 1
        left = self._logs_of_topic[key[0]] - 1
        if left:
            self._logs_of_topic[key[0]] = left
        else:
            del self._logs_of_topic[key[0]]
        self._timed_flush.pop(key, None)
        partition_log.on_change = None
        return partition_log

    def _on_change(self, key: tuple[str, int]) -> None:
        self._changed.add(key)
        self._moved.add(key)

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

    # --- recovery points and log start offsets ----------------------------------------------

    @staticmethod
    def _read_recovery_points(log_dir: Path) -> dict[tuple[str, int], int]:
        try:
            return read_offsets(log_dir / RECOVERY_POINT_CHECKPOINT)
        except (ValueError, OSError) as exc:
            log.warning("%s: unreadable %s (%s): recovering every log", log_dir, RECOVERY_POINT_CHECKPOINT, exc)
            return {}

    @staticmethod
    def _read_log_start_offsets(log_dir: Path) -> dict[tuple[str, int], int]:
        try:
            return read_offsets(log_dir / LOG_START_OFFSET_CHECKPOINT)
        except (ValueError, OSError) as exc:
            log.warning("%s: unreadable %s (%s): logs start at their first segment", log_dir,
                        LOG_START_OFFSET_CHECKPOINT, exc)
            return {}

    def _note_moved(self) -> None:
        """Bring the checkpoint copies up to date with the logs that reported a change."""
        moved, self._moved = self._moved, set()
        for key in moved:
            partition_log = self._logs.get(key)
            if partition_log is None:
                continue  # deleted or offline: its entries went with it
            log_dir = self._dir_of[key]
            self._recovery_points.set(log_dir, key, partition_log.recovery_point)
            start = partition_log.log_start_offset
            self._start_offsets.set(log_dir, key, start if start > partition_log.segments[0].base_offset else None)

    def _checkpoint(self, checkpoints: OffsetsCheckpoints, log_dir: Path | None, force: bool) -> None:
        self._note_moved()
        for d, ticket, offsets in checkpoints.to_write(self._checkpoint_dirs(log_dir), force):
            try:
                checkpoints.write(d, ticket, offsets)
            except OSError as exc:
                self.mark_offline(d, exc)

    async def _checkpoint_async(self, checkpoints: OffsetsCheckpoints) -> None:
        """The periodic checkpoint, its fsyncs in a worker thread so the event loop keeps serving."""
        self._note_moved()
        for d, ticket, offsets in checkpoints.to_write(self._checkpoint_dirs(None), False):
            try:
                await self.io_threads.run(checkpoints.write, d, ticket, offsets)
            except OSError as exc:
                self.mark_offline(d, exc)

    def _checkpoint_dirs(self, log_dir: Path | None) -> list[Path]:
        return [d for d in ([log_dir] if log_dir is not None else self.log_dirs) if d not in self.offline_dirs]

    def checkpoint_recovery_points(self, log_dir: Path | None = None, force: bool = False) -> None:
        """Write each dir's recovery points when they changed (all dirs if `log_dir` is None); a
        dir whose write fails goes offline."""
        self._checkpoint(self._recovery_points, log_dir, force)

    def checkpoint_log_start_offsets(self, log_dir: Path | None = None, force: bool = False) -> None:
        """The same for the log start offsets (Kafka waits for
        log.flush.start.offset.checkpoint.interval.ms, a minute; the background pass writes them
        when changed: a DeleteRecords is rare)."""
        self._checkpoint(self._start_offsets, log_dir, force)

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

    async def write_epoch_checkpoints(self, keys: Iterable[tuple[str, int]] | None = None) -> None:
        """Write the leader-epoch checkpoints that lag their cache (a LeaderAndIsr, a follower's
        fetch or a load changed them: see leader_epoch) among the logs of `keys` (default: those
        that reported a change), in threads, many at once. A log deleted meanwhile is skipped; a
        failed write takes its directory offline."""
        pending = []
        for key in self._changed if keys is None else keys:
            partition_log = self._logs.get(key)
            if partition_log is not None and partition_log.leader_epoch_cache.dirty and not partition_log.closed:
                pending.append((key, partition_log))
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
            tick = min([_MAX_TICK_MS, retention_interval] + [lg.config.flush_ms for lg in self._timed_flush.values()])
            try:
                await asyncio.wait_for(stop.wait(), max(tick, _MIN_TICK_MS) / 1000)
            except TimeoutError:
                pass

    async def _visit(self, key: tuple[str, int], now: int) -> None:
        partition_log = self._logs.get(key)
        if partition_log is None or partition_log.closed:
            return
        partition_log.delete_pending_files(now)
        active_base = partition_log.active_segment.base_offset
        if partition_log.recovery_point < active_base:
            await partition_log.flush_async(active_base)  # segments rolled since the last flush
        if (partition_log.has_pending_deletes or partition_log.leader_epoch_cache.dirty
                or partition_log.recovery_point < partition_log.active_segment.base_offset):
            self._changed.add(key)  # not due yet, changed meanwhile, or a flush that failed

    def remove_expired_producers(self, now: int) -> None:
        """Kafka's producer-id expiration task (every producer.id.expiration.check.interval.ms)."""
        expiration_ms = self.broker_config.producer_id_expiration_ms
        for partition_log in list(self._logs.values()):
            if not partition_log.closed:
                partition_log.remove_expired_producers(now, expiration_ms)

    async def _background_pass(self, now: int, run_retention: bool) -> None:
        """The delayed deletions, the flushes after a roll and the epoch checkpoints of the logs
        that reported a change since the last pass; the flush.ms flushes of the logs that have
        one; retention over every log when due; then the offsets checkpoints that changed."""
        self._remove_doomed_dirs(now)
        changed, self._changed = list(self._changed), set()
        await self.write_epoch_checkpoints(changed)
        for i, key in enumerate(changed):
            try:
                await self._visit(key, now)
            except BaseException:
                self._changed.update(changed[i:])  # the next pass takes them up again
                raise
        for partition_log in list(self._timed_flush.values()):
            if not partition_log.closed and partition_log.needs_time_flush(now):
                await partition_log.flush_async()
        if run_retention:
            for partition_log in list(self._logs.values()):
                if not partition_log.closed:
                    partition_log.delete_old_segments(now)
        await self._checkpoint_async(self._recovery_points)
        await self._checkpoint_async(self._start_offsets)

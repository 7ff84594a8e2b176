import asyncio
import time

import pytest

from odradek.broker.log import LogConfig, LogManager
from odradek.broker.log.checkpoint import OffsetsCheckpoints, read_offsets
from odradek.broker.log.errors import KafkaStorageError
from odradek.common.clock import ManualClock
from odradek.common.config import BrokerConfig

from .helpers import batch, read_all


def broker_config(**props):
    return BrokerConfig.from_properties({"broker.id": "0", "zookeeper.connect": "127.0.0.1:1", **props})


def append(lg, n, ts=None):
    ts = int(time.time() * 1000) if ts is None else ts
    for _ in range(n):
        start = lg.log_end_offset
        lg.append_as_leader(batch(range(start, start + 2), ts=ts), leader_epoch=0)


async def run_until(manager, predicate, passes=500, timeout=10.0):
    """Run the background task until `predicate()` holds, checking after each of its passes
    (bounded: `passes` passes, `timeout` seconds for any one)."""
    passed = asyncio.Event()
    background_pass = manager._background_pass

    async def counted(now, run_retention):
        try:
            await background_pass(now, run_retention)
        finally:
            passed.set()

    manager._background_pass = counted
    stop = asyncio.Event()
    task = asyncio.create_task(manager.run_background(stop))
    try:
        for _ in range(passes):
            if predicate():
                return
            passed.clear()
            await asyncio.wait_for(passed.wait(), timeout)
        assert predicate(), f"background work did not happen in {passes} passes"
    finally:
        stop.set()
        await asyncio.wait_for(task, 5)
        del manager._background_pass


def test_logs_spread_over_dirs_and_reload(tmp_path):
    dirs = [tmp_path / "a", tmp_path / "b"]
    manager = LogManager(dirs, broker_config())
    manager.startup()
    logs = [manager.get_or_create_log("orders", p, LogConfig()) for p in range(4)]
    assert {lg.dir.parent for lg in logs} == set(dirs)
    assert manager.get_or_create_log("orders", 0, LogConfig(retention_ms=5)) is logs[0]
    assert logs[0].config.retention_ms == 5
    for lg in logs:
        append(lg, 3)
    manager.shutdown()

    manager = LogManager(dirs, broker_config())
    manager.startup()
    assert sorted((lg.topic, lg.partition) for lg in manager.all_logs()) == [("orders", p) for p in range(4)]
    assert read_all(manager.get_log("orders", 2)) == [(i, i) for i in range(6)]
    assert manager.get_log("orders", 9) is None
    manager.shutdown()


def test_same_partition_in_two_dirs_is_refused(tmp_path):
    for d in ("a", "b"):
        (tmp_path / d / "t-0").mkdir(parents=True)
    with pytest.raises(KafkaStorageError):
        LogManager([tmp_path / "a", tmp_path / "b"], broker_config()).startup()


def test_delete_log_renames_then_background_removes(tmp_path):
    clock = ManualClock()
    manager = LogManager([tmp_path], broker_config(), clock=clock)
    manager.startup()
    lg = manager.get_or_create_log("gone", 0, LogConfig(file_delete_delay_ms=200))
    append(lg, 3)
    region = lg.read(0, 10_000).regions[0]
    content = region.read_bytes()
    manager.delete_log("gone", 0)
    assert manager.get_log("gone", 0) is None
    doomed = [p for p in tmp_path.iterdir() if p.name.endswith("-delete")]
    assert len(doomed) == 1 and doomed[0].name.startswith("gone-0.")
    assert region.read_bytes() == content  # in-flight fetches keep reading
    # a new topic of the same name starts empty
    fresh = manager.get_or_create_log("gone", 0, LogConfig())
    assert fresh.log_end_offset == 0
    clock.advance(199)
    manager._remove_doomed_dirs()
    assert doomed[0].exists(), "removed before file.delete.delay.ms"
    clock.advance(1)
    asyncio.run(run_until(manager, lambda: not doomed[0].exists()))  # the background's first pass
    assert (tmp_path / "gone-0").exists()
    manager.shutdown()


def test_delete_log_of_a_topic_with_the_longest_legal_name(tmp_path):
    """A 249-character topic (Kafka's limit) has a 251-character directory; its `.<uuid>-delete`
    name is cut to 255 as Kafka's logDeleteDirName does, else the rename fails and the deleted
    topic's data stays, to be loaded again at restart."""
    topic = "t" * 249
    manager = LogManager([tmp_path], broker_config())
    manager.startup()
    append(manager.get_or_create_log(topic, 0, LogConfig()), 1)
    manager.delete_log(topic, 0)
    (doomed,) = tmp_path.glob("*-delete")
    assert len(doomed.name) == 255 and doomed.name.startswith("t" * 200) and doomed.name.endswith("-delete")
    assert not (tmp_path / f"{topic}-0").exists()
    manager.shutdown()
    manager = LogManager([tmp_path], broker_config())
    manager.startup()
    assert manager.get_log(topic, 0) is None and not doomed.exists()
    manager.shutdown()


def test_leftover_delete_dirs_are_removed_after_restart(tmp_path):
    leftover = tmp_path / ("old-0." + "ab" * 16 + "-delete")
    leftover.mkdir()
    (leftover / "00000000000000000000.log").write_bytes(b"x")
    manager = LogManager([tmp_path], broker_config())
    manager.startup()
    assert manager.all_logs() == []
    asyncio.run(run_until(manager, lambda: not leftover.exists()))
    manager.shutdown()


def test_background_retention(tmp_path):
    manager = LogManager([tmp_path], broker_config(**{"log.retention.check.interval.ms": "50"}))
    manager.startup()
    config = LogConfig(segment_bytes=500, retention_ms=60_000, file_delete_delay_ms=0)
    lg = manager.get_or_create_log("old", 0, config)
    append(lg, 20, ts=int(time.time() * 1000) - 3_600_000)
    lg.high_watermark = lg.log_end_offset
    assert len(lg.segments) > 2
    asyncio.run(run_until(manager, lambda: lg.log_start_offset == lg.log_end_offset == 40))
    assert [p.name for p in lg.dir.glob("*.log")] == ["00000000000000000040.log"]
    manager.shutdown()


def test_background_flushes_rolled_segments_and_by_flush_ms(tmp_path):
    manager = LogManager([tmp_path], broker_config())
    manager.startup()
    rolled = manager.get_or_create_log("rolled", 0, LogConfig(segment_bytes=500))
    append(rolled, 20)
    timed = manager.get_or_create_log("timed", 0, LogConfig(flush_ms=50))
    append(timed, 2)
    assert rolled.recovery_point == 0 and timed.recovery_point == 0
    asyncio.run(
        run_until(
            manager,
            lambda: rolled.recovery_point == rolled.active_segment.base_offset and timed.recovery_point == 4,
        )
    )
    text = (tmp_path / "recovery-point-offset-checkpoint").read_text()
    assert f"rolled 0 {rolled.active_segment.base_offset}" in text and "timed 0 4" in text
    manager.shutdown()


def test_logs_made_in_a_worker_thread_join_the_manager(tmp_path):
    manager = LogManager([tmp_path], broker_config())
    manager.startup()

    async def create():
        config = manager.default_config
        first = await manager.get_or_create_log_async("t", 0, config)
        again = await manager.get_or_create_log_async("t", 0, config)
        return first, again

    first, again = asyncio.run(create())
    assert first is again is manager.get_log("t", 0)
    append(first, 3)
    assert first.log_end_offset == 6 and (tmp_path / "t-0").is_dir()
    manager.shutdown()


def test_logs_load_with_their_topics_overrides(tmp_path):
    """After a restart each log runs on its topic's overrides, not on the broker defaults alone."""
    manager = LogManager([tmp_path], broker_config(**{"log.segment.bytes": "5000"}))
    manager.startup()
    manager.get_or_create_log("small", 0, LogConfig())
    manager.get_or_create_log("plain", 0, LogConfig())
    manager.shutdown()

    manager = LogManager([tmp_path], broker_config(**{"log.segment.bytes": "5000"}))
    assert manager.topics_on_disk() == {"small", "plain"}
    manager.startup({"small": (7, {"segment.bytes": "2000", "min.insync.replicas": "2"})})
    small, plain = manager.get_log("small", 0), manager.get_log("plain", 0)
    assert (small.config.segment_bytes, small.config.min_insync_replicas) == (2000, 2)
    assert (plain.config.segment_bytes, plain.config.min_insync_replicas) == (5000, 1)
    manager.shutdown()


def test_topic_config_changes_apply_to_every_log_and_older_reads_lose(tmp_path):
    manager = LogManager([tmp_path], broker_config())
    manager.startup()
    logs = [manager.get_or_create_log("t", p, manager.log_config("t")) for p in range(3)]
    other = manager.get_or_create_log("u", 0, manager.log_config("u"))
    assert manager.update_topic_config("t", {"retention.ms": "1000"}, zxid=10)
    assert [lg.config.retention_ms for lg in logs] == [1000] * 3
    assert other.config.retention_ms == LogConfig().retention_ms
    # A read made before the one applied (a LeaderAndIsr racing a change notification) loses.
    assert not manager.update_topic_config("t", {}, zxid=9)
    assert manager.log_config("t").retention_ms == 1000
    # A log created later (a new partition) starts with the newest config.
    assert manager.get_or_create_log("t", 3, manager.log_config("t")).config.retention_ms == 1000
    # Broker-level defaults change under the overrides.
    manager.reconfigure(broker_config(**{"log.retention.ms": "5000", "log.segment.bytes": "3000"}))
    assert [(lg.config.retention_ms, lg.config.segment_bytes) for lg in logs] == [(1000, 3000)] * 3
    assert (other.config.retention_ms, other.config.segment_bytes) == (5000, 3000)
    manager.shutdown()


def test_shutdown_closes_logs_in_parallel_and_marks_only_sound_dirs_clean(tmp_path):
    from odradek.broker.log.log_manager import CLEAN_SHUTDOWN_FILE

    dirs = [tmp_path / "a", tmp_path / "b"]
    manager = LogManager(dirs, broker_config())
    manager.startup()
    logs = [manager.get_or_create_log("orders", p, LogConfig()) for p in range(40)]
    for lg in logs:
        append(lg, 1)
    broken = logs[0]

    def fail(*args, **kwargs):
        raise OSError("disk gone")

    broken.close = fail
    manager.shutdown()
    assert all(lg.closed for lg in logs[1:])
    assert not (broken.dir.parent / CLEAN_SHUTDOWN_FILE).exists()
    (sound,) = [d for d in dirs if d != broken.dir.parent]
    assert (sound / CLEAN_SHUTDOWN_FILE).exists()


def _shut_down_with(tmp_path, monkeypatch, sync):
    """Two dirs of logs written and shut down with `sync` as the syncfs (None: none on this
    system); returns the dirs and each log's end offset."""
    import odradek.broker.log.log_manager as lm

    if sync is None:
        monkeypatch.setattr(lm, "can_sync_filesystem", lambda: False)
    else:
        monkeypatch.setattr(lm, "sync_filesystem", sync)
    dirs = [tmp_path / "a", tmp_path / "b"]
    manager = LogManager(dirs, broker_config())
    manager.startup()
    logs = {p: manager.get_or_create_log("orders", p, LogConfig()) for p in range(12)}
    for p, lg in logs.items():
        append(lg, p + 1)
    manager.shutdown()
    assert all(lg.closed for lg in logs.values())
    return dirs, {p: lg.log_end_offset for p, lg in logs.items()}


def _reload(dirs, ends):
    manager = LogManager(dirs, broker_config())
    manager.startup()
    try:
        for p, end in ends.items():
            lg = manager.get_log("orders", p)
            assert lg.log_end_offset == end and len(read_all(lg)) == end
        return {p: manager.get_log("orders", p).recovery_point for p in ends}
    finally:
        manager.shutdown()


def test_shutdown_makes_each_dir_durable_with_one_syncfs_not_an_fsync_a_log(tmp_path, monkeypatch):
    from odradek.broker.log.checkpoint import can_sync_filesystem, sync_filesystem
    from odradek.broker.log.log_manager import CLEAN_SHUTDOWN_FILE

    assert can_sync_filesystem()  # Linux's C library has it (the fallback is tested below)
    synced = []

    def sync(fd):
        synced.append(fd)
        sync_filesystem(fd)

    flushed = []
    monkeypatch.setattr("odradek.broker.log.log.Log.flush", lambda self, offset=None: flushed.append(self))
    dirs, ends = _shut_down_with(tmp_path, monkeypatch, sync)
    assert len(synced) == 2 and not flushed
    assert all((d / CLEAN_SHUTDOWN_FILE).exists() for d in dirs)
    monkeypatch.undo()
    assert _reload(dirs, ends) == ends  # recovery points at the ends: everything was on disk


def test_a_failed_syncfs_leaves_its_dir_to_recovery(tmp_path, monkeypatch):
    from odradek.broker.log.log_manager import CLEAN_SHUTDOWN_FILE

    def sync(fd):
        raise OSError(5, "Input/output error")

    dirs, ends = _shut_down_with(tmp_path, monkeypatch, sync)
    assert not any((d / CLEAN_SHUTDOWN_FILE).exists() for d in dirs)
    monkeypatch.undo()
    # nothing was known durable: recovered from the start (the data was in the page cache all along)
    assert _reload(dirs, ends) == dict.fromkeys(ends, 0)


def test_without_syncfs_each_log_is_flushed_at_shutdown(tmp_path, monkeypatch):
    from odradek.broker.log.log import Log
    from odradek.broker.log.log_manager import CLEAN_SHUTDOWN_FILE

    flushed = []
    real_flush = Log.flush

    def flush(self, offset=None):
        flushed.append(self)
        real_flush(self, offset)

    monkeypatch.setattr(Log, "flush", flush)
    dirs, ends = _shut_down_with(tmp_path, monkeypatch, None)
    assert len(flushed) == len(ends)
    assert all((d / CLEAN_SHUTDOWN_FILE).exists() for d in dirs)
    monkeypatch.undo()
    assert _reload(dirs, ends) == ends


def test_epoch_checkpoints_lag_until_the_background_pass_writes_them(tmp_path):
    """Epoch changes are made in memory; the background pass writes the lagging checkpoints, a
    clean close writes what is left, and an epoch begun with no record after it is dropped at load
    (Kafka's truncateFromEnd) in memory, the file following at the next pass."""
    manager = LogManager([tmp_path], broker_config())
    manager.startup()
    lg = manager.get_or_create_log("t", 0, LogConfig())
    append(lg, 2)
    lg.leader_epoch_cache.assign(3, lg.log_end_offset)  # became leader, nothing appended since
    checkpoint = tmp_path / "t-0" / "leader-epoch-checkpoint"
    assert not checkpoint.exists()
    asyncio.run(manager.write_epoch_checkpoints())
    assert checkpoint.read_text() == "0\n2\n0 0\n3 4\n"
    lg.leader_epoch_cache.assign(4, lg.log_end_offset)  # replaces epoch 3, begun at the same offset
    manager.shutdown()
    assert checkpoint.read_text() == "0\n2\n0 0\n4 4\n"  # written at close

    manager = LogManager([tmp_path], broker_config())
    manager.startup()
    assert manager.get_log("t", 0).leader_epoch_cache.entries == [(0, 0)]
    assert checkpoint.read_text().endswith("4 4\n")  # the file follows at the next pass
    asyncio.run(manager.write_epoch_checkpoints())
    assert checkpoint.read_text() == "0\n1\n0 0\n"
    manager.shutdown()


def test_a_pass_visits_only_the_logs_that_reported_work(tmp_path):
    """A broker of thousands of quiet logs: the background pass touches none of them; a roll, a
    file to delete later, a moved log start or an epoch change brings one log into the next pass."""
    clock = ManualClock(int(time.time() * 1000))
    manager = LogManager([tmp_path], broker_config(), clock=clock)
    manager.startup()
    config = LogConfig(segment_bytes=500, file_delete_delay_ms=100)
    logs = [manager.get_or_create_log("t", p, config) for p in range(4)]
    for lg in logs:
        append(lg, 1)
    asyncio.run(manager._background_pass(clock(), run_retention=False))
    visited = []
    for lg in logs:
        lg.delete_pending_files = lambda now=None, force=False, lg=lg: visited.append(lg.partition) or 0
    asyncio.run(manager._background_pass(clock(), run_retention=False))
    assert visited == []

    append(logs[1], 20)  # rolls
    logs[2].leader_epoch_cache.assign(5, logs[2].log_end_offset)
    asyncio.run(manager._background_pass(clock(), run_retention=False))
    assert sorted(visited) == [1, 2]
    assert logs[1].recovery_point == logs[1].active_segment.base_offset > 0
    assert not logs[2].leader_epoch_cache.dirty
    assert f"t 1 {logs[1].recovery_point}" in (tmp_path / "recovery-point-offset-checkpoint").read_text()
    for lg in logs:
        del lg.delete_pending_files


def test_files_deleted_later_stay_in_the_passes_until_due(tmp_path):
    clock = ManualClock(int(time.time() * 1000))
    manager = LogManager([tmp_path], broker_config(), clock=clock)
    manager.startup()
    lg = manager.get_or_create_log("t", 0, LogConfig(segment_bytes=500, file_delete_delay_ms=1_000))
    append(lg, 20)
    lg.high_watermark = lg.log_end_offset
    assert lg.maybe_increment_log_start_offset(lg.segments[1].base_offset + 1)
    assert lg.has_pending_deletes
    for _ in range(3):
        asyncio.run(manager._background_pass(clock(), run_retention=False))
        clock.advance(200)
    assert lg.has_pending_deletes and list(lg.dir.glob("*.deleted"))
    clock.advance(400)
    asyncio.run(manager._background_pass(clock(), run_retention=False))
    assert not lg.has_pending_deletes and not list(lg.dir.glob("*.deleted"))
    text = (tmp_path / "log-start-offset-checkpoint").read_text()
    assert f"t 0 {lg.log_start_offset}" in text
    # DeleteRecords up to a segment's base: the log starts at its first segment, no entry needed
    lg.high_watermark = lg.log_end_offset
    lg.maybe_increment_log_start_offset(lg.active_segment.base_offset)
    asyncio.run(manager._background_pass(clock(), run_retention=False))
    assert lg.log_start_offset == lg.segments[0].base_offset
    assert "t 0" not in (tmp_path / "log-start-offset-checkpoint").read_text()
    manager.shutdown()


def test_flush_ms_set_and_unset_by_a_topic_config_change(tmp_path):
    clock = ManualClock(int(time.time() * 1000))
    manager = LogManager([tmp_path], broker_config(), clock=clock)
    manager.startup()
    lg = manager.get_or_create_log("t", 0, manager.log_config("t"))
    append(lg, 2)
    clock.advance(10_000)
    asyncio.run(manager._background_pass(clock(), run_retention=False))
    assert lg.recovery_point == 0  # flush.ms is unlimited by default
    manager.update_topic_config("t", {"flush.ms": "1000"}, zxid=1)
    asyncio.run(manager._background_pass(clock(), run_retention=False))
    assert lg.recovery_point == 4
    manager.update_topic_config("t", {}, zxid=2)
    append(lg, 1)
    clock.advance(10_000)
    asyncio.run(manager._background_pass(clock(), run_retention=False))
    assert lg.recovery_point == 4
    manager.shutdown()


def test_a_checkpoint_written_late_never_replaces_a_newer_one(tmp_path):
    """The background pass writes a copy in a worker thread while a truncation may write a newer
    one from the event loop: whichever lands last, the file keeps the newer."""
    checkpoints = OffsetsCheckpoints("offsets")
    checkpoints.set(tmp_path, ("t", 0), 5)
    [(_, older, offsets_then)] = checkpoints.to_write([tmp_path], force=False)
    checkpoints.set(tmp_path, ("t", 0), 3)
    [(_, newer, offsets_now)] = checkpoints.to_write([tmp_path], force=False)
    assert checkpoints.to_write([tmp_path], force=False) == []  # nothing lags
    checkpoints.write(tmp_path, newer, offsets_now)
    checkpoints.write(tmp_path, older, offsets_then)
    assert read_offsets(tmp_path / "offsets") == {("t", 0): 3}


def test_the_early_write_back_neither_fails_the_shutdown_nor_takes_its_error_report(tmp_path, monkeypatch):
    """The syncfs early in a shutdown goes through descriptors of its own, so the load-time ones
    still report any write-back error to the final syncfs; its own failure only logs."""
    from odradek.broker.log import log_manager as lm

    dirs = [tmp_path / "a", tmp_path / "b"]
    manager = LogManager(dirs, broker_config())
    manager.startup()
    append(manager.get_or_create_log("t", 0, LogConfig()), 2)
    synced = []

    def sync(fd):
        synced.append(fd)
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(lm, "sync_filesystem", sync)
    manager.write_back()
    assert len(synced) == 2 and not set(synced) & set(manager._dir_fds.values())
    assert manager.online_dirs == dirs
    monkeypatch.undo()
    manager.shutdown()
    assert all((d / lm.CLEAN_SHUTDOWN_FILE).exists() for d in dirs)

"""Recovery after unclean stops: torn tails, corrupt bytes, damaged indexes, and a real SIGKILL."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from odradek.broker.log import Log, LogConfig, LogManager
from odradek.broker.log.log_manager import CLEAN_SHUTDOWN_FILE, RECOVERY_POINT_CHECKPOINT
from odradek.broker.log.offset_index import OffsetIndex
from odradek.broker.log.segment import LogSegment
from odradek.common.config import BrokerConfig

from .helpers import batch, batches_in, read_all

CONFIG = LogConfig(segment_bytes=1000, index_interval_bytes=100)


def broker_config(**props):
    return BrokerConfig.from_properties({"broker.id": "0", "zookeeper.connect": "127.0.0.1:1", **props})


def make_log(path, n_batches=40, config=CONFIG) -> None:
    lg = Log(path, config)
    for _ in range(n_batches):
        start = lg.log_end_offset
        lg.append_as_leader(batch(range(start, start + 2)), leader_epoch=4)
    lg.close()


def assert_consistent(lg: Log, end: int) -> None:
    assert lg.log_end_offset == end
    assert read_all(lg) == [(i, i) for i in range(end)]
    for offset in range(lg.log_start_offset, end):
        first = batches_in(lg.read(offset, 1).read_bytes())[0]
        assert first.base_offset <= offset <= first.last_offset


def test_torn_tail_is_truncated_to_whole_batches(tmp_path):
    path = tmp_path / "t-0"
    make_log(path)
    active = sorted(path.glob("*.log"))[-1]
    size = active.stat().st_size
    one = len(batch([78, 79]))
    os.truncate(active, size - one // 2)  # half of the last batch
    lg = Log(path, CONFIG, had_clean_shutdown=False)
    try:
        assert_consistent(lg, 78)
        assert active.stat().st_size == size - one
        lg.append_as_leader(batch([78, 79]), leader_epoch=4)
        assert_consistent(lg, 80)
    finally:
        lg.close()


def test_flipped_byte_truncates_there_and_drops_later_segments(tmp_path):
    path = tmp_path / "t-0"
    make_log(path)
    logs = sorted(path.glob("*.log"))
    assert len(logs) >= 4
    victim = logs[1]
    data = bytearray(victim.read_bytes())
    one = len(batch([0, 1]))
    data[3 * one + 40] ^= 0x55  # inside the 4th batch of the second segment
    victim.write_bytes(bytes(data))
    first_bad = int(victim.name[:-4]) + 6
    lg = Log(path, CONFIG, had_clean_shutdown=False)
    try:
        assert_consistent(lg, first_bad)
        assert sorted(path.glob("*.log")) == logs[:2]
        assert lg.leader_epoch_cache.entries == [(4, 0)]
    finally:
        lg.close()


def append_epochs(lg: Log, epochs) -> None:
    """One 2-record batch per epoch in `epochs`, each appended as leader under it."""
    for epoch in epochs:
        start = lg.log_end_offset
        lg.append_as_leader(batch([start, start + 1]), leader_epoch=epoch)


def epoch_file(path) -> list[str]:
    return (path / "leader-epoch-checkpoint").read_text().splitlines()[2:]


def test_the_recovery_point_never_passes_an_epoch_not_on_disk(tmp_path):
    """Epoch changes are made in memory (leader_epoch); a flush, in the loop's thread or a
    worker's, writes the checkpoint before it moves the recovery point."""
    import asyncio

    path = tmp_path / "t-0"
    lg = Log(path, CONFIG)
    try:
        append_epochs(lg, [1, 1, 2])
        assert not (path / "leader-epoch-checkpoint").exists() and lg.recovery_point == 0
        lg.flush()
        assert epoch_file(path) == ["1 0", "2 4"] and lg.recovery_point == 6
        append_epochs(lg, [3])
        asyncio.run(lg.flush_async())
        assert epoch_file(path) == ["1 0", "2 4", "3 6"] and lg.recovery_point == 8
    finally:
        lg.close()


def test_a_crash_rebuilds_the_epochs_the_checkpoint_lagged(tmp_path):
    """After a crash the load rebuilds, from the batches, the epochs begun past the recovery
    point that the checkpoint did not hold yet."""
    path = tmp_path / "t-0"
    lg = Log(path, CONFIG)
    append_epochs(lg, [1, 2])
    lg.flush()
    append_epochs(lg, [3, 3, 5])
    before, recovery_point = list(lg.leader_epoch_cache.entries), lg.recovery_point
    assert epoch_file(path) == ["1 0", "2 2"]  # no close: a crash
    again = Log(path, CONFIG, recovery_point=recovery_point, had_clean_shutdown=False)
    try:
        assert again.leader_epoch_cache.entries == before == [(1, 0), (2, 2), (3, 4), (5, 8)]
    finally:
        again.close()
        lg.closed = True


def test_a_crash_after_a_truncation_drops_the_epochs_it_made_stale(tmp_path):
    """A follower truncated records of epoch 5 (they diverged from its new leader) and appended
    epoch 4's in their place; the checkpoint on disk still names epoch 5 at those offsets. The
    load after a crash goes by the batches there, not by the file."""
    path = tmp_path / "t-0"
    lg = Log(path, CONFIG)
    append_epochs(lg, [1, 1, 5, 5])
    lg.flush()
    assert epoch_file(path) == ["1 0", "5 4"]
    lg.truncate_to(4)
    append_epochs(lg, [4, 4])
    before, recovery_point = list(lg.leader_epoch_cache.entries), lg.recovery_point
    assert before == [(1, 0), (4, 4)] and recovery_point == 4
    again = Log(path, CONFIG, recovery_point=recovery_point, had_clean_shutdown=False)
    try:
        assert again.leader_epoch_cache.entries == before
    finally:
        again.close()
        lg.closed = True


def test_garbage_length_at_the_tail_is_truncated(tmp_path):
    path = tmp_path / "t-0"
    make_log(path, 5)
    with open(sorted(path.glob("*.log"))[-1], "ab") as f:
        f.write(b"\x00" * 8 + b"\x7f\xff\xff\xff" + b"junk")
    lg = Log(path, CONFIG, had_clean_shutdown=False)
    try:
        assert_consistent(lg, 10)
    finally:
        lg.close()


@pytest.mark.parametrize("damage", ["delete", "partial-entry", "garbage", "beyond-log"])
def test_damaged_indexes_are_rebuilt_even_after_a_clean_shutdown(tmp_path, damage):
    path = tmp_path / "t-0"
    make_log(path, 60)
    index = sorted(path.glob("*.index"))[1]
    timeindex = index.with_suffix(".timeindex")
    good = index.read_bytes()
    assert len(good) >= 16
    if damage == "delete":
        index.unlink()
        timeindex.unlink()
    elif damage == "partial-entry":
        index.write_bytes(good + b"\x00\x01\x02")
    elif damage == "garbage":
        index.write_bytes(good[8:16] + good[:8])  # not increasing
        timeindex.write_bytes(os.urandom(13))
    else:
        index.write_bytes(good + b"\x00\x00\x7f\x00\x00\x0f\xff\xff")
    lg = Log(path, CONFIG, had_clean_shutdown=True)
    try:
        assert_consistent(lg, 120)
        assert index.read_bytes() == good
        assert lg.fetch_offset_by_timestamp(0) == (0, 1000)
    finally:
        lg.close()


def test_inactive_segments_indexes_are_read_on_first_use(tmp_path, monkeypatch):
    """Kafka's lazy indexes: a load reads only the active segment's indexes; an old segment's
    are read when something first needs them (a read, a time lookup, retention)."""
    path = tmp_path / "t-0"
    make_log(path, 60)
    loaded = []
    real_load = OffsetIndex.load
    monkeypatch.setattr(OffsetIndex, "load", lambda self, size: loaded.append(self.base_offset) or real_load(self, size))
    lg = Log(path, CONFIG, had_clean_shutdown=True)
    try:
        bases = [s.base_offset for s in lg.segments]
        assert len(bases) >= 4 and loaded == [bases[-1]]
        second = lg.segments[1]
        assert "index" not in vars(second)
        assert lg.fetch_offset_by_timestamp(0) == (0, 1000)  # the first segment's time index
        assert loaded == [bases[-1], bases[0]]
        assert batches_in(lg.read(bases[1] + 3, 1).read_bytes())[0].base_offset == bases[1] + 2
        assert loaded == [bases[-1], bases[0], bases[1]]
        assert second.max_timestamp == 1000
        assert_consistent(lg, 120)
    finally:
        lg.close()
    untouched = Log(path, CONFIG, had_clean_shutdown=True)
    index_bytes = {p.name: p.read_bytes() for p in path.glob("*index")}
    untouched.close()  # closing never reads (nor rewrites) what was not used
    assert {p.name: p.read_bytes() for p in path.glob("*index")} == index_bytes


def test_corrupt_index_first_used_after_start_is_rebuilt_never_truncated(tmp_path):
    """An old segment's damage found on first use is not a torn tail: its index is rebuilt from
    its batches, and even a corrupt batch there cuts nothing from the middle of the log."""
    path = tmp_path / "t-0"
    make_log(path, 60)
    index = sorted(path.glob("*.index"))[1]
    good = index.read_bytes()
    index.write_bytes(good[8:16] + good[:8])  # not increasing
    segment = index.with_suffix(".log")
    size = segment.stat().st_size
    lg = Log(path, CONFIG, had_clean_shutdown=True)
    try:
        assert_consistent(lg, 120)
        assert index.read_bytes() == good and segment.stat().st_size == size
    finally:
        lg.close()
    data = bytearray(segment.read_bytes())
    one = len(batch([0, 1]))
    data[2 * one + 8 : 2 * one + 12] = b"\xff\xff\xff\x7f"  # the 3rd batch's length: garbage
    segment.write_bytes(bytes(data))
    index.write_bytes(b"\x00")  # and its index fails the check on first use
    lg = Log(path, CONFIG, had_clean_shutdown=True)
    try:
        base = int(segment.name[:-4])
        assert lg.log_end_offset == 120
        assert read_all(lg, base)[:4] == [(base + i, base + i) for i in range(4)]
        assert segment.stat().st_size == size  # nothing cut from the middle of the log
    finally:
        lg.close()


def test_clean_shutdown_skips_recovery_and_unclean_recovers_from_the_recovery_point(tmp_path, monkeypatch):
    bc = broker_config()
    manager = LogManager([tmp_path], bc)
    manager.startup()
    lg = manager.get_or_create_log("t", 0, CONFIG)
    for _ in range(40):
        start = lg.log_end_offset
        lg.append_as_leader(batch(range(start, start + 2)), leader_epoch=0)
    manager.shutdown()
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    assert (tmp_path / RECOVERY_POINT_CHECKPOINT).read_text() == "0\n1\nt 0 80\n"

    recovered = []
    real_recover = LogSegment.recover
    monkeypatch.setattr(LogSegment, "recover", lambda self, *a: recovered.append(self.base_offset) or real_recover(self, *a))

    manager = LogManager([tmp_path], bc)
    manager.startup()
    assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    assert recovered == []
    lg = manager.get_log("t", 0)
    assert_consistent(lg, 80)
    bases = [s.base_offset for s in lg.segments]
    lg.recovery_point = bases[-2] + 1  # as if only that much had been flushed
    manager.checkpoint_recovery_points()
    for seg in lg.segments:
        seg.close()  # an unclean stop: no marker, no further checkpoint

    manager = LogManager([tmp_path], bc)
    manager.startup()
    assert recovered == bases[-2:]
    assert_consistent(manager.get_log("t", 0), 80)
    manager.shutdown()


CHILD = textwrap.dedent(
    """
    import sys, pathlib
    from odradek.broker.log import LogConfig, LogManager
    from odradek.broker.log.record_batch import build_batch
    from odradek.common.config import BrokerConfig

    bc = BrokerConfig.from_properties({"broker.id": "0", "zookeeper.connect": "127.0.0.1:1"})
    manager = LogManager([pathlib.Path(sys.argv[1])], bc)
    manager.startup()
    log = manager.get_or_create_log("crash", 0, LogConfig(segment_bytes=2 << 20, index_interval_bytes=512))
    i = 0
    while True:
        start = log.log_end_offset
        # mostly small batches, some of ~400 KB: a kill inside one large write leaves a torn tail
        records = [(b"k" * (400_000 if i % 9 == 8 and k == 0 else (start + k) % 97), str(start + k).encode())
                   for k in range(1 + i % 7)]
        log.append_as_leader(build_batch(records), leader_epoch=1 + i // 500)
        if i % 25 == 0:
            log.flush()
            manager.checkpoint_recovery_points()
            print(log.log_end_offset, flush=True)
        i += 1
    """
)


@pytest.mark.integration  # a writer process, SIGKILLed
def test_sigkill_mid_write_loses_nothing_flushed(tmp_path):
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    flushed = []
    try:
        deadline = time.monotonic() + 60
        while len(flushed) < 60 and time.monotonic() < deadline:
            line = child.stdout.readline()
            if not line:
                break
            flushed.append(int(line))
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)
        child.stdout.close()
        stderr = child.stderr.read()
        child.stderr.close()
    assert len(flushed) == 60, stderr
    assert child.returncode == -signal.SIGKILL

    manager = LogManager([tmp_path], broker_config())
    manager.startup()
    try:
        lg = manager.get_log("crash", 0)
        end = lg.log_end_offset
        assert end >= flushed[-1]
        assert len(lg.segments) > 3
        assert_consistent(lg, end)
        assert lg.leader_epoch_cache.entries[0] == (1, 0)
        info = lg.append_as_leader(batch([end, end + 1]), leader_epoch=99)
        assert info.first_offset == end
        assert read_all(lg, end) == [(end, end), (end + 1, end + 1)]
        assert lg.fetch_offset_by_timestamp(0)[0] == 0
    finally:
        manager.shutdown()


def test_a_quiet_active_segment_closes_without_a_time_index_write_and_reloads_its_max(tmp_path):
    """A close writes no final time-index entry for the active segment (one file write fewer per
    quiet log of a big broker): the load scans the active tail for the max timestamp, and a
    lookup by time still finds the batch."""
    path = tmp_path / "t-0"
    lg = Log(path, LogConfig())
    for i, ts in enumerate((5_000, 9_000, 7_000)):
        lg.append_as_leader(batch([i], ts=ts), leader_epoch=0)
    time_index = path / f"{0:020d}.timeindex"
    before = time_index.read_bytes() if time_index.exists() else b""
    lg.close()
    assert (time_index.read_bytes() if time_index.exists() else b"") == before  # nothing appended
    lg = Log(path, LogConfig(), had_clean_shutdown=True)
    try:
        active = lg.segments[-1]
        assert (active.max_timestamp, active.offset_of_max_timestamp) == (9_000, 1)
        assert lg.fetch_offset_by_timestamp(8_000) == (1, 9_000)
        lg.roll()  # at the roll the entry is written, as Kafka's onBecomeInactiveSegment
        assert time_index.read_bytes() != before
    finally:
        lg.close()

"""Idempotent appends through a real Log on disk: duplicates, refusals, and state that survives
reopening, truncation and a change of leader."""

import pytest

from odradek.broker.log import Log, LogConfig
from odradek.broker.log.log import CLOSE_SNAPSHOT_MIN_RECORDS
from odradek.broker.log.producer_state import (
    InvalidProducerEpochError,
    OutOfOrderSequenceError,
    list_snapshots,
)

from .helpers import batch, read_all

SMALL = LogConfig(segment_bytes=1000, index_interval_bytes=150, file_delete_delay_ms=0)
PID = 4000


def pbatch(values, seq, epoch=0, pid=PID, **kw):
    return batch(values, producer_id=pid, producer_epoch=epoch, base_sequence=seq, **kw)


@pytest.fixture
def log(tmp_path):
    lg = Log(tmp_path / "topic-0", SMALL)
    yield lg
    lg.close()


def test_a_retried_batch_is_not_appended_again_and_gets_its_first_offsets(log):
    log.append_as_leader(batch([100]), leader_epoch=0)  # a plain batch first
    first = log.append_as_leader(pbatch([1, 2], seq=0), leader_epoch=0)
    second = log.append_as_leader(pbatch([3], seq=2), leader_epoch=0)
    assert (first.first_offset, first.last_offset, second.first_offset) == (1, 2, 3)
    retry = log.append_as_leader(pbatch([1, 2], seq=0), leader_epoch=0)
    assert retry.duplicate and (retry.first_offset, retry.last_offset) == (1, 2) and retry.num_records == 0
    assert log.log_end_offset == 4
    assert read_all(log) == [(0, 100), (1, 1), (2, 2), (3, 3)]


def test_duplicate_under_log_append_time_answers_the_first_append_time(tmp_path):
    lg = Log(tmp_path / "t-0", LogConfig(message_timestamp_type="LogAppendTime"))
    try:
        first = lg.append_as_leader(pbatch([1], seq=0), leader_epoch=0, now=5_000)
        retry = lg.append_as_leader(pbatch([1], seq=0), leader_epoch=0, now=9_000)
        assert first.log_append_time == retry.log_append_time == 5_000
    finally:
        lg.close()


def test_out_of_order_and_old_epoch_are_refused_and_nothing_is_written(log):
    log.append_as_leader(pbatch([1], seq=0, epoch=2), leader_epoch=0)
    with pytest.raises(OutOfOrderSequenceError) as err:
        log.append_as_leader(pbatch([2], seq=5, epoch=2), leader_epoch=0)
    assert err.value.error_code == 45
    with pytest.raises(InvalidProducerEpochError):
        log.append_as_leader(pbatch([2], seq=1, epoch=1), leader_epoch=0)
    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(pbatch([2], seq=1, epoch=3), leader_epoch=0)  # new epoch not at 0
    assert log.log_end_offset == 1
    assert log.append_as_leader(pbatch([2], seq=0, epoch=3), leader_epoch=0).first_offset == 1


def test_a_request_with_several_batches_is_all_or_nothing(log):
    log.append_as_leader(pbatch([0], seq=0), leader_epoch=0)
    good = pbatch([1], seq=1)
    gap = pbatch([3], seq=3)
    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(good + gap, leader_epoch=0)
    assert log.log_end_offset == 1
    info = log.append_as_leader(good + pbatch([2], seq=2), leader_epoch=0)
    assert (info.first_offset, info.last_offset) == (1, 2)
    assert log.producer_state.last_entry(PID).last_seq == 2


def _fill(log, n, pid=PID):
    """n single-record batches of producer `pid` (rolling a few segments with SMALL)."""
    for seq in range(n):
        log.append_as_leader(pbatch([seq], seq=seq, pid=pid), leader_epoch=0)


def _assert_rebuilt(log, last_seq: int, retried: int) -> None:
    """The reopened log knows the producer up to `last_seq` and answers a retry as a duplicate."""
    assert log.producer_state.last_entry(PID).last_seq == last_seq
    assert log.append_as_leader(pbatch([retried], seq=retried), leader_epoch=0).duplicate


def test_state_is_rebuilt_after_a_clean_reopen_from_a_snapshot(tmp_path, monkeypatch):
    monkeypatch.setattr("odradek.broker.log.log.CLOSE_SNAPSHOT_MIN_RECORDS", 0)  # a snapshot at any close
    lg = Log(tmp_path / "t-0", SMALL)
    _fill(lg, 30)
    assert len(lg.segments) > 2
    lg.close()
    assert list_snapshots(lg.dir)[-1][0] == 30  # written at close
    lg = Log(tmp_path / "t-0", SMALL, had_clean_shutdown=True)
    try:
        dup = lg.append_as_leader(pbatch([28], seq=28), leader_epoch=0)
        assert dup.duplicate and dup.first_offset == 28
        with pytest.raises(OutOfOrderSequenceError):
            lg.append_as_leader(pbatch([31], seq=31), leader_epoch=0)
        assert lg.append_as_leader(pbatch([30], seq=30), leader_epoch=0).first_offset == 30
    finally:
        lg.close()


def test_a_close_after_few_records_writes_no_snapshot_and_the_load_replays_them(tmp_path, monkeypatch):
    """A quiet partition (a few records since its last snapshot, or none) closes without creating
    a snapshot file, the slow part of closing thousands of logs; its load replays the few."""
    import odradek.broker.log.log as log_module

    written = []
    real_write = log_module.write_snapshot

    def write(directory, state, fsync=False):
        written.append(state.map_end_offset)
        return real_write(directory, state, fsync=fsync)

    monkeypatch.setattr(log_module, "write_snapshot", write)
    big = LogConfig()  # no roll: every snapshot here would be a close's
    lg = Log(tmp_path / "t-0", big)
    _fill(lg, 5)
    lg.close()
    assert written == [] and list_snapshots(lg.dir) == []
    lg = Log(tmp_path / "t-0", big, had_clean_shutdown=True)
    _assert_rebuilt(lg, last_seq=4, retried=4)
    _fill_from(lg, 5, CLOSE_SNAPSHOT_MIN_RECORDS)  # 5 + 16 records since the start: one too many
    lg.close()
    assert written == [21] and [o for o, _ in list_snapshots(lg.dir)] == [21]
    lg = Log(tmp_path / "t-0", big, had_clean_shutdown=True)
    lg.close()  # a rolling restart's idle partition: the snapshot at 21 stands
    assert written == [21]
    lg = Log(tmp_path / "t-0", big, had_clean_shutdown=True)
    try:
        _assert_rebuilt(lg, last_seq=20, retried=20)
        _fill_from(lg, 21, CLOSE_SNAPSHOT_MIN_RECORDS)  # exactly the bound since the snapshot at 21
    finally:
        lg.close()
    assert written == [21]
    lg = Log(tmp_path / "t-0", big, had_clean_shutdown=True)
    try:
        _assert_rebuilt(lg, last_seq=36, retried=36)
    finally:
        lg.close()


def _fill_from(log, first_seq, n, pid=PID):
    for seq in range(first_seq, first_seq + n):
        log.append_as_leader(pbatch([seq], seq=seq, pid=pid), leader_epoch=0)


def test_state_is_rebuilt_by_a_scan_without_snapshots(tmp_path):
    lg = Log(tmp_path / "t-0", SMALL)
    _fill(lg, 30)
    lg.flush()
    lg.close()
    for _, path in list_snapshots(lg.dir):
        path.unlink()
    lg = Log(tmp_path / "t-0", SMALL, recovery_point=0, had_clean_shutdown=False)
    try:
        _assert_rebuilt(lg, 29, retried=29)
    finally:
        lg.close()


def test_a_roll_snapshot_plus_the_tail_after_an_unclean_stop(tmp_path):
    lg = Log(tmp_path / "t-0", SMALL)
    _fill(lg, 30)
    rolled = [o for o, _ in list_snapshots(lg.dir)]
    assert rolled and rolled[-1] < 30
    # no close(): an unclean stop leaves only the roll snapshots
    for seg in lg.segments:
        seg.write_indexes()
    lg2 = Log(tmp_path / "t-0", SMALL, recovery_point=0, had_clean_shutdown=False)
    try:
        _assert_rebuilt(lg2, 29, retried=27)
    finally:
        lg2.close()
        for seg in lg.segments:
            seg.file.close()


def test_truncation_drops_state_beyond_the_new_end(log):
    _fill(log, 20)
    assert log.truncate_to(15)
    assert log.producer_state.last_entry(PID).last_seq == 14
    assert not [o for o, _ in list_snapshots(log.dir) if o > 15]
    # seq 15 is new again, not a duplicate
    info = log.append_as_leader(pbatch([15], seq=15), leader_epoch=1)
    assert not info.duplicate and info.first_offset == 15
    assert log.append_as_leader(pbatch([12], seq=12), leader_epoch=1).duplicate


def test_truncation_to_before_a_new_epoch_brings_the_old_epoch_back(log):
    _fill(log, 4)
    log.append_as_leader(pbatch([9], seq=0, epoch=1), leader_epoch=0)
    log.truncate_to(4)
    entry = log.producer_state.last_entry(PID)
    assert (entry.producer_epoch, entry.last_seq) == (0, 3)
    assert log.append_as_leader(pbatch([3], seq=3), leader_epoch=0).duplicate


def test_truncate_fully_forgets_every_producer(log):
    _fill(log, 5)
    log.truncate_fully_and_start_at(100)
    assert len(log.producer_state) == 0 and list_snapshots(log.dir) == []
    assert log.append_as_leader(pbatch([7], seq=7), leader_epoch=0).first_offset == 100  # unknown: any seq


def test_follower_built_state_detects_what_the_old_leader_acknowledged(tmp_path):
    leader = Log(tmp_path / "a" / "t-0", SMALL)
    follower = Log(tmp_path / "b" / "t-0", SMALL)
    try:
        for seq in range(3):
            leader.append_as_leader(pbatch([seq], seq=seq), leader_epoch=0)
        follower.append_as_follower(leader.read(0, 1 << 20).read_bytes())
        assert follower.log_end_offset == 3
        # the follower becomes leader; the client retries its last batch
        retry = follower.append_as_leader(pbatch([2], seq=2), leader_epoch=1)
        assert retry.duplicate and retry.first_offset == 2
        assert follower.append_as_leader(pbatch([3], seq=3), leader_epoch=1).first_offset == 3
    finally:
        leader.close()
        follower.close()


def test_expiry_forgets_idle_producers(log):
    log.append_as_leader(pbatch([1], seq=0, ts=1_000), leader_epoch=0)
    log.append_as_leader(pbatch([1], seq=0, pid=PID + 1, ts=50_000), leader_epoch=0)
    assert log.remove_expired_producers(now=60_000, expiration_ms=50_000) == 1
    assert log.producer_state.last_entry(PID) is None
    assert not log.append_as_leader(pbatch([1], seq=0, ts=1_000), leader_epoch=0).duplicate


def test_non_idempotent_batches_are_untouched(log):
    log.append_as_leader(batch([1]), leader_epoch=0)
    log.append_as_leader(batch([1]), leader_epoch=0)
    assert log.log_end_offset == 2 and len(log.producer_state) == 0


def test_log_manager_expires_producers_with_the_broker_setting(tmp_path):
    from odradek.broker.log import LogManager
    from odradek.common.config import BrokerConfig

    config = BrokerConfig.from_properties({"broker.id": "0", "zookeeper.connect": "127.0.0.1:1",
                                           "producer.id.expiration.ms": "10000"})
    assert config.producer_id_expiration_ms == 10_000
    assert BrokerConfig.from_properties({"broker.id": "0", "zookeeper.connect": "127.0.0.1:1"}
                                        ).producer_id_expiration_ms == 86_400_000
    manager = LogManager([tmp_path], config)
    manager.startup()
    try:
        lg = manager.get_or_create_log("t", 0, SMALL)
        lg.append_as_leader(pbatch([1], seq=0, ts=1_000), leader_epoch=0)
        manager.remove_expired_producers(now=10_999)
        assert lg.producer_state.last_entry(PID) is not None
        manager.remove_expired_producers(now=11_000)
        assert lg.producer_state.last_entry(PID) is None
    finally:
        manager.shutdown()

"""Transactions in a real Log on disk: open transactions hold the last stable offset (LSO) down,
markers (control batches) end them, aborts land in the segment's `.txnindex` in Kafka's format,
and all of it survives reopening (clean and unclean), truncation, and replication to a follower."""

import struct

import pytest

from odradek.broker.log import Log, LogConfig
from odradek.broker.log.control_batch import TRANSACTIONAL_MASK, build_marker, read_marker
from odradek.broker.log.errors import InvalidRecordError
from odradek.broker.log.producer_state import (
    AppendOrigin,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    TransactionCoordinatorFencedError,
)
from odradek.broker.log.record_batch import check_batch
from odradek.broker.log.transaction_index import ENTRY_SIZE, AbortedTxn

from .helpers import batch

SMALL = LogConfig(segment_bytes=1000, index_interval_bytes=150, file_delete_delay_ms=0)
COORDINATOR = AppendOrigin.COORDINATOR


def txn_batch(values, pid, seq, epoch=0):
    return batch(values, producer_id=pid, producer_epoch=epoch, base_sequence=seq, attributes=TRANSACTIONAL_MASK)


def marker(log, pid, commit, epoch=0, coordinator_epoch=0):
    return log.append_as_leader(build_marker(pid, epoch, coordinator_epoch, commit, 1000), 0, origin=COORDINATOR)


@pytest.fixture
def log(tmp_path):
    lg = Log(tmp_path / "topic-0", SMALL)
    yield lg
    lg.close()


def replicated(log) -> int:
    log.high_watermark = log.log_end_offset
    return log.last_stable_offset


def test_markers_round_trip_in_kafkas_layout():
    data = build_marker(7, 3, 11, True, 1000)
    info = check_batch(data, 0, len(data))
    assert info.is_control and info.attributes & TRANSACTIONAL_MASK
    assert (info.producer_id, info.producer_epoch, info.base_sequence, info.records_count) == (7, 3, -1, 1)
    assert read_marker(data, 0, len(data)) == (True, 11)
    assert read_marker(build_marker(7, 3, 2, False, 0), 0, len(data)) == (False, 2)


def test_an_open_transaction_holds_the_lso_until_its_commit_is_replicated(log):
    log.append_as_leader(batch([1]), 0)  # offset 0, plain
    log.append_as_leader(txn_batch([2, 3], pid=10, seq=0), 0)  # 1-2
    log.append_as_leader(batch([4]), 0)  # 3
    assert replicated(log) == 1
    assert log.producer_state.open_transactions() == {10: 1}
    info = marker(log, 10, commit=True)  # 4
    assert info.first_offset == 4
    log.high_watermark = 4  # marker written, not replicated: still unstable
    assert log.last_stable_offset == 1
    assert replicated(log) == 5
    assert log.collect_aborted_transactions(0, 5) == []


def test_an_abort_is_indexed_in_kafkas_txnindex_format(log, tmp_path):
    log.append_as_leader(txn_batch([1], pid=10, seq=0), 0)  # 0
    log.append_as_leader(txn_batch([2], pid=11, seq=0), 0)  # 1
    log.append_as_leader(txn_batch([3], pid=10, seq=1), 0)  # 2
    marker(log, 10, commit=False)  # 3: pid 11 still open from 1
    assert replicated(log) == 1
    aborted = log.collect_aborted_transactions(0, 4)
    assert aborted == [AbortedTxn(10, 0, 3, 1)]
    files = list((tmp_path / "topic-0").glob("*.txnindex"))
    data = files[0].read_bytes()
    assert len(data) == ENTRY_SIZE and struct.unpack(">hqqqq", data) == (0, 10, 0, 3, 1)
    marker(log, 11, commit=True)  # 4
    assert replicated(log) == 5
    assert log.collect_aborted_transactions(4, 5) == []  # the abort ended before the range


def test_aborts_are_found_across_segments_and_the_search_stops(log):
    for i in range(12):  # each transaction: two records and an abort; segments roll every few
        pid = 100 + i
        log.append_as_leader(txn_batch([i] * 20, pid=pid, seq=0), 0)
        marker(log, pid, commit=i % 2 == 0)
    assert len(log.segments) > 2
    replicated(log)
    aborted = log.collect_aborted_transactions(0, log.log_end_offset)
    assert [t.producer_id for t in aborted] == [101, 103, 105, 107, 109, 111]
    mid = aborted[3]
    found = log.collect_aborted_transactions(mid.first_offset, mid.last_offset)
    assert found == [mid]


def test_epoch_and_coordinator_fencing_of_markers_and_data(log):
    log.append_as_leader(txn_batch([1], pid=10, seq=0, epoch=3), 0)
    with pytest.raises(InvalidProducerEpochError):
        marker(log, 10, commit=True, epoch=2)
    with pytest.raises(InvalidTxnStateError):
        log.append_as_leader(batch([2], producer_id=10, producer_epoch=3, base_sequence=1), 0)
    marker(log, 10, commit=False, epoch=4, coordinator_epoch=5)  # a fencing abort bumps the epoch
    with pytest.raises(TransactionCoordinatorFencedError):
        marker(log, 10, commit=True, epoch=4, coordinator_epoch=4)
    with pytest.raises(InvalidProducerEpochError):  # the zombie's epoch is gone
        log.append_as_leader(txn_batch([3], pid=10, seq=1, epoch=3), 0)
    assert log.log_end_offset == 2
    with pytest.raises(InvalidRecordError):  # clients never write control batches
        log.append_as_leader(build_marker(10, 5, 5, True, 0), 0)


def test_open_transaction_survives_a_clean_reopen_and_aborts_survive_an_unclean_one(tmp_path):
    lg = Log(tmp_path / "t-0", SMALL)
    for i in range(6):
        lg.append_as_leader(txn_batch([i] * 20, pid=200 + i, seq=0), 0)
        marker(lg, 200 + i, commit=i % 3 != 0)
    lg.append_as_leader(txn_batch([9], pid=300, seq=0), 0)
    open_at = lg.log_end_offset - 1
    replicated(lg)
    before = lg.collect_aborted_transactions(0, lg.log_end_offset)
    assert [t.producer_id for t in before] == [200, 203]
    lg.close()

    lg = Log(tmp_path / "t-0", SMALL, had_clean_shutdown=True)
    lg.high_watermark = lg.log_end_offset
    assert lg.last_stable_offset == open_at
    assert lg.collect_aborted_transactions(0, lg.log_end_offset) == before
    lg.close()

    for f in (tmp_path / "t-0").glob("*.txnindex"):
        f.unlink()  # lost indexes and snapshots: an unclean start rebuilds them from the log
    for f in (tmp_path / "t-0").glob("*.snapshot"):
        f.unlink()
    lg = Log(tmp_path / "t-0", SMALL, recovery_point=0, had_clean_shutdown=False)
    try:
        lg.high_watermark = lg.log_end_offset
        assert lg.last_stable_offset == open_at
        assert lg.collect_aborted_transactions(0, lg.log_end_offset) == before
        assert sorted(f.name for f in (tmp_path / "t-0").glob("*.txnindex"))
    finally:
        lg.close()


def test_truncating_below_a_marker_reopens_its_transaction(log):
    log.append_as_leader(txn_batch([1], pid=10, seq=0), 0)  # 0
    marker(log, 10, commit=False)  # 1
    assert log.collect_aborted_transactions(0, 2) == [AbortedTxn(10, 0, 1, 2)]
    log.truncate_to(1)
    assert log.producer_state.open_transactions() == {10: 0}
    assert log.collect_aborted_transactions(0, 2) == []
    assert replicated(log) == 0


def test_a_follower_replaying_the_leaders_batches_has_the_same_transactions(tmp_path):
    leader = Log(tmp_path / "t-0", SMALL)
    follower = Log(tmp_path / "f" / "t-0", SMALL)
    try:
        leader.append_as_leader(txn_batch([1], pid=10, seq=0), 0)
        leader.append_as_leader(txn_batch([2], pid=11, seq=0), 0)
        marker(leader, 10, commit=False)
        leader.append_as_leader(txn_batch([3], pid=12, seq=0), 0)
        marker(leader, 11, commit=True)
        data = leader.read(0, 1 << 20).read_bytes()
        follower.append_as_follower(data)
        assert follower.producer_state.open_transactions() == {12: 3}
        assert replicated(follower) == replicated(leader) == 3
        assert follower.collect_aborted_transactions(0, 5) == leader.collect_aborted_transactions(0, 5)
        assert follower.read(0, 1 << 20).read_bytes() == data
    finally:
        leader.close()
        follower.close()


def test_producers_with_an_open_transaction_never_expire(log):
    log.append_as_leader(txn_batch([1], pid=10, seq=0), 0)
    log.append_as_leader(batch([2], producer_id=11, producer_epoch=0, base_sequence=0), 0)
    assert log.remove_expired_producers(now=10**13, expiration_ms=1) == 1
    assert log.producer_state.open_transactions() == {10: 0}

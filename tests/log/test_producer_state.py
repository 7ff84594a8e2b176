"""ProducerStateManager, the pure core: Kafka 3.x's sequence and epoch rules, duplicates, wrap-around,
expiry, snapshots."""

import pytest

from odradek.broker.log.errors import InvalidRecordError
from odradek.broker.log.producer_state import (
    MAX_SEQUENCE,
    AppendOrigin,
    BatchMetadata,
    InvalidProducerEpochError,
    OutOfOrderSequenceError,
    ProducerStateManager,
    decrement_sequence,
    delete_snapshots,
    increment_sequence,
    list_snapshots,
    load_latest_snapshot,
    write_snapshot,
)
from odradek.broker.log.record_batch import HEADER, check_batch

from .helpers import batch

CLIENT, REPLICATION = AppendOrigin.CLIENT, AppendOrigin.REPLICATION


class Writer:
    """Appends rows to a state the way Log does: prepare, then update at the next offsets."""

    def __init__(self, state=None):
        self.state = state or ProducerStateManager()
        self.next_offset = self.state.map_end_offset

    def append(self, pid, epoch, seq, count=1, ts=1000, origin=CLIENT):
        last_seq = increment_sequence(seq, count - 1) if seq >= 0 else seq
        first, last = self.next_offset, self.next_offset + count - 1
        out = self.state.prepare([(pid, epoch, seq, last_seq, first, last, ts)], origin)
        if isinstance(out, BatchMetadata):
            return out
        self.state.update(out, last + 1)
        self.next_offset = last + 1
        return first


def test_sequences_wrap_at_int_max():
    assert increment_sequence(5, 3) == 8
    assert increment_sequence(MAX_SEQUENCE, 1) == 0
    assert increment_sequence(MAX_SEQUENCE - 1, 3) == 1
    assert decrement_sequence(1, 3) == MAX_SEQUENCE - 1
    assert decrement_sequence(8, 3) == 5


def test_batch_info_carries_the_producer_fields_and_last_sequence():
    data = batch([1, 2, 3], producer_id=42, producer_epoch=3, base_sequence=MAX_SEQUENCE - 1)
    info = check_batch(data, 0, len(data))
    assert (info.producer_id, info.producer_epoch, info.base_sequence) == (42, 3, MAX_SEQUENCE - 1)
    assert info.last_sequence == 0  # MAX-1, MAX, 0
    plain = batch([1])
    assert check_batch(plain, 0, len(plain)).producer_id == -1


def test_in_sequence_batches_are_accepted_and_remembered():
    w = Writer()
    assert w.append(7, 0, 0, count=2) == 0
    assert w.append(7, 0, 2, count=3) == 2
    entry = w.state.last_entry(7)
    assert (entry.producer_epoch, entry.last_seq, entry.last_offset) == (0, 4, 4)
    assert w.state.map_end_offset == 5


def test_a_retried_batch_is_a_duplicate_with_its_first_offsets():
    w = Writer()
    for seq in range(6):
        w.append(7, 0, seq * 2, count=2)
    # the last five batches (seq 2..11) are remembered; the first (seq 0-1) is not
    dup = w.append(7, 0, 4, count=2)
    assert isinstance(dup, BatchMetadata)
    assert (dup.first_offset, dup.last_offset, dup.first_seq, dup.last_seq) == (4, 5, 4, 5)
    with pytest.raises(OutOfOrderSequenceError):
        w.append(7, 0, 0, count=2)  # too old to be recognised: a gap for Kafka too
    # a duplicate needs the same epoch and the same sequence range
    with pytest.raises(OutOfOrderSequenceError):
        w.append(7, 0, 4, count=1)


def test_a_sequence_gap_is_out_of_order():
    w = Writer()
    w.append(7, 0, 0)
    with pytest.raises(OutOfOrderSequenceError):
        w.append(7, 0, 2)
    assert w.state.last_entry(7).last_seq == 0  # nothing changed


def test_an_older_epoch_is_fenced():
    w = Writer()
    w.append(7, 3, 0)
    with pytest.raises(InvalidProducerEpochError) as err:
        w.append(7, 2, 1)
    assert err.value.error_code == 47


def test_a_new_epoch_starts_at_sequence_zero():
    w = Writer()
    w.append(7, 0, 0)
    w.append(7, 0, 1)
    with pytest.raises(OutOfOrderSequenceError):
        w.append(7, 1, 2)
    assert w.append(7, 1, 0) == 2
    entry = w.state.last_entry(7)
    assert entry.producer_epoch == 1 and len(entry.batches) == 1  # the old epoch's batches are gone
    assert not isinstance(w.append(7, 1, 1), BatchMetadata)


def test_an_unknown_producer_is_accepted_at_any_sequence():
    """Kafka 3.x (after KIP-360): no UNKNOWN_PRODUCER_ID; a producer whose state expired or whose
    batches retention deleted continues where it was."""
    w = Writer()
    assert w.append(9, 4, 57) == 0
    assert w.state.last_entry(9).last_seq == 57
    with pytest.raises(OutOfOrderSequenceError):
        w.append(9, 4, 60)


def test_sequence_wraps_around_int_max():
    w = Writer()
    w.append(7, 0, MAX_SEQUENCE - 1, count=2)  # unknown producer: accepted anywhere
    assert w.state.last_entry(7).last_seq == MAX_SEQUENCE
    assert w.append(7, 0, 0) == 2
    w2 = Writer()
    w2.append(8, 0, MAX_SEQUENCE - 1, count=4)  # sequences MAX-1, MAX, 0, 1
    assert w2.state.last_entry(8).last_seq == 1
    dup = w2.append(8, 0, MAX_SEQUENCE - 1, count=4)
    assert isinstance(dup, BatchMetadata) and dup.last_seq == 1
    assert w2.append(8, 0, 2) == 4


def test_a_client_batch_needs_a_sequence():
    w = Writer()
    with pytest.raises(InvalidRecordError):
        w.append(7, 0, -1)


def test_one_request_is_checked_as_a_whole():
    w = Writer()
    w.append(7, 0, 0)
    state = w.state
    rows = [(7, 0, 1, 1, 1, 1, 1), (7, 0, 2, 2, 2, 2, 1), (7, 0, 5, 5, 3, 3, 1)]
    with pytest.raises(OutOfOrderSequenceError):
        state.prepare(rows, CLIENT)
    assert state.last_entry(7).last_seq == 0
    appends = state.prepare(rows[:2], CLIENT)
    assert len(appends) == 2 and state.last_entry(7).last_seq == 0  # prepare changes nothing
    state.update(appends, 3)
    assert state.last_entry(7).last_seq == 2


def test_replication_replays_without_checks():
    w = Writer()
    w.append(7, 5, 10, origin=REPLICATION)
    w.append(7, 5, 30, origin=REPLICATION)  # a gap: the log is the truth
    w.append(7, 4, 3, origin=REPLICATION)  # an older epoch: only a warning
    entry = w.state.last_entry(7)
    assert (entry.producer_epoch, entry.last_seq) == (4, 3)
    w2 = Writer()
    w2.append(7, 0, 0, origin=REPLICATION)
    assert isinstance(w2.append(7, 0, 0), BatchMetadata)  # the follower-built state knows the batch


def test_expiry_removes_producers_idle_that_long():
    w = Writer()
    w.append(1, 0, 0, ts=1_000)
    w.append(2, 0, 0, ts=5_000)
    assert w.state.remove_expired_producers(now_ms=10_999, expiration_ms=10_000) == []
    assert w.state.remove_expired_producers(now_ms=11_000, expiration_ms=10_000) == [1]
    assert w.state.last_entry(1) is None and w.state.last_entry(2) is not None
    assert w.append(1, 0, 8) == 2  # forgotten: any sequence again, appended at the next offset


def test_covers_up_to():
    w = Writer()
    w.append(1, 0, 0, count=3)  # offsets 0..2
    assert w.state.covers_up_to(3)
    assert not w.state.covers_up_to(2)


def test_snapshot_round_trip_and_corruption(tmp_path):
    w = Writer()
    for seq in range(7):
        w.append(1, 2, seq, ts=100 + seq)
    w.append(2**40, 0, MAX_SEQUENCE, ts=7)
    path = write_snapshot(tmp_path, w.state)
    assert path.name == "00000000000000000008.snapshot"
    loaded = load_latest_snapshot(tmp_path, 0, 100)
    assert loaded.map_end_offset == 8
    for pid in (1, 2**40):
        a, b = w.state.last_entry(pid), loaded.last_entry(pid)
        assert (a.producer_epoch, a.last_timestamp) == (b.producer_epoch, b.last_timestamp)
        assert list(a.batches) == list(b.batches)
    assert len(loaded.last_entry(1).batches) == 5
    assert load_latest_snapshot(tmp_path, 0, 7) is None  # outside the range
    # a torn newer snapshot is deleted and the older one used
    write_snapshot(tmp_path, ProducerStateManager(3))
    torn = tmp_path / "00000000000000000009.snapshot"
    torn.write_bytes(path.read_bytes()[:-3])
    assert load_latest_snapshot(tmp_path, 0, 100).map_end_offset == 8
    assert not torn.exists()
    delete_snapshots(tmp_path, below=4)
    assert [o for o, _ in list_snapshots(tmp_path)] == [8]


def test_header_layout_matches_kafka():
    # producerId int64, producerEpoch int16, baseSequence int32 right before recordsCount
    data = batch([1], producer_id=0x0102030405060708, producer_epoch=0x0A0B, base_sequence=0x0C0D0E0F)
    fields = HEADER.unpack_from(data, 0)
    assert fields[9:12] == (0x0102030405060708, 0x0A0B, 0x0C0D0E0F)
    assert data[43:51] == bytes.fromhex("0102030405060708")

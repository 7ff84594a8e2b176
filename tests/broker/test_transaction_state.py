"""The transaction coordinator's pure core: TransactionMetadata's transits (Kafka's state machine,
epoch bumps and fencing) and the `__transaction_state` record format."""

import struct

import pytest

from odradek.broker.transaction import transaction_log
from odradek.broker.transaction.transaction_metadata import (
    MAX_PRODUCER_EPOCH,
    IllegalTransitionError,
    TransactionMetadata,
    TransactionState,
    is_epoch_exhausted,
)

S = TransactionState


def written(m: TransactionMetadata, transit):
    """Apply a transit as the coordinator does once its record is written."""
    m.complete(transit)
    return m


def test_a_transaction_goes_round_and_every_step_bumps_nothing_it_should_not():
    m = TransactionMetadata("app", 7)
    written(m, m.prepare_init(30_000, now=1))
    assert (m.state, m.producer_epoch, m.last_producer_epoch) == (S.EMPTY, 0, -1)
    written(m, m.prepare_add_partitions({("t", 0)}, now=5))
    written(m, m.prepare_add_partitions({("t", 1)}, now=9))
    assert m.state == S.ONGOING and m.partitions == {("t", 0), ("t", 1)} and m.txn_start_timestamp == 5
    written(m, m.prepare_end(commit=True, now=10))
    assert m.state == S.PREPARE_COMMIT and m.partitions
    written(m, m.prepare_complete(now=11))
    assert (m.state, m.partitions, m.producer_epoch) == (S.COMPLETE_COMMIT, set(), 0)
    written(m, m.prepare_add_partitions({("t", 2)}, now=20))
    assert m.txn_start_timestamp == 20  # a new transaction starts its clock


def test_one_change_at_a_time_and_only_kafkas_moves():
    m = TransactionMetadata("app", 7)
    transit = m.prepare_init(30_000, now=1)
    with pytest.raises(IllegalTransitionError):
        m.prepare_add_partitions({("t", 0)}, now=2)  # the init is still being written
    m.abort_pending()
    assert m.producer_epoch == -1  # a failed write changed nothing
    written(m, m.prepare_init(30_000, now=1))
    with pytest.raises(IllegalTransitionError):
        m.prepare_end(commit=True, now=3)  # Empty cannot commit
    with pytest.raises(IllegalTransitionError):
        m.complete(transit)  # not the pending one


def test_init_producer_id_epochs_kip_360():
    m = TransactionMetadata("app", 7)
    written(m, m.prepare_init(30_000, now=1))
    written(m, m.prepare_init(30_000, now=2))
    assert (m.producer_epoch, m.last_producer_epoch) == (1, 0)
    written(m, m.prepare_init(30_000, now=3, expected_epoch=1))  # the current epoch: bumped
    assert m.producer_epoch == 2
    written(m, m.prepare_init(30_000, now=4, expected_epoch=1))  # the previous: a retry, no bump
    assert (m.producer_epoch, m.last_producer_epoch) == (2, 1)
    assert m.prepare_init(30_000, now=5, expected_epoch=0) is None  # anything older is fenced
    written(m, m.prepare_init(30_000, now=6, new_producer_id=99))
    assert (m.producer_id, m.last_producer_id, m.producer_epoch) == (99, 7, 0)
    assert is_epoch_exhausted(MAX_PRODUCER_EPOCH - 1) and not is_epoch_exhausted(5)


def test_fencing_an_open_transaction_aborts_it_with_a_bumped_epoch():
    m = TransactionMetadata("app", 7)
    written(m, m.prepare_init(30_000, now=1))
    written(m, m.prepare_add_partitions({("t", 0)}, now=2))
    m.prepare_fence_epoch()
    assert m.producer_epoch == 1 and m.pending == S.PREPARE_EPOCH_FENCE
    with pytest.raises(IllegalTransitionError):
        m.prepare_end(commit=True, now=3)  # a fenced transaction only aborts
    transit = m.prepare_end(commit=False, now=3)
    assert (transit.state, transit.producer_epoch) == (S.PREPARE_ABORT, 1)
    written(m, transit)
    written(m, m.prepare_complete(now=4))
    assert m.state == S.COMPLETE_ABORT


def test_state_titles_are_kafkas():
    assert [s.title for s in S] == ["Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit",
                                    "CompleteAbort", "Dead", "PrepareEpochFence"]
    assert S.from_title("ongoing") is S.ONGOING and S.from_title("nope") is None


def test_log_records_round_trip_in_kafkas_layout():
    m = TransactionMetadata("app", 7)
    written(m, m.prepare_init(45_000, now=1))
    transit = m.prepare_add_partitions({("b", 1), ("a", 0), ("a", 2)}, now=1234)
    key = transaction_log.key("app")
    assert key == b"\x00\x00\x00\x03app"
    value = transaction_log.value(transit)
    version, pid, epoch, timeout, state = struct.unpack_from(">hqhib", value)
    assert (version, pid, epoch, timeout, state) == (0, 7, 0, 45_000, 1)
    back = transaction_log.decode_value(value)
    assert (back.producer_id, back.producer_epoch, back.state, back.partitions) == (7, 0, S.ONGOING, transit.partitions)
    assert (back.txn_start_timestamp, back.txn_last_update_timestamp) == (1234, 1234)
    assert transaction_log.decode_key(key) == "app"
    empty = transaction_log.value(m.prepare_init(45_000, now=2) if not m.abort_pending() else None)
    assert struct.unpack_from(">i", empty, 17)[0] == -1  # Empty writes a null partition list
    for bad in (value[:20], b"\x00\x05" + value[2:], value[:17] + b"\x7f\xff\xff\xff" + value[21:]):
        with pytest.raises(ValueError):
            transaction_log.decode_value(bad)


# --- EndTxn outside an open transaction (Kafka's endTransaction) --------------------------------


@pytest.mark.parametrize(("state", "commit", "want"), [
    (S.EMPTY, True, "invalid_txn_state"),
    (S.EMPTY, False, "invalid_txn_state"),
    (S.COMPLETE_COMMIT, True, "none"),
    (S.COMPLETE_COMMIT, False, "invalid_txn_state"),
    (S.COMPLETE_ABORT, False, "none"),
    (S.COMPLETE_ABORT, True, "invalid_txn_state"),
    (S.PREPARE_COMMIT, True, "concurrent_transactions"),
    (S.PREPARE_COMMIT, False, "invalid_txn_state"),
    (S.PREPARE_ABORT, False, "concurrent_transactions"),
    (S.PREPARE_ABORT, True, "invalid_txn_state"),
])
def test_end_txn_outside_a_transaction_accepts_only_a_retry_of_the_same_outcome(state, commit, want):
    from kio.schema.errors import ErrorCode

    from odradek.broker.transaction.transaction_coordinator import end_in_state

    assert end_in_state(state, commit) == ErrorCode[want]


@pytest.mark.parametrize(("api", "version", "want"), [
    (24, 1, "invalid_producer_epoch"), (24, 2, "producer_fenced"), (25, 1, "invalid_producer_epoch"),
    (25, 2, "producer_fenced"), (26, 0, "invalid_producer_epoch"), (26, 2, "producer_fenced"),
    (22, 3, "invalid_producer_epoch"), (22, 4, "producer_fenced"),
])
def test_producer_fenced_is_invalid_producer_epoch_for_versions_before_it(api, version, want):
    from kio.schema.errors import ErrorCode

    from odradek.broker.transaction.transaction_apis import fenced_for_version

    assert fenced_for_version(ErrorCode.producer_fenced, api, version) == ErrorCode[want]
    assert fenced_for_version(ErrorCode.none, api, version) == ErrorCode.none

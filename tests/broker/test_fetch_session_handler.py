"""The fetcher's side of a fetch session: what each request carries and how answers move it on."""

from kio.schema.errors import ErrorCode

from odradek.broker.fetch_session import MAX_EPOCH, next_epoch
from odradek.broker.fetch_session_handler import FetchSessionHandler

A0, A1, B0 = ("a", 0), ("a", 1), ("b", 0)


def established(partitions, session_id=9):
    h = FetchSessionHandler()
    h.build(partitions)
    h.handle_response(0, session_id)
    return h


def test_first_request_is_full_and_asks_for_a_session():
    h = FetchSessionHandler()
    r = h.build({A0: 10, A1: 20})
    assert (r.session_id, r.epoch, r.full, r.to_send, r.forgotten) == (0, 0, True, {A0: 10, A1: 20}, [])


def test_granted_session_makes_the_next_request_incremental_with_only_changes():
    h = established({A0: 10, A1: 20})
    r = h.build({A0: 15, A1: 20, B0: 0})
    assert (r.session_id, r.epoch, r.full) == (9, 1, False)
    assert r.to_send == {A0: 15, B0: 0} and r.forgotten == []
    h.handle_response(0, 9)
    r = h.build({A0: 15, B0: 0})
    assert (r.epoch, r.to_send, r.forgotten) == (2, {}, [A1])


def test_no_session_granted_keeps_sending_full_requests():
    h = FetchSessionHandler()
    h.build({A0: 1})
    h.handle_response(0, 0)
    r = h.build({A0: 2})
    assert (r.session_id, r.epoch, r.full, r.to_send) == (0, 0, True, {A0: 2})


def test_a_session_the_leader_closed_is_not_named_again():
    h = established({A0: 1})
    h.build({})
    h.handle_response(0, 0)
    r = h.build({A0: 1})
    assert (r.session_id, r.epoch, r.full) == (0, 0, True)


def test_session_errors_start_over_with_a_full_request():
    h = established({A0: 1})
    h.build({A0: 2})
    h.handle_response(ErrorCode.invalid_fetch_session_epoch, 0)
    r = h.build({A0: 2})
    assert (r.session_id, r.epoch, r.full, r.to_send) == (9, 0, True, {A0: 2})  # names the session to close
    h.handle_response(ErrorCode.fetch_session_id_not_found, 0)
    r = h.build({A0: 2})
    assert (r.session_id, r.epoch, r.full) == (0, 0, True)  # an unknown session is not named again


def test_an_unanswered_request_replaces_the_session():
    h = established({A0: 1, A1: 1})
    h.build({A0: 5, A1: 1})
    h.handle_error()
    r = h.build({A0: 5, A1: 1})
    assert (r.session_id, r.epoch, r.full, r.to_send) == (9, 0, True, {A0: 5, A1: 1})
    h.handle_response(0, 12)
    assert h.build({A0: 5, A1: 1}).session_id == 12


def test_a_failed_incremental_request_does_not_update_the_cached_state():
    h = established({A0: 1})
    h.build({A0: 2})
    h.handle_error()
    assert h.session_partitions == {}


def test_epochs_wrap_to_one():
    assert next_epoch(0) == 1 and next_epoch(5) == 6 and next_epoch(MAX_EPOCH) == 1


def test_named_changes_are_all_an_incremental_request_looks_at():
    h = established({A0: 10, A1: 20, B0: 30})
    r = h.build({A0: 15, A1: 99, B0: 30}, changed=[A0, B0])
    assert (r.full, r.to_send, r.forgotten) == (False, {A0: 15}, [])  # A1 was not named: not looked at
    h.handle_response(0, 9)
    assert h.session_partitions == {A0: 15, A1: 20, B0: 30}
    r = h.build({A0: 15}, changed=[B0])
    assert (r.to_send, r.forgotten) == ({}, [B0])
    h.handle_response(0, 9)
    assert h.session_partitions == {A0: 15, A1: 20}


def test_named_changes_do_not_shrink_a_full_request():
    h = FetchSessionHandler()
    r = h.build({A0: 1, A1: 2}, changed=[A0])
    assert (r.full, r.to_send) == (True, {A0: 1, A1: 2})
    h.handle_response(0, 9)
    assert h.session_partitions == {A0: 1, A1: 2}

"""common/network/pipeline: the produce-pipelining policy, without sockets or sleeps."""

import pytest

from odradek.common.network.pipeline import RequestPipeline


class Req:
    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return self.name


def test_pipelined_requests_start_up_to_the_window():
    p = RequestPipeline(window=3)
    reqs = [Req(f"p{i}") for i in range(4)]
    for r in reqs[:3]:
        assert p.may_start(pipelined=True)
        p.start(r, pipelined=True)
    assert not p.may_start(pipelined=True)
    with pytest.raises(RuntimeError):
        p.start(reqs[3], pipelined=True)
    p.finish(reqs[0])
    assert p.answerable() == [reqs[0]]
    assert p.may_start(pipelined=True)


def test_answers_leave_in_request_order_finished_heads_together():
    p = RequestPipeline(window=8)
    a, b, c = Req("a"), Req("b"), Req("c")
    for r in (a, b, c):
        p.start(r, pipelined=True)
    p.finish(c)
    p.finish(b)
    assert p.answerable() == []  # a is still running: b and c wait behind it
    p.finish(a)
    assert p.answerable() == [a, b, c]
    assert len(p) == 0


def test_a_barrier_waits_for_everything_before_it_and_blocks_everything_after():
    p = RequestPipeline(window=8)
    a = Req("produce")
    p.start(a, pipelined=True)
    assert not p.may_start(pipelined=False)  # a Fetch waits for the Produce before it
    p.finish(a)
    assert p.answerable() == [a]
    barrier = Req("fetch")
    assert p.may_start(pipelined=False)
    p.start(barrier, pipelined=False)
    assert not p.may_start(pipelined=True) and not p.may_start(pipelined=False)
    p.finish(barrier)
    assert p.answerable() == [barrier]
    assert p.may_start(pipelined=True)


def test_abandon_hands_back_everything_in_flight():
    p = RequestPipeline(window=2)
    a, b = Req("a"), Req("b")
    p.start(a, pipelined=True)
    p.start(b, pipelined=True)
    p.finish(b)
    assert p.abandon() == [a, b]
    assert len(p) == 0 and p.may_start(pipelined=False)


def test_window_must_be_positive():
    with pytest.raises(ValueError):
        RequestPipeline(window=0)

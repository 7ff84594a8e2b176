"""ElectLeaders decisions over plain data: preferred and unclean, with Kafka's per-partition errors."""

from kio.schema.errors import ErrorCode

from odradek.common.zk_data import LeaderIsrAndControllerEpoch as State
from odradek.common.zk_data import TopicAssignment
from odradek.controller.context import TopicPartition as TP
from odradek.controller.elect_leaders import PREFERRED, UNCLEAN, on_elect_leaders

from .test_state_machine import context


def cluster(states: dict[int, State], live=(0, 1, 2)):
    ctx = context(live=live)
    ctx.assignments = {"t": TopicAssignment({0: (0, 1, 2), 1: (1, 2, 0), 2: (2, 0, 1)})}
    ctx.partition_states = {TP("t", p): s for p, s in states.items()}
    return ctx


def codes(d):
    return {tp.partition: r.error for tp, r in d.answer.items() if tp.topic == "t"}


def test_preferred_moves_only_where_the_preferred_replica_can_lead():
    ctx = cluster({0: State(1, 4, (0, 1, 2), 5, 9), 1: State(1, 4, (1, 2), 5, 9), 2: State(0, 4, (0, 1), 5, 9)})
    d = on_elect_leaders(ctx, PREFERRED, None)
    assert codes(d) == {0: 0, 1: ErrorCode.election_not_needed, 2: ErrorCode.preferred_leader_not_available}
    (w,) = d.state_writes
    assert w.tp == TP("t", 0) and w.state.leader == 0 and w.state.leader_epoch == 5 and w.expected_version == 9
    assert d.requests


def test_unclean_elects_an_out_of_sync_replica_only_when_no_leader_is_live():
    # partition 0: leader 0 dead, ISR only the dead 0; partition 1: live leader; partition 2: nobody live
    ctx = cluster({0: State(-1, 4, (0,), 5, 9), 1: State(1, 4, (1,), 5, 9), 2: State(-1, 4, (2,), 5, 9)}, live=(1,))
    d = on_elect_leaders(ctx, UNCLEAN, [TP("t", 0), TP("t", 1), TP("t", 2), TP("t", 7), TP("u", 0)])
    assert codes(d)[0] == 0 and codes(d)[1] == ErrorCode.election_not_needed
    assert codes(d)[7] == ErrorCode.unknown_topic_or_partition
    assert d.answer[TP("u", 0)].error == ErrorCode.unknown_topic_or_partition
    (w, w2) = d.state_writes
    assert w.state.leader == 1 and w.state.isr == (1,)
    assert w2.tp == TP("t", 2) and w2.state.leader == 1  # 1 is a replica of partition 2 too


def test_no_live_replica_and_unknown_type():
    ctx = cluster({0: State(-1, 4, (0,), 5, 9)}, live=())
    assert codes(on_elect_leaders(ctx, UNCLEAN, [TP("t", 0)])) == {0: ErrorCode.eligible_leaders_not_available}
    assert codes(on_elect_leaders(ctx, 7, [TP("t", 0)])) == {0: ErrorCode.invalid_request}
    assert not on_elect_leaders(ctx, 7, [TP("t", 0)]).state_writes


def test_a_newer_controller_deposes():
    ctx = cluster({0: State(1, 4, (0, 1, 2), 99, 9)})
    assert on_elect_leaders(ctx, PREFERRED, None).deposed

"""Reassignment decisions (KIP-455) replayed over plain data: start, completion, cancel, resume."""

import pytest
from kio.schema.errors import ErrorCode

from odradek.common import messages as m
from odradek.common.zk_data import LeaderIsrAndControllerEpoch as State
from odradek.common.zk_data import TopicAssignment
from odradek.controller import reassignment as ra
from odradek.controller.context import TopicPartition as TP
from odradek.controller.state_machine import apply_decisions

from .test_state_machine import context

T0 = TP("t", 0)


def cluster(replicas=(0, 1, 2), isr=None, leader=None, live=(0, 1, 2, 3), adding=(), removing=()):
    isr = tuple(replicas) if isr is None else isr
    ctx = context(live=live)
    ctx.assignments = {"t": TopicAssignment({0: tuple(replicas)}, None, {0: tuple(adding)} if adding else {},
                                            {0: tuple(removing)} if removing else {})}
    ctx.partition_states = {T0: State(replicas[0] if leader is None else leader, 3, isr, 4, 7)}
    return ctx


def sent(d, broker, kind):
    return d.requests_to(broker, kind)


def stop_deletes(d, broker) -> list[tuple[str, int]]:
    return [(t.name, int(p)) for r in sent(d, broker, m.StopReplicaRequest) if r.delete_partitions
            for t in r.topics for p in t.partition_indexes]


def isr_grows(ctx, new_isr):
    s = ctx.partition_states[T0]
    ctx.partition_states[T0] = State(s.leader, s.leader_epoch, tuple(new_isr), s.controller_epoch, s.zk_version + 1)


def test_replica_assignment_sets_follow_kafka():
    a = ra.ReplicaAssignment((0, 1, 2)).reassign_to((1, 2, 3))
    assert a == ra.ReplicaAssignment((1, 2, 3, 0), (3,), (0,))
    assert a.target == (1, 2, 3) and a.origin == (1, 2, 0)
    # a second reassignment replaces the first but keeps the original replicas
    b = a.reassign_to((4, 5))
    assert b == ra.ReplicaAssignment((4, 5, 1, 2, 0), (4, 5), (1, 2, 0))
    assert a.reassign_to(a.origin) == ra.ReplicaAssignment((1, 2, 0))


def test_start_records_progress_then_bumps_the_epoch_and_adds_the_new_replica():
    ctx = cluster()
    d = ra.on_reassign(ctx, {T0: (1, 2, 3)})
    assert d.answer == {T0: ra.Result()}
    assert d.assignment_writes == {T0: ra.ReplicaAssignment((1, 2, 3, 0), (3,), (0,))}
    (w,) = d.state_writes
    assert w.state.leader == 0 and w.state.leader_epoch == 4 and w.state.isr == (0, 1, 2) and w.expected_version == 7
    (lai,) = sent(d, 3, m.LeaderAndIsrRequest)
    ps = lai.topic_states[0].partition_states[0]
    assert ps.is_new and tuple(ps.replicas) == (1, 2, 3, 0)
    assert sent(d, 0, m.LeaderAndIsrRequest)  # the leader learns the new replica set
    assert not d.final_assignment_writes and not stop_deletes(d, 0)
    apply_decisions(ctx, d)
    assert ctx.replicas(T0) == (1, 2, 3, 0)
    assert ra.list_reassignments(ctx, None) == {T0: ra.ReplicaAssignment((1, 2, 3, 0), (3,), (0,))}
    # not in sync yet: nothing to complete
    assert not ra.on_reassignment_progress(ctx).state_writes


def test_completion_moves_leadership_and_deletes_the_removed_replica():
    ctx = cluster()
    apply_decisions(ctx, ra.on_reassign(ctx, {T0: (1, 2, 3)}))
    isr_grows(ctx, (0, 1, 2, 3))
    d = ra.on_reassignment_progress(ctx)
    (w,) = d.state_writes
    assert w.state.leader == 1 and w.state.isr == (1, 2, 3) and w.state.leader_epoch == 5
    assert d.final_assignment_writes == {T0: ra.ReplicaAssignment((1, 2, 3))}
    assert stop_deletes(d, 0) == [("t", 0)]
    assert not sent(d, 0, m.LeaderAndIsrRequest)
    assert all(sent(d, b, m.LeaderAndIsrRequest) for b in (1, 2, 3))
    assert d.final_requests and all(isinstance(r, m.UpdateMetadataRequest) for _, r in d.final_requests)
    apply_decisions(ctx, d)
    assert ctx.replicas(T0) == (1, 2, 3) and not ra.ongoing(ctx)
    assert ctx.assignments["t"].adding_replicas == {} and ctx.assignments["t"].removing_replicas == {}


def test_a_leader_that_stays_keeps_leading():
    ctx = cluster(leader=1)
    apply_decisions(ctx, ra.on_reassign(ctx, {T0: (1, 2, 3)}))
    isr_grows(ctx, (1, 2, 0, 3))
    (w,) = ra.on_reassignment_progress(ctx).state_writes
    assert w.state.leader == 1 and w.state.isr == (1, 2, 3)


def test_shrinking_the_replication_factor_completes_at_once():
    ctx = cluster()
    d = ra.on_reassign(ctx, {T0: (0, 1)})
    assert d.assignment_writes == {T0: ra.ReplicaAssignment((0, 1, 2), (), (2,))}
    apply_decisions(ctx, d)
    d = ra.on_reassignment_progress(ctx)
    assert d.state_writes[0].state.isr == (0, 1) and stop_deletes(d, 2) == [("t", 0)]
    apply_decisions(ctx, d)
    assert ctx.replicas(T0) == (0, 1)


def test_growing_the_replication_factor_waits_for_both_new_replicas():
    ctx = cluster(replicas=(0,))
    apply_decisions(ctx, ra.on_reassign(ctx, {T0: (0, 1, 2)}))
    isr_grows(ctx, (0, 1))
    assert not ra.on_reassignment_progress(ctx).state_writes
    isr_grows(ctx, (0, 1, 2))
    d = ra.on_reassignment_progress(ctx)
    assert d.final_assignment_writes == {T0: ra.ReplicaAssignment((0, 1, 2))}
    assert not any(stop_deletes(d, b) for b in range(4))


def test_cancel_restores_the_original_replicas_and_deletes_the_added_one():
    ctx = cluster()
    apply_decisions(ctx, ra.on_reassign(ctx, {T0: (1, 2, 3)}))
    isr_grows(ctx, (0, 1, 2))
    d = ra.on_reassign(ctx, {T0: None})
    assert d.answer == {T0: ra.Result()}
    assert not d.assignment_writes and d.final_assignment_writes == {T0: ra.ReplicaAssignment((1, 2, 0))}
    assert stop_deletes(d, 3) == [("t", 0)]
    apply_decisions(ctx, d)
    assert set(ctx.replicas(T0)) == {0, 1, 2} and not ra.ongoing(ctx)
    assert ctx.partition_states[T0].leader == 0


def test_cancel_drops_an_added_replica_from_the_isr():
    ctx = cluster()
    apply_decisions(ctx, ra.on_reassign(ctx, {T0: (0, 1, 2, 3)}))
    isr_grows(ctx, (0, 1, 3))  # 3 joined, 2 fell behind
    d = ra.on_reassign(ctx, {T0: None})
    assert d.state_writes[0].state.isr == (0, 1)


def test_errors_are_kafkas():
    ctx = cluster()
    answer = ra.on_reassign(ctx, {
        T0: (), TP("t", 1): (0, 1), TP("u", 0): (0,),
    }).answer
    assert answer[T0].error == ErrorCode.invalid_replica_assignment
    assert answer[TP("t", 1)].error == ErrorCode.unknown_topic_or_partition
    assert answer[TP("u", 0)].error == ErrorCode.unknown_topic_or_partition
    for bad in ((0, 0, 1), (0, -1), (0, 9)):
        assert ra.on_reassign(ctx, {T0: bad}).answer[T0].error == ErrorCode.invalid_replica_assignment
    assert ra.on_reassign(ctx, {T0: tuple(range(ra.MAX_REPLICAS + 1))}).answer[T0].error \
        == ErrorCode.invalid_replica_assignment
    assert ra.on_reassign(ctx, {T0: None}).answer[T0].error == ErrorCode.no_reassignment_in_progress
    ctx.topics_to_delete = {"t"}
    assert ra.on_reassign(ctx, {T0: (1,)}).answer[T0].error == ErrorCode.unknown_topic_or_partition


def test_the_same_replicas_is_a_no_op():
    d = ra.on_reassign(cluster(), {T0: (0, 1, 2)})
    assert d.answer == {T0: ra.Result()} and not d.state_writes and not d.requests


def test_a_new_controller_resumes_from_the_topic_znode():
    # what a successor loads: RS/AR/RR in the topic znode, the new replica since caught up
    ctx = cluster(replicas=(1, 2, 3, 0), isr=(0, 1, 2, 3), adding=(3,), removing=(0,))
    assert ra.ongoing(ctx) == {T0: ra.ReplicaAssignment((1, 2, 3, 0), (3,), (0,))}
    d = ra.on_reassignment_progress(ctx)
    assert d.final_assignment_writes == {T0: ra.ReplicaAssignment((1, 2, 3))}
    # and deciding it again after a crash before the topic znode write decides the same
    ctx2 = cluster(replicas=(1, 2, 3, 0), isr=(1, 2, 3), leader=1, adding=(3,), removing=(0,))
    assert ra.on_reassignment_progress(ctx2).final_assignment_writes == {T0: ra.ReplicaAssignment((1, 2, 3))}


def test_completion_waits_for_a_live_target_leader():
    ctx = cluster(replicas=(1, 2, 3, 0), isr=(0, 3), leader=0, adding=(3,), removing=(0, 1, 2), live=(0, 1, 2, 3))
    ctx.assignments["t"] = TopicAssignment({0: (3, 0)}, None, {0: (3,)}, {0: (0,)})
    ctx.shutting_down_brokers = {3}
    assert not ra.on_reassignment_progress(ctx).state_writes


def test_zk_entries_leave_the_znode_when_done_or_refused():
    ctx = cluster()
    ctx.zk_reassignment = {T0: (1, 2, 3), TP("gone", 0): (1,)}
    d = ra.on_zk_reassignment(ctx)
    assert d.answer[TP("gone", 0)].error == ErrorCode.unknown_topic_or_partition
    assert d.reassign_znode == {T0: (1, 2, 3)}
    apply_decisions(ctx, d)
    isr_grows(ctx, (0, 1, 2, 3))
    d = ra.on_reassignment_progress(ctx)
    assert d.reassign_znode == {}
    # already moving to that target: not started again
    ctx = cluster(replicas=(1, 2, 3, 0), adding=(3,), removing=(0,))
    ctx.zk_reassignment = {T0: (1, 2, 3)}
    assert not ra.on_zk_reassignment(ctx).state_writes


@pytest.mark.parametrize("data", [b"", b"[]", b'{"partitions":[{"topic":1,"partition":0,"replicas":[1]}]}',
                                  b'{"partitions":[{"topic":"t","partition":0,"replicas":[true]}]}',
                                  b'{"partitions":[{"topic":"t","partition":"0","replicas":[1]}]}'])
def test_unreadable_reassign_znode(data):
    with pytest.raises(ValueError):
        ra.decode_reassign_partitions(data)


def test_reassign_znode_round_trip():
    entries = {T0: (1, 2), TP("u", 3): (0,)}
    assert ra.decode_reassign_partitions(ra.encode_reassign_partitions(entries)) == entries


def test_a_replica_removed_while_its_broker_is_down_is_deleted_when_it_returns():
    from odradek.controller.state_machine import on_broker_change

    from .test_state_machine import brokers

    ctx = cluster(live=(1, 2, 3))  # broker 0, an original replica, is down
    ctx.partition_states[T0] = State(1, 3, (1, 2), 4, 7)
    apply_decisions(ctx, ra.on_reassign(ctx, {T0: (1, 2, 3)}))
    isr_grows(ctx, (1, 2, 3))
    d = ra.on_reassignment_progress(ctx)
    assert not stop_deletes(d, 0)  # nowhere to send it
    apply_decisions(ctx, d)
    assert ctx.stray_replicas == {0: {T0}}
    back = on_broker_change(ctx, brokers(0, 1, 2, 3))
    assert stop_deletes(back, 0) == [("t", 0)]
    apply_decisions(ctx, back)
    assert ctx.stray_replicas == {}

"""Issue 3's controller decisions replayed over plain data: AlterPartition, ControlledShutdown,
preferred leader election, and their interplay with failover, broker failure and zombies."""

from kio.schema.errors import ErrorCode

from odradek.common import messages as m
from odradek.common.zk_data import LeaderIsrAndControllerEpoch as State
from odradek.common.zk_data import TopicAssignment
from odradek.controller.context import TopicPartition as TP
from odradek.controller.state_machine import (
    IsrChange,
    apply_decisions,
    imbalanced_partitions,
    on_alter_partition,
    on_auto_leader_rebalance,
    on_broker_change,
    on_controlled_shutdown,
    on_controller_failover,
    on_preferred_replica_election,
)

from .test_state_machine import brokers, context, um_state

T0, T1 = TP("t", 0), TP("t", 1)


def cluster(states=None, live=(0, 1, 2), epoch=5):
    """Topic t: partition 0 on (0, 1, 2), partition 1 on (1, 2, 0); both fully in sync."""
    ctx = context(live=live, epoch=epoch)
    ctx.assignments["t"] = TopicAssignment({0: (0, 1, 2), 1: (1, 2, 0)})
    ctx.partition_states.update(states or {T0: State(0, 3, (0, 1, 2), epoch, 10), T1: State(1, 4, (1, 2, 0), epoch, 20)})
    return ctx


def shrink(ctx, tp, broker_id, new_isr, leader_epoch=None, partition_epoch=None, broker_epoch=None):
    s = ctx.partition_states[tp]
    return on_alter_partition(
        ctx, broker_id, ctx.live_brokers[broker_id].epoch if broker_epoch is None else broker_epoch,
        [IsrChange(tp, s.leader_epoch if leader_epoch is None else leader_epoch, tuple(new_isr),
                   s.zk_version if partition_epoch is None else partition_epoch)],
    )


# --- AlterPartition ---------------------------------------------------------------------------


def test_isr_shrink_is_written_with_cas_and_announced_to_everyone():
    ctx = cluster()
    d = shrink(ctx, T0, 0, (0, 1))
    new = State(0, 3, (0, 1), 5, 11)
    assert [(w.tp, w.state, w.expected_version) for w in d.state_writes] == [(T0, new, 10)]
    assert d.answer.error == 0 and d.answer.partitions == {T0: (0, new)}
    for b in (0, 1, 2):
        (um,) = d.requests_to(b, m.UpdateMetadataRequest)
        assert um_state(um, "t", 0).isr == (0, 1) and um_state(um, "t", 0).zk_version == 11
    assert not any(isinstance(p, m.LeaderAndIsrRequest) for _, p in d.requests)
    apply_decisions(ctx, d)
    assert ctx.partition_states[T0] == new


def test_isr_expansion_back_to_a_live_replica():
    ctx = cluster({T0: State(0, 3, (0,), 5, 10), T1: State(1, 4, (1, 2, 0), 5, 20)})
    d = shrink(ctx, T0, 0, (0, 2))
    assert d.answer.partitions[T0] == (0, State(0, 3, (0, 2), 5, 11))


def test_alter_partition_errors():
    ctx = cluster()
    cases = {
        "not leader": (shrink(ctx, T0, 1, (1, 2)), ErrorCode.not_leader_or_follower),
        "old leader epoch": (shrink(ctx, T0, 0, (0, 1), leader_epoch=2), ErrorCode.fenced_leader_epoch),
        "newer leader epoch": (shrink(ctx, T0, 0, (0, 1), leader_epoch=4), ErrorCode.fenced_leader_epoch),
        "stale partition epoch": (shrink(ctx, T0, 0, (0, 1), partition_epoch=9), ErrorCode.invalid_update_version),
        "leader not in isr": (shrink(ctx, T0, 0, (1, 2)), ErrorCode.invalid_request),
        "not a replica": (shrink(ctx, T0, 0, (0, 7)), ErrorCode.invalid_request),
        "duplicate member": (shrink(ctx, T0, 0, (0, 1, 1)), ErrorCode.invalid_request),
    }
    for name, (d, code) in cases.items():
        assert d.answer.error == 0, name
        assert d.answer.partitions[T0][0] == code, name
        assert d.answer.partitions[T0][1] == ctx.partition_states[T0], name
        assert not d.state_writes and not d.requests, name
    d = on_alter_partition(ctx, 0, ctx.live_brokers[0].epoch, [IsrChange(TP("nope", 0), 0, (0,), 0)])
    assert d.answer.partitions[TP("nope", 0)] == (ErrorCode.unknown_topic_or_partition, None)


def test_stale_or_unknown_broker_is_refused_as_a_whole():
    ctx = cluster()
    assert shrink(ctx, T0, 0, (0, 1), broker_epoch=99).answer.error == ErrorCode.stale_broker_epoch
    ctx.live_brokers.pop(0)
    d = on_alter_partition(ctx, 0, 100, [IsrChange(T0, 3, (0, 1), 10)])
    assert d.answer.error == ErrorCode.broker_not_available and not d.state_writes


def test_adding_a_dead_or_shutting_down_replica_is_refused():
    ctx = cluster({T0: State(0, 3, (0,), 5, 10), T1: State(1, 4, (1, 2, 0), 5, 20)}, live=(0, 1))
    assert shrink(ctx, T0, 0, (0, 2)).answer.partitions[T0][0] == ErrorCode.invalid_request
    ctx.shutting_down_brokers.add(1)
    assert shrink(ctx, T0, 0, (0, 1)).answer.partitions[T0][0] == ErrorCode.invalid_request


def test_two_isr_changes_racing_from_the_same_state_do_not_lose_each_other():
    """Two requests made from zk_version 10: the first wins; the second cannot overwrite it with a
    state that forgot the first change; it is told INVALID_UPDATE_VERSION with the current state,
    and succeeds when made again from that state."""
    ctx = cluster()
    first = IsrChange(T0, 3, (0, 1), 10)   # 2 fell behind
    second = IsrChange(T0, 3, (0, 2), 10)  # made from the old state: 1 fell behind
    d1 = on_alter_partition(ctx, 0, 100, [first])
    apply_decisions(ctx, d1)
    d2 = on_alter_partition(ctx, 0, 100, [second])
    assert d2.answer.partitions[T0] == (ErrorCode.invalid_update_version, State(0, 3, (0, 1), 5, 11))
    assert not d2.state_writes
    d3 = on_alter_partition(ctx, 0, 100, [IsrChange(T0, 3, (0,), 11)])
    assert d3.answer.partitions[T0] == (0, State(0, 3, (0,), 5, 12))


def test_a_retried_change_already_applied_is_answered_without_a_write():
    ctx = cluster()
    apply_decisions(ctx, shrink(ctx, T0, 0, (0, 1)))
    d = on_alter_partition(ctx, 0, 100, [IsrChange(T0, 3, (0, 1), 10)])  # the lost answer's retry
    assert d.answer.partitions[T0] == (0, State(0, 3, (0, 1), 5, 11)) and not d.state_writes


def test_cas_conflict_redecision_reports_the_state_actually_written():
    """The controller re-reads a conflicting znode and decides again: the answer follows the
    fresh state, never the write that failed."""
    ctx = cluster()
    d = shrink(ctx, T0, 0, (0, 1))
    assert d.state_writes  # ... suppose the compare-and-set failed: someone wrote version 11
    ctx.partition_states[T0] = State(2, 4, (2,), 5, 11)
    d = on_alter_partition(ctx, 0, 100, [IsrChange(T0, 3, (0, 1), 10)])
    assert d.answer.partitions[T0] == (ErrorCode.not_leader_or_follower, State(2, 4, (2,), 5, 11))


def test_failover_during_broker_failure_fences_the_old_leaders_isr_change():
    """Broker 0 (leader of t-0) dies while the controller fails over: the new controller elects 1;
    broker 0's delayed AlterPartition (if it comes back) and one made with the old leader epoch fail."""
    ctx = cluster(live=(1, 2), epoch=6)
    d = on_controller_failover(ctx)
    apply_decisions(ctx, d)
    assert ctx.partition_states[T0] == State(1, 4, (1, 2), 6, 11)
    ctx.live_brokers.update(brokers(0))  # 0 comes back with a fresh registration
    answer = on_alter_partition(ctx, 0, 100, [IsrChange(T0, 3, (0, 1), 10)]).answer
    assert answer.partitions[T0][0] == ErrorCode.not_leader_or_follower
    assert on_alter_partition(ctx, 1, 101, [IsrChange(T0, 3, (1,), 11)]).answer.partitions[T0][0] == ErrorCode.fenced_leader_epoch
    answer = on_alter_partition(ctx, 1, 101, [IsrChange(T0, 4, (1, 2, 0), 11)]).answer
    assert answer.partitions[T0] == (0, State(1, 4, (1, 2, 0), 6, 12))


def test_zombie_controller_is_deposed_instead_of_answering():
    """A controller whose context shows a state written by a newer controller epoch must not act."""
    ctx = cluster(epoch=5)
    ctx.partition_states[T1] = State(1, 5, (1, 2), 6, 21)
    assert on_alter_partition(ctx, 0, 100, [IsrChange(T0, 3, (0, 1), 10)]).deposed
    assert on_controlled_shutdown(ctx, 0, 100).deposed
    assert on_preferred_replica_election(ctx).deposed


# --- ControlledShutdown -------------------------------------------------------------------------


def test_controlled_shutdown_moves_leadership_and_leaves_isrs():
    ctx = cluster()
    d = on_controlled_shutdown(ctx, 0, 100)
    writes = {w.tp: (w.state, w.expected_version) for w in d.state_writes}
    assert writes == {T0: (State(1, 4, (1, 2), 5, 11), 10), T1: (State(1, 5, (1, 2), 5, 21), 20)}
    assert d.answer.error == 0 and d.answer.remaining == ()
    assert d.shutting_down_brokers == {0}
    for b in (1, 2):
        (lai,) = d.requests_to(b, m.LeaderAndIsrRequest)
        assert sorted(p.partition_index for t in lai.topic_states for p in t.partition_states) == [0, 1]
    for b in (0, 1, 2):
        assert um_state(d.requests_to(b, m.UpdateMetadataRequest)[0], "t", 0).leader == 1
    # the shutting-down broker becomes a follower of t-0 and stops following t-1 (Kafka's
    # OfflineReplica): LeaderAndIsr for what it led, StopReplica without deletion for what it follows
    (lai,) = d.requests_to(0, m.LeaderAndIsrRequest)
    assert [p.partition_index for t in lai.topic_states for p in t.partition_states] == [0]
    (stop,) = d.requests_to(0, m.StopReplicaRequest)
    assert not stop.delete_partitions and stop.controller_epoch == 5
    assert [(t.name, tuple(t.partition_indexes)) for t in stop.topics] == [("t", (1,))]
    assert [type(p) for p in d.requests_to(0)] == [m.LeaderAndIsrRequest, m.UpdateMetadataRequest, m.StopReplicaRequest]
    assert not d.requests_to(1, m.StopReplicaRequest) and not d.requests_to(2, m.StopReplicaRequest)
    apply_decisions(ctx, d)
    assert ctx.shutting_down_brokers == {0}
    # asked again (the broker retries): nothing left to do
    again = on_controlled_shutdown(ctx, 0, 100)
    assert again.answer.remaining == () and not again.state_writes
    # ... except the StopReplica for what it follows (now both partitions), in case it was lost
    (stop,) = again.requests_to(0, m.StopReplicaRequest)
    assert [(t.name, tuple(t.partition_indexes)) for t in stop.topics] == [("t", (0, 1))]
    assert [b for b, _ in again.requests] == [0]


def test_controlled_shutdown_stops_followed_partitions_out_of_the_isr_or_offline():
    """A follower already out of the ISR, or of a partition with no leader, is stopped all the
    same, without a state write (nothing to change)."""
    ctx = cluster({T0: State(0, 3, (0,), 5, 10), T1: State(-1, 4, (2,), 5, 20)}, live=(0, 1))
    d = on_controlled_shutdown(ctx, 1, 101)
    assert not d.state_writes and d.answer.remaining == ()
    (stop,) = d.requests_to(1, m.StopReplicaRequest)
    assert [(t.name, tuple(t.partition_indexes)) for t in stop.topics] == [("t", (0, 1))]
    assert not d.requests_to(0)


def test_controlled_shutdown_reports_partitions_with_no_other_isr_member():
    ctx = cluster({T0: State(0, 3, (0,), 5, 10), T1: State(1, 4, (1, 2, 0), 5, 20)})
    ctx.assignments["solo"] = TopicAssignment({0: (0,)})
    ctx.partition_states[TP("solo", 0)] = State(0, 0, (0,), 5, 0)
    d = on_controlled_shutdown(ctx, 0, 100)
    assert d.answer.remaining == (T0,)  # the single-replica partition cannot move: not reported
    assert {w.tp for w in d.state_writes} == {T1}


def test_shutting_down_broker_is_not_elected_and_forgotten_when_it_dies():
    ctx = cluster()
    apply_decisions(ctx, on_controlled_shutdown(ctx, 1, 101))
    assert ctx.partition_states[T1].leader == 2
    assert shrink(ctx, T1, 2, (2, 0, 1)).answer.partitions[T1][0] == ErrorCode.invalid_request
    d = on_broker_change(ctx, brokers(0, 2))
    assert d.shutting_down_brokers == set()
    apply_decisions(ctx, d)
    assert ctx.shutting_down_brokers == set()


def test_controlled_shutdown_with_stale_epoch():
    ctx = cluster()
    d = on_controlled_shutdown(ctx, 0, 7)
    assert d.answer.error == ErrorCode.stale_broker_epoch and not d.state_writes and d.shutting_down_brokers is None


# --- preferred leader election ------------------------------------------------------------------


def test_preferred_leader_comes_back_when_live_and_in_sync():
    ctx = cluster({T0: State(1, 7, (1, 2, 0), 5, 30), T1: State(2, 4, (2, 1), 5, 20)})
    d = on_preferred_replica_election(ctx)
    # t-0: 0 is in the ISR → back to 0; t-1: 1 is in the ISR → back to 1
    assert {w.tp: w.state for w in d.state_writes} == {T0: State(0, 8, (1, 2, 0), 5, 31), T1: State(1, 5, (2, 1), 5, 21)}
    assert d.requests_to(0, m.LeaderAndIsrRequest)
    apply_decisions(ctx, d)
    assert not on_preferred_replica_election(ctx).state_writes


def test_preferred_leader_not_in_isr_or_dead_stays_put():
    ctx = cluster({T0: State(1, 7, (1, 2), 5, 30), T1: State(2, 4, (2, 1), 5, 20)}, live=(0, 2))
    assert not on_preferred_replica_election(ctx).state_writes


def imbalance_cluster():
    """Broker 0 prefers ten partitions of u (replicas (0, 1)); broker 1 leads `moved` of them."""
    ctx = context(live=(0, 1))
    ctx.assignments["u"] = TopicAssignment(dict.fromkeys(range(10), (0, 1)))
    for p in range(10):
        ctx.partition_states[TP("u", p)] = State(0, 1, (0, 1), 5, 1)
    return ctx


def move(ctx, *partitions):
    for p in partitions:
        ctx.partition_states[TP("u", p)] = State(1, 2, (0, 1), 5, 2)


def test_auto_rebalance_waits_until_the_imbalance_exceeds_the_percentage():
    ctx = imbalance_cluster()
    move(ctx, 3)  # 1 of 10 not led by its preferred replica: 10 %, not above 10 %
    assert imbalanced_partitions(ctx, 10) == []
    assert not on_auto_leader_rebalance(ctx, 10).state_writes
    assert imbalanced_partitions(ctx, 9) == [TP("u", 3)]
    move(ctx, 7)  # 20 % > 10 %: both move back
    d = on_auto_leader_rebalance(ctx, 10)
    assert {w.tp: w.state for w in d.state_writes} == {
        TP("u", 3): State(0, 3, (0, 1), 5, 3), TP("u", 7): State(0, 3, (0, 1), 5, 3)}
    assert all(isinstance(p, (m.LeaderAndIsrRequest, m.UpdateMetadataRequest)) for _, p in d.requests)
    apply_decisions(ctx, d)
    assert imbalanced_partitions(ctx, 10) == []


def test_auto_rebalance_ratio_is_per_preferred_broker_and_still_checks_the_isr():
    ctx = imbalance_cluster()
    ctx.assignments["v"] = TopicAssignment({0: (1, 0)})
    ctx.partition_states[TP("v", 0)] = State(0, 1, (0,), 5, 1)  # broker 1 prefers it: 100 % imbalance
    move(ctx, 5)  # broker 0: 10 %, left alone
    assert imbalanced_partitions(ctx, 10) == [TP("v", 0)]
    assert not on_auto_leader_rebalance(ctx, 10).state_writes  # 1 is not in the ISR: no move
    ctx.partition_states[TP("v", 0)] = State(0, 1, (0, 1), 5, 1)
    d = on_auto_leader_rebalance(ctx, 10)
    assert [(w.tp, w.state.leader) for w in d.state_writes] == [(TP("v", 0), 1)]


def test_zombie_controller_requests_carry_its_old_epoch_and_it_stands_down_on_conflict():
    """Controller epoch 5 is paused while epoch 6 takes over and handles broker 0's death; the
    zombie, woken with the same stale view, decides the same failure: its requests carry epoch 5
    (brokers that saw 6 reject them) and its compare-and-set expects version 10, which 6 already
    replaced; once it re-reads the partition it sees epoch 6's write and is deposed."""
    new = cluster(epoch=6)
    zombie = cluster(epoch=5)
    d_new = on_broker_change(new, brokers(1, 2))
    apply_decisions(new, d_new)
    assert all(p.controller_epoch == 6 for _, p in d_new.requests)
    d_zombie = on_broker_change(zombie, brokers(1, 2))
    assert d_zombie.requests and all(p.controller_epoch == 5 for _, p in d_zombie.requests)
    assert {w.tp: w.expected_version for w in d_zombie.state_writes}[T0] == 10
    zombie.partition_states[T0] = new.partition_states[T0]  # the re-read after the failed CAS
    assert new.partition_states[T0].zk_version == 11 and new.partition_states[T0].controller_epoch == 6
    assert on_broker_change(zombie, brokers(1, 2)).deposed
    assert on_alter_partition(zombie, 1, 101, [IsrChange(T0, 4, (1, 2), 11)]).deposed

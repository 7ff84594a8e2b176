"""The controller's decisions, replayed as event sequences over plain data (no ZooKeeper)."""

import pytest

from odradek.common import messages as m
from odradek.common import wire
from odradek.common.zk_data import (
    BrokerInfo,
    EndPoint,
    TopicAssignment,
    delete_topic_path,
    topic_config_path,
    topic_path,
)
from odradek.common.zk_data import (
    LeaderIsrAndControllerEpoch as State,
)
from odradek.controller.context import ControllerContext
from odradek.controller.context import TopicPartition as TP
from odradek.controller.state_machine import (
    RequestBatch,
    apply_decisions,
    initial_leader_and_isr,
    on_broker_change,
    on_controlled_shutdown,
    on_controller_failover,
    on_partition_modification,
    on_topic_change,
    on_topic_deletion,
    reconcile_leader_and_isr,
)


def broker(b: int, epoch: int | None = None) -> BrokerInfo:
    return BrokerInfo(b, (EndPoint("127.0.0.1", 9000 + b),), None, 100 + b if epoch is None else epoch)


def brokers(*ids: int) -> dict[int, BrokerInfo]:
    return {b: broker(b) for b in ids}


def context(live=(0, 1, 2), epoch=5, **kw) -> ControllerContext:
    return ControllerContext(controller_id=1000, epoch=epoch, epoch_zk_version=epoch, live_brokers=brokers(*live), **kw)


def partitions_in(requests) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for r in requests:
        states = r.topic_states
        for t in states:
            out.setdefault(t.topic_name, []).extend(p.partition_index for p in t.partition_states)
    return out


def um_state(request: m.UpdateMetadataRequest, topic: str, p: int) -> m.UpdateMetadataPartitionState:
    for t in request.topic_states:
        if t.topic_name == topic:
            for s in t.partition_states:
                if s.partition_index == p:
                    return s
    raise AssertionError(f"{topic}-{p} not in {request}")


# --- leader election rules ------------------------------------------------------------------------


def test_initial_state_uses_live_replicas_in_assignment_order():
    assert initial_leader_and_isr((2, 0, 1), {0, 1}, 7) == State(0, 0, (0, 1), 7, 0)
    assert initial_leader_and_isr((2,), {0, 1}, 7) is None


def test_dead_leader_gives_way_to_first_live_isr_member_in_assignment_order():
    state = State(leader=0, leader_epoch=3, isr=(0, 2, 1), controller_epoch=4, zk_version=9)
    new = reconcile_leader_and_isr((0, 1, 2), state, {1, 2}, 5)
    assert new == State(1, 4, (2, 1), 5, 10)


def test_no_live_isr_member_goes_offline_keeping_the_last_isr_member():
    state = State(0, 3, (0, 1), 4, 2)
    assert reconcile_leader_and_isr((0, 1, 2), state, {2}, 5) == State(-1, 4, (0,), 5, 3)
    # already offline with the same ISR: nothing to write
    assert reconcile_leader_and_isr((0, 1, 2), State(-1, 4, (0,), 5, 3), {2}, 5) is None


def test_unclean_election_takes_any_live_replica_when_enabled():
    state = State(-1, 4, (0,), 5, 3)
    assert reconcile_leader_and_isr((0, 1, 2), state, {2}, 5, unclean=True) == State(2, 5, (2,), 5, 4)


def test_dead_follower_leaves_the_isr_and_bumps_the_epoch():
    state = State(0, 1, (0, 1, 2), 5, 0)
    assert reconcile_leader_and_isr((0, 1, 2), state, {0, 2}, 5) == State(0, 2, (0, 2), 5, 1)
    assert reconcile_leader_and_isr((0, 1, 2), state, {0, 1, 2}, 5) is None


def test_offline_partition_elects_returning_isr_member():
    state = State(-1, 4, (1,), 5, 3)
    assert reconcile_leader_and_isr((0, 1), state, {0, 1}, 6) == State(1, 5, (1,), 6, 4)


# --- topic creation -------------------------------------------------------------------------------


def test_topic_creation_with_one_broker_down():
    ctx = context(live=(0, 2))
    d = on_topic_change(ctx, {"t": TopicAssignment({0: (1, 0), 1: (0, 2), 2: (1,)})})
    writes = {w.tp: w for w in d.state_writes}
    assert writes[TP("t", 0)].state == State(0, 0, (0,), 5, 0) and writes[TP("t", 0)].expected_version is None
    assert writes[TP("t", 1)].state == State(0, 0, (0, 2), 5, 0)
    assert TP("t", 2) not in writes  # no live replica: stays New, no znode
    [lai0] = d.requests_to(0, m.LeaderAndIsrRequest)
    [lai2] = d.requests_to(2, m.LeaderAndIsrRequest)
    assert partitions_in([lai0]) == {"t": [0, 1]} and partitions_in([lai2]) == {"t": [1]}
    assert all(p.is_new for t in lai0.topic_states for p in t.partition_states)
    assert lai0.controller_epoch == 5 and lai0.broker_epoch == 100
    assert {leader.broker_id for leader in lai2.live_leaders} == {0}
    assert d.requests_to(1) == []
    for b in (0, 2):
        [um] = d.requests_to(b, m.UpdateMetadataRequest)
        assert partitions_in([um]) == {"t": [0, 1]}
        assert um_state(um, "t", 0).offline_replicas == (1,)
        assert [x.id for x in um.live_brokers] == [0, 2]
    apply_decisions(ctx, d)
    assert set(ctx.assignments) == {"t"} and len(ctx.partition_states) == 2
    # the same children again: nothing to do
    again = on_topic_change(ctx, {"t": TopicAssignment({0: (1, 0), 1: (0, 2), 2: (1,)})})
    assert again.state_writes == [] and again.requests == []
    # broker 1 comes back: the New partition t-2 gets its state, t-0 gets 1 back as a replica
    d = on_broker_change(ctx, brokers(0, 1, 2))
    writes = {w.tp: w for w in d.state_writes}
    assert writes == {TP("t", 2): writes[TP("t", 2)]} and writes[TP("t", 2)].state == State(1, 0, (1,), 5, 0)
    [lai1] = d.requests_to(1, m.LeaderAndIsrRequest)
    assert partitions_in([lai1]) == {"t": [0, 2]}


def test_added_partitions_get_leaders_and_are_announced():
    """CreatePartitions grew the topic's znode: the new partitions go New → Online on their live
    replicas (LeaderAndIsr is_new to them), every live broker hears of them (UpdateMetadata), the
    existing ones are left alone; a shrunk or unknown assignment changes nothing."""
    ctx = cluster_with_topic(live=(0, 1))
    grown = TopicAssignment({0: (0, 1, 2), 1: (1, 2, 0), 2: (2, 0, 1), 3: (0, 1, 2), 4: (2, 1, 0), 5: (2,)})
    d = on_partition_modification(ctx, {"t": grown, "unknown": TopicAssignment({0: (0,)})})
    writes = {w.tp: w for w in d.state_writes}
    assert set(writes) == {TP("t", 3), TP("t", 4)}  # t-5 has no live replica: stays New
    assert writes[TP("t", 3)].state == State(0, 0, (0, 1), 5, 0) and writes[TP("t", 3)].expected_version is None
    assert writes[TP("t", 4)].state == State(1, 0, (1, 0), 5, 0)
    for b in (0, 1):
        [lai] = d.requests_to(b, m.LeaderAndIsrRequest)
        assert partitions_in([lai]) == {"t": [3, 4]}
        assert all(p.is_new for t in lai.topic_states for p in t.partition_states)
        [um] = d.requests_to(b, m.UpdateMetadataRequest)
        assert partitions_in([um]) == {"t": [3, 4]}
    assert d.requests_to(2) == []
    apply_decisions(ctx, d)
    assert ctx.assignments["t"].partitions == grown.partitions and "unknown" not in ctx.assignments
    # the same znode again, or one with fewer partitions: nothing to do
    assert on_partition_modification(ctx, {"t": grown}).requests == []
    shrunk = on_partition_modification(ctx, {"t": TopicAssignment({0: (0, 1, 2)})})
    assert shrunk.requests == [] and shrunk.updated_assignments == {}
    # broker 2 returns: the New partition t-5 gets its state like any other
    d = on_broker_change(ctx, brokers(0, 1, 2))
    assert {w.tp: w.state for w in d.state_writes}[TP("t", 5)] == State(2, 0, (2,), 5, 0)


def test_partitions_added_to_a_topic_being_deleted_are_ignored():
    ctx = cluster_with_topic()
    ctx.topics_to_delete = {"t"}
    d = on_partition_modification(ctx, {"t": TopicAssignment({**ctx.assignments["t"].partitions, 3: (0, 1, 2)})})
    assert d.requests == [] and d.state_writes == [] and d.updated_assignments == {}


# --- broker failure and return --------------------------------------------------------------------


def cluster_with_topic(live=(0, 1, 2)) -> ControllerContext:
    ctx = context(live=live)
    ctx.assignments["t"] = TopicAssignment({0: (0, 1, 2), 1: (1, 2, 0), 2: (2, 0, 1)})
    ctx.partition_states.update({
        TP("t", 0): State(0, 0, (0, 1, 2), 5, 0),
        TP("t", 1): State(1, 0, (1, 2, 0), 5, 0),
        TP("t", 2): State(2, 0, (2, 0, 1), 5, 0),
    })
    return ctx


def test_broker_failure_moves_leaders_and_shrinks_isrs():
    ctx = cluster_with_topic()
    d = on_broker_change(ctx, brokers(0, 2))
    states = {w.tp: (w.state, w.expected_version) for w in d.state_writes}
    assert states[TP("t", 1)] == (State(2, 1, (2, 0), 5, 1), 0)  # led by 1: next live ISR member
    assert states[TP("t", 0)] == (State(0, 1, (0, 2), 5, 1), 0)  # follower 1 leaves the ISR
    assert states[TP("t", 2)] == (State(2, 1, (2, 0), 5, 1), 0)
    assert d.requests_to(1) == []
    for b in (0, 2):
        [lai] = d.requests_to(b, m.LeaderAndIsrRequest)
        assert sorted(partitions_in([lai])["t"]) == [0, 1, 2]
        [um] = d.requests_to(b, m.UpdateMetadataRequest)
        assert um_state(um, "t", 1).leader == 2 and um_state(um, "t", 1).offline_replicas == (1,)
        assert [x.id for x in um.live_brokers] == [0, 2]
    apply_decisions(ctx, d)
    assert set(ctx.live_brokers) == {0, 2}
    assert on_broker_change(ctx, brokers(0, 2)).requests == []  # idempotent


def test_last_isr_member_dying_leaves_partition_offline_then_it_returns():
    ctx = context(live=(0, 1))
    ctx.assignments["t"] = TopicAssignment({0: (0, 1)})
    ctx.partition_states[TP("t", 0)] = State(0, 2, (0,), 5, 4)
    d = on_broker_change(ctx, brokers(1))
    assert [w.state for w in d.state_writes] == [State(-1, 3, (0,), 5, 5)]
    [um] = d.requests_to(1, m.UpdateMetadataRequest)
    assert um_state(um, "t", 0).leader == -1
    apply_decisions(ctx, d)
    # broker 0 returns (new registration epoch): it is the last ISR member, so it leads again
    d = on_broker_change(ctx, {0: broker(0, epoch=999), 1: broker(1)})
    assert [w.state for w in d.state_writes] == [State(0, 4, (0,), 5, 6)]
    [um0] = d.requests_to(0, m.UpdateMetadataRequest)
    assert um0.broker_epoch == 999 and [x.id for x in um0.live_brokers] == [0, 1]
    [lai0] = d.requests_to(0, m.LeaderAndIsrRequest)
    assert partitions_in([lai0]) == {"t": [0]}
    assert d.requests_to(1, m.LeaderAndIsrRequest)  # the follower learns of the new leader


def test_returning_broker_gets_full_metadata_and_all_its_replicas():
    ctx = cluster_with_topic(live=(0, 2))
    ctx.assignments["u"] = TopicAssignment({0: (0,)})
    ctx.partition_states[TP("u", 0)] = State(0, 0, (0,), 5, 0)
    ctx.partition_states[TP("t", 1)] = State(2, 1, (2, 0), 5, 1)
    d = on_broker_change(ctx, brokers(0, 1, 2))
    assert d.state_writes == []  # leaders live; 1 rejoins the ISR by catching up (issue 3)
    [um1] = d.requests_to(1, m.UpdateMetadataRequest)
    assert partitions_in([um1]) == {"t": [0, 1, 2], "u": [0]}
    [lai1] = d.requests_to(1, m.LeaderAndIsrRequest)
    assert partitions_in([lai1]) == {"t": [0, 1, 2]}
    [um0] = d.requests_to(0, m.UpdateMetadataRequest)
    assert "u" not in partitions_in([um0])  # others only hear of what changed
    assert [x.id for x in um0.live_brokers] == [0, 1, 2]
    assert d.requests_to(0, m.LeaderAndIsrRequest) == []


def test_bounced_broker_counts_as_dead_and_new():
    ctx = cluster_with_topic()
    d = on_broker_change(ctx, {0: broker(0), 1: broker(1, epoch=555), 2: broker(2)})
    apply_decisions(ctx, d)
    assert ctx.partition_states[TP("t", 1)].leader == 2
    assert 1 not in ctx.partition_states[TP("t", 0)].isr
    assert ctx.live_brokers[1].epoch == 555
    assert d.requests_to(1, m.LeaderAndIsrRequest)


# --- controller failover --------------------------------------------------------------------------


def test_failover_during_a_broker_failure():
    # broker 1 died while no controller was active: its znode is gone, states still name it
    ctx = cluster_with_topic(live=(0, 2))
    ctx.epoch = 6
    ctx.assignments["fresh"] = TopicAssignment({0: (2, 1)})  # created while no controller ran
    d = on_controller_failover(ctx)
    states = {w.tp: w.state for w in d.state_writes}
    assert states[TP("t", 1)] == State(2, 1, (2, 0), 6, 1)
    assert states[TP("t", 0)] == State(0, 1, (0, 2), 6, 1)
    assert states[TP("fresh", 0)] == State(2, 0, (2,), 6, 0)
    for b in (0, 2):
        [um] = d.requests_to(b, m.UpdateMetadataRequest)
        assert partitions_in([um]) == {"fresh": [0], "t": [0, 1, 2]}
        assert um.controller_epoch == 6
        [lai] = d.requests_to(b, m.LeaderAndIsrRequest)
        assert sorted(partitions_in([lai])["t"]) == [0, 1, 2]
    apply_decisions(ctx, d)
    assert on_controller_failover(ctx).state_writes == []  # a second failover finds nothing to fix


def test_zombie_controller_sees_a_newer_epoch_and_stands_down():
    ctx = cluster_with_topic()
    ctx.partition_states[TP("t", 0)] = State(0, 1, (0, 1, 2), 9, 1)  # written by controller epoch 9
    assert on_broker_change(ctx, brokers(0, 2)).deposed
    assert on_controller_failover(ctx).deposed
    d = on_broker_change(ctx, brokers(0, 2))
    assert d.requests == [] and d.state_writes == []


def test_requests_carry_the_controller_epoch_for_fencing():
    ctx = cluster_with_topic()
    d = on_controller_failover(ctx)
    assert d.requests and all(p.controller_epoch == 5 and p.controller_id == 1000 for _, p in d.requests)


# --- topic deletion -------------------------------------------------------------------------------


def test_deletion_announces_stops_deletes_znodes_then_drops():
    ctx = cluster_with_topic()
    d = on_topic_deletion(ctx, {"t"})
    for b in (0, 1, 2):
        kinds = [type(p) for p in d.requests_to(b)]
        assert kinds == [m.UpdateMetadataRequest, m.StopReplicaRequest, m.UpdateMetadataRequest]
        first, stop, last = d.requests_to(b)
        assert {s.leader for t in first.topic_states for s in t.partition_states} == {m.LEADER_DURING_DELETE}
        assert stop.delete_partitions and partitions_in_stop(stop) == {"t": [0, 1, 2]}
        assert {s.leader for t in last.topic_states for s in t.partition_states} == {m.LEADER_DURING_DELETE}
    assert d.zk_deletes == [topic_path("t"), topic_config_path("t"), delete_topic_path("t")]
    apply_decisions(ctx, d)
    assert ctx.assignments == {} and ctx.partition_states == {} and ctx.topics_to_delete == set()


def partitions_in_stop(r: m.StopReplicaRequest) -> dict[str, list[int]]:
    return {t.name: list(t.partition_indexes) for t in r.topics}


def test_deletion_waits_for_an_offline_replica_then_completes_when_it_returns():
    ctx = cluster_with_topic(live=(0, 2))
    d = on_topic_deletion(ctx, {"t"})
    assert d.zk_deletes == [] and d.topics_to_delete == {"t"}
    assert [type(p) for p in d.requests_to(0)] == [m.UpdateMetadataRequest, m.StopReplicaRequest]
    apply_decisions(ctx, d)
    assert on_topic_deletion(ctx, {"t"}).requests == []  # already in progress
    d = on_broker_change(ctx, brokers(0, 1, 2))
    assert d.state_writes == []  # no elections for a topic being deleted
    assert d.requests_to(1, m.LeaderAndIsrRequest) == []
    [stop1] = d.requests_to(1, m.StopReplicaRequest)
    assert stop1.delete_partitions
    assert d.zk_deletes == [topic_path("t"), topic_config_path("t"), delete_topic_path("t")]
    apply_decisions(ctx, d)
    assert "t" not in ctx.assignments and ctx.topics_to_delete == set()


def test_marker_for_unknown_topic_is_cleared():
    ctx = context()
    d = on_topic_deletion(ctx, {"ghost"})
    assert d.zk_deletes == [delete_topic_path("ghost")] and d.requests == []


def test_failover_resumes_a_pending_deletion():
    ctx = cluster_with_topic()
    ctx.topics_to_delete = {"t"}
    d = on_controller_failover(ctx)
    assert d.state_writes == [] and d.zk_deletes[-1] == delete_topic_path("t")
    assert all(not isinstance(p, m.LeaderAndIsrRequest) for _, p in d.requests)


# --- wire ---------------------------------------------------------------------------------------


def test_every_request_encodes_and_decodes():
    ctx = cluster_with_topic()
    d = on_controller_failover(ctx)
    d2 = on_topic_deletion(apply_decisions(ctx, d), {"t"})
    for _, payload in d.requests + d2.requests + d2.final_requests:
        frame = wire.encode_request(payload, 7, "controller-1000")
        header, decoded, _ = wire.decode_request(frame[4:])
        assert decoded == payload and header.correlation_id == 7


def test_i32_keeps_kios_bounds():
    from odradek.controller.state_machine import _i32

    assert _i32(2**31 - 1) == 2**31 - 1 and _i32(-(2**31)) == -(2**31)
    for bad in (2**31, -(2**31) - 1, "1", 1.0):
        with pytest.raises(TypeError):
            _i32(bad)


def test_i32s_checks_each_list_once_per_batch_and_keeps_the_bounds():
    ctx = cluster_with_topic()
    _i32s = RequestBatch(ctx, ctx.live_brokers)._i32s

    first = _i32s((0, 1, 2))
    assert first == (0, 1, 2) and _i32s([0, 1, 2]) is first and _i32s(x for x in (0, 1, 2)) is first
    assert _i32s((1, 1)) == (1, 1) and type(_i32s((True, 1))[0]) is int  # an equal key: the checked ints
    for bad in ((0, 2**31), (1.5,), ("1",)):
        with pytest.raises(TypeError):
            _i32s(bad)
    assert RequestBatch(ctx, ctx.live_brokers)._i32s((0, 1, 2)) is not first  # nothing outlives its batch


def test_a_controlled_shutdown_builds_each_partition_state_once_for_all_brokers():
    ctx = cluster_with_topic()
    d = on_controlled_shutdown(ctx, 1, ctx.live_brokers[1].epoch)
    updates = [r for _, r in d.requests if isinstance(r, m.UpdateMetadataRequest)]
    assert len(updates) == 3
    first = {(t.topic_name, ps.partition_index): ps for t in updates[0].topic_states for ps in t.partition_states}
    for other in updates[1:]:
        for t in other.topic_states:
            for ps in t.partition_states:
                assert ps is first[(t.topic_name, ps.partition_index)]
    for _, payload in d.requests:  # and they still encode as before
        _, decoded, _ = wire.decode_request(wire.encode_request(payload, 7, "controller-1000")[4:])
        assert decoded == payload

"""The controller's side of a failed log directory (Kafka's KIP-112 in the ZooKeeper controller),
as decisions over plain data: the broker's LeaderAndIsr answers say which replicas are offline;
those lose their leaderships and ISR places, and come back only with a new registration."""

from kio.schema.errors import ErrorCode

from odradek.common import messages as m
from odradek.common import zk_data
from odradek.common.zk_data import LeaderIsrAndControllerEpoch as State
from odradek.common.zk_data import TopicAssignment
from odradek.controller.context import TopicPartition as TP
from odradek.controller.state_machine import (
    IsrChange,
    apply_decisions,
    on_alter_partition,
    on_broker_change,
    on_leader_and_isr_response,
    on_log_dir_event,
)

from .test_state_machine import broker, brokers, context

STORAGE = ErrorCode.kafka_storage_error


def cluster():
    """t-0 led by 0, t-1 led by 1, t-2 led by 2; every ISR full; broker 0 also follows t-1, t-2."""
    ctx = context(assignments={"t": TopicAssignment({0: (0, 1, 2), 1: (1, 0, 2), 2: (2, 0, 1)})})
    for p in range(3):
        leader = ctx.assignments["t"].partitions[p][0]
        ctx.partition_states[TP("t", p)] = State(leader, 3, (0, 1, 2), 5, 7)
    return ctx


def requests_of(d, broker_id, kind):
    return d.requests_to(broker_id, kind)


def test_the_announcement_asks_the_broker_about_every_replica_it_has():
    ctx = cluster()
    d = on_log_dir_event(ctx, {0, 9})  # 9 is not live: nothing to ask
    [lai] = requests_of(d, 0, m.LeaderAndIsrRequest)
    assert sorted((t.topic_name, p.partition_index) for t in lai.topic_states for p in t.partition_states) == [
        ("t", 0), ("t", 1), ("t", 2)]
    assert not d.state_writes and not requests_of(d, 1, m.LeaderAndIsrRequest)


def test_storage_errors_move_leadership_and_isr_membership_away():
    ctx = cluster()
    d = on_leader_and_isr_response(ctx, 0, broker(0).epoch, [
        (TP("t", 0), STORAGE), (TP("t", 1), STORAGE), (TP("t", 2), 0)])
    assert d.replicas_on_offline_dirs == {0: {TP("t", 0), TP("t", 1)}}
    writes = {w.tp: w.state for w in d.state_writes}
    # t-0 was led by 0: the next ISR member in assignment order leads, 0 leaves the ISR
    assert writes[TP("t", 0)] == State(1, 4, (1, 2), 5, 8)
    # t-1 keeps its leader; 0 leaves the ISR with a new leader epoch
    assert writes[TP("t", 1)] == State(1, 4, (1, 2), 5, 8)
    assert TP("t", 2) not in writes
    # the remaining replicas learn the new states; the broker is told to stop the offline ones
    for b in (1, 2):
        [lai] = requests_of(d, b, m.LeaderAndIsrRequest)
        assert sorted(p.partition_index for t in lai.topic_states for p in t.partition_states) == [0, 1]
    assert not requests_of(d, 0, m.LeaderAndIsrRequest)
    [stop] = requests_of(d, 0, m.StopReplicaRequest)
    assert not stop.delete_partitions and sorted(stop.topics[0].partition_indexes) == [0, 1]
    [um] = requests_of(d, 2, m.UpdateMetadataRequest)
    assert all(0 in s.offline_replicas for t in um.topic_states for s in t.partition_states)
    apply_decisions(ctx, d)
    # the same answer again changes nothing
    again = on_leader_and_isr_response(ctx, 0, broker(0).epoch, [(TP("t", 0), STORAGE), (TP("t", 1), STORAGE)])
    assert not again.state_writes and again.replicas_on_offline_dirs is None


def test_an_offline_replica_is_never_elected_nor_added_back():
    ctx = cluster()
    ctx.partition_states[TP("t", 0)] = State(0, 3, (0, 1), 5, 7)
    apply_decisions(ctx, on_leader_and_isr_response(ctx, 2, broker(2).epoch, [(TP("t", 0), STORAGE)]))
    # 0 dies: 1 is the only online ISR member
    d = on_broker_change(ctx, brokers(1, 2))
    assert {w.tp: w.state.leader for w in d.state_writes}[TP("t", 0)] == 1
    apply_decisions(ctx, d)
    # the leader asks to add 2 back: refused while its replica is offline
    change = IsrChange(TP("t", 0), ctx.partition_states[TP("t", 0)].leader_epoch, (1, 2),
                       ctx.partition_states[TP("t", 0)].zk_version)
    answer = on_alter_partition(ctx, 1, broker(1).epoch, [change]).answer
    assert answer.partitions[TP("t", 0)][0] == int(ErrorCode.invalid_request)


def test_the_last_isr_member_stays_when_its_replica_goes_offline():
    ctx = cluster()
    ctx.partition_states[TP("t", 0)] = State(0, 3, (0,), 5, 7)
    d = on_leader_and_isr_response(ctx, 0, broker(0).epoch, [(TP("t", 0), STORAGE)])
    assert [w.state for w in d.state_writes] == [State(-1, 4, (0,), 5, 8)]


def test_a_new_registration_forgets_offline_replicas_and_an_old_answer_is_ignored():
    ctx = cluster()
    apply_decisions(ctx, on_leader_and_isr_response(ctx, 0, broker(0).epoch, [(TP("t", 0), STORAGE)]))
    assert ctx.replicas_on_offline_dirs == {0: {TP("t", 0)}}
    stale = on_leader_and_isr_response(ctx, 0, broker(0).epoch - 1, [(TP("t", 1), STORAGE)])
    assert not stale.state_writes and stale.replicas_on_offline_dirs is None
    restarted = {**brokers(1, 2), 0: broker(0, epoch=500)}
    d = on_broker_change(ctx, restarted)
    assert d.replicas_on_offline_dirs == {}
    apply_decisions(ctx, d)
    assert ctx.replicas_on_offline_dirs == {}


def test_log_dir_event_json_is_kafkas():
    assert zk_data.encode_log_dir_event(3) == b'{"version":1,"broker":3,"event":1}'
    assert zk_data.decode_log_dir_event(b'{"version":1,"broker":3,"event":1}') == 3
    assert zk_data.decode_log_dir_event(b'{"version":1,"broker":3,"event":2}') is None
    assert zk_data.decode_log_dir_event(b"\xff") is None
    assert zk_data.log_dir_event_path() == "/log_dir_event_notification/log_dir_event_"

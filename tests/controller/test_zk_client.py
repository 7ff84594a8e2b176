"""The controller's ZooKeeper access against the real server: election, fencing, compare-and-set."""

import pytest
from kazoo.client import KazooClient

from odradek.common import zk_data as z
from odradek.common.zk_data import LeaderIsrAndControllerEpoch as State
from odradek.controller.context import TopicPartition as TP
from odradek.controller.state_machine import StateWrite
from odradek.controller.zk_client import ControllerMovedError, ControllerZkClient


@pytest.fixture
def clients(zk_connect):
    made = []

    def make() -> ControllerZkClient:
        c = ControllerZkClient(zk_connect, session_timeout_ms=4000, connection_timeout_ms=10000)
        c.start()
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()


def test_one_candidate_wins_and_the_epoch_counts_elections(clients):
    a, b = clients(), clients()
    assert a.elect(z.ControllerInfo(1000)) == (1, 1)
    assert b.elect(z.ControllerInfo(1001)) is None
    assert a.is_active() and not b.is_active()
    assert a.elect(z.ControllerInfo(1000)) == (1, 1)  # a retried commit finds its own znode
    a.resign()
    assert b.elect(z.ControllerInfo(1001)) == (2, 2)
    assert z.decode_controller(b.zk.get(z.CONTROLLER)[0]).controller_id == 1001


def test_writes_are_compare_and_set_and_fenced_by_the_epoch(clients):
    a = clients()
    epoch, version = a.elect(z.ControllerInfo(1000))
    a.zk.create(z.topic_path("t"), z.encode_topic_assignment(z.TopicAssignment({0: (0,), 1: (0,)})), makepath=True)
    created = [StateWrite(TP("t", p), State(0, 0, (0,), epoch, 0), None) for p in (0, 1)]
    assert a.write_states(created, version).applied == created
    assert a.partition_states([TP("t", 0), TP("t", 1), TP("t", 2)]) == {w.tp: w.state for w in created}

    # someone else changed t-1 behind our back: its transaction fails as a whole, t-1 is the culprit
    a.zk.set(z.partition_state_path("t", 1), z.encode_partition_state(State(0, 0, (0,), epoch)))
    stale = [StateWrite(TP("t", p), State(-1, 1, (0,), epoch, 1), 0) for p in (0, 1)]
    result = a.write_states(stale, version)
    assert result.applied == [] and result.conflicts == [TP("t", 1)]
    assert a.partition_states([TP("t", 0)])[TP("t", 0)].zk_version == 0

    # a newer controller bumped the epoch: every write and delete is refused
    b = clients()
    a.zk.delete(z.CONTROLLER)
    assert b.elect(z.ControllerInfo(1001)) == (epoch + 1, version + 1)
    with pytest.raises(ControllerMovedError):
        a.write_states(stale[:1], version)
    with pytest.raises(ControllerMovedError):
        a.delete_recursive(z.topic_path("t"), version)
    b.delete_recursive(z.topic_path("t"), version + 1)
    assert b.zk.exists(z.topic_path("t")) is None
    b.delete_recursive(z.topic_path("t"), version + 1)  # already gone: fine


def test_load_context_reads_brokers_topics_states_and_markers(clients, zk_connect):
    a = clients()
    epoch, version = a.elect(z.ControllerInfo(1000))
    other = KazooClient(hosts=zk_connect, timeout=10)
    other.start(timeout=10)
    try:
        other.create(z.broker_path(3), z.encode_broker(z.BrokerInfo(3, (z.EndPoint("127.0.0.1", 9093),))), ephemeral=True)
        czxid = other.exists(z.broker_path(3)).czxid
        other.create(z.topic_path("t"), z.encode_topic_assignment(z.TopicAssignment({0: (3,)})))
        other.create(z.partition_state_path("t", 0), z.encode_partition_state(State(3, 2, (3,), 1)), makepath=True)
        other.create(z.delete_topic_path("gone"))
        ctx = a.load_context(1000, epoch, version)
    finally:
        other.stop()
        other.close()
    assert ctx.live_brokers[3].epoch == czxid and ctx.live_brokers[3].endpoint().port == 9093
    assert ctx.assignments["t"].partitions == {0: (3,)}
    assert ctx.partition_states == {TP("t", 0): State(3, 2, (3,), 1, 0)}
    assert ctx.topics_to_delete == {"gone"} and (ctx.epoch, ctx.epoch_zk_version) == (epoch, version)


def test_many_transactions_are_pipelined_each_standing_alone(clients, monkeypatch):
    """Transactions go out together (Kafka 1.1's async writes); a conflict fails only its own
    transaction, the others apply; a newer epoch fails them all."""
    from odradek.controller import zk_client

    monkeypatch.setattr(zk_client, "TRANSACTION_OPS", 3)
    a = clients()
    epoch, version = a.elect(z.ControllerInfo(1000))
    n = 10  # transactions of 3, 3, 3, 1
    a.zk.create(z.topic_path("t"), z.encode_topic_assignment(z.TopicAssignment(dict.fromkeys(range(n), (0,)))),
                makepath=True)
    created = [StateWrite(TP("t", p), State(0, 0, (0,), epoch, 0), None) for p in range(n)]
    assert a.write_states(created, version).applied == created
    commits = _count_settles(a, monkeypatch)
    a.zk.set(z.partition_state_path("t", 4), z.encode_partition_state(State(0, 0, (0,), epoch)))
    moved = [StateWrite(TP("t", p), State(0, 1, (0,), epoch, 1), 0) for p in range(n)]
    result = a.write_states(moved, version)
    assert commits == [4]
    assert result.conflicts == [TP("t", 4)]
    assert result.applied == moved[:3] + moved[6:]
    states = a.partition_states([TP("t", p) for p in range(n)])
    assert [states[TP("t", p)].leader_epoch for p in range(n)] == [1, 1, 1, 0, 0, 0, 1, 1, 1, 1]

    b = clients()
    a.zk.delete(z.CONTROLLER)
    assert b.elect(z.ControllerInfo(1001)) == (epoch + 1, version + 1)
    again = [StateWrite(TP("t", p), State(0, 2, (0,), epoch, 2), 1) for p in range(3)]
    with pytest.raises(ControllerMovedError):
        a.write_states(again + again, version)
    assert b.partition_states([TP("t", 0)])[TP("t", 0)].leader_epoch == 1


def test_new_partitions_parents_are_created_in_two_pipelined_rounds(clients, monkeypatch):
    """New state znodes need `/partitions` and `/partitions/<p>`: created all at once per level
    (two round trips a partition one after another made topic creation slow at thousands of
    partitions); existing ones are fine, and a topic deleted meanwhile makes its states conflicts."""
    a = clients()
    epoch, version = a.elect(z.ControllerInfo(1000))
    for topic in ("t", "u"):
        a.zk.create(z.topic_path(topic), z.encode_topic_assignment(z.TopicAssignment(dict.fromkeys(range(6), (0,)))),
                    makepath=True)
    a.zk.create(f"{z.partitions_path('t')}/0", makepath=True)  # left by an earlier attempt
    rounds = _count_settles(a, monkeypatch)
    created = [StateWrite(TP(topic, p), State(0, 0, (0,), epoch, 0), None) for topic in ("t", "u") for p in range(6)]
    assert a.write_states(created, version).applied == created
    assert rounds == [2, 12, 1]  # the topics' /partitions, each partition's znode, the transaction
    assert set(a.partition_states([w.tp for w in created])) == {w.tp for w in created}

    rounds.clear()
    a.zk.create(z.topic_path("gone"), b"{}")
    a.zk.delete(z.topic_path("gone"))
    orphan = StateWrite(TP("gone", 0), State(0, 0, (0,), epoch, 0), None)
    result = a.write_states([orphan], version)
    assert result.applied == [] and result.conflicts == [orphan.tp]
    assert a.zk.exists(z.topic_path("gone")) is None


def _count_settles(client, monkeypatch) -> list[int]:
    """The number of requests in each pipelined round `client` awaits from now on."""
    rounds: list[int] = []
    real = client.calls.settle

    def settle(pending):
        rounds.append(len(pending))
        return real(pending)

    monkeypatch.setattr(client.calls, "settle", settle)
    return rounds

"""Real controller processes (`odradek controller`) on the real ZooKeeper, with stand-in brokers
(tests/controller/fake_broker.py) that register like brokers and record what they are sent."""

import json
import signal
import subprocess
import sys
import time

import pytest
from kazoo.client import KazooClient

from odradek.common import messages as m
from odradek.common import zk_data as z
from odradek.controller.zk_client import ensure_chroot

from .fake_broker import FakeBroker, partition_states

SESSION_TIMEOUT_MS = 4000
TAKEOVER_S = SESSION_TIMEOUT_MS / 1000 + 8.0  # ZooKeeper expires a session up to a tick late; shared machine


def wait_until(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} within {timeout}s")
        time.sleep(0.05)


class ControllerProcess:
    def __init__(self, zk_connect: str, controller_id: int, log_dir, extra: tuple[str, ...] = ()):
        self.controller_id = controller_id
        self.log_path = log_dir / f"controller-{controller_id}.log"
        self.args = [
            sys.executable, "-m", "odradek.cli", "controller",
            "--override", f"controller.id={controller_id}",
            "--override", f"zookeeper.connect={zk_connect}",
            "--override", f"zookeeper.session.timeout.ms={SESSION_TIMEOUT_MS}",
            "--override", "listeners=PLAINTEXT://127.0.0.1:0",
            *(f"--override={kv}" for kv in extra),
        ]
        self.proc: subprocess.Popen | None = None

    def start(self) -> "ControllerProcess":
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        return self

    def signal(self, sig) -> None:
        self.proc.send_signal(sig)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def reap(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait(10)


@pytest.fixture
def zk(zk_connect):
    ensure_chroot(zk_connect)
    client = KazooClient(hosts=zk_connect, timeout=10)
    client.start(timeout=10)
    yield client
    client.stop()
    client.close()


@pytest.fixture
def start_controller(zk_connect, tmp_path):
    started: list[ControllerProcess] = []

    def start(controller_id: int, *extra: str) -> ControllerProcess:
        c = ControllerProcess(zk_connect, controller_id, tmp_path, extra).start()
        started.append(c)
        return c

    yield start
    for c in started:
        c.reap()


@pytest.fixture
def start_broker(zk_connect):
    started: list[FakeBroker] = []

    def start(broker_id: int) -> FakeBroker:
        b = FakeBroker(zk_connect, broker_id).start()
        started.append(b)
        return b

    yield start
    for b in started:
        b.stop()


def active_controller(zk) -> int | None:
    try:
        return json.loads(zk.get(z.CONTROLLER)[0])["brokerid"]
    except Exception:  # no active controller right now
        return None


def controller_epoch(zk) -> int:
    return z.decode_controller_epoch(zk.get(z.CONTROLLER_EPOCH)[0])


def state(zk, topic: str, partition: int):
    try:
        data, stat = zk.get(z.partition_state_path(topic, partition))
    except Exception:  # not created yet
        return None
    return z.decode_partition_state(data, stat.version)


def brief(s) -> tuple:
    return (s.leader, s.leader_epoch, s.isr, s.controller_epoch)


def create_topic(zk, topic: str, partitions: dict[int, tuple[int, ...]]) -> None:
    """What a broker's CreateTopics does: config first, then the assignment."""
    zk.ensure_path(z.CONFIG_TOPICS)
    zk.create(z.topic_config_path(topic), z.encode_entity_config({}))
    zk.create(z.topic_path(topic), z.encode_topic_assignment(z.TopicAssignment(partitions)), makepath=True)


def test_standby_takes_over_after_sigkill_and_topic_creation_continues(zk, start_controller, start_broker):
    broker = start_broker(0)
    controllers = {c: start_controller(c) for c in (1000, 1001)}
    first = wait_until(lambda: active_controller(zk), 30, "active controller")
    assert controller_epoch(zk) == 1
    broker.wait_for(lambda b: [r for r in b.requests(m.UpdateMetadataRequest) if r.controller_epoch == 1],
                    what="UpdateMetadata from epoch 1")
    time.sleep(0.5)
    assert active_controller(zk) == first, "the standby must not take over a live controller"

    controllers[first].signal(signal.SIGKILL)
    second = wait_until(lambda: (a := active_controller(zk)) not in (None, first) and a, TAKEOVER_S,
                        "new active controller after SIGKILL")
    assert second == 2001 - first and controller_epoch(zk) == 2
    # the new controller tells every broker everything, under its epoch
    broker.wait_for(lambda b: [r for r in b.requests(m.UpdateMetadataRequest) if r.controller_epoch == 2],
                    what="UpdateMetadata from epoch 2")

    create_topic(zk, "after-failover", {0: (0,), 1: (0,)})
    s0 = wait_until(lambda: state(zk, "after-failover", 0), 20, "partition state znode")
    assert (s0.leader, s0.leader_epoch, s0.isr, s0.controller_epoch) == (0, 0, (0,), 2)
    lai = broker.wait_for(lambda b: [r for r in b.requests(m.LeaderAndIsrRequest) if r.controller_epoch == 2
                                     and ("after-failover", 1) in partition_states(r)], what="LeaderAndIsr")
    assert partition_states(lai[0])[("after-failover", 1)].is_new


def test_sigterm_resigns_and_exits_cleanly(zk, start_controller):
    c = start_controller(1000)
    wait_until(lambda: active_controller(zk) == 1000, 30, "active controller")
    c.signal(signal.SIGTERM)
    assert c.proc.wait(15) == 0, c.log()
    assert zk.exists(z.CONTROLLER) is None
    assert "resigned" in c.log()


def test_topic_lifecycle_and_broker_failure(zk, start_controller, start_broker):
    b0, b1 = start_broker(0), start_broker(1)
    start_controller(1000)
    for b in (b0, b1):
        b.wait_for(lambda b: [r for r in b.requests(m.UpdateMetadataRequest) if len(r.live_brokers) == 2],
                   what="UpdateMetadata naming both brokers")

    # creation: states written, LeaderAndIsr to the replicas, UpdateMetadata to all
    create_topic(zk, "t", {0: (0, 1), 1: (1, 0)})
    wait_until(lambda: state(zk, "t", 0) and state(zk, "t", 1), 20, "state znodes of t")
    assert state(zk, "t", 0) == z.LeaderIsrAndControllerEpoch(0, 0, (0, 1), 1, 0)
    assert state(zk, "t", 1) == z.LeaderIsrAndControllerEpoch(1, 0, (1, 0), 1, 0)
    for b in (b0, b1):
        [lai] = b.wait_for(lambda b: b.requests(m.LeaderAndIsrRequest), what="LeaderAndIsr")
        assert set(partition_states(lai)) == {("t", 0), ("t", 1)}
        b.wait_for(lambda b: [r for r in b.requests(m.UpdateMetadataRequest) if ("t", 1) in partition_states(r)],
                   what="UpdateMetadata with t")

    # broker 1 dies: t-1 moves to broker 0 with a new leader epoch, the ISRs shrink
    b1.unregister()
    wait_until(lambda: state(zk, "t", 1).leader == 0, 20, "new leader for t-1")
    assert brief(state(zk, "t", 1)) == (0, 1, (0,), 1)
    assert brief(state(zk, "t", 0)) == (0, 1, (0,), 1)
    lai = b0.wait_for(lambda b: [r for r in b.requests(m.LeaderAndIsrRequest) if partition_states(r).get(("t", 1))
                                 and partition_states(r)[("t", 1)].leader == 0], what="LeaderAndIsr for t-1")
    assert partition_states(lai[-1])[("t", 1)].leader_epoch == 1

    # broker 1 returns: full metadata and a LeaderAndIsr for all its replicas
    since = time.monotonic()
    b1.register()
    um = b1.wait_for(lambda b: [r for r in b.requests(m.UpdateMetadataRequest, since) if len(r.live_brokers) == 2],
                     what="full UpdateMetadata after returning")
    assert {("t", 0), ("t", 1)} <= set(partition_states(um[0]))
    lai = b1.wait_for(lambda b: b.requests(m.LeaderAndIsrRequest, since), what="LeaderAndIsr after returning")
    assert set(partition_states(lai[0])) == {("t", 0), ("t", 1)}

    # deletion: UpdateMetadata with leader -2, StopReplica(delete), znodes gone, marker last
    since = time.monotonic()
    zk.create(z.delete_topic_path("t"), makepath=True)
    wait_until(lambda: zk.exists(z.delete_topic_path("t")) is None, 20, "deletion marker removed")
    assert zk.exists(z.topic_path("t")) is None and zk.exists(z.topic_config_path("t")) is None
    for b in (b0, b1):
        stops = b.wait_for(lambda b: b.requests(m.StopReplicaRequest, since), what="StopReplica")
        assert stops[0].delete_partitions
        assert {(t.name, p) for t in stops[0].topics for p in t.partition_indexes} == {("t", 0), ("t", 1)}
        ums = b.wait_for(lambda b: len(b.requests(m.UpdateMetadataRequest, since)) >= 2
                         and b.requests(m.UpdateMetadataRequest, since),
                         what="UpdateMetadata before and after the deletion")
        for r in ums[:2]:
            assert {s.leader for s in partition_states(r).values()} == {m.LEADER_DURING_DELETE}
    # the name can be used again at once
    create_topic(zk, "t", {0: (1,)})
    wait_until(lambda: state(zk, "t", 0), 20, "state of the re-created t")
    assert brief(state(zk, "t", 0))[:3] == (1, 0, (1,))


def test_added_partitions_get_states_leader_and_isr_and_metadata(zk, start_controller, start_broker):
    """A broker's CreatePartitions rewrites /brokers/topics/<t> (compare-and-set); the
    controller's data watch on it sees the new partitions, also after a failover (a new session
    arms the watches anew) and for a topic created after it became active."""
    b0, b1 = start_broker(0), start_broker(1)
    first = start_controller(1000)
    wait_until(lambda: active_controller(zk) == 1000, 30, "active controller")
    create_topic(zk, "grow", {0: (0, 1)})
    wait_until(lambda: state(zk, "grow", 0), 20, "state of grow-0")

    def grow(partitions: dict[int, tuple[int, ...]]) -> None:
        data, stat = zk.get(z.topic_path("grow"))
        current = z.decode_topic_assignment(data)
        zk.set(z.topic_path("grow"), z.encode_topic_assignment(
            z.TopicAssignment({**current.partitions, **partitions}, current.topic_id)), version=stat.version)

    since = time.monotonic()
    grow({1: (1, 0), 2: (0, 1)})
    wait_until(lambda: state(zk, "grow", 1) and state(zk, "grow", 2), 20, "states of the new partitions")
    assert brief(state(zk, "grow", 1)) == (1, 0, (1, 0), 1)
    for b in (b0, b1):
        lai = b.wait_for(lambda b: [r for r in b.requests(m.LeaderAndIsrRequest, since)
                                    if ("grow", 2) in partition_states(r)], what="LeaderAndIsr for grow-2")
        assert set(partition_states(lai[0])) == {("grow", 1), ("grow", 2)}
        assert partition_states(lai[0])[("grow", 2)].is_new
        b.wait_for(lambda b: [r for r in b.requests(m.UpdateMetadataRequest, since)
                              if ("grow", 2) in partition_states(r)], what="UpdateMetadata with grow-2")

    # a second change fires the re-armed watch
    grow({3: (1, 0)})
    wait_until(lambda: state(zk, "grow", 3), 20, "state of grow-3")

    # after a failover the new controller watches every topic again
    start_controller(1001)
    first.signal(signal.SIGKILL)
    wait_until(lambda: active_controller(zk) == 1001, TAKEOVER_S, "the standby active")
    b0.wait_for(lambda b: [r for r in b.requests(m.UpdateMetadataRequest) if r.controller_epoch == 2],
                what="UpdateMetadata from epoch 2")
    grow({4: (0,)})
    s4 = wait_until(lambda: state(zk, "grow", 4), 20, "state of grow-4 after the failover")
    assert brief(s4) == (0, 0, (0,), 2)


def test_paused_controller_is_deposed_and_rejoins_as_standby(zk, start_controller, start_broker):
    broker = start_broker(0)
    controllers = {c: start_controller(c) for c in (1000, 1001)}
    first = wait_until(lambda: active_controller(zk), 30, "active controller")
    broker.wait_for(lambda b: b.requests(m.UpdateMetadataRequest), what="UpdateMetadata")

    controllers[first].signal(signal.SIGSTOP)  # a zombie: alive, but its session expires
    second = wait_until(lambda: (a := active_controller(zk)) not in (None, first) and a, TAKEOVER_S,
                        "takeover from a paused controller")
    assert controller_epoch(zk) == 2
    broker.wait_for(lambda b: [r for r in b.requests(m.UpdateMetadataRequest) if r.controller_epoch == 2],
                    what="UpdateMetadata from epoch 2")
    controllers[first].signal(signal.SIGCONT)
    wait_until(lambda: "deposed" in controllers[first].log() or "standby" in controllers[first].log().split("epoch 1")[-1],
               20, "the resumed controller noticing it was deposed")
    create_topic(zk, "x", {0: (0,)})
    wait_until(lambda: state(zk, "x", 0), 20, "state of x")
    assert state(zk, "x", 0).controller_epoch == 2
    time.sleep(0.5)
    assert active_controller(zk) == second and controller_epoch(zk) == 2
    assert controllers[first].proc.poll() is None
    # the deposed controller sent nothing once its successor had spoken
    took_over = min(r.at for r in broker.received if r.payload.controller_epoch == 2)
    assert [r for r in broker.received if r.payload.controller_epoch == 1 and r.at > took_over] == []

    # the zombie rejoined with a fresh session: it takes over when the active one dies
    controllers[second].signal(signal.SIGKILL)
    wait_until(lambda: active_controller(zk) == first, TAKEOVER_S, "the old controller back in charge")
    assert controller_epoch(zk) == 3
    broker.wait_for(lambda b: [r for r in b.requests(m.UpdateMetadataRequest) if r.controller_epoch == 3],
                    what="UpdateMetadata from epoch 3")


def test_compare_and_set_conflict_is_reread_and_decided_again(zk, start_controller, start_broker, tmp_path):
    b0, b1 = start_broker(0), start_broker(1)
    c = start_controller(1000)
    create_topic(zk, "c", {0: (1, 0)})
    wait_until(lambda: state(zk, "c", 0), 20, "state of c-0")
    # someone rewrites the state znode: the controller's cached version is now stale
    path = z.partition_state_path("c", 0)
    zk.set(path, zk.get(path)[0])
    b1.unregister()
    wait_until(lambda: state(zk, "c", 0).leader == 0, 20, "new leader for c-0")
    s = state(zk, "c", 0)
    assert (brief(s), s.zk_version) == ((0, 1, (0,), 1), 2)
    assert "conflicts" in c.log()
    b0.wait_for(lambda b: [r for r in b.requests(m.LeaderAndIsrRequest) if partition_states(r)[("c", 0)].leader == 0
                           and partition_states(r)[("c", 0)].zk_version == 2], what="LeaderAndIsr after the retry")

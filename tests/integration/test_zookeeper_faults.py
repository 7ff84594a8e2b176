"""Acceptance: brokers and controllers ride out ZooKeeper faults (issue 11, findings 4, 5 and 8).

- A 20-second ZooKeeper outage expires no session: clients try to reconnect at least every
  second or so, not on a back-off doubling up to an hour.
- A broker whose re-registration fails keeps trying until it is registered again, and while it is
  not registered it acts as leader of nothing (produce answers NOT_LEADER_OR_FOLLOWER).
- SIGTERM while ZooKeeper hangs (SIGSTOP) or is down ends brokers and controllers in bounded time.

The outage tests run a ZooKeeper of their own (the session's is shared by every test).
"""

import signal
import time

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from kio.schema.errors import ErrorCode

from odradek.common import zk_data
from odradek.dev.cluster import LocalCluster
from odradek.dev.netns import NetworkLab, unavailable_reason
from odradek.dev.waiting import wait_until
from odradek.dev.zookeeper import free_port, free_ports

from .kafka_helpers import ContinuousProducer, create_topic, produce_error, verify_acknowledged, wait_isr_full

SESSION_TIMEOUT_MS = 6000
SHUTDOWN_BOUND_S = 15.0
"""How long LocalCluster.stop gives a process after SIGTERM before it kills it."""


@pytest.fixture
def own_zookeeper_cluster(tmp_path):
    """`make(brokers=..., controllers=...)` → a started LocalCluster with a ZooKeeper of its own."""
    made: list[LocalCluster] = []

    def make(brokers: int, controllers: int = 1, broker_overrides=None) -> LocalCluster:
        cluster = LocalCluster(
            tmp_path / f"cluster-{len(made)}", brokers=brokers, controllers=controllers,
            broker_ports=free_ports(brokers), zookeeper_port=free_port(),
            broker_overrides={"zookeeper.session.timeout.ms": SESSION_TIMEOUT_MS, **(broker_overrides or {})},
            controller_overrides={"zookeeper.session.timeout.ms": SESSION_TIMEOUT_MS},
        )
        made.append(cluster)
        return cluster.start()

    yield make
    for cluster in made:
        cluster.stop()


def registrations(zk: KazooClient) -> dict[int, tuple[int, int]]:
    """broker id → (czxid, owner session) of its `/brokers/ids/<id>`."""
    out = {}
    for child in zk.get_children(zk_data.BROKER_IDS):
        try:
            _, stat = zk.get(zk_data.broker_path(int(child)))
        except NoNodeError:
            continue
        out[int(child)] = (stat.czxid, stat.ephemeralOwner)
    return out


def test_sessions_outlive_a_20s_zookeeper_outage(own_zookeeper_cluster):
    """Finding 5: ZooKeeper down for 20 s (SIGKILL, then started again on its data) expires no
    broker session when clients reconnect promptly: every registration is the same znode after,
    and acknowledged records written across the outage are all there."""
    cluster = own_zookeeper_cluster(brokers=3)
    create_topic(cluster.bootstrap, "outage", 3, replication_factor=3)
    wait_isr_full(cluster.bootstrap, "outage", 3)
    zk = cluster.zk_client()
    try:
        before = registrations(zk)
    finally:
        zk.stop()
        zk.close()
    assert sorted(before) == [0, 1, 2]

    producer = ContinuousProducer(cluster.bootstrap, "outage", 3, tag="outage", rate=300).start()
    try:
        producer.wait_acked(300, timeout=30)
        cluster.zookeeper.kill()
        outage_end = time.monotonic() + 20
        while time.monotonic() < outage_end:  # the fault's duration, while the producer runs
            assert not cluster.dead_processes(), f"died during the outage: {cluster.dead_processes()}"
            time.sleep(0.5)
        cluster.zookeeper.start()
        # The restarted server restores the sessions with a fresh timeout: one whose client does
        # not come back within it expires then (its znode goes, and the broker registers anew).
        zk = cluster.zk_client()
        try:
            window_end = time.monotonic() + 2 * SESSION_TIMEOUT_MS / 1000
            while time.monotonic() < window_end:
                now = registrations(zk)
                assert now == before, f"a broker session expired after the outage: {before} -> {now}"
                time.sleep(0.2)
        finally:
            zk.stop()
            zk.close()
        producer.wait_acked(300, timeout=60)
    finally:
        producer.stop()
    verify_acknowledged(cluster.bootstrap, producer)
    assert not cluster.dead_processes()


def test_failed_reregistration_is_retried_and_fences_the_broker(cluster_factory):
    """Finding 4: the broker's session expires (SIGSTOP past the timeout) and its first attempt to
    register again fails, because the znode is held by a live session. Until it is registered
    again the broker leads nothing (produce: NOT_LEADER_OR_FOLLOWER); once the znode is free it
    registers without anyone's help and serves again."""
    cluster = cluster_factory(brokers=1, broker_overrides={"zookeeper.session.timeout.ms": 4000})
    create_topic(cluster.bootstrap, "fenced", 1)
    port = cluster.broker_ports[0]
    assert produce_error(port, "fenced", 0, b"before") == ErrorCode.none
    broker = cluster.broker(0)
    squatter = cluster.zk_client()
    try:
        broker.pause()
        try:
            cluster.wait_broker_gone(0, timeout=30)
            stranger = zk_data.BrokerInfo(0, (zk_data.EndPoint("127.0.0.1", free_port(), "PLAINTEXT"),), None)
            squatter.create(zk_data.broker_path(0), zk_data.encode_broker(stranger), ephemeral=True)
        finally:
            broker.resume()
        # The broker sees its session lost, fails to register (the id is taken) and must not lead.
        wait_until(lambda: _produce_unless_dropped(port, b"while-fenced") == ErrorCode.not_leader_or_follower,
                   "the unregistered broker refuses produce", timeout=20, interval=0.2)
        # Held for a while (the broker keeps retrying meanwhile), then freed.
        for _ in range(10):
            assert produce_error(port, "fenced", 0, b"while-fenced") == ErrorCode.not_leader_or_follower
            time.sleep(0.2)
        squatter.delete(zk_data.broker_path(0))
        owner = wait_until(lambda: registrations(squatter).get(0, (0, 0))[1], "the broker registered again",
                           timeout=20)
        assert owner != squatter.client_id[0]
        wait_until(lambda: _produce_unless_dropped(port, b"after") == ErrorCode.none,
                   "the re-registered broker leads again", timeout=30, interval=0.2)
    finally:
        squatter.stop()
        squatter.close()
    assert broker.alive


def _produce_unless_dropped(port: int, value: bytes) -> ErrorCode | None:
    """produce_error, or None when the broker dropped the connection: it drops every client
    connection when it is fenced or unfenced, and a produce may be caught by that turn."""
    try:
        return produce_error(port, "fenced", 0, value)
    except ConnectionError:
        return None


@pytest.mark.parametrize("fault", [signal.SIGSTOP, signal.SIGKILL], ids=["zookeeper-hangs", "zookeeper-down"])
def test_sigterm_during_a_zookeeper_outage_ends_in_bounded_time(own_zookeeper_cluster, fault):
    """Finding 8: SIGTERM to a broker (controlled shutdown looks up the controller in ZooKeeper)
    and to the active controller (resigns, closes its session) while ZooKeeper hangs or is down:
    each exits by itself with code 0 within the shutdown bound."""
    cluster = own_zookeeper_cluster(brokers=2)
    create_topic(cluster.bootstrap, "bye", 2, replication_factor=2)
    wait_isr_full(cluster.bootstrap, "bye", 2)
    cluster.zookeeper.kill(fault)
    try:
        time.sleep(1.0)  # let the outage begin: requests in flight when it starts must be bounded too
        targets = [cluster.broker(0), cluster.controller(0)]
        started = time.monotonic()
        for p in targets:
            p.popen.send_signal(signal.SIGTERM)
        for p in targets:
            try:
                code = p.popen.wait(max(0.1, started + SHUTDOWN_BOUND_S - time.monotonic()))
            except Exception as e:
                raise AssertionError(f"{p.name} still running {SHUTDOWN_BOUND_S}s after SIGTERM; "
                                     f"{p.log_path}:\n{p.log_tail(30)}") from e
            assert code == 0, f"{p.name} exited with {code}:\n{p.log_tail(30)}"
    finally:
        if fault == signal.SIGSTOP:
            cluster.zookeeper.kill(signal.SIGCONT)


@pytest.mark.skipif(unavailable_reason() is not None, reason=f"needs network namespaces: {unavailable_reason()}")
def test_leader_cut_from_zookeeper_stops_acting_as_leader(tmp_path):
    """Finding 5's second half: a leader that only ZooKeeper cannot reach loses its session, and
    the controller elects another replica. The deposed leader, still reachable by clients, must
    stop taking writes (NOT_LEADER_OR_FOLLOWER) instead of appending for as long as the partition
    lasts; once it can reach ZooKeeper again it registers anew and follows."""
    with NetworkLab() as lab:
        names = ["zookeeper", "broker-0", "broker-1", "broker-2", "controller-0"]
        hosts = {name: (h.netns, h.ip) for name in names for h in [lab.add_host(name)]}
        cluster = LocalCluster(
            tmp_path / "cluster", brokers=3, controllers=1, broker_ports=free_ports(3), zookeeper_port=free_port(),
            broker_overrides={"zookeeper.session.timeout.ms": SESSION_TIMEOUT_MS},
            controller_overrides={"zookeeper.session.timeout.ms": SESSION_TIMEOUT_MS}, hosts=hosts,
        ).start()
        try:
            create_topic(cluster.bootstrap, "deposed", 1, replication_factor=3)
            wait_isr_full(cluster.bootstrap, "deposed", 1)
            leader = cluster.partition_state("deposed", 0).leader
            host, port = cluster.broker_host(leader), cluster.broker_ports[leader]
            assert produce_error(port, "deposed", 0, b"before", host=host) == ErrorCode.none
            lab.block(f"broker-{leader}", "zookeeper")
            wait_until(lambda: cluster.partition_state("deposed", 0).leader not in (leader, -1),
                       "another replica elected leader", timeout=30)
            # It learns it may be deposed half a session timeout after losing ZooKeeper at most.
            wait_until(lambda: produce_error(port, "deposed", 0, b"deposed", host=host)
                       == ErrorCode.not_leader_or_follower,
                       "the deposed leader refuses writes", timeout=SESSION_TIMEOUT_MS / 1000, interval=0.2)
            lab.unblock(f"broker-{leader}", "zookeeper")
            wait_isr_full(cluster.bootstrap, "deposed", 1, timeout=60)
        finally:
            cluster.stop()

"""Broker configuration without restarts, end to end (issue 28 item 10): the operator process
(kopf, in a thread) against the emulated API server, and real brokers whose pods a stand-in
kubelet maps onto local processes: deleting pod N restarts broker N with the spec's config.

A change of a key the brokers apply live goes through IncrementalAlterConfigs into the
cluster-wide dynamic defaults: no broker restarts, and DescribeConfigs (librdkafka's, not the
operator's client) shows the new value from DYNAMIC_DEFAULT_BROKER_CONFIG at once, for the broker
and for a topic's default. A change of a static key rolls every broker exactly once.
"""

import asyncio
import queue
import threading
import uuid

import kmock
import pytest
import pytest_asyncio
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, NewTopic
from operator_harness import KC, NS, STS, Api, Kubelet, OperatorThread, condition, new_server, wait_for, writes

from odradek.dev.cluster import LocalCluster
from odradek.dev.zookeeper import free_ports
from odradek.operator import builders
from odradek.operator.models import parse_spec
from odradek.operator.reconciler import apply_dynamic_config
from odradek.operator.rolling import fetch_view

pytestmark = [pytest.mark.timeout(240), pytest.mark.asyncio]

BROKERS = 2
CONFIG = {"log.retention.ms": 3600000, "num.partitions": 1}
OVERRIDES = {"zookeeper.session.timeout.ms": 6000, "replica.lag.time.max.ms": 3000}
KEY_STORE = "listener.name.plaintext.ssl.keystore.location"
"""A listener's key store (its listener PLAINTEXT here: stored and described, nothing to load)."""


def text(config: dict) -> dict[str, str]:
    return {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in config.items()}


class Restarter:
    """Stops and starts broker processes on one long-lived thread: a process dies with the thread
    that started it (PR_SET_PDEATHSIG), and the emulated API server's loop must not block."""

    def __init__(self, cluster: LocalCluster):
        self.cluster = cluster
        self.jobs: queue.Queue = queue.Queue()
        self.done: set[int] = set()
        self.errors: list[str] = []
        self.thread = threading.Thread(target=self._run, name="restarter", daemon=True)
        self.thread.start()

    def restart(self, broker_id: int, config: dict[str, str]) -> None:
        self.done.discard(broker_id)
        self.jobs.put((broker_id, config))

    def _run(self) -> None:
        while (job := self.jobs.get()) is not None:
            broker_id, config = job
            process = self.cluster.brokers[broker_id]
            try:
                code = process.stop(timeout=30)
                if code != 0:
                    self.errors.append(f"broker {broker_id} exited with {code}; read {process.log_path}")
                process.overrides.update(config)
                process.start()
                self.cluster.wait_ready(timeout=60, brokers=[broker_id])
            except Exception as e:  # reported by the test, which must not hang on a dead thread
                self.errors.append(f"broker {broker_id}: {e}")
            self.done.add(broker_id)

    def stop(self) -> None:
        self.jobs.put(None)
        self.thread.join(60)


class ProcessKubelet(Kubelet):
    """The harness's kubelet for broker pods backed by real processes: a pod the operator deletes
    is recreated from the current template and its broker restarted with the spec's config; the
    pod is Ready once that broker is registered again."""

    def __init__(self, server, restarter: Restarter, name: str = "demo"):
        super().__init__(server, None, name, ready_after=1)
        self.restarter = restarter
        self.restarts = dict.fromkeys(range(BROKERS), 0)

    def pod_deleted(self, index: int) -> None:
        self.restarts[index] += 1
        spec = parse_spec(self.server.live(KC, NS, self.cluster)["spec"])
        self.restarter.restart(index, text(spec.brokers.config))

    def pod_ready(self, index: int, pod: dict) -> tuple[bool, bool]:
        ready = self.restarts[index] == 0 or index in self.restarter.done
        was = any(c.get("status") == "True" for c in (pod.get("status") or {}).get("conditions", []))
        return ready and not was, ready


@pytest.fixture
def kafka(zookeeper, tmp_path):
    cluster = LocalCluster(
        tmp_path / "cluster", brokers=BROKERS, controllers=1, broker_ports=free_ports(BROKERS),
        zookeeper_connect=f"{zookeeper.connect}/odradek-{uuid.uuid4().hex[:8]}",
        broker_overrides={**OVERRIDES, **text(CONFIG)}, controller_overrides={"zookeeper.session.timeout.ms": 6000})
    cluster.start()
    restarter = Restarter(cluster)
    try:
        yield cluster, restarter
    finally:
        cluster.stop()
        restarter.stop()


def describe(bootstrap: str, resource: ConfigResource, key: str) -> tuple[str | None, int] | None:
    """`key`'s value and source, or None while it is not described: a listener's key (Kafka's
    too) is listed only once it is set, and each broker's own configs arrive one by one."""
    client = AdminClient({"bootstrap.servers": bootstrap})
    entries = client.describe_configs([resource])[resource].result(timeout=10)
    entry = entries.get(key)
    return None if entry is None else (entry.value, entry.source)


@pytest_asyncio.fixture
async def env(kafka):
    cluster, restarter = kafka
    server = new_server()
    ports = [("127.0.0.1", p) for p in cluster.broker_ports]

    async def view(body):
        return await fetch_view(ports, timeout=5.0)

    async def applier(body, desired):
        return await apply_dynamic_config(body, ports, desired)

    async with server, kmock.Server(server) as http:
        kubelet = ProcessKubelet(server, restarter)
        kubelet.start()
        api = Api(str(http.url))
        operator = OperatorThread(str(http.url), view, interval=1.0, config_applier=applier)
        try:
            yield server, api, kubelet, cluster, restarter
        finally:
            if operator.thread.is_alive():
                await operator.stop()
            await kubelet.stop()
            await api.close()


async def test_a_dynamic_key_restarts_no_broker_a_static_key_restarts_each_once(env):
    server, api, kubelet, cluster, restarter = env

    def kc():
        return server.live(KC, NS, "demo")

    async def ready(generation: int):
        await wait_for(lambda: condition(kc(), "Ready").get("status") == "True"
                       and condition(kc(), "Ready").get("observedGeneration") == generation, 90,
                       f"Ready=True for generation {generation}")

    await api.create_cluster({"zookeeper": {"connect": cluster.zookeeper_connect}, "controller": {"replicas": 1},
                              "brokers": {"replicas": BROKERS, "config": CONFIG}})
    await ready(1)
    client = AdminClient({"bootstrap.servers": cluster.bootstrap})
    futures = client.create_topics([NewTopic("t", 1, BROKERS)], operation_timeout=20)
    await asyncio.to_thread(futures["t"].result, 25)
    assert kubelet.restarts == {0: 0, 1: 0}
    pids = [b.pid for b in cluster.brokers]
    hash_before = server.live(STS, NS, "demo-broker")["spec"]["template"]["metadata"]["annotations"][builders.CONFIG_HASH]

    # a dynamic key: IncrementalAlterConfigs, no restart; a listener's key store: the same, to
    # each broker's own configs (Kafka refuses it at the default)
    mark = len(list(server))
    await api.patch_spec({"brokers": {"config": {"log.retention.ms": 7200000, KEY_STORE: "/certs/new.pem"}}})
    for broker in range(BROKERS):
        resource = ConfigResource(ConfigResource.Type.BROKER, str(broker))
        await wait_for(lambda r=resource: describe(cluster.bootstrap, r, "log.retention.ms")
                       == ("7200000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value), 30,
                       f"broker {broker} describing the new log.retention.ms", step=0.05)
        await wait_for(lambda r=resource: describe(cluster.bootstrap, r, KEY_STORE)
                       == ("/certs/new.pem", ConfigSource.DYNAMIC_BROKER_CONFIG.value), 30,
                       f"broker {broker} describing its new {KEY_STORE}", step=0.05)
    topic = ConfigResource(ConfigResource.Type.TOPIC, "t")
    assert describe(cluster.bootstrap, topic, "retention.ms") == ("7200000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
    await ready(2)
    passes = sum(1 for r in list(server) if r.resource is not None and r.resource.plural == "kafkaclusters")
    await wait_for(lambda: sum(1 for r in list(server) if r.resource is not None
                               and r.resource.plural == "kafkaclusters") > passes + 6, 30, "more reconcile passes")
    assert kubelet.restarts == {0: 0, 1: 0}, "a dynamic key restarted a broker"
    assert [b.pid for b in cluster.brokers] == pids
    assert [w for w in writes(server, mark) if w[:2] == ("delete", "pods")] == []
    assert server.live(STS, NS, "demo-broker")["spec"]["template"]["metadata"]["annotations"][
        builders.CONFIG_HASH] == hash_before
    assert "log.retention.ms=7200000\n" in server.live("v1/configmaps", NS, "demo-broker")["data"]["server.properties"]

    # a static key: exactly one restart per broker
    await api.patch_spec({"brokers": {"config": {"num.partitions": 2}}})
    await ready(3)
    assert kubelet.restarts == {0: 1, 1: 1}
    assert not restarter.errors, restarter.errors
    assert all(b.pid not in pids for b in cluster.brokers)
    for broker in range(BROKERS):
        resource = ConfigResource(ConfigResource.Type.BROKER, str(broker))
        assert describe(cluster.bootstrap, resource, "num.partitions") == (
            "2", ConfigSource.STATIC_BROKER_CONFIG.value)
        # the dynamic default survives the restart (read from ZooKeeper at start)
        assert describe(cluster.bootstrap, resource, "log.retention.ms") == (
            "7200000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
        assert describe(cluster.bootstrap, resource, KEY_STORE) == (
            "/certs/new.pem", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    await asyncio.sleep(3)
    assert kubelet.restarts == {0: 1, 1: 1}

    # a dynamic value the brokers refuse: a condition naming it, still no restart
    await api.patch_spec({"brokers": {"config": {"log.cleaner.threads": 8}}})
    await wait_for(lambda: condition(kc(), "Stalled").get("reason") == "DynamicConfigRefused", 30,
                   "the refusal in the status")
    assert "log.cleaner.threads" in condition(kc(), "Stalled")["message"]
    await api.patch_spec({"brokers": {"config": {"log.cleaner.threads": None}}})
    await ready(5)
    assert condition(kc(), "Stalled")["status"] == "False"
    assert kubelet.restarts == {0: 1, 1: 1}

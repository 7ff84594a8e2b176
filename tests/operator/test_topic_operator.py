"""Topic resources end to end: the operator process (kopf, in a thread) against an emulated API
server, and a real cluster (ZooKeeper, a controller and two brokers as processes) that it
changes through the Kafka protocol. What the cluster holds is checked with confluent-kafka's
AdminClient (librdkafka), not with the operator's own client.
"""

import asyncio
import time
import uuid

import kmock
import pytest
import pytest_asyncio
from confluent_kafka.admin import AdminClient, NewTopic
from integration.metrics_scrape import scrape, value
from operator_harness import KC, NS, TOPICS, Api, OperatorThread, condition, new_server, wait_for, writes

from odradek.dev.cluster import LocalCluster
from odradek.dev.zookeeper import free_ports
from odradek.operator.rolling import fetch_view
from odradek.operator.topic_models import FINALIZER, MANAGED_ANNOTATION
from odradek.operator.topics import Tuning

pytestmark = [pytest.mark.timeout(120), pytest.mark.asyncio]

RESYNC = 0.5  # tests wait for resync passes (Env.resync_passes), never for a time
CLUSTER = "demo"
BASE = f"/apis/odradek.io/v1alpha1/namespaces/{NS}/topics"


@pytest.fixture(scope="module")
def kafka(zookeeper, tmp_path_factory):
    cluster = LocalCluster(
        tmp_path_factory.mktemp("topic-operator-cluster"), brokers=2, controllers=1, broker_ports=free_ports(2),
        zookeeper_connect=f"{zookeeper.connect}/odradek-{uuid.uuid4().hex[:8]}",
        broker_overrides={"zookeeper.session.timeout.ms": 6000, "auto.create.topics.enable": "false"},
        controller_overrides={"zookeeper.session.timeout.ms": 6000})
    cluster.start()
    yield cluster
    cluster.stop()


class Kafka:
    """The cluster as librdkafka sees it (blocking calls run in a thread: the emulated API server
    shares this test's loop)."""

    def __init__(self, bootstrap: str):
        self.client = AdminClient({"bootstrap.servers": bootstrap})

    def _topic(self, name):
        md = self.client.list_topics(name, timeout=10)
        t = md.topics.get(name)
        if t is None or t.error is not None or not t.partitions:
            return None
        return {"partitions": len(t.partitions), "replicas": max(len(p.replicas) for p in t.partitions.values())}

    async def topic(self, name):
        return await asyncio.to_thread(self._topic, name)

    def _overrides(self, name):
        from confluent_kafka.admin import ConfigResource, ConfigSource
        resource = ConfigResource(ConfigResource.Type.TOPIC, name)
        entries = self.client.describe_configs([resource])[resource].result(timeout=10)
        return {k: e.value for k, e in entries.items() if e.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value}

    async def overrides(self, name):
        return await asyncio.to_thread(self._overrides, name)

    def _create(self, name, partitions, replicas=1, config=None):
        futures = self.client.create_topics([NewTopic(name, partitions, replicas, config=config or {})],
                                            operation_timeout=20, request_timeout=20)
        futures[name].result(timeout=25)

    async def create(self, name, partitions, replicas=1, config=None):
        await asyncio.to_thread(self._create, name, partitions, replicas, config)

    def _alter(self, name, set_=None, delete=()):
        from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

        entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in (set_ or {}).items()]
        entries += [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE) for k in delete]
        resource = ConfigResource(ConfigResource.Type.TOPIC, name, incremental_configs=entries)
        self.client.incremental_alter_configs([resource])[resource].result(timeout=20)

    async def alter(self, name, set_=None, delete=()):
        await asyncio.to_thread(self._alter, name, set_, delete)

    def _delete(self, name):
        self.client.delete_topics([name], operation_timeout=20, request_timeout=20)[name].result(timeout=25)

    async def delete(self, name):
        await asyncio.to_thread(self._delete, name)

    async def wait_topic(self, name, expected, timeout):
        """Until Metadata shows `expected`: brokers learn of a new topic or partition from the
        controller one after another, and librdkafka may ask another broker than the operator."""
        deadline = time.monotonic() + timeout
        while (found := await self.topic(name)) != expected:
            assert time.monotonic() < deadline, f"topic {name} is {found} after {timeout}s, not {expected}"
            await asyncio.sleep(0.1)

    async def wait_gone(self, name, timeout=20.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if await self.topic(name) is None:
                return
            await asyncio.sleep(0.1)
        raise AssertionError(f"topic {name} still exists after {timeout}s")


class Env:
    def __init__(self, server, url, kafka: LocalCluster):
        self.server, self.url, self.cluster = server, url, kafka
        self.api = Api(url)
        self.kafka = Kafka(kafka.bootstrap)
        self.operator: OperatorThread | None = None
        self.observes = 0
        """Topic reconcile passes that looked at the cluster: each asks topic_bootstrap once."""

    async def view(self, body):
        return await fetch_view([("127.0.0.1", p) for p in self.cluster.broker_ports], timeout=5.0)

    def _bootstrap(self, cluster):  # called in the operator's thread; an int += is atomic enough here
        self.observes += 1
        return [("127.0.0.1", p) for p in self.cluster.broker_ports]

    async def resync_passes(self, n, timeout=30.0):
        """Wait until the operator has looked at the cluster for its Topics n more times. With one
        managed Topic these are its resync passes, and once pass n+1 has started pass n is over,
        writes included (the work queue gives a key to one worker at a time): the event to wait
        for, rather than sleeping through resync periods."""
        target = self.observes + n
        await wait_for(lambda: self.observes >= target, timeout, f"{n} more topic reconcile passes", step=0.05)

    def start_operator(self):
        self.metrics_url = f"http://127.0.0.1:{free_ports(1)[0]}/metrics"
        self.operator = OperatorThread(
            self.url, self.view, interval=2.0, metrics_host="127.0.0.1",
            metrics_port=int(self.metrics_url.rsplit(":", 1)[1].split("/")[0]),
            topic_bootstrap=self._bootstrap,
            topic_tuning=Tuning(workers=8, resync=RESYNC, linger=0.02))

    async def stop_operator(self):
        await self.operator.stop()

    async def create_cluster(self):
        await self.api.create_cluster({"zookeeper": {"connect": self.cluster.zookeeper_connect}}, name=CLUSTER)

    async def apply(self, name, spec, annotations=None):
        meta = {"name": name, "namespace": NS, **({"annotations": annotations} if annotations else {})}
        status, body = await self.api.call("POST", BASE, {
            "apiVersion": "odradek.io/v1alpha1", "kind": "Topic", "metadata": meta,
            "spec": {"clusterRef": CLUSTER, **spec}})
        assert status in (200, 201), body
        return body

    async def patch(self, name, patch):
        status, body = await self.api.call("PATCH", f"{BASE}/{name}", patch, "application/merge-patch+json")
        assert status == 200, body
        return body

    async def delete(self, name):
        status, body = await self.api.call("DELETE", f"{BASE}/{name}")
        assert status == 200, body

    def topic(self, name):
        return self.server.live(TOPICS, NS, name)

    async def reason(self, name, reason, generation=None, timeout=30.0):
        """Wait until Ready's reason is `reason` for the current (or given) generation."""
        def check():
            body = self.topic(name)
            ready = condition(body, "Ready")
            want = generation or (body or {}).get("metadata", {}).get("generation")
            return ready.get("reason") == reason and ready.get("observedGeneration") == want and body
        return await wait_for(check, timeout, f"Topic {name} Ready reason {reason}")

    async def ready(self, name, timeout=30.0):
        body = await self.reason(name, "TopicReady", timeout=timeout)
        assert condition(body, "Ready")["status"] == "True"
        return body

    async def gone(self, name, timeout=30.0):
        await wait_for(lambda: self.topic(name) is None, timeout, f"Topic {name} removed")

    def topic_writes(self, since=0):
        return [w for w in writes(self.server, since, exclude=()) if w[1] == "topics"]

    def mark(self):
        return len(list(self.server))


@pytest_asyncio.fixture
async def env(kafka):
    server = new_server()
    async with server, kmock.Server(server) as http:
        e = Env(server, str(http.url), kafka)
        try:
            yield e
        finally:
            if e.operator is not None and e.operator.thread.is_alive():
                await e.stop_operator()
            await e.api.close()


def unique(prefix="t"):
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


async def test_create_reports_the_live_topic_with_kstatus_conditions(env):
    name = unique()
    await env.create_cluster()
    env.start_operator()
    await env.apply(name, {"partitions": 3, "replicas": 2, "config": {"retention.ms": 3600000, "cleanup.policy": "delete"}})
    body = await env.ready(name)
    status = body["status"]
    assert (status["topicName"], status["partitions"], status["replicas"]) == (name, 3, 2)
    assert status["config"] == {"cleanup.policy": "delete", "retention.ms": "3600000"}
    assert {c["type"]: c["status"] for c in status["conditions"]} == {
        "Ready": "True", "Reconciling": "False", "Stalled": "False"}
    assert all(c["observedGeneration"] == 1 for c in status["conditions"]), "kubectl wait reads these"
    assert body["metadata"]["finalizers"] == [FINALIZER]
    await env.kafka.wait_topic(name, {"partitions": 3, "replicas": 2}, timeout=15)
    assert await env.kafka.overrides(name) == {"cleanup.policy": "delete", "retention.ms": "3600000"}
    # the Topic controller's passes are counted and timed per kind and namespace (issue 28 item 13)
    samples = await asyncio.to_thread(scrape, env.metrics_url)
    topic = {"kind": "Topic", "namespace": NS}
    assert value(samples, "odradek_operator_reconcile_duration_seconds_count", **topic) >= 1
    assert value(samples, "odradek_operator_reconcile_errors_total", **topic) == 0
    assert not [ls for n, ls, _ in samples if ls.get("kind") == "Topic" and "name" in ls], "no series per Topic"


async def test_resync_recreates_a_topic_deleted_in_the_cluster_and_writes_nothing_when_nothing_changed(env):
    name = unique()
    await env.create_cluster()
    env.start_operator()
    await env.apply(name, {"partitions": 2})
    await env.ready(name)
    mark = env.mark()
    await env.resync_passes(3)  # two whole resyncs of an unchanged topic
    assert env.topic_writes(mark) == [], "an unchanged topic gets no status or finalizer writes"

    await env.kafka.delete(name)  # out of band
    await env.kafka.wait_gone(name)
    await env.kafka.wait_topic(name, {"partitions": 2, "replicas": 1}, timeout=RESYNC + 10)


async def test_partitions_are_raised(env):
    name = unique()
    await env.create_cluster()
    env.start_operator()
    await env.apply(name, {"partitions": 2})
    await env.ready(name)
    await env.patch(name, {"spec": {"partitions": 5}})
    body = await env.reason(name, "TopicReady", generation=2)
    assert body["status"]["partitions"] == 5
    await env.kafka.wait_topic(name, {"partitions": 5, "replicas": 1}, timeout=15)


async def test_config_changes_are_applied_and_overrides_that_left_the_spec_removed(env):
    name = unique()
    await env.create_cluster()
    env.start_operator()
    await env.apply(name, {"config": {"retention.ms": 1000, "segment.bytes": 1048576}})
    await env.ready(name)
    await env.patch(name, {"spec": {"config": {"retention.ms": 2000, "segment.bytes": None, "cleanup.policy": "compact"}}})
    body = await env.reason(name, "TopicReady", generation=2)
    assert body["status"]["config"] == {"cleanup.policy": "compact", "retention.ms": "2000"}
    assert await env.kafka.overrides(name) == {"cleanup.policy": "compact", "retention.ms": "2000"}


async def test_a_config_change_made_in_the_cluster_is_reverted_within_one_resync(env):
    name = unique()
    await env.create_cluster()
    env.start_operator()
    await env.apply(name, {"config": {"retention.ms": 60000}})
    await env.ready(name)
    await env.kafka.alter(name, {"retention.ms": "5", "max.message.bytes": "2000000"})
    assert await env.kafka.overrides(name) == {"retention.ms": "5", "max.message.bytes": "2000000"}
    changed = time.monotonic()
    deadline = changed + RESYNC + 10
    while (found := await env.kafka.overrides(name)) != {"retention.ms": "60000"}:
        assert time.monotonic() < deadline, f"still {found}"
        await asyncio.sleep(0.1)
    assert env.topic(name)["status"]["config"] == {"retention.ms": "60000"}


async def test_partition_decrease_is_refused_with_its_condition(env):
    name = unique()
    await env.create_cluster()
    env.start_operator()
    await env.apply(name, {"partitions": 3, "config": {"retention.ms": 60000}})
    await env.ready(name)
    await env.patch(name, {"spec": {"partitions": 1}})
    body = await env.reason(name, "PartitionDecreaseNotSupported", generation=2)
    stalled = condition(body, "Stalled")
    assert stalled["status"] == "True" and "3 partitions" in stalled["message"]
    assert condition(body, "Reconciling")["status"] == "False"
    assert body["status"]["partitions"] == 3 and body["status"]["observedGeneration"] == 2
    await env.kafka.wait_topic(name, {"partitions": 3, "replicas": 1}, timeout=15)  # nothing removed


async def test_replication_factor_change_is_a_reassignment(env):
    """spec.replicas 1 → 2 → 1: the operator reassigns the partitions (AlterPartitionReassignments,
    carried out by the controller) and the cluster follows."""
    name = unique()
    await env.create_cluster()
    env.start_operator()
    await env.apply(name, {"partitions": 2, "replicas": 1})
    await env.ready(name)
    await env.patch(name, {"spec": {"replicas": 2}})
    await env.kafka.wait_topic(name, {"partitions": 2, "replicas": 2}, timeout=30)
    await env.patch(name, {"spec": {"replicas": 1}})
    await env.kafka.wait_topic(name, {"partitions": 2, "replicas": 1}, timeout=30)


async def test_invalid_config_and_unknown_cluster_are_conditions(env):
    bad, orphan = unique("bad"), unique("orphan")
    await env.create_cluster()
    env.start_operator()
    await env.apply(bad, {"config": {"retention.ms": "forever", "no.such.key": 1}})
    body = await env.reason(bad, "InvalidConfig")
    assert "retention.ms" in condition(body, "Ready")["message"] and "no.such.key" in condition(body, "Ready")["message"]
    assert condition(body, "Stalled")["status"] == "True"
    assert await env.kafka.topic(bad) is None

    status, _ = await env.api.call("POST", BASE, {
        "apiVersion": "odradek.io/v1alpha1", "kind": "Topic", "metadata": {"name": orphan, "namespace": NS},
        "spec": {"clusterRef": "elsewhere"}})
    assert status in (200, 201)
    body = await env.reason(orphan, "ClusterNotFound")
    assert condition(body, "Reconciling")["status"] == "True", "kstatus: still in progress, not failed"
    assert not body["metadata"].get("finalizers")
    await env.patch(bad, {"spec": {"config": {"retention.ms": 1000, "no.such.key": None}}})
    await env.ready(bad)
    assert await env.kafka.overrides(bad) == {"retention.ms": "1000"}


async def test_the_older_of_two_resources_keeps_the_topic_and_the_newer_takes_over_after_it(env):
    shared = unique("shared")
    await env.create_cluster()
    env.start_operator()
    await env.apply("first", {"topicName": shared, "partitions": 2})
    await env.ready("first")
    await asyncio.sleep(1.0)  # creationTimestamp has a one-second resolution
    await env.apply("second", {"topicName": shared, "partitions": 4})
    body = await env.reason("second", "ResourceConflict")
    assert "'first'" in condition(body, "Ready")["message"] and condition(body, "Stalled")["status"] == "True"
    assert not body["metadata"].get("finalizers")
    await env.kafka.wait_topic(shared, {"partitions": 2, "replicas": 1}, timeout=15)  # the newer one changed nothing

    await env.delete("first")  # Delete policy: the topic goes, then the newer resource creates its own
    await env.gone("first")
    await env.ready("second")
    await env.kafka.wait_topic(shared, {"partitions": 4, "replicas": 1}, timeout=15)


async def test_delete_removes_the_topic_unless_retained(env):
    doomed, kept = unique("doomed"), unique("kept")
    await env.create_cluster()
    env.start_operator()
    await env.apply(doomed, {})
    await env.apply(kept, {"deletionPolicy": "Retain"})
    await env.ready(doomed)
    await env.ready(kept)
    await env.delete(doomed)
    await env.delete(kept)
    await env.gone(doomed)
    await env.gone(kept)
    await env.kafka.wait_gone(doomed)
    await env.kafka.wait_topic(kept, {"partitions": 1, "replicas": 1}, timeout=15)


async def test_unmanaged_annotation_stops_managing_without_deleting(env):
    name = unique()
    await env.create_cluster()
    env.start_operator()
    witness = unique("witness")  # a managed Topic: its resync passes show that resyncs happened
    await env.apply(witness, {"partitions": 1})
    await env.apply(name, {"partitions": 1})
    await env.ready(name)
    await env.ready(witness)
    await env.patch(name, {"metadata": {"annotations": {MANAGED_ANNOTATION: "false"}}})
    body = await env.reason(name, "Unmanaged")
    assert not body["metadata"].get("finalizers")
    assert {c["type"]: c["status"] for c in body["status"]["conditions"]} == {
        "Ready": "False", "Reconciling": "False", "Stalled": "False"}
    await env.kafka.delete(name)  # not recreated while unmanaged
    await env.kafka.wait_gone(name)
    await env.resync_passes(3)
    assert await env.kafka.topic(name) is None
    await env.kafka.create(name, 1)
    await env.delete(name)
    await env.gone(name)
    await env.resync_passes(2)
    await env.kafka.wait_topic(name, {"partitions": 1, "replicas": 1}, timeout=15)  # deleting the resource kept the topic


async def test_an_existing_topic_is_adopted_and_made_to_match(env):
    name = unique("existing")
    await env.kafka.create(name, 2, config={"retention.ms": "120000", "segment.bytes": "1048576"})
    await env.create_cluster()
    env.start_operator()
    await env.apply(name, {"partitions": 3, "config": {"retention.ms": 120000}})
    body = await env.ready(name)
    # Issue 28: adoption destroys nothing: an override the spec does not name is kept and reported.
    kept = {"retention.ms": "120000", "segment.bytes": "1048576"}
    assert (body["status"]["partitions"], body["status"]["config"]) == (3, kept)
    assert body["status"]["keptConfig"] == ["segment.bytes"]
    assert "segment.bytes" in condition(body, "Ready")["message"]
    assert await env.kafka.overrides(name) == kept, "adoption removed an override"
    await env.kafka.wait_topic(name, {"partitions": 3, "replicas": 1}, timeout=15)
    # Named in the spec, it is managed: changed, then removed when the spec drops it.
    await env.patch(name, {"spec": {"config": {"segment.bytes": 2097152}}})
    body = await env.ready(name)
    assert body["status"]["keptConfig"] == [] and body["status"]["config"]["segment.bytes"] == "2097152"
    await env.patch(name, {"spec": {"config": {"segment.bytes": None}}})
    await env.ready(name)
    assert await env.kafka.overrides(name) == {"retention.ms": "120000"}, "a managed override left the spec"


async def test_cluster_gone_during_delete_releases_the_finalizer(env):
    name = unique()
    await env.create_cluster()
    env.start_operator()
    await env.apply(name, {})
    await env.ready(name)
    status, _ = await env.api.delete_cluster(CLUSTER)
    assert status == 200
    await wait_for(lambda: env.server.live(KC, NS, CLUSTER) is None, 30, "the KafkaCluster gone")
    # A KafkaCluster has no finalizer: it is gone before the operator saw it go; wait until it has.
    await env.reason(name, "ClusterNotFound", generation=1)
    await env.delete(name)
    await env.gone(name)
    await env.kafka.wait_topic(name, {"partitions": 1, "replicas": 1}, timeout=15)  # nothing could be asked to delete it


async def test_operator_restarted_between_steps(env):
    a, b = unique("a"), unique("b")
    await env.create_cluster()
    env.start_operator()
    await env.apply(a, {"config": {"retention.ms": 1000}})
    await env.ready(a)
    await env.stop_operator()

    await env.apply(b, {"partitions": 2})  # created while no operator runs
    await env.delete(a)  # and deleted: the finalizer holds it for the next operator
    env.start_operator()
    await env.ready(b)
    await env.gone(a)
    await env.kafka.wait_gone(a)
    await env.kafka.wait_topic(b, {"partitions": 2, "replicas": 1}, timeout=15)
    await env.stop_operator()

    mark = env.mark()  # an upgrade: a new process, nothing changed
    env.start_operator()
    await env.resync_passes(3)  # the first look and two whole resyncs
    assert env.topic_writes(mark) == [], "a restarted operator writes nothing for a Ready topic"

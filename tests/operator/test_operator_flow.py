"""The operator process (kopf, in a thread) against an emulated API server: what it writes.

Pods come from a stand-in StatefulSet controller/kubelet (operator_harness.Kubelet); the cluster's
Metadata answer is scripted (ScriptedView), so the roll's health gate is under the test's control.
"""

import asyncio

import kmock
import pytest
import pytest_asyncio
from integration.metrics_scrape import scrape, value
from operator_harness import (
    KC,
    NS,
    PODS,
    STS,
    Api,
    Kubelet,
    OperatorThread,
    ScriptedView,
    changes,
    condition,
    new_server,
    object_path,
    put_node,
    resync_rounds,
    wait_for,
    writes,
)

from odradek.dev.zookeeper import free_port
from odradek.operator import builders
from odradek.operator.models import parse_spec
from odradek.operator.rolling import PartitionView

pytestmark = [pytest.mark.timeout(90), pytest.mark.asyncio]

SPEC = {"zookeeper": {"connect": "zk-0.zk:2181/odradek"}}
OWNED = {"configmaps", "services", "statefulsets", "deployments", "poddisruptionbudgets"}


def holding(counts):
    """Partitions of replication factor 1: `counts[b]` of them on broker b."""
    return tuple(PartitionView(f"t{b}", i, (b,), (b,)) for b, n in counts.items() for i in range(n))


def status_writes(server) -> int:
    return sum(1 for r in list(server) if r.subresource == "status" and r.action is not None
               and r.action.name == "UPDATE")


class Env:
    def __init__(self, server, url):
        self.server, self.url = server, url
        self.view = ScriptedView()
        self.kubelet = Kubelet(server, self.view)
        self.api = Api(url)
        self.operator: OperatorThread | None = None

    def start_operator(self):
        self.operator = OperatorThread(self.url, self.view)

    async def stop_operator(self):
        await self.operator.stop()

    def cluster(self):
        return self.server.live(KC, NS, "demo")

    async def ready(self, timeout=30.0):
        await wait_for(lambda: condition(self.cluster(), "Ready").get("status") == "True", timeout, "Ready=True")

    def pod_deletes(self, since=0):
        return [w for w in writes(self.server, since) if w[:2] == ("delete", "pods")]


@pytest_asyncio.fixture
async def env():
    server = new_server()
    async with server, kmock.Server(server) as http:
        e = Env(server, str(http.url))
        e.kubelet.start()
        try:
            yield e
        finally:
            if e.operator is not None and e.operator.thread.is_alive():
                await e.stop_operator()
            await e.kubelet.stop()
            await e.api.close()


async def test_create_owned_objects_then_ready(env):
    env.start_operator()
    created = await env.api.create_cluster(SPEC)
    uid = created["metadata"]["uid"]
    await wait_for(lambda: condition(env.cluster(), "Progressing").get("status") == "True", 20, "Progressing")
    assert condition(env.cluster(), "Ready")["status"] == "False"
    await env.ready()

    posted = [w for w in changes(env.server) if w[0] == "create" and w[1] in OWNED]
    expected = builders.desired_objects(env.cluster(), parse_spec(SPEC))
    assert sorted(p[2] for p in posted) == sorted(o["metadata"]["name"] for o in expected), "each object created once"
    for obj in expected:
        res = {"ConfigMap": "v1/configmaps", "Service": "v1/services", "StatefulSet": STS,
               "Deployment": "apps/v1/deployments", "PodDisruptionBudget": "policy/v1/poddisruptionbudgets"}
        live = env.server.live(res[obj["kind"]], NS, obj["metadata"]["name"])
        assert live["metadata"]["ownerReferences"] == [{
            "apiVersion": "odradek.io/v1alpha1", "kind": "KafkaCluster", "name": "demo", "uid": uid,
            "controller": True, "blockOwnerDeletion": True}]
    status = env.cluster()["status"]
    assert status["observedGeneration"] == 1
    assert status["brokers"] == {"desired": 3, "ready": 3, "ids": [0, 1, 2]}
    assert status["bootstrapServers"] == "demo-bootstrap.kafka.svc:9092"
    assert condition(env.cluster(), "Progressing")["status"] == "False"
    assert condition(env.cluster(), "Degraded")["status"] == "False"
    assert env.pod_deletes() == []


async def test_config_change_rolls_one_pod_at_a_time_only_while_healthy(env):
    env.start_operator()
    await env.api.create_cluster(SPEC)
    await env.ready()
    old_hash = env.server.live(STS, NS, "demo-broker")["spec"]["template"]["metadata"]["annotations"][builders.CONFIG_HASH]

    # The cluster is not healthy: each broker is one of two in-sync replicas of a partition whose
    # min.insync.replicas is 2, so no restart.
    env.view.set(default_min_insync=2, partitions=(PartitionView("orders", 0, (0, 1, 2), (0, 1)),
                                                   PartitionView("orders", 1, (0, 1, 2), (1, 2))))
    mark = len(list(env.server))
    await env.api.patch_spec({"brokers": {"config": {"num.partitions": 6}}})
    sts = await wait_for(lambda: (s := env.server.live(STS, NS, "demo-broker"))["spec"]["template"]["metadata"]
                         ["annotations"][builders.CONFIG_HASH] != old_hash and s, 20, "new template hash")
    new_hash = sts["spec"]["template"]["metadata"]["annotations"][builders.CONFIG_HASH]
    await env.view.passes(4)
    assert env.pod_deletes(mark) == [], "no restart while partitions are under-replicated"
    progressing = condition(env.cluster(), "Progressing")
    assert progressing["status"] == "True" and progressing["reason"] == "RollingUpdate"
    assert "under-replicated" in progressing["message"] and progressing["observedGeneration"] == 2

    env.view.set(partitions=())
    await wait_for(lambda: all(
        (env.server.live(PODS, NS, f"demo-broker-{i}") or {}).get("metadata", {}).get("annotations", {})
        .get(builders.CONFIG_HASH) == new_hash for i in range(3)), 30, "every pod on the new config")
    await env.ready()
    assert [w[2] for w in env.pod_deletes(mark)] == ["demo-broker-0", "demo-broker-1", "demo-broker-2"]
    assert env.kubelet.max_down == 1, "never two brokers down at once"


async def test_a_broker_stuck_on_a_broken_config_is_restarted_once_the_spec_is_fixed(env):
    env.start_operator()
    await env.api.create_cluster(SPEC)
    await env.ready()

    def template_hash():
        return env.server.live(STS, NS, "demo-broker")["spec"]["template"]["metadata"]["annotations"][builders.CONFIG_HASH]

    def pod_hash(i):
        return ((env.server.live(PODS, NS, f"demo-broker-{i}") or {}).get("metadata", {})
                .get("annotations", {}).get(builders.CONFIG_HASH))

    old = template_hash()
    mark = len(list(env.server))
    await env.api.patch_spec({"brokers": {"config": {"num.io.threads": 7}}})  # the kubelet's broken hash
    broken = await wait_for(lambda: (h := template_hash()) != old and h, 20, "the broken template")
    env.kubelet.broken.add(broken)
    await wait_for(lambda: pod_hash(0) == broken, 20, "broker 0 restarted into the broken config")
    await env.view.passes(4)
    assert [w[2] for w in env.pod_deletes(mark)] == ["demo-broker-0"], "the roll stops at the broken broker"

    await env.api.patch_spec({"brokers": {"config": {"num.io.threads": 8}}})
    fixed = await wait_for(lambda: (h := template_hash()) not in (old, broken) and h, 20, "the fixed template")
    await wait_for(lambda: all(pod_hash(i) == fixed for i in range(3)), 30, "every pod on the fixed config")
    await env.ready()
    assert [w[2] for w in env.pod_deletes(mark)] == [
        "demo-broker-0", "demo-broker-0", "demo-broker-1", "demo-broker-2"], "the stuck broker went first"
    assert env.kubelet.max_down == 1, "never two brokers down at once"


async def test_replica_changes_restart_nothing_and_scale_down_is_refused_while_holding_replicas(env):
    env.start_operator()
    await env.api.create_cluster(SPEC)
    await env.ready()
    mark = len(list(env.server))

    await env.api.patch_spec({"brokers": {"replicas": 4}})
    await wait_for(lambda: env.server.live(STS, NS, "demo-broker")["spec"]["replicas"] == 4, 20, "4 replicas")
    await wait_for(lambda: env.cluster()["status"]["brokers"]["ready"] == 4, 20, "4 brokers ready")
    await env.ready()

    env.view.set(partitions=holding({0: 3, 1: 3, 2: 3, 3: 1}))
    await env.api.patch_spec({"brokers": {"replicas": 3}})
    await wait_for(lambda: condition(env.cluster(), "Degraded").get("reason") == "ScaleDownRefused", 20, "refusal")
    assert "[3]" in condition(env.cluster(), "Degraded")["message"]
    assert env.server.live(STS, NS, "demo-broker")["spec"]["replicas"] == 4

    env.view.set(partitions=holding({0: 3, 1: 3, 2: 4}))  # partitions moved off broker 3
    await wait_for(lambda: env.server.live(STS, NS, "demo-broker")["spec"]["replicas"] == 3, 20, "3 replicas")
    await env.ready()
    assert condition(env.cluster(), "Degraded")["status"] == "False"
    assert env.pod_deletes(mark) == [], "a count change restarts no broker"


async def test_invalid_spec_is_a_condition_not_a_crash(env):
    env.start_operator()
    await env.api.create_cluster({**SPEC, "brokers": {"config": {"broker.id": 7}}})
    await wait_for(lambda: condition(env.cluster(), "Ready").get("reason") == "InvalidSpec", 20, "InvalidSpec")
    ready = condition(env.cluster(), "Ready")
    assert ready["status"] == "False" and "broker.id" in ready["message"]
    # Counted once every pass that began before the status was seen is over: a resync round
    # that listed the cluster before the create event's pass wrote it writes it once more
    # (rounds run one after another, so the next round's list means the previous one is done).
    await resync_rounds(env.server, 1)
    invalid_status_writes = status_writes(env.server)
    await resync_rounds(env.server, 6)  # five whole passes of the resync timer, at least
    assert [w for w in writes(env.server) if w[1] in OWNED] == [], "nothing applied from an invalid spec"
    again = status_writes(env.server)
    assert again == invalid_status_writes, "an unchanged invalid spec writes no new status"

    await env.api.patch_spec({"brokers": {"config": {"broker.id": None, "num.partitions": 3}}})
    await env.ready()
    assert env.operator.thread.is_alive()


async def test_delete_is_immediate_even_without_the_operator(env):
    env.start_operator()
    await env.api.create_cluster(SPEC)
    await env.ready()
    await env.view.passes(3)
    assert not env.cluster()["metadata"].get("finalizers"), "no finalizer holds the resource"
    # `helm uninstall` removes the operator and the resource together: nothing may wait for it.
    await env.stop_operator()
    status, _ = await env.api.delete_cluster()
    assert status == 200
    assert env.cluster() is None, "deleted at once"
    for res, name in ((STS, "demo-broker"), ("v1/services", "demo-bootstrap"), ("apps/v1/deployments", "demo-controller")):
        assert env.server.live(res, NS, name) is None


async def test_the_finalizer_an_older_operator_added_is_removed(env):
    status, body = await env.api.call("POST", f"/apis/odradek.io/v1alpha1/namespaces/{NS}/kafkaclusters", {
        "apiVersion": "odradek.io/v1alpha1", "kind": "KafkaCluster",
        "metadata": {"name": "demo", "namespace": NS, "finalizers": ["kopf.zalando.org/KopfFinalizerMarker"]},
        "spec": SPEC})
    assert status in (200, 201), body
    env.start_operator()
    await wait_for(lambda: not env.cluster()["metadata"].get("finalizers"), 20, "the old finalizer removed")
    await env.ready()
    status, _ = await env.api.delete_cluster()
    assert status == 200 and env.cluster() is None


async def test_restart_mid_reconcile_and_upgrade_write_nothing_twice(env):
    created = await env.api.create_cluster(SPEC)
    # A previous operator died after creating the first objects of its pass.
    partial = builders.desired_objects(created, parse_spec(SPEC))[:2]
    for obj in partial:
        status, body = await env.api.call("POST", object_path(obj["kind"], NS), obj)
        assert status in (200, 201), body
    mark = len(list(env.server))
    env.start_operator()
    await env.ready()
    creates = [w for w in changes(env.server, mark) if w[0] == "create"]
    already = {(object_path(o["kind"], NS).rsplit("/", 1)[1], o["metadata"]["name"]) for o in partial}
    assert {w[1:] for w in creates}.isdisjoint(already), "what the previous run created is not created again"
    assert len(creates) == len({w[1:] for w in creates}), "no object created twice"
    await env.stop_operator()

    # An operator upgrade: a new process, same spec, same desired objects.
    mark = len(list(env.server))
    env.start_operator()
    await env.view.passes(3)
    assert [w for w in changes(env.server, mark) if w[1] in OWNED or w[1] == "pods"] == []
    assert env.pod_deletes(mark) == []


async def test_ready_waits_for_the_managed_ensemble_and_a_controller(env):
    env.kubelet.ready_zookeeper, env.kubelet.ready_controllers = 2, 0
    env.start_operator()
    await env.api.create_cluster({})  # operator-managed ZooKeeper, 3 members
    await wait_for(lambda: condition(env.cluster(), "Ready").get("reason") == "ZooKeeperNotReady", 20,
                   "ZooKeeperNotReady")
    await wait_for(lambda: env.cluster()["status"]["brokers"]["ready"] == 3, 20, "brokers ready")
    assert condition(env.cluster(), "Ready")["status"] == "False"
    assert "2/3 ZooKeeper pods ready" in condition(env.cluster(), "Ready")["message"]

    env.kubelet.ready_zookeeper = None
    await wait_for(lambda: condition(env.cluster(), "Ready").get("reason") == "ControllerNotReady", 20,
                   "ControllerNotReady")
    assert condition(env.cluster(), "Ready")["status"] == "False"

    env.kubelet.ready_controllers = 1  # one active controller, the standby not (yet) ready
    await env.ready()
    status = env.cluster()["status"]
    assert status["controllers"] == {"desired": 2, "ready": 1}
    assert status["zookeeper"] == {"desired": 3, "ready": 3}


async def test_keys_no_longer_rendered_are_removed_and_a_restart_patches_nothing(env):
    metrics = "prometheus.io/scrape"

    def template_annotations():
        return env.server.live(STS, NS, "demo-broker")["spec"]["template"]["metadata"]["annotations"]

    env.start_operator()
    await env.api.create_cluster({**SPEC, "metrics": {"enabled": True}})
    await env.ready()
    assert template_annotations()[metrics] == "true"
    mark = len(list(env.server))

    await env.api.patch_spec({"metrics": {"enabled": False}})
    await wait_for(lambda: metrics not in template_annotations(), 20, "the metrics annotation removed")
    assert builders.CONFIG_HASH in template_annotations(), "only the dropped key is removed"
    assert env.pod_deletes(mark) == [], "metrics are not in the config hash: no broker restarts"
    await env.view.passes(2)
    await env.stop_operator()

    mark = len(list(env.server))  # an operator upgrade: same spec, same desired objects
    env.start_operator()
    await env.view.passes(3)
    assert [w for w in changes(env.server, mark) if w[1] in OWNED or w[1] == "pods"] == []


async def test_zookeeper_scaling_is_refused_with_a_condition(env):
    env.start_operator()
    await env.api.create_cluster({})  # a managed ensemble of 3
    await env.ready()
    servers = env.server.live("v1/configmaps", NS, "demo-zookeeper-members")["data"]
    await env.api.patch_spec({"zookeeper": {"replicas": 1}})
    await wait_for(lambda: condition(env.cluster(), "Stalled").get("reason") == "ZooKeeperScalingRefused", 20,
                   "the refusal")
    assert condition(env.cluster(), "Stalled")["observedGeneration"] == 2
    assert condition(env.cluster(), "Degraded")["status"] == "True"
    assert env.server.live(STS, NS, "demo-zookeeper")["spec"]["replicas"] == 3
    assert env.server.live("v1/configmaps", NS, "demo-zookeeper-members")["data"] == servers
    await env.api.patch_spec({"zookeeper": {"replicas": 3}})
    await wait_for(lambda: condition(env.cluster(), "Stalled").get("status") == "False", 20, "no refusal")
    await env.ready()


async def test_switching_to_an_existing_ensemble_is_refused_until_annotated(env):
    env.start_operator()
    await env.api.create_cluster({})  # metadata in the managed ensemble
    await env.ready()
    managed = builders.zookeeper_connect(env.cluster(), parse_spec({}))
    mark = len(list(env.server))
    await env.api.patch_spec({"zookeeper": {"connect": "external:2181/odradek"}})
    await wait_for(lambda: condition(env.cluster(), "Stalled").get("reason") == "ZooKeeperSwitchRefused", 20,
                   "the refusal")
    assert condition(env.cluster(), "Stalled")["observedGeneration"] == 2
    assert "managed ensemble" in condition(env.cluster(), "Stalled")["message"]
    await env.view.passes(2)
    assert [w for w in writes(env.server, mark) if w[0] == "delete"] == [], "nothing deleted"
    assert env.server.live(STS, NS, "demo-zookeeper") is not None
    props = env.server.live("v1/configmaps", NS, "demo-broker")["data"]["server.properties"]
    assert f"zookeeper.connect={managed}\n" in props and env.pod_deletes(mark) == []

    status, _ = await env.api.call(
        "PATCH", f"/apis/odradek.io/v1alpha1/namespaces/{NS}/kafkaclusters/demo",
        {"metadata": {"annotations": {"odradek.io/zookeeper-migrated-to": "external:2181/odradek"}}},
        "application/merge-patch+json")
    assert status == 200
    await wait_for(lambda: env.server.live(STS, NS, "demo-zookeeper") is None, 20, "the managed ensemble removed")
    for res, name in (("v1/configmaps", "demo-zookeeper"), ("v1/services", "demo-zookeeper"),
                      ("v1/services", "demo-zookeeper-headless"), ("policy/v1/poddisruptionbudgets", "demo-zookeeper")):
        assert env.server.live(res, NS, name) is None, name
    await wait_for(lambda: "zookeeper.connect=external:2181/odradek\n" in
                   env.server.live("v1/configmaps", NS, "demo-broker")["data"]["server.properties"], 20,
                   "the brokers on the existing ensemble")
    await wait_for(lambda: condition(env.cluster(), "Stalled").get("status") == "False", 20, "no refusal")
    await env.ready()


async def test_a_larger_volume_resizes_the_claims_and_leaves_the_template(env):
    pvcs = "v1/persistentvolumeclaims"
    classes = "storage.k8s.io/v1/storageclasses"
    env.server.put_raw(classes, None, {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
                                       "metadata": {"name": "standard"}, "allowVolumeExpansion": True})
    env.server.put_raw(classes, None, {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
                                       "metadata": {"name": "fixed"}})
    env.start_operator()
    await env.api.create_cluster(SPEC)
    await env.ready()
    for i in range(3):  # what the StatefulSet controller creates (the default class filled in)
        env.server.put_raw(pvcs, NS, {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                                      "metadata": {"name": f"data-demo-broker-{i}"},
                                      "spec": {"storageClassName": "standard",
                                               "resources": {"requests": {"storage": "10Gi"}}}})
    template = env.server.live(STS, NS, "demo-broker")["spec"]["volumeClaimTemplates"]
    mark = len(list(env.server))

    await env.api.patch_spec({"brokers": {"storage": {"size": "20Gi"}}})
    await wait_for(lambda: all(env.server.live(pvcs, NS, f"data-demo-broker-{i}")["spec"]["resources"]["requests"]
                               ["storage"] == "20Gi" for i in range(3)), 20, "every claim resized")
    await env.view.passes(2)
    assert env.server.live(STS, NS, "demo-broker")["spec"]["volumeClaimTemplates"] == template
    assert condition(env.cluster(), "Stalled")["status"] == "False"
    assert env.pod_deletes(mark) == [], "a resize restarts no broker"

    await env.api.patch_spec({"brokers": {"storage": {"size": "5Gi"}}})
    await wait_for(lambda: condition(env.cluster(), "Stalled").get("reason") == "StorageShrinkRefused", 20,
                   "the shrink refused")
    for i in range(3):  # the class no longer allows expansion
        claim = env.server.live(pvcs, NS, f"data-demo-broker-{i}")
        env.server.put_raw(pvcs, NS, {**claim, "spec": {**claim["spec"], "storageClassName": "fixed"}})
    await env.api.patch_spec({"brokers": {"storage": {"size": "40Gi"}}})
    await wait_for(lambda: condition(env.cluster(), "Stalled").get("reason") == "StorageNotExpandable", 20,
                   "the growth refused")
    assert env.server.live(pvcs, NS, "data-demo-broker-0")["spec"]["resources"]["requests"]["storage"] == "20Gi"


async def test_an_api_error_reaches_the_status(env):
    env.server.forbidden_writes.add("poddisruptionbudgets")
    port = free_port()
    env.operator = OperatorThread(env.url, env.view, metrics_port=port, metrics_host="127.0.0.1")
    await env.api.create_cluster(SPEC)
    await wait_for(lambda: condition(env.cluster(), "Stalled").get("reason") == "KubernetesApiError", 20,
                   "the error in the status")
    assert env.cluster()["status"]["observedGeneration"] == 1
    assert condition(env.cluster(), "Ready")["status"] == "False"
    assert "403" in condition(env.cluster(), "Stalled")["message"]
    demo = {"kind": "KafkaCluster", "namespace": NS, "name": "demo"}
    samples = await asyncio.to_thread(scrape, f"http://127.0.0.1:{port}/metrics")
    assert value(samples, "odradek_operator_reconcile_errors_total", **demo) >= 1
    env.server.forbidden_writes.clear()
    await env.ready()
    samples = await asyncio.to_thread(scrape, f"http://127.0.0.1:{port}/metrics")
    assert value(samples, "odradek_operator_reconcile_duration_seconds_count", **demo) >= 2


async def test_a_transient_api_error_is_reconciling_not_stalled(env):
    """kstatus reads Stalled=True as Failed (Flux and `helm --wait` give up): a 503 is retried."""
    env.server.unavailable_writes.add("poddisruptionbudgets")
    env.start_operator()
    await env.api.create_cluster(SPEC)
    await wait_for(lambda: condition(env.cluster(), "Reconciling").get("reason") == "KubernetesApiError", 20,
                   "the error in the status")
    assert condition(env.cluster(), "Reconciling")["status"] == "True"
    assert "503" in condition(env.cluster(), "Reconciling")["message"]
    assert "retrying" in condition(env.cluster(), "Reconciling")["message"]
    assert condition(env.cluster(), "Stalled")["status"] == "False"
    env.server.unavailable_writes.clear()
    await env.ready()
    assert condition(env.cluster(), "Stalled")["status"] == "False"


async def test_an_operator_upgrade_rolls_clusters_that_name_no_image(env, monkeypatch):
    monkeypatch.setenv("ODRADEK_IMAGE", "registry.example/odradek:1.0.0")
    env.start_operator()
    await env.api.create_cluster(SPEC)
    await env.ready()

    def images():
        return {env.server.live(res, NS, name)["spec"]["template"]["spec"]["containers"][0]["image"]
                for res, name in ((STS, "demo-broker"), ("apps/v1/deployments", "demo-controller"))}

    assert images() == {"registry.example/odradek:1.0.0"}
    assert "image" not in env.cluster()["spec"], "nothing frozen into the resource"
    await env.stop_operator()
    mark = len(list(env.server))
    monkeypatch.setenv("ODRADEK_IMAGE", "registry.example/odradek:1.1.0")  # the upgraded operator
    env.start_operator()
    await wait_for(lambda: images() == {"registry.example/odradek:1.1.0"}, 20, "the new image in the template")
    await wait_for(lambda: len(env.pod_deletes(mark)) == 3, 30, "every broker restarted")
    await env.ready()
    assert env.kubelet.max_down == 1


async def test_the_operator_brings_its_crds_up_to_date(env):
    from odradek.operator.crd import crd, topic_crd

    crds = "apiextensions.k8s.io/v1/customresourcedefinitions"
    stale = crd()
    stale["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"].pop("metrics")
    env.server.put_raw(crds, None, stale)  # what an older chart installed
    env.operator = OperatorThread(env.url, env.view, install_crds=True)
    await env.api.create_cluster(SPEC)
    await env.ready()
    for doc in (crd(), topic_crd()):
        live = env.server.live(crds, None, doc["metadata"]["name"])
        assert live is not None and live["spec"] == doc["spec"], doc["metadata"]["name"]
    await env.stop_operator()
    mark = len(list(env.server))
    env.operator = OperatorThread(env.url, env.view, install_crds=True)
    await env.view.passes(2)
    assert [w for w in changes(env.server, mark) if w[1] == "customresourcedefinitions"] == [], "up to date: no write"


async def test_brokers_get_their_nodes_rack_and_a_new_node_restarts_nothing(env):
    """brokers.rack: the operator lists the nodes and keeps each one's topology label in a
    ConfigMap the brokers read at start (broker.rack); a node joining later only updates it."""
    put_node(env.server, "node-a", {"topology.kubernetes.io/zone": "zone-a"})
    put_node(env.server, "node-b", {"topology.kubernetes.io/zone": "zone-b"})
    put_node(env.server, "node-x", {})
    env.start_operator()
    await env.api.create_cluster({**SPEC, "brokers": {"rack": {"topologyKey": "topology.kubernetes.io/zone"}}})
    await env.ready()

    def racks():
        return (env.server.live("v1/configmaps", NS, "demo-broker-racks") or {}).get("data")

    assert racks() == {"node-a": "zone-a", "node-b": "zone-b"}
    template = env.server.live(STS, NS, "demo-broker")["spec"]["template"]
    put_node(env.server, "node-c", {"topology.kubernetes.io/zone": "zone-c"})
    await wait_for(lambda: racks() == {"node-a": "zone-a", "node-b": "zone-b", "node-c": "zone-c"}, 20, "node-c")
    assert env.server.live(STS, NS, "demo-broker")["spec"]["template"] == template
    assert env.pod_deletes() == []

"""The chart's Argo CD health checks (Lua, run by Lua 5.1 as Argo CD's gopher-lua is) over the
statuses the operator writes, and the chart's README carrying the same scripts."""

from pathlib import Path

import lupa.lua51 as lua51
import pytest
import yaml

from odradek.operator import status as cluster_status
from odradek.operator.topic_reconciler import Cluster, LiveTopic, gate, outcome, plan, resource_from_body, status

CHART = Path(__file__).resolve().parents[2] / "helm" / "odradek"


def health(script: str, obj: dict) -> tuple[str, str]:
    runtime = lua51.LuaRuntime()
    runtime.globals().obj = runtime.table_from(obj, recursive=True)
    result = runtime.execute(script)
    return result["status"], result["message"]


def topic(spec=None, generation=1, annotations=None):
    meta = {"name": "orders", "namespace": "kafka", "generation": generation, "creationTimestamp": "t"}
    if annotations:
        meta["annotations"] = annotations
    return {"metadata": meta, "spec": {"clusterRef": "kafka", **(spec or {})}}


def with_status(body, o):
    return {**body, "status": status(o, at="t")}


SCRIPT = CHART / "health" / "odradek.lua"
"""One script for every kind: Argo CD is given it once per kind."""


@pytest.fixture(scope="module")
def topic_lua():
    return SCRIPT.read_text()


def test_topic_health(topic_lua):
    body = topic({"partitions": 3})
    r = resource_from_body(body)
    ready = outcome(r, "orders", LiveTopic(3, 1), plan(r.spec, "orders", LiveTopic(3, 1)), [])
    assert health(topic_lua, with_status(body, ready))[0] == "Healthy"
    fewer = outcome(r, "orders", LiveTopic(5, 1), plan(r.spec, "orders", LiveTopic(5, 1)), [])
    state, message = health(topic_lua, with_status(body, fewer))
    assert state == "Degraded" and message.startswith("PartitionDecreaseNotSupported:")
    waiting = gate(r, Cluster.MISSING, None).outcome
    assert health(topic_lua, with_status(body, waiting)) == (
        "Progressing", "ClusterNotFound: KafkaCluster 'kafka' does not exist in this namespace")
    unmanaged = topic(annotations={"odradek.io/managed": "false"})
    idle = gate(resource_from_body(unmanaged), Cluster.PRESENT, None).outcome
    assert health(topic_lua, with_status(unmanaged, idle))[0] == "Suspended"


def test_topic_health_waits_for_the_latest_generation_and_a_status(topic_lua):
    body = topic({"partitions": 3})
    r = resource_from_body(body)
    ready = with_status(body, outcome(r, "orders", LiveTopic(3, 1), plan(r.spec, "orders", LiveTopic(3, 1)), []))
    ready["metadata"]["generation"] = 2
    assert health(topic_lua, ready)[0] == "Progressing"
    assert health(topic_lua, topic())[0] == "Progressing"


def test_kafkacluster_health():
    script = SCRIPT.read_text()
    body = {"metadata": {"name": "kafka", "generation": 1}}
    ok = cluster_status.Observation(1, desired_brokers=3, ready_broker_ids=(0, 1, 2), running_brokers=3,
                                    desired_controllers=1, ready_controllers=1)
    assert health(script, {**body, "status": cluster_status.status(ok, at="t")})[0] == "Healthy"
    refused = cluster_status.Observation(1, desired_brokers=3, ready_broker_ids=(0, 1, 2, 3), running_brokers=4,
                                         desired_controllers=1, ready_controllers=1, refused="brokers [3] hold replicas")
    state, message = health(script, {**body, "status": cluster_status.status(refused, at="t")})
    assert state == "Degraded" and "ScaleDownRefused" in message
    rolling = cluster_status.Observation(1, desired_brokers=3, ready_broker_ids=(0, 1), running_brokers=3,
                                         desired_controllers=1, ready_controllers=1)
    assert health(script, {**body, "status": cluster_status.status(rolling, at="t")})[0] == "Progressing"


def test_kafkauser_health():
    from odradek.operator import user_reconciler as u

    script = SCRIPT.read_text()
    body = {"metadata": {"name": "app", "namespace": "kafka", "generation": 1},
            "spec": {"clusterRef": "kafka", "authentication": {"type": "scram-sha-512"}}}
    r = u.resource_from_body(body)
    live = u.LiveUser({u.SCRAM_MECHANISM: u.SCRAM_ITERATIONS})
    ready = u.outcome(r, "app", u.plan(r.spec, "app", live, "pw", True), [], "app")
    assert health(script, {**body, "status": u.status(ready, at="t")})[0] == "Healthy"
    failed = u.outcome(r, "app", u.Plan(()), [(u.AlterScram("app", "pw"), u.ActionResult("security_disabled"))], "app")
    state, message = health(script, {**body, "status": u.status(failed, at="t")})
    assert state == "Degraded" and message.startswith("SecurityDisabled:")
    waiting = u.gate(r, Cluster.MISSING).outcome
    assert health(script, {**body, "status": u.status(waiting, at="t")})[0] == "Progressing"


def test_readme_carries_the_script_for_every_kind():
    readme = (CHART / "README.md").read_text()
    section = readme[readme.index("## Argo CD health checks"):]
    start = section.index("```yaml\n") + len("```yaml\n")
    block = section[start:section.index("\n```", start)]
    data = yaml.safe_load(block)["data"]
    script = SCRIPT.read_text()
    for kind in ("KafkaCluster", "Topic", "KafkaUser"):
        assert data[f"resource.customizations.health.odradek.io_{kind}"] == script

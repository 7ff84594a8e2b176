"""`odradek operator --render FILE`: the objects the operator would apply, with no cluster."""

import subprocess
import sys

import pytest
import yaml
from op_validation import restricted_violations, validate

from odradek.operator import builders
from odradek.operator.models import parse_spec
from odradek.operator.render import PLACEHOLDER_UID

pytestmark = pytest.mark.integration  # runs `odradek operator --render` as a process


def run(*args, input=None):
    return subprocess.run([sys.executable, "-m", "odradek.cli", "operator", *args], input=input,
                          capture_output=True, text=True, timeout=60)


CLUSTER = """\
apiVersion: odradek.io/v1alpha1
kind: KafkaCluster
metadata: {name: orders, namespace: kafka}
spec:
  brokers: {replicas: 5, config: {num.partitions: 6}}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: unrelated}
"""


def test_render_prints_every_object_valid_and_restricted(tmp_path):
    path = tmp_path / "cluster.yaml"
    path.write_text(CLUSTER)
    done = run("--render", str(path))
    assert done.returncode == 0, done.stderr
    objects = list(yaml.safe_load_all(done.stdout))
    body = {"metadata": {"name": "orders", "namespace": "kafka", "uid": PLACEHOLDER_UID},
            "spec": {"brokers": {"replicas": 5, "config": {"num.partitions": 6}}}}
    expected = builders.desired_objects(body, parse_spec(body["spec"]))
    assert [(o["kind"], o["metadata"]["name"]) for o in objects] == [(o["kind"], o["metadata"]["name"]) for o in expected]
    for obj in objects:
        validate(obj)
        if obj["kind"] in ("StatefulSet", "Deployment"):
            assert restricted_violations(obj["spec"]["template"]["spec"]) == []
    sts = next(o for o in objects if o["kind"] == "StatefulSet" and o["metadata"]["name"] == "orders-broker")
    assert sts["spec"]["replicas"] == 5
    assert run("--render", "-", input=CLUSTER).stdout == done.stdout, "standard input works too"
    # Issue 28: probes are the process's own health endpoint (a hung event loop fails them), no
    # process started and no ZooKeeper session opened per probe.
    controller = next(o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == "orders-controller")
    for workload in (sts, controller):
        container = workload["spec"]["template"]["spec"]["containers"][0]
        for kind, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
            probe = container[kind]
            assert probe["httpGet"] == {"path": path, "port": builders.METRICS_PORT}, (workload["metadata"]["name"], kind)
            assert probe["timeoutSeconds"] >= 5 and probe["failureThreshold"] >= 3, "one slow answer is no failure"
    assert sts["spec"]["template"]["spec"]["containers"][0]["startupProbe"]["httpGet"]["path"] == "/healthz"
    # The ZooKeeper heap is at most 75 % of its memory limit, and its probes start no JVM.
    from odradek.operator.storage import parse_quantity

    zk_config = next(o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "orders-zookeeper")
    zk = next(o for o in objects if o["kind"] == "StatefulSet" and o["metadata"]["name"] == "orders-zookeeper")
    zk_container = zk["spec"]["template"]["spec"]["containers"][0]
    limit = parse_quantity(zk_container["resources"]["limits"]["memory"])
    assert int(zk_config["data"]["ZK_SERVER_HEAP"]) * 2**20 <= limit * 3 / 4
    assert "zkServer.sh" not in str(zk_container["readinessProbe"])


def test_render_refuses_an_invalid_spec_with_its_reason(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("kind: KafkaCluster\nmetadata: {name: bad}\nspec: {brokers: {config: {broker.id: 3}}}\n")
    done = run("--render", str(path))
    assert done.returncode == 2 and "broker.id" in done.stderr and done.stdout == ""
    assert run("--render", str(tmp_path / "missing.yaml")).returncode == 2

"""Desired objects: snapshot-tested, schema-validated, and checked for the properties that matter."""

import os
from pathlib import Path

import pytest
import yaml
from op_validation import restricted_violations, validate

from odradek.operator import builders
from odradek.operator.models import parse_spec

SNAPSHOTS = Path(__file__).parent / "snapshots"
UID = "0b5c3f9e-0000-4000-8000-000000000001"


def resource(spec: dict, name="demo", namespace="kafka") -> dict:
    return {"apiVersion": "odradek.io/v1alpha1", "kind": "KafkaCluster",
            "metadata": {"name": name, "namespace": namespace, "uid": UID, "generation": 1},
            "spec": spec}


CASES = {
    "default": {},
    "external-zookeeper": {
        "image": "registry.example/odradek:1.2.3",
        "brokers": {"replicas": 5, "storage": {"size": "50Gi", "storageClass": "fast", "deleteClaim": True},
                    "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"memory": "2Gi"}},
                    "config": {"num.partitions": 6, "auto.create.topics.enable": False},
                    "rack": {"topologyKey": "topology.kubernetes.io/zone"}},
        "controller": {"replicas": 3},
        "zookeeper": {"connect": "zk-0.zk:2181,zk-1.zk:2181/odradek"},
        "metrics": {"enabled": True},
    },
}


def render(case: str) -> str:
    body = resource(CASES[case])
    return yaml.safe_dump_all(builders.desired_objects(body, parse_spec(body["spec"])), sort_keys=True)


@pytest.mark.parametrize("case", sorted(CASES))
def test_snapshot(case):
    path = SNAPSHOTS / f"{case}.yaml"
    text = render(case)
    if os.environ.get("UPDATE_SNAPSHOTS"):
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
    assert path.read_text() == text, f"{path.name} changed: re-run with UPDATE_SNAPSHOTS=1 and review the diff"


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_object_validates_strictly(case):
    body = resource(CASES[case])
    objects = builders.desired_objects(body, parse_spec(body["spec"]))
    for obj in objects:
        validate(obj)
    validate(body)


def by_kind_name(objects):
    return {(o["kind"], o["metadata"]["name"]): o for o in objects}


def test_default_cluster_shape():
    body = resource({})
    objs = by_kind_name(builders.desired_objects(body, parse_spec({})))
    assert set(objs) == {
        ("ConfigMap", "demo-zookeeper"), ("ConfigMap", "demo-zookeeper-members"),
        ("Service", "demo-zookeeper-headless"), ("Service", "demo-zookeeper"),
        ("StatefulSet", "demo-zookeeper"), ("PodDisruptionBudget", "demo-zookeeper"),
        ("ConfigMap", "demo-controller"), ("Deployment", "demo-controller"), ("PodDisruptionBudget", "demo-controller"),
        ("ConfigMap", "demo-broker"), ("Service", "demo-broker-headless"), ("Service", "demo-bootstrap"),
        ("StatefulSet", "demo-broker"), ("PodDisruptionBudget", "demo-broker"),
    }
    brokers = objs[("StatefulSet", "demo-broker")]["spec"]
    assert brokers["replicas"] == 3 and brokers["updateStrategy"] == {"type": "OnDelete"}
    assert objs[("StatefulSet", "demo-zookeeper")]["spec"]["replicas"] == 3
    assert objs[("Deployment", "demo-controller")]["spec"]["replicas"] == 2
    assert objs[("PodDisruptionBudget", "demo-broker")]["spec"]["maxUnavailable"] == 1
    assert objs[("Service", "demo-broker-headless")]["spec"]["clusterIP"] == "None"
    for obj in objs.values():
        meta = obj["metadata"]
        assert meta["namespace"] == "kafka"
        assert meta["ownerReferences"] == [{"apiVersion": "odradek.io/v1alpha1", "kind": "KafkaCluster",
                                            "name": "demo", "uid": UID, "controller": True,
                                            "blockOwnerDeletion": True}]
        assert meta["labels"]["app.kubernetes.io/instance"] == "demo"
        assert meta["labels"]["app.kubernetes.io/managed-by"] == "odradek-operator"
    props = objs[("ConfigMap", "demo-broker")]["data"]["server.properties"]
    assert "zookeeper.connect=demo-zookeeper.kafka.svc:2181/odradek\n" in props
    assert "broker.id" not in props  # the ordinal, given per pod
    command = brokers["template"]["spec"]["containers"][0]["command"][-1]
    assert "--override broker.id=${POD_NAME##*-}" in command


def test_config_hash_changes_with_config_and_image_not_with_replicas():
    base = resource({})
    h = builders.broker_config_hash(base, parse_spec({}))
    assert h == builders.broker_config_hash(base, parse_spec({"brokers": {"replicas": 7}}))
    assert h != builders.broker_config_hash(base, parse_spec({"brokers": {"config": {"num.partitions": 2}}}))
    assert h != builders.broker_config_hash(base, parse_spec({"image": "odradek:next"}))


def test_external_zookeeper_creates_no_ensemble():
    body = resource(CASES["external-zookeeper"])
    objs = builders.desired_objects(body, parse_spec(body["spec"]))
    assert not [o for o in objs if o["metadata"]["labels"]["app.kubernetes.io/component"] == "zookeeper"]
    cm = by_kind_name(objs)[("ConfigMap", "demo-broker")]["data"]["server.properties"]
    assert "zookeeper.connect=zk-0.zk:2181,zk-1.zk:2181/odradek\n" in cm
    assert "auto.create.topics.enable=false\n" in cm


def test_broker_count_override_keeps_brokers_that_hold_data():
    body = resource({"brokers": {"replicas": 2}})
    sts = by_kind_name(builders.desired_objects(body, parse_spec(body["spec"]), broker_replicas=4))
    assert sts[("StatefulSet", "demo-broker")]["spec"]["replicas"] == 4


def test_validation_catches_a_misspelt_field():
    body = resource({})
    sts = by_kind_name(builders.desired_objects(body, parse_spec({})))[("StatefulSet", "demo-broker")]
    sts["spec"]["updateStrategy"]["tpye"] = "OnDelete"
    with pytest.raises(Exception, match="tpye"):
        validate(sts)


def _aliases(model) -> set[str]:
    return {f.alias for f in model.model_fields.values() if f.alias}


def test_rendered_config_keys_are_real_config_keys():
    """Every key the builders write (properties and --override) is one the processes read."""
    from odradek.common.config import BrokerConfig, ControllerConfig

    body = resource({})
    spec = parse_spec({})
    assert set(builders.broker_properties(body, spec)) | {"broker.id", "advertised.listeners"} <= _aliases(BrokerConfig)
    assert set(builders.controller_properties(body, spec)) | {"controller.id", "listeners"} <= _aliases(ControllerConfig)
    for obj in builders.controller_objects(body, spec):
        if obj["kind"] == "Deployment":
            command = obj["spec"]["template"]["spec"]["containers"][0]["command"][-1]
            assert f"--override listeners=PLAINTEXT://${{POD_IP}}:{builders.CONTROLLER_PORT}" in command


def test_controller_port_is_the_controller_default_listener():
    from odradek.common.config import ControllerConfig, parse_listeners

    default = ControllerConfig.model_fields["listeners"].default
    assert parse_listeners(default)[0][2] == builders.CONTROLLER_PORT


def test_zookeeper_keeps_its_transaction_log_on_the_volume_and_purges_it():
    body = resource({})
    objs = by_kind_name(builders.desired_objects(body, parse_spec({})))
    env = objs[("ConfigMap", "demo-zookeeper")]["data"]
    sts = objs[("StatefulSet", "demo-zookeeper")]
    mounts = {m["mountPath"] for m in sts["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
              if m["name"] == sts["spec"]["volumeClaimTemplates"][0]["metadata"]["name"]}
    for key in ("ZOO_DATA_DIR", "ZOO_DATA_LOG_DIR"):
        assert any(env[key] == m or env[key].startswith(m + "/") for m in mounts), f"{key} is not on the volume"
    assert int(env["ZOO_AUTOPURGE_PURGEINTERVAL"]) > 0 and int(env["ZOO_AUTOPURGE_SNAPRETAINCOUNT"]) >= 3
    # a change of the environment reaches running members: it is in the pod template's hash
    changed = builders.desired_objects(body, parse_spec({"zookeeper": {"image": "zookeeper:3.9"}}))
    assert (by_kind_name(changed)[("StatefulSet", "demo-zookeeper")]["spec"]["template"]["metadata"]["annotations"]
            != sts["spec"]["template"]["metadata"]["annotations"])


def test_liveness_never_depends_on_zookeeper_and_brokers_get_time_to_recover():
    body = resource({})
    objs = by_kind_name(builders.desired_objects(body, parse_spec({})))
    broker = objs[("StatefulSet", "demo-broker")]["spec"]["template"]["spec"]["containers"][0]
    controller = objs[("Deployment", "demo-controller")]["spec"]["template"]["spec"]["containers"][0]
    startup = broker["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 1800, "30 minutes of log recovery"
    for container in (broker, controller):
        assert "exec" not in container["livenessProbe"], "a ZooKeeper outage would restart the pod"
        assert container["livenessProbe"]["httpGet"]["path"] == "/healthz", "answered by the event loop only"


def test_metrics_always_served_and_exposed_when_enabled():
    for enabled in (False, True):
        body = resource({"metrics": {"enabled": enabled}})
        objs = by_kind_name(builders.desired_objects(body, parse_spec(body["spec"])))
        props = objs[("ConfigMap", "demo-broker")]["data"]["server.properties"]
        assert f"metrics.port={builders.METRICS_PORT}\n" in props and "metrics.host=0.0.0.0\n" in props
        for key in (("StatefulSet", "demo-broker"), ("Deployment", "demo-controller")):
            template = objs[key]["spec"]["template"]
            ports = {p["name"]: p["containerPort"] for p in template["spec"]["containers"][0]["ports"]}
            annotations = template["metadata"]["annotations"]
            assert (ports.get("metrics") == builders.METRICS_PORT) is enabled
            assert (annotations.get("prometheus.io/port") == str(builders.METRICS_PORT)) is enabled
        # ZooKeeper's own Prometheus provider, always on, exposed the same way (issue 28)
        extra = objs[("ConfigMap", "demo-zookeeper")]["data"]["ZOO_CFG_EXTRA"].split()
        assert f"metricsProvider.className={builders.ZK_METRICS_PROVIDER}" in extra
        assert f"metricsProvider.httpPort={builders.ZK_METRICS_PORT}" in extra
        zk = objs[("StatefulSet", "demo-zookeeper")]["spec"]["template"]
        ports = {p["name"]: p["containerPort"] for p in zk["spec"]["containers"][0]["ports"]}
        assert (ports.get("metrics") == builders.ZK_METRICS_PORT) is enabled
        assert (zk["metadata"]["annotations"].get("prometheus.io/port") == str(builders.ZK_METRICS_PORT)) is enabled
    # exposing restarts nothing: the config hash does not move
    off, on = (builders.broker_config_hash(resource({}), parse_spec({"metrics": {"enabled": e}})) for e in (False, True))
    assert off == on



@pytest.mark.parametrize("case", sorted(CASES))
def test_every_pod_meets_pod_security_restricted(case):
    body = resource(CASES[case])
    for obj in builders.desired_objects(body, parse_spec(body["spec"])):
        if obj["kind"] in ("StatefulSet", "Deployment"):
            pod = obj["spec"]["template"]["spec"]
            assert restricted_violations(pod) == [], obj["metadata"]["name"]
            for c in pod["containers"]:
                assert {"requests", "limits"} <= set(c["resources"]), f"{c['name']} without requests and limits"


def test_pods_spread_over_nodes_and_take_scheduling_settings():
    body = resource({"brokers": {"pod": {"nodeSelector": {"disk": "ssd"}, "priorityClassName": "kafka",
                                         "tolerations": [{"key": "dedicated", "operator": "Equal",
                                                          "value": "kafka", "effect": "NoSchedule"}],
                                         "antiAffinity": "required"}}})
    objs = by_kind_name(builders.desired_objects(body, parse_spec(body["spec"])))
    broker = objs[("StatefulSet", "demo-broker")]["spec"]["template"]["spec"]
    assert broker["nodeSelector"] == {"disk": "ssd"} and broker["priorityClassName"] == "kafka"
    assert broker["tolerations"] == [{"key": "dedicated", "operator": "Equal", "value": "kafka", "effect": "NoSchedule"}]
    required = broker["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    assert required["topologyKey"] == "kubernetes.io/hostname"
    assert required["labelSelector"]["matchLabels"]["app.kubernetes.io/component"] == "broker"
    zk = objs[("StatefulSet", "demo-zookeeper")]["spec"]["template"]["spec"]
    assert "preferredDuringSchedulingIgnoredDuringExecution" in zk["affinity"]["podAntiAffinity"], "spread by default"
    assert broker["terminationGracePeriodSeconds"] >= 3 * (30 + 5) + 60
    validate(objs[("StatefulSet", "demo-broker")])


RACK = {"brokers": {"rack": {"topologyKey": "topology.kubernetes.io/zone"}}}


def test_rack_map_takes_each_nodes_topology_label():
    nodes = [{"metadata": {"name": "n2", "labels": {"topology.kubernetes.io/zone": "eu-1b"}}},
             {"metadata": {"name": "n1", "labels": {"topology.kubernetes.io/zone": "eu-1a", "other": "x"}}},
             {"metadata": {"name": "n3", "labels": {"other": "x"}}},  # unlabelled: its brokers do not start
             {"metadata": {"name": "n4"}}]
    assert builders.rack_map(nodes, "topology.kubernetes.io/zone") == {"n1": "eu-1a", "n2": "eu-1b"}


def test_a_rack_key_mounts_the_node_map_and_rolls_the_brokers_once():
    body = resource(RACK)
    objects = by_kind_name(builders.desired_objects(body, parse_spec(RACK), racks={"n1": "eu-1a"}))
    assert objects[("ConfigMap", "demo-broker-racks")]["data"] == {"n1": "eu-1a"}
    pod = objects[("StatefulSet", "demo-broker")]["spec"]["template"]["spec"]
    broker = pod["containers"][0]
    assert {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}} in broker["env"]
    assert {"name": "racks", "mountPath": builders.RACKS_DIR} in broker["volumeMounts"]
    assert {"name": "racks", "configMap": {"name": "demo-broker-racks"}} in pod["volumes"]
    assert '--override "broker.rack=$(cat "$rack")"' in broker["command"][2]
    plain = resource({})
    assert builders.broker_config_hash(body, parse_spec(RACK)) != builders.broker_config_hash(plain, parse_spec({}))
    # the node map is no part of the hash: a node joining the cluster restarts nothing
    again = by_kind_name(builders.desired_objects(body, parse_spec(RACK), racks={"n1": "eu-1a", "n2": "eu-1b"}))
    assert (again[("StatefulSet", "demo-broker")]["spec"]["template"]
            == objects[("StatefulSet", "demo-broker")]["spec"]["template"])
    assert ("ConfigMap", "demo-broker-racks") not in by_kind_name(builders.desired_objects(plain, parse_spec({})))


@pytest.mark.parametrize("key", ['zone"; reboot; "', "a/b/c", "zone with space", "-zone"])
def test_a_rack_key_that_is_no_label_key_is_refused(key):
    """The key is written into the broker's start command: only label keys pass."""
    with pytest.raises(ValueError):
        parse_spec({"brokers": {"rack": {"topologyKey": key}}})


@pytest.mark.integration  # runs the start command in sh
@pytest.mark.parametrize("labelled", [True, False])
def test_the_broker_start_command_passes_its_nodes_rack(tmp_path, labelled):
    """The pod's shell glue, run as the container runs it: with the node's file the broker gets
    broker.rack; without it (an unlabelled node) the container fails with the reason."""
    import subprocess

    racks, bin_dir = tmp_path / "racks", tmp_path / "bin"
    racks.mkdir()
    bin_dir.mkdir()
    if labelled:
        (racks / "node-7").write_text("eu-1c")
    fake = bin_dir / "odradek"  # stands in for the image's entry point: prints what it was given
    fake.write_text('#!/bin/sh\nfor a in "$@"; do echo "$a"; done\n')
    fake.chmod(0o755)
    pod = by_kind_name(builders.desired_objects(resource(RACK), parse_spec(RACK)))[("StatefulSet", "demo-broker")]
    script = pod["spec"]["template"]["spec"]["containers"][0]["command"][2]
    script = script.replace(builders.RACKS_DIR, str(racks)).replace(f"-lt {builders.RACK_WAIT_SECONDS}", "-lt 1")
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "NODE_NAME": "node-7", "POD_NAME": "demo-broker-2",
           "POD_NAMESPACE": "kafka"}
    done = subprocess.run(["sh", "-c", script], env=env, capture_output=True, text=True, timeout=30)
    if labelled:
        assert done.returncode == 0 and "broker.rack=eu-1c" in done.stdout.splitlines()
        assert "broker.id=2" in done.stdout.splitlines()
    else:
        assert done.returncode == 1 and "node node-7 has no label topology.kubernetes.io/zone" in done.stderr


def test_zookeeper_heap_fits_its_memory_limit():
    """Issue 28: the image's 1000 MB default heap in a 1Gi container risked an OOM kill."""
    import pytest
    from pydantic import ValidationError

    def zk_env(zookeeper):
        body = resource({"zookeeper": zookeeper})
        objs = by_kind_name(builders.desired_objects(body, parse_spec(body["spec"])))
        sts = objs[("StatefulSet", "demo-zookeeper")]["spec"]["template"]["spec"]["containers"][0]
        return objs[("ConfigMap", "demo-zookeeper")]["data"], sts

    data, container = zk_env({})
    limit = 1024  # MiB, the default limit
    assert container["resources"]["limits"]["memory"] == "1Gi"
    assert int(data["ZK_SERVER_HEAP"]) <= 0.75 * limit and int(data["ZK_SERVER_HEAP"]) == 768
    assert int(zk_env({"resources": {"limits": {"memory": "512Mi"}}})[0]["ZK_SERVER_HEAP"]) == 256
    data, _ = zk_env({"jvmOptions": {"-Xmx": "600m", "-Xms": "600m"}})
    assert (data["ZK_SERVER_HEAP"], data["SERVER_JVMFLAGS"]) == ("600", "-Xms600m")
    with pytest.raises(ValidationError, match="75 %"):
        parse_spec({"zookeeper": {"jvmOptions": {"-Xmx": "1g"}}})
    # no limit, no request: the image's own default
    assert "ZK_SERVER_HEAP" not in zk_env({"resources": {"requests": {"cpu": "1"}}})[0]
    for probe in ("readinessProbe", "livenessProbe"):
        command = " ".join(container[probe]["exec"]["command"])
        assert "zkServer.sh" not in command and "java" not in command and "/dev/tcp/" in command


def test_pod_template_of_every_component_is_added_under_the_operators_own():
    """spec.<component>.pod (issue 28 item 12): pull secrets, labels, annotations, env,
    tolerations, priority class and service account reach every pod; the operator's labels,
    annotations and variables win; the pods still validate and meet restricted Pod Security."""
    pod = {"labels": {"team": "data", "app.kubernetes.io/component": "mine"},
           "annotations": {"example.com/owner": "data", builders.CONFIG_HASH: "forged"},
           "imagePullSecrets": [{"name": "registry"}], "serviceAccountName": "kafka-pods",
           "env": [{"name": "TZ", "value": "UTC"}, {"name": "POD_NAME", "value": "forged"}],
           "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "kafka", "effect": "NoSchedule"}],
           "priorityClassName": "kafka-critical"}
    body = resource({"brokers": {"pod": pod}, "controller": {"pod": pod}, "zookeeper": {"pod": pod}})
    workloads = [o for o in builders.desired_objects(body, parse_spec(body["spec"]))
                 if o["kind"] in ("StatefulSet", "Deployment")]
    assert len(workloads) == 3
    for obj in workloads:
        template = obj["spec"]["template"]
        meta, spec = template["metadata"], template["spec"]
        component = obj["metadata"]["labels"]["app.kubernetes.io/component"]
        assert meta["labels"]["team"] == "data" and meta["labels"]["app.kubernetes.io/component"] == component
        assert obj["spec"]["selector"]["matchLabels"].items() <= meta["labels"].items()
        assert meta["annotations"]["example.com/owner"] == "data"
        assert meta["annotations"][builders.CONFIG_HASH] != "forged"
        assert spec["imagePullSecrets"] == [{"name": "registry"}]
        assert spec["serviceAccountName"] == "kafka-pods" and spec["priorityClassName"] == "kafka-critical"
        assert spec["tolerations"][0]["key"] == "dedicated"
        env = spec["containers"][0]["env"]
        assert {"name": "TZ", "value": "UTC"} in env
        pod_name = [e for e in env if e["name"] == "POD_NAME"]
        assert len(pod_name) == 1, "one POD_NAME: the operator's where it sets one, else the user's"
        assert restricted_violations(spec) == []
        validate(obj)
    with pytest.raises(ValueError):
        parse_spec({"brokers": {"pod": {"labels": {"not a key!": "x"}}}})

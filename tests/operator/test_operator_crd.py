"""KafkaCluster models: defaults, validation, and the committed CRD matching the models."""

import jsonschema
import pytest
import yaml
from pydantic import ValidationError

from odradek.operator import crd
from odradek.operator.models import OPERATOR_OWNED_KEYS, parse_spec, spec_error_message

FIVE_LINES = """
apiVersion: odradek.io/v1alpha1
kind: KafkaCluster
metadata:
  name: demo
spec: {}
"""


def crd_schema() -> dict:
    return crd.crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def test_five_line_resource_is_a_three_broker_cluster():
    body = yaml.safe_load(FIVE_LINES)
    spec = parse_spec(body["spec"])
    assert spec.brokers.replicas == 3
    assert spec.controller.replicas == 2
    assert spec.zookeeper.managed and spec.zookeeper.replicas == 3
    assert spec.metrics.enabled is False
    jsonschema.validate(body, crd_schema())


@pytest.mark.parametrize("key", sorted(OPERATOR_OWNED_KEYS))
def test_operator_owned_keys_are_rejected_with_a_clear_message(key):
    with pytest.raises(ValidationError) as info:
        parse_spec({"brokers": {"config": {key: "x", "num.partitions": 3}}})
    message = spec_error_message(info.value)
    assert key in message and "set by the operator" in message
    assert message.startswith("spec.brokers.config")


def test_existing_zookeeper_and_camel_case_fields():
    spec = parse_spec({
        "image": "odradek:test",
        "brokers": {"replicas": 5, "storage": {"size": "1Gi", "storageClass": "fast", "deleteClaim": True},
                    "config": {"num.partitions": 6, "auto.create.topics.enable": False},
                    "rack": {"topologyKey": "topology.kubernetes.io/zone"}},
        "zookeeper": {"connect": "zk-0:2181,zk-1:2181/odradek"},
    })
    assert not spec.zookeeper.managed
    assert spec.brokers.storage.storage_class == "fast" and spec.brokers.storage.delete_claim
    assert spec.brokers.rack.topology_key == "topology.kubernetes.io/zone"


@pytest.mark.parametrize("bad", [
    {"brokers": {"replicas": 0}},
    {"brokers": {"replicaz": 3}},
    {"zookeeper": {"connect": " "}},
    {"controller": {"replicas": "two"}},
])
def test_invalid_specs_are_rejected(bad):
    with pytest.raises(ValidationError):
        parse_spec(bad)


def test_crd_schema_rejects_what_the_models_reject_structurally():
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"spec": {"brokers": {"replicas": 0}}}, crd_schema())
    jsonschema.validate({"spec": {"brokers": {"config": {"num.partitions": 3, "x": "y", "b": True}}}},
                        crd_schema())


def _assert_structural(node, path="schema"):
    """The rules of a structural schema that matter here: every node typed, no refs, no
    additionalProperties beside properties."""
    assert "$ref" not in node and "anyOf" not in node and "title" not in node, path
    assert "type" in node or "x-kubernetes-int-or-string" in node, path
    assert not ("properties" in node and "additionalProperties" in node), path
    for name, child in node.get("properties", {}).items():
        _assert_structural(child, f"{path}.{name}")
    if isinstance(node.get("additionalProperties"), dict):
        _assert_structural(node["additionalProperties"], f"{path}.*")
    if "items" in node:
        _assert_structural(node["items"], f"{path}[]")


def test_crd_is_structural_with_status_and_printer_columns():
    doc = crd.crd()
    version = doc["spec"]["versions"][0]
    _assert_structural(version["schema"]["openAPIV3Schema"])
    assert version["subresources"] == {"status": {}}
    columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert columns["Ready"] == '.status.conditions[?(@.type=="Ready")].status'
    assert {"Brokers", "Controllers", "Age"} <= set(columns)
    assert columns["Controllers"] == ".status.controllers.ready"
    assert doc["spec"]["names"]["shortNames"] == ["kc"]
    assert doc["spec"]["scope"] == "Namespaced"


@pytest.mark.parametrize("path", [crd.CRD_PATH, crd.CHART_CRD_PATH], ids=["crds", "chart"])
def test_committed_crd_is_up_to_date(path):
    assert path.read_text() == crd.render(), (
        f"{path} is stale: run `python -m odradek.operator.crd`")


@pytest.mark.parametrize("bad", [
    {"brokers": {"storage": {"size": "1Xi"}}},
    {"zookeeper": {"storage": {"size": ""}}},
    {"brokers": {"resources": {"limits": {"memory": "2 GB"}}}},
    {"zookeeper": {"replicas": 2**31 - 1}},
    {"brokers": {"replicas": 2**31 - 1}},
    {"controller": {"replicas": 2**31}},
    {"clusterCa": {"validityDays": 2**62}},
], ids=["storage-size", "zookeeper-storage-size", "resources", "zookeeper-replicas", "broker-replicas",
        "controller-replicas", "validity-days"])
def test_the_crd_refuses_what_would_crash_or_hang_a_pass(bad):
    """Found by the property test: a size that is no quantity reached plan_resize (ValueError on an
    existing cluster's pass), a replica count of 2^31-1 rendered a ZooKeeper member or a broker
    certificate per replica (a hung operator), a validity of 2^62 days overflowed the dates."""
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"spec": bad}, crd_schema())
    with pytest.raises(ValidationError):
        parse_spec(bad)


@pytest.mark.parametrize("bad", [
    {"brokers": {"storage": {"size": "0"}}},
    {"brokers": {"storage": {"size": "-10Gi"}}},
    {"controller": {"resources": {"requests": {"cpu": "-1"}}}},
])
def test_sizes_and_resources_kubernetes_refuses_are_invalid_specs(bad):
    """The API server refuses a claim of no size and a negative resource: an invalid spec, not an
    apply failing half-way through a pass."""
    with pytest.raises(ValidationError) as info:
        parse_spec(bad)
    assert "zero" in spec_error_message(info.value) or "negative" in spec_error_message(info.value)


@pytest.mark.parametrize("config", [
    {"log.dirs\t": "/tmp"}, {"listeners ": "PLAINTEXT://evil:1"}, {" zookeeper.connect": "evil:2181"},
    {"num.partitions": "3\nlog.dirs=/tmp"}, {"num.partitions": "3\rlisteners=PLAINTEXT://evil:1"},
    {"x.y": "a\u2028zookeeper.connect=evil:2181"}, {"": "x"}, {"a=b": "c"},
], ids=["tab", "trailing-space", "leading-space", "newline", "carriage-return", "line-separator", "empty", "equals"])
def test_broker_config_cannot_reach_the_keys_the_operator_owns(config):
    """The brokers read server.properties line by line, trimming keys (common/config.parse_properties):
    `log.dirs<TAB>` or a line break in a value set an owned key past the check on its name."""
    with pytest.raises(ValidationError) as info:
        parse_spec({"brokers": {"config": config}})
    assert spec_error_message(info.value).startswith("spec.brokers.config")


def test_listener_prefixed_and_numeric_broker_config_still_pass():
    parse_spec({"brokers": {"config": {"listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": "x", "num.io.threads": 8,
                                       "log.retention.hours": 168, "auto.create.topics.enable": False}}})


@pytest.mark.parametrize("spec", [
    {"zookeeper": {"connect": "zk:2181\nsuper.users=User:me"}},
    {"zookeeper": {"connect": "zk:2181/odradek\rauthorizer.class.name="}},
    {"authorization": {"superUsers": ["User:me\nauthorizer.class.name="]}},
    {"brokers": {"config": {"log.dirs\n": "x"}}},
], ids=["connect-newline", "connect-return", "super-user", "key-newline"])
def test_no_field_written_into_server_properties_can_add_a_line(spec):
    """zookeeper.connect sorts last in server.properties and super.users carries the spec's users:
    a line break in either set any key, e.g. an empty authorizer.class.name (no ACLs at all)."""
    with pytest.raises(ValidationError):
        parse_spec(spec)


def test_zookeeper_connect_forms_kafka_takes():
    for connect in ("zk:2181", "zk-0.zk:2181,zk-1.zk:2181/odradek", "10.0.0.1:2181/a/b", "[::1]:2181,zk/x"):
        parse_spec({"zookeeper": {"connect": connect}})

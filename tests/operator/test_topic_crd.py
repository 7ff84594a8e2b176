"""The Topic CRD: generated from the models, structural, committed up to date, printer columns."""

import jsonschema
import pytest
from test_operator_crd import _assert_structural

from odradek.operator import crd


def schema() -> dict:
    return crd.topic_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def test_topic_crd_is_structural_namespaced_with_status_and_columns():
    doc = crd.topic_crd()
    version = doc["spec"]["versions"][0]
    _assert_structural(version["schema"]["openAPIV3Schema"])
    assert doc["metadata"]["name"] == "topics.odradek.io" and doc["spec"]["scope"] == "Namespaced"
    assert doc["spec"]["names"]["singular"] == "topic", "kubectl wait topic/x"
    assert version["subresources"] == {"status": {}}
    columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert columns["Ready"] == '.status.conditions[?(@.type=="Ready")].status'
    assert {"Cluster", "Topic", "Partitions", "Replicas", "Age"} <= set(columns)


def test_schema_takes_a_gitops_topic_and_refuses_what_kubernetes_can_refuse():
    jsonschema.validate({"spec": {"clusterRef": "kafka", "topicName": "Orders_V2", "partitions": 6, "replicas": 3,
                                  "config": {"retention.ms": 86400000, "cleanup.policy": "compact"},
                                  "deletionPolicy": "Retain"}}, schema())
    for bad in ({"partitions": 3}, {"clusterRef": "k", "partitions": 0}, {"clusterRef": "k", "topicName": "a b"},
                {"clusterRef": "k", "deletionPolicy": "Shred"}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate({"spec": bad}, schema())


@pytest.mark.parametrize("path", [crd.TOPIC_CRD_PATH, crd.CHART_TOPIC_CRD_PATH], ids=["crds", "chart"])
def test_committed_topic_crd_is_up_to_date(path):
    assert path.read_text() == crd.render(crd.topic_crd), f"{path} is stale: run `python -m odradek.operator.crd`"

"""KafkaUser decisions as pure functions: the gate, the plan (credentials, ACLs, quotas), the
outcome and the status; the CRD generated from the models."""

import jsonschema
import pytest
from test_operator_crd import _assert_structural

from odradek.operator import crd
from odradek.operator.topic_reconciler import Cluster, Phase
from odradek.operator.user_models import FINALIZER
from odradek.operator.user_reconciler import (
    SCRAM_ITERATIONS,
    SCRAM_MECHANISM,
    Acl,
    ActionResult,
    AlterQuotas,
    AlterScram,
    CreateAcls,
    DeleteAcls,
    LiveUser,
    Step,
    desired_acls,
    gate,
    outcome,
    plan,
    removal,
    resource_from_body,
    scram_secret_data,
    secret_value,
    status,
    user_secret,
)

ACLS = [{"resource": {"type": "topic", "name": "orders"}, "operations": ["Read", "Describe"]},
        {"resource": {"type": "group", "name": "app-", "patternType": "prefix"}, "operations": ["Read"]},
        {"resource": {"type": "cluster"}, "operations": ["IdempotentWrite"], "type": "deny", "host": "10.0.0.1"}]


def body(name="alice", spec=None, *, finalizer=False, deleting=False, status_=None):
    meta = {"name": name, "namespace": "kafka", "generation": 1, "uid": f"uid-{name}", "resourceVersion": "1"}
    if finalizer:
        meta["finalizers"] = [FINALIZER]
    if deleting:
        meta["deletionTimestamp"] = "2024-01-02T00:00:00Z"
    return {"metadata": meta, "spec": {"clusterRef": "demo", **(spec or {})}, "status": status_ or {}}


def scram_user(**spec):
    return resource_from_body(body(spec={"authentication": {"type": "scram-sha-512"}, **spec}))


def test_gate():
    r = scram_user()
    assert gate(r, Cluster.PRESENT).step is Step.OBSERVE and gate(r, Cluster.PRESENT).finalizer is True
    waiting = gate(r, Cluster.MISSING)
    assert waiting.step is Step.STATUS and waiting.outcome.phase is Phase.PROGRESSING
    assert waiting.outcome.reason == "ClusterNotFound"
    invalid = resource_from_body(body(spec={"authentication": {"type": "kerberos"}}))
    assert gate(invalid, Cluster.PRESENT).outcome.phase is Phase.STALLED
    deleted = resource_from_body(body(spec={}, finalizer=True, deleting=True))
    assert gate(deleted, Cluster.PRESENT).step is Step.REMOVE
    assert gate(deleted, Cluster.MISSING).step is Step.RELEASE, "a cluster that is gone holds up nothing"
    assert gate(resource_from_body(body(deleting=True)), Cluster.PRESENT).step is Step.NONE


@pytest.mark.parametrize("spec", [
    {"authentication": {"type": "tls", "password": {"valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}}},
    {"authorization": {"acls": [{"resource": {"type": "topic"}, "operations": ["Read"]}]}},
    {"authorization": {"acls": [{"resource": {"type": "cluster", "name": "x"}, "operations": ["Alter"]}]}},
    {"authorization": {"acls": [{"resource": {"type": "topic", "name": "t"}, "operations": []}]}},
    {"quotas": {"producerByteRate": 0}},
])
def test_invalid_specs_stall(spec):
    r = resource_from_body(body(spec=spec))
    assert r.invalid is not None and gate(r, Cluster.PRESENT).outcome.phase is Phase.STALLED


def test_acls_in_strimzi_shape_become_kafka_bindings():
    r = scram_user(authorization={"type": "simple", "acls": ACLS})
    assert desired_acls(r.spec, "alice") == {
        Acl(2, "orders", 3, "User:alice", "*", 3, 3), Acl(2, "orders", 3, "User:alice", "*", 8, 3),
        Acl(3, "app-", 4, "User:alice", "*", 3, 3), Acl(4, "kafka-cluster", 3, "User:alice", "10.0.0.1", 12, 2)}
    tls = resource_from_body(body(spec={"authentication": {"type": "tls"}}))
    assert tls.username == "CN=alice"


def test_plan_creates_what_is_missing_and_removes_what_the_spec_does_not_name():
    r = scram_user(authorization={"acls": ACLS[:1]}, quotas={"producerByteRate": 1024})
    read = Acl(2, "orders", 3, "User:alice", "*", 3, 3)
    stray = Acl(2, "other", 3, "User:alice", "*", 4, 3)
    live = LiveUser({SCRAM_MECHANISM: SCRAM_ITERATIONS, "SCRAM-SHA-256": 4096}, frozenset({read, stray}),
                    {"producer_byte_rate": 2048.0, "consumer_byte_rate": 1.0})
    p = plan(r.spec, "alice", live, "pw", password_stored=True)
    assert p.actions == (
        AlterScram("alice", None, ("SCRAM-SHA-256",)),
        CreateAcls("alice", (Acl(2, "orders", 3, "User:alice", "*", 8, 3),)),
        DeleteAcls("alice", (stray,)),
        AlterQuotas("alice", {"producer_byte_rate": 1024.0}, ("consumer_byte_rate",)))
    settled = LiveUser({SCRAM_MECHANISM: SCRAM_ITERATIONS}, frozenset(desired_acls(r.spec, "alice")),
                       {"producer_byte_rate": 1024.0})
    assert plan(r.spec, "alice", settled, "pw", password_stored=True).actions == ()


def test_the_credential_is_upserted_when_missing_or_not_yet_in_the_secret():
    r = scram_user()
    have = LiveUser({SCRAM_MECHANISM: SCRAM_ITERATIONS})
    assert plan(r.spec, "alice", LiveUser(), "pw", True).actions == (AlterScram("alice", "pw"),)
    assert plan(r.spec, "alice", have, "pw", False).actions == (AlterScram("alice", "pw"),)
    assert plan(r.spec, "alice", LiveUser({SCRAM_MECHANISM: 8192}), "pw", True).actions == (AlterScram("alice", "pw"),)
    assert plan(r.spec, "alice", have, "pw", True).actions == ()
    assert "pw" not in repr(AlterScram("alice", "pw")) and "pw" not in str(AlterScram("alice", "pw"))
    no_auth = resource_from_body(body(spec={}))
    assert plan(no_auth.spec, "alice", have, None, False).actions == (AlterScram("alice", None, (SCRAM_MECHANISM,)),)


def test_no_authorizer_stalls_only_a_user_with_acls():
    with_acls = scram_user(authorization={"acls": ACLS[:1]})
    p = plan(with_acls.spec, "alice", LiveUser({SCRAM_MECHANISM: SCRAM_ITERATIONS}, None), "pw", True)
    o = outcome(with_acls, "alice", p, [], "alice")
    assert o.phase is Phase.STALLED and o.reason == "AuthorizerNotEnabled"
    bare = scram_user()
    p = plan(bare.spec, "alice", LiveUser({SCRAM_MECHANISM: SCRAM_ITERATIONS}, None), "pw", True)
    assert outcome(bare, "alice", p, [], "alice").phase is Phase.READY


def test_outcome_transient_errors_reconcile_user_errors_stall():
    r = scram_user()
    a = AlterScram("alice", "pw")
    assert outcome(r, "alice", plan(r.spec, "alice", LiveUser(), "pw", False),
                   [(a, ActionResult("not_controller", "try again"))], "alice").phase is Phase.PROGRESSING
    o = outcome(r, "alice", plan(r.spec, "alice", LiveUser(), "pw", False),
                [(a, ActionResult("cluster_authorization_failed"))], "alice")
    assert o.phase is Phase.STALLED and o.reason == "ClusterAuthorizationFailed"
    s = status(outcome(r, "alice", plan(r.spec, "alice", LiveUser(), "pw", False), [(a, ActionResult())], "alice"),
               at="t")
    assert s["username"] == "alice" and s["secret"] == "alice" and s["observedGeneration"] == 1
    by_type = {c["type"]: c["status"] for c in s["conditions"]}
    assert by_type == {"Ready": "True", "Reconciling": "False", "Stalled": "False"}


def test_removal_takes_everything_of_the_user():
    live = LiveUser({SCRAM_MECHANISM: 4096}, frozenset({Acl(2, "t", 3, "User:alice", "*", 3, 3)}), {"a": 1.0})
    assert removal("alice", live) == (AlterScram("alice", None, (SCRAM_MECHANISM,)),
                                      DeleteAcls("alice", everything=True), AlterQuotas("alice", {}, ("a",)))
    assert removal("alice", LiveUser()) == ()


def test_the_secret_carries_password_and_jaas_config_and_its_owner():
    r = scram_user()
    secret = user_secret(r, scram_secret_data("alice", 'p"w'))
    assert secret_value(secret, "password") == 'p"w'
    assert secret_value(secret, "sasl.jaas.config") == (
        'org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" password="p\\"w";')
    assert secret["metadata"]["ownerReferences"][0]["uid"] == "uid-alice"
    assert secret_value(None, "password") is None and secret_value({"data": {"password": "!!"}}, "password") is None


def user_schema() -> dict:
    return crd.user_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def test_user_crd_is_structural_with_short_name_and_columns():
    doc = crd.user_crd()
    version = doc["spec"]["versions"][0]
    _assert_structural(version["schema"]["openAPIV3Schema"])
    assert doc["metadata"]["name"] == "kafkausers.odradek.io" and doc["spec"]["names"]["shortNames"] == ["ku"]
    assert version["subresources"] == {"status": {}}
    assert "const" not in str(version["schema"]) and "exclusiveMinimum" not in str(version["schema"])
    jsonschema.validate({"spec": {"clusterRef": "k", "authentication": {"type": "scram-sha-512"},
                                  "authorization": {"type": "simple", "acls": ACLS},
                                  "quotas": {"producerByteRate": 1024, "controllerMutationRate": 0.5}}}, user_schema())
    for bad in ({"authentication": {"type": "scram-sha-512"}}, {"clusterRef": "k", "authorization": {"type": "opa"}}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate({"spec": bad}, user_schema())


@pytest.mark.parametrize("path", [crd.USER_CRD_PATH, crd.CHART_USER_CRD_PATH], ids=["crds", "chart"])
def test_committed_user_crd_is_up_to_date(path):
    assert path.read_text() == crd.render(crd.user_crd), f"{path} is stale: run `python -m odradek.operator.crd`"


def test_a_password_from_the_users_own_secret_is_an_invalid_spec():
    """The operator writes Secret <name> (password, sasl.jaas.config): taking the password from its
    sasl.jaas.config key made every pass upsert a new, longer password."""
    for key in ("sasl.jaas.config", "password"):
        r = scram_user(authentication={"type": "scram-sha-512", "password": {
            "valueFrom": {"secretKeyRef": {"name": "alice", "key": key}}}})
        g = gate(r, Cluster.PRESENT)
        assert g.step is Step.STATUS and g.outcome.phase is Phase.STALLED and g.outcome.reason == "InvalidSpec"
        assert "secretKeyRef" in g.outcome.message
    other = scram_user(authentication={"type": "scram-sha-512", "password": {
        "valueFrom": {"secretKeyRef": {"name": "alice-password", "key": "password"}}}})
    assert gate(other, Cluster.PRESENT).step is Step.OBSERVE

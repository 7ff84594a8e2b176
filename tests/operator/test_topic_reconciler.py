"""Topic decisions as pure functions: the gate, the plan, the outcome and the status."""

import pytest

from odradek.operator.topic_models import FINALIZER, MANAGED_ANNOTATION
from odradek.operator.topic_reconciler import (
    ActionResult,
    AlterConfigs,
    ChangeReplicationFactor,
    Cluster,
    CreatePartitions,
    CreateTopic,
    LiveTopic,
    Phase,
    Step,
    conditions,
    config_changes,
    gate,
    outcome,
    owner_of,
    plan,
    resource_from_body,
    status,
    status_patch,
)


def body(name="orders", spec=None, *, generation=1, created="2024-01-01T00:00:00Z", finalizer=False,
         deleting=False, annotations=None, status_=None):
    meta = {"name": name, "namespace": "kafka", "generation": generation, "creationTimestamp": created,
            "uid": f"uid-{name}", "resourceVersion": "1"}
    if finalizer:
        meta["finalizers"] = [FINALIZER]
    if deleting:
        meta["deletionTimestamp"] = "2024-01-02T00:00:00Z"
    if annotations:
        meta["annotations"] = annotations
    return {"metadata": meta, "spec": {"clusterRef": "demo", **(spec or {})}, "status": status_ or {}}


def resource(**kwargs):
    return resource_from_body(body(**kwargs))


def test_topic_name_defaults_to_the_resource_name_and_may_hold_what_kubernetes_cannot():
    assert resource().topic == "orders"
    r = resource(spec={"topicName": "Orders_V2"})
    assert r.topic == "Orders_V2" and r.invalid is None


@pytest.mark.parametrize(("spec", "reason", "words"), [
    ({"config": {"retention.ms": "forever"}}, "InvalidConfig", "retention.ms"),
    ({"config": {"no.such.key": 1}}, "InvalidConfig", "Unknown topic config name: no.such.key"),
    ({"config": {"min.insync.replicas": 0}}, "InvalidConfig", "at least 1"),
    ({"partitions": 0}, "InvalidSpec", "spec.partitions"),
    ({"topicName": "a/b"}, "InvalidSpec", "spec.topicName"),
    ({"topicName": ".."}, "InvalidSpec", "spec.topicName"),
    ({"deletionPolicy": "Shred"}, "InvalidSpec", "spec.deletionPolicy"),
])
def test_invalid_specs_stall_with_a_reason_before_anything_is_looked_at(spec, reason, words):
    r = resource(spec=spec)
    g = gate(r, Cluster.PRESENT, None)
    assert g.step is Step.STATUS and g.outcome.phase is Phase.STALLED
    assert g.outcome.reason == reason and words in g.outcome.message


def test_config_values_are_checked_with_the_brokers_rules():
    r = resource(spec={"config": {"cleanup.policy": "compact,delete", "retention.ms": 86400000,
                                  "unclean.leader.election.enable": False, "min.cleanable.dirty.ratio": 0.1}})
    assert r.invalid is None
    assert r.spec.config_texts()["unclean.leader.election.enable"] == "false"


def test_a_valid_managed_owner_with_a_cluster_is_observed_and_gets_the_finalizer():
    g = gate(resource(), Cluster.PRESENT, None)
    assert g.step is Step.OBSERVE and g.finalizer is True


def test_unknown_cluster_keeps_trying_without_a_finalizer():
    g = gate(resource(), Cluster.MISSING, None)
    assert g.step is Step.STATUS and g.finalizer is None
    assert (g.outcome.phase, g.outcome.reason) == (Phase.PROGRESSING, "ClusterNotFound")


def test_unmanaged_drops_the_finalizer_and_touches_nothing():
    r = resource(annotations={MANAGED_ANNOTATION: "false"}, finalizer=True)
    g = gate(r, Cluster.PRESENT, None)
    assert g.step is Step.STATUS and g.finalizer is False and g.outcome.phase is Phase.IDLE


def test_the_older_resource_keeps_the_topic_and_the_newer_gets_resource_conflict():
    old = resource(name="a", spec={"topicName": "t"}, created="2024-01-01T00:00:00Z")
    new = resource(name="b", spec={"topicName": "t"}, created="2024-01-01T00:00:05Z")
    assert old.claim == new.claim
    assert owner_of([new, old]) is old
    g = gate(new, Cluster.PRESENT, "a")
    assert g.outcome.reason == "ResourceConflict" and "'a'" in g.outcome.message and g.finalizer is False


def test_a_resource_that_manages_the_topic_keeps_it_against_an_older_newcomer():
    managing = resource(name="b", spec={"topicName": "t"}, created="2024-01-02T00:00:00Z",
                        status_={"topicName": "t"})
    older = resource(name="a", spec={"topicName": "t"}, created="2024-01-01T00:00:00Z")
    assert owner_of([older, managing]) is managing


def test_topic_name_cannot_change_once_managed():
    r = resource(spec={"topicName": "renamed"}, status_={"topicName": "orders"})
    assert r.topic == "orders", "the claim stays on the managed topic"
    g = gate(r, Cluster.PRESENT, None)
    assert g.outcome.reason == "TopicNameChangeNotSupported" and g.outcome.phase is Phase.STALLED


@pytest.mark.parametrize(("kwargs", "cluster", "owner", "step"), [
    (dict(finalizer=True), Cluster.PRESENT, None, Step.DELETE),
    (dict(finalizer=True, spec={"deletionPolicy": "Retain"}), Cluster.PRESENT, None, Step.RELEASE),
    (dict(finalizer=True), Cluster.MISSING, None, Step.RELEASE),
    (dict(finalizer=True), Cluster.DELETING, None, Step.RELEASE),
    (dict(finalizer=True, annotations={MANAGED_ANNOTATION: "false"}), Cluster.PRESENT, None, Step.RELEASE),
    (dict(finalizer=True), Cluster.PRESENT, "older", Step.RELEASE),
    (dict(finalizer=True, spec={"partitions": -1, "deletionPolicy": "Retain"}), Cluster.PRESENT, None, Step.RELEASE),
    (dict(finalizer=True, spec={"partitions": -1}), Cluster.PRESENT, None, Step.DELETE),
    (dict(finalizer=False), Cluster.PRESENT, None, Step.NONE),
])
def test_deletion(kwargs, cluster, owner, step):
    assert gate(resource(deleting=True, **kwargs), cluster, owner).step is step


def test_plan_creates_a_missing_topic_with_the_spec():
    r = resource(spec={"partitions": 3, "replicas": 2, "config": {"retention.ms": 1000}})
    assert plan(r.spec, "orders", None).actions == (CreateTopic("orders", 3, 2, {"retention.ms": "1000"}),)


def test_plan_raises_partitions_sets_and_removes_overrides():
    r = resource(spec={"partitions": 6, "replicas": 3, "config": {"retention.ms": 1000, "cleanup.policy": "compact"}})
    live = LiveTopic(3, 3, {"retention.ms": "2000", "cleanup.policy": "compact", "segment.bytes": "1048576"})
    p = plan(r.spec, "orders", live)
    assert p.actions == (CreatePartitions("orders", 6), AlterConfigs("orders", {"retention.ms": "1000"}, ("segment.bytes",)))
    assert p.refusals == ()


def test_plan_of_a_matching_topic_is_empty_values_compared_as_the_broker_reads_them():
    r = resource(spec={"partitions": 3, "config": {"retention.ms": 1000, "unclean.leader.election.enable": True}})
    p = plan(r.spec, "orders", LiveTopic(3, 1, {"retention.ms": "1000", "unclean.leader.election.enable": "true"}))
    assert p.actions == () and p.refusals == ()
    assert config_changes({"cleanup.policy": "compact, delete"}, {"cleanup.policy": "compact,delete"}) == ({}, ())


def test_plan_refuses_fewer_partitions_reassigns_for_another_replication_factor_and_applies_the_rest():
    r = resource(spec={"partitions": 2, "replicas": 1, "config": {"retention.ms": 5}})
    p = plan(r.spec, "orders", LiveTopic(4, 3, {}))
    assert p.actions == (ChangeReplicationFactor("orders", 1), AlterConfigs("orders", {"retention.ms": "5"}, ()))
    assert [reason for reason, _ in p.refusals] == ["PartitionDecreaseNotSupported"]


def test_unset_partitions_and_replicas_are_not_enforced():
    p = plan(resource().spec, "orders", LiveTopic(7, 2, {}))
    assert p.actions == () and p.refusals == ()


def test_outcome_reports_the_topic_after_the_actions_that_succeeded():
    r = resource(spec={"partitions": 6, "config": {"retention.ms": 1}})
    live = LiveTopic(3, 3, {"segment.bytes": "1000"})
    p = plan(r.spec, "orders", live)
    o = outcome(r, "orders", live, p, [(p.actions[0], ActionResult()), (p.actions[1], ActionResult())])
    assert o.phase is Phase.READY and o.live == LiveTopic(6, 3, {"retention.ms": "1"}) and o.topic == "orders"


def test_failed_actions_become_conditions_retried_or_stalled_by_error():
    r = resource(spec={"replicas": 5})
    p = plan(r.spec, "orders", None)
    o = outcome(r, "orders", None, p, [(p.actions[0], ActionResult("invalid_replication_factor", "5 > 3 brokers"))])
    assert (o.phase, o.reason) == (Phase.STALLED, "InvalidReplicationFactor") and "5 > 3 brokers" in o.message
    assert o.topic is None, "nothing created: no topic managed yet"
    o = outcome(r, "orders", None, p, [(p.actions[0], ActionResult("request_timed_out", "slow"))])
    assert (o.phase, o.reason) == (Phase.PROGRESSING, "RequestTimedOut")


def test_a_refusal_keeps_the_live_state_and_stalls():
    r = resource(spec={"partitions": 1})
    live = LiveTopic(3, 1, {})
    p = plan(r.spec, "orders", live)
    o = outcome(r, "orders", live, p, [])
    assert (o.phase, o.reason) == (Phase.STALLED, "PartitionDecreaseNotSupported") and o.live == live


def test_conditions_follow_kstatus_and_carry_the_generation():
    r = resource(generation=4)
    ready = conditions(outcome(r, "orders", LiveTopic(1, 1), plan(r.spec, "orders", LiveTopic(1, 1)), []), at="t0")
    assert {c["type"]: (c["status"], c["observedGeneration"]) for c in ready} == {
        "Ready": ("True", 4), "Reconciling": ("False", 4), "Stalled": ("False", 4)}
    stalled = conditions(gate(resource(spec={"partitions": 0}), Cluster.PRESENT, None).outcome, at="t1")
    assert {c["type"]: c["status"] for c in stalled} == {"Ready": "False", "Reconciling": "False", "Stalled": "True"}
    waiting = conditions(gate(r, Cluster.MISSING, None).outcome, at="t2")
    assert {c["type"]: c["status"] for c in waiting} == {"Ready": "False", "Reconciling": "True", "Stalled": "False"}


def test_transition_time_moves_only_when_the_status_of_a_condition_changes():
    first = status(gate(resource(), Cluster.MISSING, None).outcome, at="t0")
    again = resource(status_=first)
    second = status(gate(again, Cluster.MISSING, None).outcome, first, at="t1")
    assert second == first


def test_status_keeps_live_fields_while_the_topic_is_not_looked_at_and_nulls_removed_config():
    previous = {"topicName": "orders", "partitions": 3, "replicas": 1, "config": {"retention.ms": "5"}}
    s = status(gate(resource(status_=previous), Cluster.MISSING, None).outcome, previous, at="t")
    assert (s["topicName"], s["partitions"], s["replicas"], s["config"]) == ("orders", 3, 1, {"retention.ms": "5"})
    patch = status_patch(previous, {**s, "config": {"segment.bytes": "100"}})
    assert patch["config"] == {"retention.ms": None, "segment.bytes": "100"}


def test_integral_floats_from_yaml_tools_are_longs_to_kafka():
    r = resource(spec={"config": {"retention.ms": 6.048e+08, "min.cleanable.dirty.ratio": 0.25}})
    assert r.invalid is None
    assert r.spec.config_texts() == {"retention.ms": "604800000", "min.cleanable.dirty.ratio": "0.25"}


def test_adoption_keeps_the_overrides_the_spec_does_not_name():
    """Issue 28: adopting an existing topic removed its overrides silently; they are kept and
    reported until the spec names them, and only managed overrides are removed later."""
    from odradek.operator.topic_reconciler import kept_overrides, status

    r = resource(spec={"clusterRef": "kafka", "config": {"retention.ms": 1000}})
    live = LiveTopic(3, 1, {"retention.ms": "5", "segment.bytes": "1048576", "cleanup.policy": "compact"})
    keep = kept_overrides(r.spec, live, frozenset(), adopting=True)
    assert keep == {"segment.bytes", "cleanup.policy"}
    p = plan(r.spec, "orders", live, keep)
    assert p.actions == (AlterConfigs("orders", {"retention.ms": "1000"}, ()),)
    o = outcome(r, "orders", live, p, [(p.actions[0], ActionResult())], keep)
    assert o.phase.value == "ready" and "cleanup.policy, segment.bytes" in o.message
    assert status(o, at="T")["keptConfig"] == ["cleanup.policy", "segment.bytes"]
    # a later pass (managing the topic): the kept ones stay kept; one named in the spec is managed
    later = resource(spec={"clusterRef": "kafka", "config": {"retention.ms": 1000, "cleanup.policy": "delete"}})
    keep = kept_overrides(later.spec, live, frozenset({"segment.bytes", "cleanup.policy"}), adopting=False)
    assert keep == {"segment.bytes"}
    # an override added in the cluster to a managed topic is reverted as before
    assert kept_overrides(later.spec, LiveTopic(3, 1, {"x.y": "1"}), frozenset(), adopting=False) == frozenset()
    assert plan(later.spec, "orders", LiveTopic(3, 1, {"x.y": "1"}), frozenset()).actions[0].delete == ("x.y",)
    # gone from the cluster: no longer reported
    assert kept_overrides(later.spec, LiveTopic(3, 1, {}), frozenset({"segment.bytes"}), adopting=False) == frozenset()

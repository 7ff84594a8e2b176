"""Pure parts of the operator: status conditions and the apply comparison."""

import json

from odradek.operator.apply import (
    FIELD_MANAGER,
    LAST_APPLIED,
    contains,
    last_applied,
    migration_patch,
    patch_for,
    three_way_patch,
    without_client_side_owners,
)
from odradek.operator.status import Observation, conditions, status


def by_type(conds):
    return {c["type"]: c for c in conds}


def test_ready_cluster():
    o = Observation(3, desired_brokers=3, running_brokers=3, ready_broker_ids=(0, 1, 2),
                    desired_controllers=2, ready_controllers=1, desired_zookeeper=3, ready_zookeeper=3)
    s = status(o, at="T1")
    c = by_type(s["conditions"])
    assert (c["Ready"]["status"], c["Progressing"]["status"], c["Degraded"]["status"]) == ("True", "False", "False")
    assert all(x["observedGeneration"] == 3 for x in s["conditions"])
    assert s["brokers"] == {"desired": 3, "ready": 3, "ids": [0, 1, 2]}
    assert s["controllers"] == {"desired": 2, "ready": 1} and s["zookeeper"] == {"desired": 3, "ready": 3}


def test_last_transition_time_moves_only_when_the_status_changes():
    waiting = Observation(1, desired_brokers=3, running_brokers=3, ready_broker_ids=(0,), ready_controllers=1)
    first = conditions(waiting, at="T1")
    same = conditions(Observation(1, desired_brokers=3, running_brokers=3, ready_broker_ids=(0, 1), ready_controllers=1),
                      first, at="T2")
    assert by_type(same)["Ready"]["lastTransitionTime"] == "T1"
    ready = conditions(Observation(1, desired_brokers=3, running_brokers=3, ready_broker_ids=(0, 1, 2), ready_controllers=1),
                       same, at="T3")
    assert by_type(ready)["Ready"]["lastTransitionTime"] == "T3"
    assert by_type(ready)["Degraded"]["lastTransitionTime"] == "T1"


def test_refused_scale_down_and_invalid_spec():
    refused = by_type(conditions(Observation(2, desired_brokers=3, running_brokers=4, ready_broker_ids=(0, 1, 2, 3),
                                             refused="brokers [3] still hold replicas"), at="T"))
    assert refused["Degraded"]["status"] == "True" and refused["Degraded"]["reason"] == "ScaleDownRefused"
    assert refused["Ready"]["status"] == "False"
    invalid = by_type(conditions(Observation(4, invalid="spec.brokers.config: broker.id"), at="T"))
    assert invalid["Ready"]["reason"] == "InvalidSpec" and invalid["Ready"]["status"] == "False"


def test_contains_ignores_server_defaults_but_not_differences():
    desired = {"spec": {"ports": [{"name": "kafka", "port": 9092}], "replicas": 3}}
    live = {"spec": {"ports": [{"name": "kafka", "port": 9092, "protocol": "TCP"}], "replicas": 3,
                     "clusterIP": "10.0.0.1"}}
    assert contains(live, desired)
    assert not contains(live, {"spec": {"replicas": 4}})
    assert not contains(live, {"spec": {"ports": [{"name": "kafka", "port": 9092}, {"name": "x", "port": 1}]}})


def test_patch_leaves_identity_out():
    patch = patch_for({"apiVersion": "v1", "kind": "Service",
                       "metadata": {"name": "a", "namespace": "n", "labels": {"x": "y"}}, "spec": {}})
    assert patch == {"metadata": {"labels": {"x": "y"}}, "spec": {}}


def test_ready_needs_the_managed_ensemble_then_a_controller():
    brokers = dict(desired_brokers=3, running_brokers=3, ready_broker_ids=(0, 1, 2), desired_controllers=2)
    zk = by_type(conditions(Observation(1, **brokers, ready_controllers=2, desired_zookeeper=3, ready_zookeeper=2), at="T"))
    assert (zk["Ready"]["status"], zk["Ready"]["reason"]) == ("False", "ZooKeeperNotReady")
    assert "2/3 ZooKeeper" in zk["Ready"]["message"] and zk["Progressing"]["reason"] == "ZooKeeperNotReady"
    ctl = by_type(conditions(Observation(1, **brokers, ready_controllers=0, desired_zookeeper=3, ready_zookeeper=3), at="T"))
    assert (ctl["Ready"]["status"], ctl["Ready"]["reason"]) == ("False", "ControllerNotReady")
    external = by_type(conditions(Observation(1, **brokers, ready_controllers=1), at="T"))
    assert external["Ready"]["status"] == "True", "an existing ensemble is not the operator's to wait for"
    assert status(Observation(1, **brokers, ready_controllers=1))["zookeeper"] is None


def test_three_way_patch_removes_what_is_no_longer_rendered():
    last = {"metadata": {"annotations": {"a": "1", "metrics": "on"}}, "spec": {"replicas": 3, "old": {"x": 1}}}
    live = {"metadata": {"annotations": {"a": "1", "metrics": "on", "kubectl.io/x": "y"}, "uid": "u"},
            "spec": {"replicas": 3, "old": {"x": 1}, "defaulted": True}}
    desired = {"metadata": {"annotations": {"a": "1"}}, "spec": {"replicas": 3}}
    assert three_way_patch(last, desired, live) == {"metadata": {"annotations": {"metrics": None}},
                                                    "spec": {"old": None}}
    assert three_way_patch(last, last, live) == {}, "server defaults and others' keys are no difference"
    assert three_way_patch({}, desired, live) == {}, "without a record nothing is removed"
    assert three_way_patch(last, {"spec": {"replicas": 4}}, live)["spec"] == {"replicas": 4, "old": None}


def test_migration_ends_client_side_apply_once():
    """An object an operator before server-side apply wrote: the last three-way patch removes
    what is no longer rendered, and the annotation; an object without it needs no migration."""
    last = {"metadata": {"annotations": {"k": "v"}}, "data": {"x": "1", "old": "2"}}
    live = {"metadata": {"name": "a", "annotations": {"k": "v", LAST_APPLIED: json.dumps(last)}},
            "data": {"x": "1", "old": "2"}}
    desired = {"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "a", "namespace": "n", "annotations": {"k": "v"}}, "data": {"x": "1"}}
    assert last_applied(live) == last
    assert migration_patch(live, desired) == {"metadata": {"annotations": {LAST_APPLIED: None}}, "data": {"old": None}}
    assert migration_patch({"metadata": {"name": "a"}, "data": {"x": "1"}}, desired) is None
    assert last_applied({"metadata": {"annotations": {LAST_APPLIED: "not json"}}}) == {}


def test_the_old_writers_ownership_is_released_and_nobody_elses():
    apply_entry = {"manager": FIELD_MANAGER, "operation": "Apply", "fieldsV1": {"f:data": {}}}
    old = {"manager": "Python", "operation": "Update", "fieldsV1": {"f:data": {}}}
    mine_update = {"manager": FIELD_MANAGER, "operation": "Update", "fieldsV1": {"f:spec": {}}}
    status = {"manager": FIELD_MANAGER, "operation": "Update", "subresource": "status", "fieldsV1": {}}
    kubectl = {"manager": "kubectl-edit", "operation": "Update", "fieldsV1": {"f:metadata": {}}}
    assert without_client_side_owners([old, apply_entry, mine_update, status, kubectl]) == [apply_entry, status, kubectl]
    assert without_client_side_owners([apply_entry, kubectl]) is None, "nothing to drop"
    assert without_client_side_owners([old]) is None, "an empty list would be refilled by the server"


def test_kstatus_conditions_follow_progress_and_refusals():
    from odradek.operator.status import error_status

    ready = by_type(conditions(Observation(1, desired_brokers=3, running_brokers=3, ready_broker_ids=(0, 1, 2),
                                           ready_controllers=1), at="T"))
    assert (ready["Reconciling"]["status"], ready["Stalled"]["status"]) == ("False", "False")
    rolling = by_type(conditions(Observation(2, desired_brokers=3, running_brokers=3, ready_broker_ids=(0, 1, 2),
                                             ready_controllers=1, pending_restarts=(1, 2)), at="T"))
    assert rolling["Reconciling"]["status"] == "True" and rolling["Reconciling"]["reason"] == "RollingUpdate"
    stuck = by_type(conditions(Observation(3, desired_brokers=3, running_brokers=3, ready_broker_ids=(0, 1, 2),
                                           ready_controllers=1,
                                           stalled=(("ZooKeeperScalingRefused", "stays at 3"),)), at="T"))
    assert stuck["Stalled"]["status"] == "True" and stuck["Stalled"]["reason"] == "ZooKeeperScalingRefused"
    assert stuck["Degraded"]["reason"] == "ZooKeeperScalingRefused" and stuck["Progressing"]["status"] == "False"
    invalid = by_type(conditions(Observation(4, invalid="spec.brokers.config: broker.id"), at="T"))
    assert invalid["Stalled"]["status"] == "True"

    previous = status(Observation(1, desired_brokers=3, running_brokers=3, ready_broker_ids=(0, 1, 2),
                                  ready_controllers=1), at="T1")
    failed = error_status(previous, 2, "Kubernetes API: 403 Forbidden", at="T2")
    c = by_type(failed["conditions"])
    assert failed["observedGeneration"] == 2 and all(x["observedGeneration"] == 2 for x in failed["conditions"])
    assert c["Stalled"]["status"] == "False", "a transient error fixes itself: kstatus must not read Failed"
    assert (c["Reconciling"]["status"], c["Reconciling"]["reason"]) == ("True", "KubernetesApiError")
    assert "403" in c["Reconciling"]["message"] and "retrying" in c["Reconciling"]["message"]
    assert c["Ready"]["status"] == "False" and failed["brokers"] == previous["brokers"], "what was seen stays"
    forbidden = by_type(error_status(previous, 2, "Kubernetes API: 403 Forbidden", permanent=True, at="T2")["conditions"])
    assert (forbidden["Stalled"]["status"], forbidden["Reconciling"]["status"]) == ("True", "False")
    assert forbidden["Ready"]["status"] == "False" and "403" in forbidden["Stalled"]["message"]
    same_generation = by_type(error_status(previous, 1, "Kubernetes API: 503", at="T2")["conditions"])
    assert same_generation["Ready"]["status"] == "True", "a blip does not unready a cluster that served the spec"
    assert same_generation["Ready"]["lastTransitionTime"] == "T1"


def test_which_api_errors_fix_themselves():
    from odradek.operator.status import permanent_api_error

    assert [s for s in (400, 401, 403, 404, 405, 409, 422, 429, 500, 503, 504) if permanent_api_error(s)] == [
        400, 403, 405, 422]


CONDITION_TYPES = ("Ready", "Progressing", "Degraded", "Reconciling", "Stalled")


def check_consistent(conds, generation, stall_reasons):
    """The rules every status obeys, whatever a pass saw."""
    c = by_type(conds)
    assert sorted(c) == sorted(CONDITION_TYPES) and len(conds) == len(CONDITION_TYPES)
    assert all(x["status"] in ("True", "False") and x["reason"] and x["observedGeneration"] == generation
               for x in conds)
    true = {t for t, x in c.items() if x["status"] == "True"}
    assert c["Reconciling"]["status"] == c["Progressing"]["status"]
    assert not {"Ready", "Stalled"} <= true, "Argo CD Healthy beside kstatus Failed"
    assert not {"Ready", "Degraded"} <= true
    assert not {"Reconciling", "Stalled"} <= true, "kstatus: in progress and failed at once"
    if "Stalled" in true:
        assert "Degraded" in true and c["Stalled"]["reason"] in stall_reasons, c
    if "Ready" not in true and "Reconciling" not in true:
        assert "Degraded" in true or "Stalled" in true, f"not ready and not moving, with no reason: {c}"


def test_every_combination_of_what_a_pass_sees_gives_consistent_conditions():
    """A table over every Observation shape reconciler.reconcile produces: refusals, waits, rolls,
    data movement, an unreachable cluster, missing support, every broker count relation."""
    import itertools

    refusal = (("ZooKeeperScalingRefused", "stays at 3"),)
    checked = 0
    scaling = ("ZooKeeperScaling", "3 → 5 members: adding member 4")
    for (invalid, stalled, refused, unreachable, pending, moving, waiting, running, ready, zk, ctl, zk_scaling) in (
            itertools.product(
            (None, "spec.brokers.replicas: must be >= 1"), ((), refusal), (None, "brokers [3] still hold replicas"),
            (None, "no broker answered Metadata"), ((), (1,)), (None, "moving 3 partitions"),
            (None, "waiting for brokers [2] to register"), (2, 3, 4), ((), (0, 1), (0, 1, 2)),
            (None, 2, 3), (0, 1), (None, scaling))):
        o = Observation(5, desired_brokers=3, running_brokers=running, ready_broker_ids=ready,
                        desired_controllers=1, ready_controllers=ctl, desired_zookeeper=None if zk is None else 3,
                        ready_zookeeper=zk or 0, invalid=invalid, waiting=waiting, refused=refused,
                        pending_restarts=pending, unreachable=unreachable, stalled=stalled, moving=moving,
                        zookeeper_scaling=None if zk is None else zk_scaling)
        conds = conditions(o, at="T")
        check_consistent(conds, 5, {"InvalidSpec", "ZooKeeperScalingRefused"})
        c = by_type(conds)
        if invalid is None and not stalled:
            assert c["Stalled"]["status"] == "False", f"only a refusal or an invalid spec stalls: {o}"
        if c["Ready"]["status"] == "True":
            assert (running, ready, pending, unreachable, refused) == (3, (0, 1, 2), (), None, None)
            assert zk is None or zk_scaling is None, "an ensemble still scaling is not the spec met"
        if invalid is None and zk is not None and zk_scaling is not None and c["Progressing"]["status"] == "True":
            assert c["Stalled"]["status"] == "False"
        checked += 1
    assert checked == 2 ** 8 * 3 * 3 * 3 * 2

    from odradek.operator.status import error_status

    for previous_o in (Observation(5, desired_brokers=3, running_brokers=3, ready_broker_ids=(0, 1, 2),
                                   ready_controllers=1),
                       Observation(5, invalid="bad"), Observation(4, stalled=refusal)):
        previous = status(previous_o, at="T1")
        for generation, permanent in itertools.product((4, 5, 6), (False, True)):
            failed = error_status(previous, generation, "Kubernetes API: 500", permanent=permanent, at="T2")
            check_consistent(failed["conditions"], generation, {"KubernetesApiError"})
            assert (by_type(failed["conditions"])["Stalled"]["status"] == "True") == permanent


def test_a_refusal_while_a_roll_runs_is_degraded_then_stalled():
    refusal = (("ZooKeeperScalingRefused", "stays at 3"),)
    rolling = by_type(conditions(Observation(3, desired_brokers=3, running_brokers=3, ready_broker_ids=(0, 1, 2),
                                             ready_controllers=1, pending_restarts=(2,), stalled=refusal), at="T"))
    assert (rolling["Reconciling"]["status"], rolling["Stalled"]["status"]) == ("True", "False")
    assert rolling["Degraded"]["reason"] == "ZooKeeperScalingRefused"
    settled = by_type(conditions(Observation(3, desired_brokers=3, running_brokers=3, ready_broker_ids=(0, 1, 2),
                                             ready_controllers=1, stalled=refusal), at="T"))
    assert (settled["Ready"]["status"], settled["Stalled"]["status"]) == ("False", "True")
    assert "stays at 3" in settled["Ready"]["message"]


def test_a_new_cluster_is_not_degraded_while_no_broker_is_up_yet():
    new = by_type(conditions(Observation(1, desired_brokers=3, running_brokers=3, ready_broker_ids=(),
                                         unreachable="no broker answered Metadata"), at="T"))
    assert new["Degraded"]["status"] == "False" and new["Progressing"]["status"] == "True"
    lost = by_type(conditions(Observation(1, desired_brokers=3, running_brokers=3, ready_broker_ids=(0, 1),
                                          unreachable="no broker answered Metadata"), at="T"))
    assert lost["Degraded"]["status"] == "True" and lost["Degraded"]["reason"] == "ClusterUnreachable"


def test_orphans_are_owned_objects_no_longer_rendered():
    from odradek.operator.apply import orphans

    def obj(kind, name, uid="u1", **meta):
        return {"kind": kind, "metadata": {"name": name, "ownerReferences": [{"uid": uid, "controller": True}], **meta}}

    desired = [obj("Service", "demo-bootstrap"), obj("StatefulSet", "demo-broker")]
    live = [obj("Service", "demo-bootstrap"), obj("StatefulSet", "demo-broker"), obj("StatefulSet", "demo-zookeeper"),
            obj("Service", "demo-zookeeper"), obj("ConfigMap", "other", uid="u2"),
            obj("ConfigMap", "going", deletionTimestamp="T"), {"kind": "ConfigMap", "metadata": {"name": "mine"}}]
    assert orphans(live, desired, "u1") == [("Service", "demo-zookeeper"), ("StatefulSet", "demo-zookeeper")]

"""Pure parts of the operator: status conditions and the apply comparison."""

from odradek.operator.apply import contains, patch_for
from odradek.operator.status import Observation, conditions, status


def by_type(conds):
    return {c["type"]: c for c in conds}


def test_ready_cluster():
    o = Observation(3, desired_brokers=3, running_brokers=3, ready_broker_ids=(0, 1, 2), active_controller=1000)
    s = status(o, at="T1")
    c = by_type(s["conditions"])
    assert (c["Ready"]["status"], c["Progressing"]["status"], c["Degraded"]["status"]) == ("True", "False", "False")
    assert all(x["observedGeneration"] == 3 for x in s["conditions"])
    assert s["brokers"] == {"desired": 3, "ready": 3, "ids": [0, 1, 2]} and s["activeController"] == 1000


def test_last_transition_time_moves_only_when_the_status_changes():
    waiting = Observation(1, desired_brokers=3, running_brokers=3, ready_broker_ids=(0,))
    first = conditions(waiting, at="T1")
    same = conditions(Observation(1, desired_brokers=3, running_brokers=3, ready_broker_ids=(0, 1)), first, at="T2")
    assert by_type(same)["Ready"]["lastTransitionTime"] == "T1"
    ready = conditions(Observation(1, desired_brokers=3, running_brokers=3, ready_broker_ids=(0, 1, 2)), same, at="T3")
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

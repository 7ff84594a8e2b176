"""The zookeeper.connect guard (reconciler.zookeeper_switch): the brokers never move to another
ensemble, where their metadata is not, unless an annotation names the new one (issue 28 item 7)."""

from odradek.operator import builders
from odradek.operator.models import parse_spec
from odradek.operator.reconciler import (
    ZOOKEEPER_MIGRATED,
    live_zookeeper_connect,
    same_ensemble,
    zookeeper_switch,
)

MANAGED = "demo-zookeeper.kafka.svc:2181/odradek"


def body(spec, annotations=None):
    return {"metadata": {"name": "demo", "namespace": "kafka", "uid": "u", "annotations": annotations or {}},
            "spec": spec}


def switch(spec, live, annotations=None):
    b = body(spec, annotations)
    return zookeeper_switch(b, parse_spec(spec), live)


def test_the_live_connect_string_is_read_from_the_brokers_config_map():
    cm = {"data": {"server.properties": f"a=1\nzookeeper.connect={MANAGED}\nz=2\n"}}
    assert live_zookeeper_connect(cm) == MANAGED
    assert live_zookeeper_connect(None) is None
    assert live_zookeeper_connect({"data": {}}) is None


def test_a_new_cluster_or_an_unchanged_ensemble_passes():
    spec = {"zookeeper": {"connect": "zk:2181/x"}}
    assert switch(spec, None) == (parse_spec(spec), None)
    assert switch({}, MANAGED)[1] is None
    assert switch(spec, "zk:2181/x")[1] is None
    # a member added to an existing ensemble's list is the same ensemble
    assert switch({"zookeeper": {"connect": "zk:2181,zk2:2181/x"}}, "zk:2181/x")[1] is None


def test_switching_away_from_the_managed_ensemble_is_refused_and_keeps_it():
    spec = {"zookeeper": {"connect": "external:2181/odradek"}}
    kept, refused = switch(spec, MANAGED)
    assert refused is not None and refused[0] == "ZooKeeperSwitchRefused"
    assert "managed ensemble" in refused[1] and ZOOKEEPER_MIGRATED in refused[1]
    assert kept.zookeeper.managed
    b = body(spec)
    names = {o["metadata"]["name"] for o in builders.desired_objects(b, kept)}
    assert "demo-zookeeper" in names, "the managed ensemble is still rendered, so nothing is pruned"
    assert builders.broker_properties(b, kept)["zookeeper.connect"] == MANAGED


def test_the_annotation_naming_the_new_ensemble_allows_the_switch():
    spec = {"zookeeper": {"connect": "external:2181/odradek"}}
    kept, refused = switch(spec, MANAGED, {ZOOKEEPER_MIGRATED: "external:2181/odradek"})
    assert refused is None and not kept.zookeeper.managed
    # an annotation naming another ensemble approves nothing
    assert switch(spec, MANAGED, {ZOOKEEPER_MIGRATED: "other:2181/odradek"})[1] is not None


def test_switching_between_ensembles_or_back_to_a_managed_one_is_refused_too():
    kept, refused = switch({"zookeeper": {"connect": "b:2181/odradek"}}, "a:2181/odradek")
    assert refused is not None and kept.zookeeper.connect == "a:2181/odradek"
    kept, refused = switch({}, "a:2181/odradek")
    assert refused is not None and kept.zookeeper.connect == "a:2181/odradek"
    assert switch({"zookeeper": {"connect": "a:2181/other"}}, "a:2181/odradek")[1] is not None


def test_same_ensemble():
    assert same_ensemble("a:1,b:1/x", "b:1/x/")
    assert not same_ensemble("a:1/x", "a:1/y")
    assert not same_ensemble("a:1/x", "b:1/x")

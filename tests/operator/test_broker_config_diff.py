"""Live broker keys out of the pods' hash and into the dynamic defaults (Strimzi's
KafkaBrokerConfigurationDiff): what rolls and what is sent through IncrementalAlterConfigs."""

import pytest

from odradek.operator import builders
from odradek.operator.broker_config import DynamicChange, diff
from odradek.operator.models import parse_spec


def body(config):
    spec = {"zookeeper": {"connect": "zk:2181/x"}, "brokers": {"config": config}}
    return {"metadata": {"name": "demo", "namespace": "kafka", "uid": "u"}, "spec": spec}, parse_spec(spec)


def test_a_live_key_change_keeps_the_pods_hash_a_static_one_changes_it():
    base = builders.broker_config_hash(*body({"log.retention.ms": 1000, "num.partitions": 3}))
    assert builders.broker_config_hash(*body({"log.retention.ms": 2000, "num.partitions": 3})) == base
    assert builders.broker_config_hash(*body({"log.retention.ms": 1000, "message.max.bytes": 2 << 20,
                                              "num.partitions": 3})) == base
    assert builders.broker_config_hash(*body({"log.retention.ms": 1000, "num.partitions": 4})) != base
    # log.retention.hours is not dynamic in Kafka: it rolls
    assert builders.broker_config_hash(*body({"log.retention.ms": 1000, "num.partitions": 3,
                                              "log.retention.hours": 1})) != base


def test_the_file_keeps_every_key_and_the_template_carries_the_static_hash():
    b, spec = body({"log.retention.ms": 1000, "log.preallocate": True})
    objects = {o["kind"]: o for o in builders.broker_objects(b, spec) if o["metadata"]["name"] == "demo-broker"}
    text = objects["ConfigMap"]["data"]["server.properties"]
    assert "log.retention.ms=1000\n" in text and "log.preallocate=true\n" in text
    annotations = objects["StatefulSet"]["spec"]["template"]["metadata"]["annotations"]
    assert annotations[builders.CONFIG_HASH] == builders.broker_config_hash(b, spec)
    assert builders.dynamic_broker_config(b, spec) == {"log.retention.ms": "1000", "log.preallocate": "true",
                                                       "min.insync.replicas": "2"}


def test_diff_sets_what_differs_resets_what_the_spec_dropped_and_leaves_the_rest():
    assert diff({"log.retention.ms": "1000"}, {"log.retention.ms": "1000"}).empty
    assert diff({"log.retention.ms": "2000", "min.insync.replicas": "2"},
                {"log.retention.ms": "1000", "min.insync.replicas": "2"}) == DynamicChange({"log.retention.ms": "2000"})
    # dropped: back to Kafka's default; deleted when the default comes from another key
    assert diff({}, {"message.max.bytes": "2000000", "log.retention.ms": "5", "log.cleaner.threads": "1"}) == \
        DynamicChange({"message.max.bytes": "1048588"}, ("log.retention.ms",))
    # not a key the broker applies live (set by hand with kafka-configs): not the operator's
    assert diff({}, {"num.io.threads": "16", "made.up": "x"}).empty


def test_a_value_the_brokers_refuse_at_start_is_refused_before_any_roll():
    """A broker exits at start on a ConfigException: `num.partitions: abc` rolled broker 0 into a
    crash loop and stopped the roll there. Now an invalid spec (Strimzi's InvalidConfigParameter)."""
    from odradek.operator import cluster_security
    from odradek.operator.broker_config import startup_problem
    from odradek.operator.render import render_objects

    for config, key in (({"num.partitions": "abc"}, "num.partitions"), ({"log.segment.bytes": 1}, "log.segment.bytes"),
                        ({"min.insync.replicas": 0}, "min.insync.replicas"),
                        ({"log.cleanup.policy": "bogus"}, "log.cleanup.policy"),
                        ({"auto.create.topics.enable": "maybe"}, "auto.create.topics.enable")):
        problem = startup_problem(cluster_security.broker_properties(*body(config)))
        assert problem is not None and key in problem, config
        doc = {"kind": "KafkaCluster", "metadata": {"name": "demo"}, "spec": body(config)[0]["spec"]}
        with pytest.raises(ValueError, match=key.replace(".", r"\.")):
            render_objects([doc], "odradek:test")
    for spec in ({"brokers": {"config": {"num.partitions": 6, "made.up.key": "x", "auto.create.topics.enable": False,
                                         "listener.name.plain.made.up": "y"}}},
                 {"authorization": {"superUsers": ["User:ops"]},
                  "listeners": [{"name": "tls", "port": 9093, "tls": True, "authentication": {"type": "tls"}},
                                {"name": "scram", "port": 9094, "type": "nodeport",
                                 "authentication": {"type": "scram-sha-512"}}]}):
        b = {"metadata": {"name": "demo", "namespace": "kafka", "uid": "u"}, "spec": spec}
        assert startup_problem(cluster_security.broker_properties(b, parse_spec(spec))) is None, spec

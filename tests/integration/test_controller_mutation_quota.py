"""controller_mutation_rate (KIP-599) against a real broker: CreateTopics v6+, CreatePartitions v3+
and DeleteTopics v5+ refuse topics with THROTTLING_QUOTA_EXCEEDED once the entity's bucket is
overdrawn, older versions do everything and are throttled (throttle_time_ms, muted connection)."""

import datetime
import time

import pytest
from kio.schema.errors import ErrorCode

from odradek.common import wire
from odradek.common.api_key import ApiKey

from .kafka_helpers import ask, wait_quotas_loaded
from .test_client_quotas import alter_request

pytestmark = pytest.mark.integration


def create_topics(version: int, topics: list[tuple[str, int]]):
    schema = wire.request_schema(ApiKey.CREATE_TOPICS, version)
    mod = __import__(schema.__module__, fromlist=["x"])
    return schema(topics=tuple(mod.CreatableTopic(name=n, num_partitions=p, replication_factor=1, assignments=(),
                                                  configs=()) for n, p in topics),
                  timeout=datetime.timedelta(seconds=30), validate_only=False)


def delete_topics(version: int, names: list[str]):
    schema = wire.request_schema(ApiKey.DELETE_TOPICS, version)
    if version >= 6:
        mod = __import__(schema.__module__, fromlist=["x"])
        return schema(topics=tuple(mod.DeleteTopicState(name=n, topic_id=None) for n in names),
                      timeout=datetime.timedelta(seconds=30))
    return schema(topic_names=tuple(names), timeout=datetime.timedelta(seconds=30))


def create_partitions(version: int, topics: list[tuple[str, int]]):
    schema = wire.request_schema(ApiKey.CREATE_PARTITIONS, version)
    mod = __import__(schema.__module__, fromlist=["x"])
    return schema(topics=tuple(mod.CreatePartitionsTopic(name=n, count=c, assignments=None) for n, c in topics),
                  timeout=datetime.timedelta(seconds=30), validate_only=False)


def test_strict_and_permissive_controller_mutation_quota(cluster_factory):
    # 2 partitions/s, bucket of 3 windows of 1 s: 6 partitions at once
    cluster = cluster_factory(brokers=1, broker_overrides={"quota.window.num": 3, "quota.window.size.seconds": 1})
    port = cluster.broker_ports[0]
    (answer,) = ask(port, [alter_request([([("client-id", None)], [("controller_mutation_rate", 2.0, False)])])])
    assert answer.entries[0].error_code == 0
    wait_quotas_loaded(cluster.broker(0), "1 controller mutation")

    (created,) = ask(port, [create_topics(7, [("m1", 4), ("m2", 4), ("m3", 1)])])
    codes = {t.name: t.error_code for t in created.topics}
    print(f"strict CreateTopics: {codes}, throttle {wire.ms(created.throttle_time)} ms")
    assert codes == {"m1": ErrorCode.none, "m2": ErrorCode.none, "m3": ErrorCode.throttling_quota_exceeded}
    assert [t.error_message for t in created.topics if t.name == "m3"] == ["The throttling quota has been exceeded."]
    assert 500 <= wire.ms(created.throttle_time) <= 1000

    time.sleep(wire.ms(created.throttle_time) / 1000 + 0.2)  # back above zero: the first goes in
    # 7 more partitions overdraw even a full bucket (6), so the second is refused whatever the timing
    (partitions,) = ask(port, [create_partitions(3, [("m1", 11), ("m2", 5)])])
    assert [r.error_code for r in partitions.results] == [ErrorCode.none, ErrorCode.throttling_quota_exceeded]

    # an old version is never refused, only throttled
    time.sleep(3.5)  # full bucket again
    (old,) = ask(port, [create_topics(5, [("old1", 5), ("old2", 5)])])
    assert all(t.error_code == ErrorCode.none for t in old.topics)
    throttle = wire.ms(old.throttle_time)
    assert throttle >= 1500  # -(6 - 10) / 2 s
    (deleted,) = ask(port, [delete_topics(6, ["old2"])])  # strict, bucket overdrawn: refused, kept
    assert [r.error_code for r in deleted.responses] == [ErrorCode.throttling_quota_exceeded]
    (deleted,) = ask(port, [delete_topics(4, ["old2"])])  # permissive: deleted, throttled
    assert [r.error_code for r in deleted.responses] == [ErrorCode.none]
    assert wire.ms(deleted.throttle_time) > throttle - 1000


def test_a_muted_connection_waits_for_its_throttle(cluster_factory):
    cluster = cluster_factory(brokers=1, broker_overrides={"quota.window.num": 2, "quota.window.size.seconds": 1})
    port = cluster.broker_ports[0]
    (answer,) = ask(port, [alter_request([([("client-id", None)], [("controller_mutation_rate", 1.0, False)])])])
    assert answer.entries[0].error_code == 0
    wait_quotas_loaded(cluster.broker(0), "1 controller mutation")
    start = time.monotonic()
    first, second = ask(port, [create_topics(5, [("w1", 4)]), create_topics(5, [("w2", 1)])])
    waited = time.monotonic() - start
    assert wire.ms(first.throttle_time) >= 1500  # -(2 - 4) / 1 s
    assert waited >= 0.8 * wire.ms(first.throttle_time) / 1000
    assert second.topics[0].error_code == ErrorCode.none

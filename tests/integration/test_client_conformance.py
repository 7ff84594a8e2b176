"""What Kafka clients notice beyond produce and consume (issue 17): offsets committed for partitions
that do not exist, authorized operations (KIP-430), ListGroups v5, OffsetDelete (KIP-496), and
transactional producers getting going. Real brokers and controller, real clients."""

import asyncio
import subprocess
import sys
import time
import uuid

import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    ConsumerGroupType,
    KafkaError,
    KafkaException,
    Producer,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import AclOperation, AdminClient
from kio.schema.errors import ErrorCode

from odradek.broker.auth_helper import NOT_REQUESTED
from odradek.broker.group import records
from odradek.broker.group.group_metadata_manager import partition_for
from odradek.broker.metadata_apis import ZERO_UUID
from odradek.common import wire
from odradek.common.client import NetworkClient
from odradek.dev.waiting import wait_until

from .conftest import new_cluster
from .kafka_helpers import create_topic, leader_of

CONFORMANCE_BROKER = {
    "offsets.topic.num.partitions": 3,
    "offsets.topic.replication.factor": 2,
    "group.initial.rebalance.delay.ms": 0,
    "group.min.session.timeout.ms": 1000,
}
METADATA, DESCRIBE_CLUSTER, DESCRIBE_GROUPS, LIST_GROUPS, OFFSET_DELETE = 3, 60, 15, 16, 47
CLUSTER_OPERATIONS = {AclOperation.CREATE, AclOperation.ALTER, AclOperation.DESCRIBE, AclOperation.CLUSTER_ACTION,
                      AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE}
TOPIC_OPERATIONS = {AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DELETE,
                    AclOperation.ALTER, AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS,
                    AclOperation.ALTER_CONFIGS}
GROUP_OPERATIONS = {AclOperation.READ, AclOperation.DELETE, AclOperation.DESCRIBE}


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory):
    c = new_cluster(zookeeper, tmp_path_factory.mktemp("conformance"), brokers=2,
                    broker_overrides=CONFORMANCE_BROKER)
    c.start()
    yield c
    c.stop()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def ask(port: int, requests: list) -> list:
    """The responses to `requests`, sent in order on one connection."""

    async def run():
        client = NetworkClient("127.0.0.1", port)
        try:
            return [await client.send(r, timeout=30) for r in requests]
        finally:
            await client.close()

    return asyncio.run(run())


def request_module(api: int, version: int):
    return sys.modules[wire.request_schema(api, version).__module__]


def request(api: int, version: int, **fields):
    return wire.make_entity(wire.request_schema(api, version), **fields)


def commit(bootstrap: str, group: str, offsets: list[TopicPartition]) -> None:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        c.commit(offsets=offsets, asynchronous=False)
    finally:
        c.close()


def listed_offsets(admin: AdminClient, group: str) -> dict[tuple[str, int], int]:
    got = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)], request_timeout=10)[group]
    return {(tp.topic, tp.partition): tp.offset for tp in got.result(30).topic_partitions if tp.offset >= 0}


def partition_errors(partitions) -> dict[tuple[str, int], int | None]:
    return {(tp.topic, tp.partition): tp.error.code() if tp.error else None for tp in partitions}


# --- OffsetCommit for partitions that do not exist -------------------------------------------------


def test_offsets_of_missing_topics_or_partitions_are_refused_per_partition(cluster):
    from kafka.admin import KafkaAdminClient
    from kafka.structs import OffsetAndMetadata as KOffsetAndMetadata
    from kafka.structs import TopicPartition as KTopicPartition

    bs = cluster.bootstrap
    topic, group, missing = unique("commit"), unique("g-commit"), unique("never-created")
    create_topic(bs, topic, 2)
    admin = AdminClient({"bootstrap.servers": bs})

    # librdkafka's consumer: the request-level answer carries the partition's error
    with pytest.raises(KafkaException) as refused:
        commit(bs, group, [TopicPartition(missing, 0, 5)])
    assert refused.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    commit(bs, group, [TopicPartition(topic, 0, 3)])

    # AlterConsumerGroupOffsets (OffsetCommit with no member): one error per partition, the rest stored
    altered = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, [
        TopicPartition(missing, 0, 5), TopicPartition(topic, 1, 4), TopicPartition(topic, 9, 1)])])[group]
    assert partition_errors(altered.result(30).topic_partitions) == {
        (missing, 0): KafkaError.UNKNOWN_TOPIC_OR_PART, (topic, 1): None, (topic, 9): KafkaError.UNKNOWN_TOPIC_OR_PART}

    kp = KafkaAdminClient(bootstrap_servers=bs)
    try:
        result = kp.alter_group_offsets(group, {KTopicPartition(missing, 1): KOffsetAndMetadata(7, "", -1),
                                                KTopicPartition(topic, 0): KOffsetAndMetadata(6, "", -1)})
    finally:
        kp.close()
    codes = {(tp.topic, tp.partition): getattr(err, "errno", 0) for tp, err in result.items()}
    assert codes == {(missing, 1): ErrorCode.unknown_topic_or_partition, (topic, 0): 0}, result
    # nothing was stored for the missing ones, and the others were
    assert listed_offsets(admin, group) == {(topic, 0): 6, (topic, 1): 4}


# --- KIP-430 authorized operations -------------------------------------------------------------------


def test_authorized_operations_are_all_supported_ones_when_asked(cluster):
    from kafka.admin import KafkaAdminClient

    bs = cluster.bootstrap
    topic, group = unique("ops"), unique("g-ops")
    create_topic(bs, topic, 1)
    commit(bs, group, [TopicPartition(topic, 0, 1)])
    admin = AdminClient({"bootstrap.servers": bs})

    described = admin.describe_cluster(include_authorized_operations=True, request_timeout=10).result(30)
    assert set(described.authorized_operations) == CLUSTER_OPERATIONS
    assert not admin.describe_cluster(request_timeout=10).result(30).authorized_operations
    topics = admin.describe_topics(TopicCollection([topic]), include_authorized_operations=True, request_timeout=10)
    assert set(topics[topic].result(30).authorized_operations) == TOPIC_OPERATIONS
    groups = admin.describe_consumer_groups([group], include_authorized_operations=True, request_timeout=10)
    assert set(groups[group].result(30).authorized_operations) == GROUP_OPERATIONS

    kp = KafkaAdminClient(bootstrap_servers=bs)
    try:
        assert set(kp.describe_cluster()["authorized_operations"]) == {op.name for op in CLUSTER_OPERATIONS}
        kp_group = kp.describe_groups([group], include_authorized_operations=True)[group]
        (kp_topic,) = kp.describe_topics([topic])
    finally:
        kp.close()
    assert set(kp_group["authorized_operations"]) == {op.name for op in GROUP_OPERATIONS}
    assert set(kp_topic["authorized_operations"]) == {op.name for op in TOPIC_OPERATIONS}

    # the exact fields, asked and not asked, in every version that has them
    cluster_bits, topic_bits, group_bits = 8096, 3576, 328  # Kafka's bit fields with no authorizer
    port = cluster.broker_ports[0]
    wanted = (topic, unique("unknown"))
    responses = ask(port, [
        request(METADATA, v, topics=tuple(wire.make_entity(request_module(METADATA, v).MetadataRequestTopic,
                                                           name=name, topic_id=ZERO_UUID) for name in wanted),
                allow_auto_topic_creation=False, include_cluster_authorized_operations=asked,
                include_topic_authorized_operations=asked)
        for v in (8, 10, 12) for asked in (True, False)
    ] + [
        request(DESCRIBE_CLUSTER, 1, include_cluster_authorized_operations=asked, endpoint_type=1)
        for asked in (True, False)
    ] + [
        request(DESCRIBE_GROUPS, 5, groups=(group,), include_authorized_operations=asked) for asked in (True, False)
    ])
    metadata, clusters, group_answers = responses[:6], responses[6:8], responses[8:]
    for i, r in enumerate(metadata):
        asked = i % 2 == 0
        assert [int(t.topic_authorized_operations) for t in r.topics] == [topic_bits if asked else NOT_REQUESTED] * 2
        if hasattr(r, "cluster_authorized_operations"):  # v8–v10
            assert int(r.cluster_authorized_operations) == (cluster_bits if asked else NOT_REQUESTED)
    assert [int(r.cluster_authorized_operations) for r in clusters] == [cluster_bits, NOT_REQUESTED]
    assert [int(r.groups[0].authorized_operations) for r in group_answers] == [group_bits, NOT_REQUESTED]


# --- ListGroups v5: group types --------------------------------------------------------------------


def test_list_groups_filters_by_type_and_state(cluster):
    from kafka.admin import KafkaAdminClient

    bs = cluster.bootstrap
    topic, group = unique("types"), unique("g-types")
    create_topic(bs, topic, 1)
    commit(bs, group, [TopicPartition(topic, 0, 1)])
    admin = AdminClient({"bootstrap.servers": bs})

    def confluent_listed(**kw) -> dict:
        result = admin.list_consumer_groups(request_timeout=10, **kw).result(30)
        assert not result.errors, result.errors
        return {g.group_id: g for g in result.valid}

    everything = confluent_listed()
    assert everything[group].type == ConsumerGroupType.CLASSIC and everything[group].state == ConsumerGroupState.EMPTY
    assert group in confluent_listed(types={ConsumerGroupType.CLASSIC})
    assert group not in confluent_listed(types={ConsumerGroupType.CONSUMER})
    assert group in confluent_listed(types={ConsumerGroupType.CLASSIC}, states={ConsumerGroupState.EMPTY})
    assert group not in confluent_listed(states={ConsumerGroupState.STABLE})

    kp = KafkaAdminClient(bootstrap_servers=bs)
    try:
        def kp_listed(**kw) -> dict:
            return {g["group_id"]: g for g in kp.list_groups(**kw)}

        assert kp_listed()[group]["group_type"] == "classic"
        assert group in kp_listed(types_filter=["Classic"])  # case does not matter, as in Kafka
        assert group not in kp_listed(types_filter=["consumer"])
        assert group in kp_listed(states_filter=["empty"]) and group not in kp_listed(states_filter=["Stable"])
    finally:
        kp.close()


# --- OffsetDelete (KIP-496) ------------------------------------------------------------------------


def offsets_topic_records(bootstrap: str, group: str) -> list[tuple[object, bool]]:
    """(decoded key, is tombstone) of every __consumer_offsets record about `group`, read with a
    real consumer from each partition's start to its end."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("reader"), "enable.auto.commit": False,
                  "enable.partition.eof": True})
    try:
        parts = len(c.list_topics("__consumer_offsets", timeout=10).topics["__consumer_offsets"].partitions)
        c.assign([TopicPartition("__consumer_offsets", p, 0) for p in range(parts)])
        out, done = [], set()
        deadline = time.monotonic() + 30
        while len(done) < parts:
            assert time.monotonic() < deadline, "__consumer_offsets not read to its end in 30 s"
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    done.add(m.partition())
                    continue
                raise AssertionError(m.error())
            key = records.decode_key(m.key())
            if key is not None and key.group == group:
                out.append((key, m.value() is None))
        return out
    finally:
        c.close()


def test_offset_delete_spares_subscribed_topics_and_tombstones_the_rest(cluster):
    from kafka.admin import KafkaAdminClient
    from kafka.errors import GroupIdNotFoundError
    from kafka.structs import TopicPartition as KTopicPartition

    bs = cluster.bootstrap
    consumed, other, group = unique("od-consumed"), unique("od-other"), unique("g-od")
    create_topic(bs, consumed, 2)
    create_topic(bs, other, 1)
    p = Producer({"bootstrap.servers": bs})
    for i in range(4):
        p.produce(consumed, b"v%d" % i, partition=i % 2)
    assert p.flush(30) == 0
    admin = AdminClient({"bootstrap.servers": bs})

    member = Consumer({"bootstrap.servers": bs, "group.id": group, "enable.auto.commit": False,
                       "auto.offset.reset": "earliest", "session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
    kp = KafkaAdminClient(bootstrap_servers=bs)
    try:
        member.subscribe([consumed])
        got = []
        deadline = time.monotonic() + 60
        while len(got) < 4 and time.monotonic() < deadline:
            m = member.poll(0.5)
            if m is not None and not m.error():
                got.append(m.value())
        assert len(got) == 4
        member.commit(offsets=[TopicPartition(consumed, 0, 2), TopicPartition(consumed, 1, 2),
                               TopicPartition(other, 0, 9)], asynchronous=False)

        # a live consumer group: its members' topics are refused, the others deleted
        result = kp.delete_group_offsets(group, [KTopicPartition(consumed, 0), KTopicPartition(other, 0),
                                                 KTopicPartition(unique("missing"), 0)])
        codes = {(tp.topic, tp.partition): getattr(err, "errno", 0) for tp, err in result.items()}
        assert sorted(codes.values()) == sorted([ErrorCode.group_subscribed_to_topic, 0,
                                                 ErrorCode.unknown_topic_or_partition]), codes
        assert codes[(consumed, 0)] == ErrorCode.group_subscribed_to_topic and codes[(other, 0)] == 0
        assert listed_offsets(admin, group) == {(consumed, 0): 2, (consumed, 1): 2}
    finally:
        member.close()
    try:
        # Empty now: every offset may go; the last ones take the group with them
        result = kp.delete_group_offsets(group, [KTopicPartition(consumed, 0)])
        assert {tp: getattr(err, "errno", 0) for tp, err in result.items()} == {KTopicPartition(consumed, 0): 0}
        assert listed_offsets(admin, group) == {(consumed, 1): 2}
        kp.delete_group_offsets(group, [KTopicPartition(consumed, 1)])
        assert group not in {g.group_id for g in admin.list_consumer_groups(request_timeout=10).result(30).valid}
        with pytest.raises(GroupIdNotFoundError):
            kp.delete_group_offsets(group, [KTopicPartition(consumed, 1)])
    finally:
        kp.close()

    # persisted: __consumer_offsets ends with tombstones for every deleted offset and the group
    stored = offsets_topic_records(bs, group)
    last = dict(stored)
    assert last[records.OffsetKey(group, other, 0)] and last[records.OffsetKey(group, consumed, 0)]
    assert last[records.OffsetKey(group, consumed, 1)] and last[records.GroupKey(group)]

    # and a consumer of the group starts over from auto.offset.reset (earliest)
    again = Consumer({"bootstrap.servers": bs, "group.id": group, "enable.auto.commit": False,
                      "auto.offset.reset": "earliest"})
    try:
        again.subscribe([consumed])
        seen = wait_until(lambda: (lambda m: m if m is not None and not m.error() else None)(again.poll(0.5)),
                          "a record from the group's restart", 60)
        assert seen.offset() == 0
    finally:
        again.close()


def test_offset_delete_wire_answers(cluster):
    """The whole-request answers: an unknown group, an empty group id, and a partition beyond the
    topic's count on a known group."""
    bs = cluster.bootstrap
    topic, group = unique("od-wire"), unique("g-od-wire")
    create_topic(bs, topic, 1)
    commit(bs, group, [TopicPartition(topic, 0, 1)])
    m = request_module(OFFSET_DELETE, 0)

    def delete(group_id, *parts):
        return m.OffsetDeleteRequest(group_id=group_id, topics=tuple(
            m.OffsetDeleteRequestTopic(name=t, partitions=(m.OffsetDeleteRequestPartition(partition_index=p),))
            for t, p in parts))

    def coordinator_port(group_id: str) -> int:
        partition = partition_for(group_id, CONFORMANCE_BROKER["offsets.topic.num.partitions"])
        return cluster.broker_ports[leader_of(bs, "__consumer_offsets", partition)]

    nope = unique("nope")
    (unknown,) = ask(coordinator_port(nope), [delete(nope, (topic, 0))])
    empty, mixed = ask(coordinator_port(group), [delete("", (topic, 0)), delete(group, (topic, 0), (topic, 5))])
    assert (unknown.error_code, unknown.topics) == (ErrorCode.group_id_not_found, ())
    assert (empty.error_code, empty.topics) == (ErrorCode.invalid_group_id, ())
    assert mixed.error_code == ErrorCode.none
    assert {(t.name, int(p.partition_index)): p.error_code for t in mixed.topics for p in t.partitions} == {
        (topic, 0): ErrorCode.none, (topic, 5): ErrorCode.unknown_topic_or_partition}


# --- transactional producers get going ---------------------------------------------------------------


def test_transactional_producers_of_every_client_get_going(cluster):
    """librdkafka, kafka-python and kcat find the transaction coordinator and initialize (they
    were refused at once before the coordinator existed)."""
    from kafka import KafkaProducer

    bs = cluster.bootstrap
    producer = Producer({"bootstrap.servers": bs, "transactional.id": unique("tx")})
    producer.init_transactions(60)
    producer.flush(5)

    kp = KafkaProducer(bootstrap_servers=bs, transactional_id=unique("tx-kp"))
    try:
        kp.init_transactions()
    finally:
        kp.close(timeout=5)

    kcat = subprocess.run(["kcat", "-P", "-b", bs, "-t", unique("tx-kcat"), "-X", f"transactional.id={unique('tx')}"],
                          input=b"a record\n", capture_output=True, timeout=60)
    assert kcat.returncode == 0, kcat.stderr

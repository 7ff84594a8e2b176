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
from kio.static.primitive import i8, i32, i64

from odradek.broker.auth_helper import NOT_REQUESTED
from odradek.broker.group import records
from odradek.broker.metadata_apis import ZERO_UUID
from odradek.common import wire
from odradek.common.network.client import NetworkClient
from odradek.dev.waiting import wait_until

from .conftest import new_cluster
from .kafka_helpers import ask, create_topic, leader_of

CONFORMANCE_BROKER = {
    "offsets.topic.num.partitions": 3,
    "offsets.topic.replication.factor": 2,
    "group.initial.rebalance.delay.ms": 0,
    "group.min.session.timeout.ms": 1000,
}
LIST_OFFSETS, METADATA, DESCRIBE_CLUSTER, DESCRIBE_GROUPS, OFFSET_DELETE, API_VERSIONS = 2, 3, 60, 15, 47, 18
DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS = 29, 30, 31
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



def request_module(api: int, version: int):
    return sys.modules[wire.request_schema(api, version).__module__]


def request(api: int, version: int, **fields):
    return wire.make_entity(wire.request_schema(api, version), **fields)


def known_everywhere(cluster, topic: str, partitions: int) -> None:
    """Wait until every broker's Metadata has a leader for each partition of `topic`: a client
    may ask any of them next (create_topic waits for one)."""
    def everywhere() -> bool:
        for port in cluster.broker_ports:
            (r,) = ask(port, [request(METADATA, 12, topics=(request_module(METADATA, 12).MetadataRequestTopic(
                name=topic, topic_id=None),), allow_auto_topic_creation=False,
                include_topic_authorized_operations=False)])
            (t,) = r.topics
            if t.error_code != ErrorCode.none or len(t.partitions) != partitions or \
                    any(int(p.leader_id) < 0 for p in t.partitions):
                return False
        return True

    wait_until(everywhere, f"{topic} known to every broker", 30)


def coordinator_port(cluster, group: str) -> int:
    """The port of `group`'s coordinator, found as clients find it (FindCoordinator, retried while
    the offsets topic is being created)."""
    def find():
        (r,) = ask(cluster.broker_ports[0], [request(10, 3, key=group, key_type=i8(0))])
        return int(r.node_id) + 1 if r.error_code == ErrorCode.none else None  # +1: node 0 is truthy too

    return cluster.broker_ports[wait_until(find, f"a coordinator for {group}", 60) - 1]


def make_topic(cluster, topic: str, partitions: int) -> None:
    create_topic(cluster.bootstrap, topic, partitions)
    known_everywhere(cluster, topic, partitions)


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
    make_topic(cluster, topic, 2)
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
    make_topic(cluster, topic, 1)
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
    make_topic(cluster, topic, 1)
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
    make_topic(cluster, consumed, 2)
    make_topic(cluster, other, 1)
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
    make_topic(cluster, topic, 1)
    commit(bs, group, [TopicPartition(topic, 0, 1)])
    m = request_module(OFFSET_DELETE, 0)

    def delete(group_id, *parts):
        return m.OffsetDeleteRequest(group_id=group_id, topics=tuple(
            m.OffsetDeleteRequestTopic(name=t, partitions=(m.OffsetDeleteRequestPartition(partition_index=p),))
            for t, p in parts))

    nope = unique("nope")
    (unknown,) = ask(coordinator_port(cluster, nope), [delete(nope, (topic, 0))])
    empty, mixed = ask(coordinator_port(cluster, group), [delete("", (topic, 0)), delete(group, (topic, 0), (topic, 5))])
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


# --- ListOffsets v7–v9: MAX_TIMESTAMP and the tiered-storage specs ----------------------------------


def produce_batches(bootstrap: str, topic: str, batches: list[list[int]], codec: str) -> None:
    """Each inner list becomes one batch (flushed alone) of records with those timestamps."""
    p = Producer({"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 100,
                  "enable.idempotence": False})
    n = 0
    for batch in batches:
        for ts in batch:
            p.produce(topic, b"v%d" % n, partition=0, timestamp=ts)
            n += 1
        assert p.flush(30) == 0


@pytest.mark.parametrize("codec", ["none", "gzip"])
def test_list_offsets_max_timestamp_and_tiered_specs(cluster, codec):
    from confluent_kafka.admin import OffsetSpec
    from kafka.admin import KafkaAdminClient
    from kafka.protocol.consumer.offsets import OffsetSpec as KOffsetSpec
    from kafka.structs import TopicPartition as KTopicPartition

    bs = cluster.bootstrap
    topic, empty = unique(f"maxts-{codec}"), unique(f"maxts-empty-{codec}")
    make_topic(cluster, topic, 1)
    make_topic(cluster, empty, 1)
    base = int(time.time() * 1000) - 600_000
    # offsets 0–3 | 4–9 | 10–12: the largest timestamp first appears at offset 6, inside the second
    # batch, again at 8 and 11 (the first one counts), and the batches' last records are older
    produce_batches(bs, topic, [[base + 1, base + 5, base + 2, base + 3],
                                [base + 4, base + 6, base + 90, base + 7, base + 90, base + 8],
                                [base + 9, base + 90, base + 10]], codec)
    admin = AdminClient({"bootstrap.servers": bs})
    tp, tp_empty = TopicPartition(topic, 0), TopicPartition(empty, 0)

    def confluent(spec):
        got = admin.list_offsets({tp: spec, tp_empty: spec}, request_timeout=10)
        return {k.topic: (v.result(30).offset, v.result(30).timestamp) for k, v in got.items()}

    assert confluent(OffsetSpec.max_timestamp()) == {topic: (6, base + 90), empty: (-1, -1)}
    assert confluent(OffsetSpec.earliest()) == {topic: (0, -1), empty: (0, -1)}
    assert confluent(OffsetSpec.latest()) == {topic: (13, -1), empty: (0, -1)}

    kp = KafkaAdminClient(bootstrap_servers=bs)
    try:
        ktp, ktp_empty = KTopicPartition(topic, 0), KTopicPartition(empty, 0)

        def kafka_python(spec):
            got = kp.list_partition_offsets({ktp: spec, ktp_empty: spec})
            return {k.topic: (v.offset, v.timestamp) for k, v in got.items()}

        assert kafka_python(KOffsetSpec.MAX_TIMESTAMP) == {topic: (6, base + 90), empty: (-1, -1)}
        # v8 EARLIEST_LOCAL: without tiered storage the local log is the whole log
        assert kafka_python(KOffsetSpec.EARLIEST_LOCAL) == {topic: (0, -1), empty: (0, -1)}
        # v9 LATEST_TIERED: nothing is tiered, Kafka answers -1
        assert kafka_python(KOffsetSpec.LATEST_TIERED) == {topic: (-1, -1), empty: (-1, -1)}
    finally:
        kp.close()

    # the wire answers with their leader epochs: the batch's for MAX_TIMESTAMP, the first for -4
    leader = leader_of(bs, topic, 0)
    mod = request_module(LIST_OFFSETS, 9)
    answers = {}
    for spec in (-3, -4, -5):
        (r,) = ask(cluster.broker_ports[leader], [mod.ListOffsetsRequest(
            replica_id=i32(-1), isolation_level=i8(0), topics=(mod.ListOffsetsTopic(name=topic, partitions=(
                mod.ListOffsetsPartition(partition_index=i32(0), current_leader_epoch=i32(-1), timestamp=i64(spec)),
            )),))])
        (p,) = r.topics[0].partitions
        answers[spec] = (p.error_code, int(p.offset), int(p.timestamp), int(p.leader_epoch))
    assert answers == {-3: (ErrorCode.none, 6, base + 90, 0), -4: (ErrorCode.none, 0, -1, 0),
                       -5: (ErrorCode.none, -1, -1, -1)}


def test_list_offsets_versions_keep_librdkafkas_exact_ones(cluster):
    (r,) = ask(cluster.broker_ports[0], [request(API_VERSIONS, 0)])
    lo, hi = next((int(k.min_version), int(k.max_version)) for k in r.api_keys if int(k.api_key) == LIST_OFFSETS)
    assert lo <= 1 and hi == 9  # librdkafka wants v1 exactly (FINDINGS); Kafka 3.9 serves up to v9


# --- topic names: collisions refused, '.' and '_' otherwise fine; deletion racing auto-creation ------


def test_names_colliding_through_dot_and_underscore_are_refused(cluster):
    from confluent_kafka.admin import NewTopic
    from kafka.admin import KafkaAdminClient
    from kafka.admin import NewTopic as KNewTopic
    from kafka.errors import InvalidTopicError

    bs = cluster.bootstrap
    tag = uuid.uuid4().hex[:6]
    make_topic(cluster, f"conf.name_{tag}", 1)  # '.' and '_' alone are fine
    admin = AdminClient({"bootstrap.servers": bs})
    future = admin.create_topics([NewTopic(f"conf_name.{tag}", 1, 1)], request_timeout=30)[f"conf_name.{tag}"]
    with pytest.raises(KafkaException) as refused:
        future.result(30)
    assert refused.value.args[0].code() == KafkaError.TOPIC_EXCEPTION
    assert f"collides with existing topics: conf.name_{tag}" in refused.value.args[0].str()
    kp = KafkaAdminClient(bootstrap_servers=bs)
    try:
        with pytest.raises(InvalidTopicError):
            kp.create_topics([KNewTopic(f"conf_name_{tag}", 1, 1)])
    finally:
        kp.close()
    # within one request too: the later of two colliding names is refused (Kafka creates in order)
    pair = admin.create_topics([NewTopic(f"conf.pair_{tag}", 1, 1), NewTopic(f"conf_pair.{tag}", 1, 1)],
                               request_timeout=30)
    pair[f"conf.pair_{tag}"].result(30)
    with pytest.raises(KafkaException) as refused:
        pair[f"conf_pair.{tag}"].result(30)
    assert refused.value.args[0].code() == KafkaError.TOPIC_EXCEPTION
    # auto-creation follows the same rule
    (r,) = ask(cluster.broker_ports[0], [request(METADATA, 12, topics=(request_module(METADATA, 12).MetadataRequestTopic(
        name=f"conf.name.{tag}", topic_id=None),), allow_auto_topic_creation=True,
        include_topic_authorized_operations=False)])
    assert r.topics[0].error_code == ErrorCode.invalid_topic_exception


def test_deleting_a_topic_while_a_producer_recreates_it_never_fails_the_metadata_request(cluster):
    """A producer keeps auto-creating a topic that an admin keeps deleting; Metadata requests for
    it and another topic meanwhile answer that topic with a retriable code and the other normally."""
    import threading

    bs = cluster.bootstrap
    churned, steady = unique("churn"), unique("steady")
    make_topic(cluster, steady, 1)
    make_topic(cluster, churned, 1)
    stop = threading.Event()

    def produce_forever():
        p = Producer({"bootstrap.servers": bs, "message.timeout.ms": 5000, "linger.ms": 5})
        while not stop.is_set():
            try:
                p.produce(churned, b"x")
            except BufferError:
                pass
            p.poll(0.01)
        p.flush(10)

    producer = threading.Thread(target=produce_forever, daemon=True)
    producer.start()
    admin = AdminClient({"bootstrap.servers": bs})
    md = request_module(METADATA, 12)
    seen: dict[str, set] = {churned: set(), steady: set()}
    refusals: list[int] = []
    try:
        for _ in range(5):
            deleted = admin.delete_topics([churned], operation_timeout=10, request_timeout=15)[churned]
            for _ in range(20):
                for port in cluster.broker_ports:
                    (r,) = ask(port, [request(METADATA, 12, topics=tuple(md.MetadataRequestTopic(name=n, topic_id=None)
                                                                           for n in (churned, steady)),
                                              allow_auto_topic_creation=True,
                                              include_topic_authorized_operations=False)])
                    for t in r.topics:
                        seen[t.name].add(t.error_code)
            try:
                deleted.result(20)
            except KafkaException as e:
                refusals.append(e.args[0].code())
    finally:
        stop.set()
        producer.join(20)
    assert seen[steady] == {ErrorCode.none}
    # a deletion may find the topic already gone (deleted again before the producer recreated it)
    assert set(refusals) <= {KafkaError.UNKNOWN_TOPIC_OR_PART}, refusals
    assert seen[churned] <= {ErrorCode.none, ErrorCode.leader_not_available, ErrorCode.unknown_topic_or_partition}, \
        seen[churned]


# --- session expiry at the deadline ----------------------------------------------------------------


def test_a_silent_member_is_gone_exactly_one_session_timeout_after_it_was_last_heard(cluster):
    """A member joins and syncs, then says nothing: a client that waits exactly session.timeout.ms
    (plus 100 ms) after the SyncGroup answer finds it gone. (A 200 ms reaper got this wrong.)"""
    import datetime

    from kio.static.primitive import i32Timedelta

    session = 6000
    group = unique("g-session")
    port = coordinator_port(cluster, group)
    join_mod, sync_mod = request_module(11, 5), request_module(14, 3)
    timeout = i32Timedelta.parse(datetime.timedelta(milliseconds=session))

    def join(member_id: str):
        return join_mod.JoinGroupRequest(group_id=group, session_timeout=timeout, rebalance_timeout=timeout,
                                         member_id=member_id, group_instance_id=None, protocol_type="consumer",
                                         protocols=(join_mod.JoinGroupRequestProtocol(name="range", metadata=b""),))

    async def scenario():
        client = NetworkClient("127.0.0.1", port)
        try:
            first = await client.send(join(""), timeout=30)
            assert first.error_code == ErrorCode.member_id_required
            joined = await client.send(join(first.member_id), timeout=30)
            assert joined.error_code == ErrorCode.none
            synced = await client.send(sync_mod.SyncGroupRequest(
                group_id=group, generation_id=joined.generation_id, member_id=joined.member_id,
                group_instance_id=None, assignments=(sync_mod.SyncGroupRequestAssignment(
                    member_id=joined.member_id, assignment=b""),)), timeout=30)
            last_heard = time.monotonic()  # the broker set the deadline before it answered
            assert synced.error_code == ErrorCode.none
            describe = request(DESCRIBE_GROUPS, 5, groups=(group,), include_authorized_operations=False)
            alive = await client.send(describe, timeout=30)
            assert [m.member_id for m in alive.groups[0].members] == [joined.member_id]
            # the waiting is the subject here: exactly the session timeout, then one look
            await asyncio.sleep(max(0.0, last_heard + session / 1000 + 0.1 - time.monotonic()))
            return await client.send(describe, timeout=30)
        finally:
            await client.close()

    after = asyncio.run(scenario())
    (described,) = after.groups
    assert (described.group_state, described.members) == ("Empty", ()), described


# --- ACLs with no authorizer -----------------------------------------------------------------------


def test_acl_apis_answer_security_disabled_and_store_nothing(cluster):
    """Kafka with no authorizer serves DescribeAcls, CreateAcls and DeleteAcls and refuses each with
    SECURITY_DISABLED: tools say why, instead of "not supported by broker"."""
    from confluent_kafka.admin import (
        AclBinding,
        AclBindingFilter,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )
    from kafka.admin import (
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        KafkaAdminClient,
        ResourcePatternFilter,
    )
    from kafka.admin import ResourceType as KpResourceType
    from kafka.errors import SecurityDisabledError

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    binding = AclBinding(ResourceType.TOPIC, "t", ResourcePatternType.LITERAL, "User:alice", "*",
                         AclOperation.READ, AclPermissionType.ALLOW)
    match_all = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                                 AclPermissionType.ANY)

    def refusal(future) -> KafkaError:
        with pytest.raises(KafkaException) as e:
            future.result(30)
        return e.value.args[0]

    # librdkafka reads DescribeAcls' top-level error and drops it (as against Kafka): no ACLs
    assert admin.describe_acls(match_all, request_timeout=10).result(30) == []
    created = admin.create_acls([binding], request_timeout=10)
    assert refusal(created[binding]).code() == KafkaError.SECURITY_DISABLED
    deleted = admin.delete_acls([match_all], request_timeout=10)
    assert refusal(deleted[match_all]).code() == KafkaError.SECURITY_DISABLED

    kp = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        with pytest.raises(SecurityDisabledError, match="No Authorizer"):
            kp.describe_acls(ACLFilter(principal=None, host="*", operation=ACLOperation.ANY,
                                       permission_type=ACLPermissionType.ANY,
                                       resource_pattern=ResourcePatternFilter(KpResourceType.ANY, None,
                                                                              ACLResourcePatternType.ANY)))
    finally:
        kp.close()

    # on the wire, every served version: one refusal per creation and per filter, in order
    creations = [dict(resource_type=i8(2), resource_name=f"t{i}", resource_pattern_type=i8(3), principal="User:a",
                      host="*", operation=i8(3), permission_type=i8(3)) for i in range(3)]
    filters = [dict(resource_type_filter=i8(1), resource_name_filter=None, pattern_type_filter=i8(1),
                    principal_filter=None, host_filter=None, operation=i8(1), permission_type=i8(1))] * 2
    requests = []
    for v in (1, 2, 3):
        create_mod, delete_mod = request_module(CREATE_ACLS, v), request_module(DELETE_ACLS, v)
        requests += [
            request(DESCRIBE_ACLS, v, **filters[0]),
            request(CREATE_ACLS, v, creations=tuple(wire.make_entity(create_mod.AclCreation, **c) for c in creations)),
            request(DELETE_ACLS, v, filters=tuple(wire.make_entity(delete_mod.DeleteAclsFilter, **f) for f in filters)),
        ]
    for describe, create, delete in zip(*[iter(ask(cluster.broker_ports[0], requests))] * 3, strict=True):
        assert (describe.error_code, describe.resources) == (ErrorCode.security_disabled, ())
        assert [r.error_code for r in create.results] == [ErrorCode.security_disabled] * 3
        assert [(r.error_code, r.matching_acls) for r in delete.filter_results] == [(ErrorCode.security_disabled, ())] * 2

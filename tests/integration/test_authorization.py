"""The authorizer on a real cluster (issue 26): Kafka's AclAuthorizer semantics seen by real
clients (confluent-kafka, kafka-python) over PLAINTEXT, where every connection is User:ANONYMOUS.

As in Kafka, the brokers' own requests (replica fetches, LeaderAndIsr from the controller,
transaction markers, KIP-890 verification) then come as User:ANONYMOUS too and need CLUSTER_ACTION
on the Cluster: the test grants that one ACL in ZooKeeper before the cluster starts (what
kafka-acls --authorizer-properties does), and nothing else. Each test adds the ACLs it needs in
ZooKeeper and removes them at its end; one ACL goes through the CreateAcls API of one broker to
check that every broker enforces it within 5 s.
"""

import asyncio
import datetime
import sys
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8, i64

from odradek.broker.authorizer import zk_acl_store as store
from odradek.broker.authorizer.acl import (
    AccessControlEntry,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from odradek.common import wire
from odradek.common.zk_calls import BoundedCalls
from odradek.common.zk_connect import ensure_chroot
from odradek.dev.waiting import wait_until

from .conftest import new_cluster
from .kafka_helpers import ask

ANONYMOUS = "User:ANONYMOUS"
OP, RT, PT = AclOperation, ResourceType, PatternType
SECURED = {
    "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
    "offsets.topic.num.partitions": 2,
    "offsets.topic.replication.factor": 2,
    "transaction.state.log.num.partitions": 2,
    "transaction.state.log.replication.factor": 2,
    "transaction.state.log.min.isr": 1,
    "group.initial.rebalance.delay.ms": 0,
    "group.min.session.timeout.ms": 1000,
}
METADATA, INIT_PRODUCER_ID, CREATE_ACLS = 3, 22, 30
ENFORCED_WITHIN_S = 5.0


def acl(rt: ResourceType, name: str, op: AclOperation, pt: PatternType = PT.LITERAL,
        permission: AclPermissionType = AclPermissionType.ALLOW) -> tuple[ResourcePattern, AccessControlEntry]:
    return ResourcePattern(rt, name, pt), AccessControlEntry(ANONYMOUS, "*", op, permission)


CLUSTER_ACTION = acl(RT.CLUSTER, "kafka-cluster", OP.CLUSTER_ACTION)


class ZkAcls:
    """ACLs written straight to ZooKeeper, as Kafka's tools can; every broker follows the change
    notifications. Remembers what it added, to remove it all at the end of a test."""

    def __init__(self, zk):
        self.calls = BoundedCalls(zk, 10)
        self.added: list = []

    def add(self, *acls) -> None:
        for pattern, entry in acls:
            store.update_resource(self.calls, pattern, lambda cur, entry=entry: cur | {entry})
            self.added.append((pattern, entry))

    def remove(self, *acls) -> None:
        for pattern, entry in acls:
            store.update_resource(self.calls, pattern, lambda cur, entry=entry: cur - {entry})

    def clear(self) -> None:
        self.remove(*self.added)
        self.added.clear()


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory):
    c = new_cluster(zookeeper, tmp_path_factory.mktemp("authz"), brokers=2, broker_overrides=SECURED)
    ensure_chroot(c.zookeeper_connect, timeout=15)
    zk = c.zk_client()
    try:
        calls = BoundedCalls(zk, 10)
        store.ensure_paths(calls)
        ZkAcls(zk).add(CLUSTER_ACTION)
    finally:
        zk.stop()
        zk.close()
    c.start()
    yield c
    c.stop()


@pytest.fixture
def acls(cluster):
    zk = cluster.zk_client()
    z = ZkAcls(zk)
    yield z
    z.clear()
    settle(cluster, z)
    zk.stop()
    zk.close()


def settle(cluster, z: ZkAcls) -> None:
    """Wait until every broker applied the changes made so far, so the next test starts from the
    same ACLs: a barrier ACL written after them is visible on each broker only once the earlier
    notifications (lower sequence numbers, read in the same pass) were applied."""
    barrier = unique("barrier")
    z.add(acl(RT.TOPIC, barrier, OP.DESCRIBE))
    for port in cluster.broker_ports:
        wait_until(lambda port=port: _metadata_error(port, barrier) == ErrorCode.unknown_topic_or_partition,
                   f"broker on port {port} applies the ACL changes", 15, 0.05)
    z.remove(z.added.pop())


def _metadata_error(port: int, topic: str) -> ErrorCode:
    mod = request_module(METADATA, 12)
    (md,) = ask(port, [request(METADATA, 12, topics=(mod.MetadataRequestTopic(name=topic, topic_id=None),),
                               allow_auto_topic_creation=False, include_topic_authorized_operations=False)])
    return md.topics[0].error_code


def eventually(check, what: str, timeout: float = 15.0):
    """`check()` until it stops raising (the ACL change reached the brokers): its value."""
    last: list = []

    def attempt():
        try:
            return (check(),)
        except Exception as e:  # the clients' own error types: AssertionError, KafkaException, kafka-python's
            last[:] = [e]
            return None

    try:
        return wait_until(attempt, what, timeout, 0.2)[0]
    except TimeoutError as e:
        raise AssertionError(f"{what}: {last}") from e


def produce(bootstrap: str, topic: str, values: list[bytes], **config) -> list:
    """Delivery errors (None for each record delivered)."""
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": False, "message.timeout.ms": 6000,
                  "retries": 0, **config})
    errors: list = []
    for v in values:
        p.produce(topic, v, on_delivery=lambda err, _msg: errors.append(err))
    p.flush(15)
    return errors


def error_code(exc_info) -> int:
    return exc_info.value.args[0].code()


def test_produce_consume_and_groups_with_least_privilege(cluster, acls):
    """CreateTopics, Metadata, Produce, Fetch, FindCoordinator, JoinGroup, OffsetCommit: Kafka's
    refusal without the ACL, success with exactly the documented one; revoking READ stops an
    active consumer's next fetch."""
    topic, group = unique("orders"), unique("group")
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    with pytest.raises(KafkaException) as e:
        admin.create_topics([NewTopic(topic, 2, 2)], request_timeout=10)[topic].result(20)
    assert error_code(e) == KafkaError.TOPIC_AUTHORIZATION_FAILED

    acls.add(acl(RT.TOPIC, topic, OP.CREATE))

    def create():
        try:
            admin.create_topics([NewTopic(topic, 2, 2)], request_timeout=10)[topic].result(20)
        except KafkaException as err:
            if err.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
    eventually(create, "CREATE on the topic lets CreateTopics through")

    # CREATE does not imply DESCRIBE: Metadata hides the topic, and refuses it by name
    assert topic not in admin.list_topics(timeout=10).topics
    named = admin.list_topics(topic=topic, timeout=10).topics[topic]
    assert named.error is not None and named.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

    refused = produce(cluster.bootstrap, topic, [b"x"])
    assert [err.code() for err in refused] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]

    acls.add(acl(RT.TOPIC, topic, OP.WRITE))
    eventually(lambda: _all_delivered(produce(cluster.bootstrap, topic, [b"v%d" % i for i in range(10)])),
               "WRITE lets Produce through")
    assert topic in admin.list_topics(timeout=10).topics  # WRITE implies DESCRIBE

    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "session.timeout.ms": 6000})
    try:
        consumer.subscribe([topic])
        codes = _poll_errors(consumer, KafkaError.GROUP_AUTHORIZATION_FAILED)
        assert KafkaError.GROUP_AUTHORIZATION_FAILED in codes, codes

        acls.add(acl(RT.GROUP, group, OP.READ))
        codes = _poll_errors(consumer, KafkaError.TOPIC_AUTHORIZATION_FAILED)
        assert KafkaError.TOPIC_AUTHORIZATION_FAILED in codes, codes  # the group is fine, the topic not

        acls.add(acl(RT.TOPIC, topic, OP.READ))
        got = _consume(consumer, 10, 30)
        assert sorted(got) == sorted(b"v%d" % i for i in range(10))
        consumer.commit(asynchronous=False)
        committed = consumer.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=10)
        assert sum(tp.offset for tp in committed if tp.offset >= 0) == 10

        acls.remove(acl(RT.TOPIC, topic, OP.READ))
        revoked = time.monotonic()
        assert _all_delivered(produce(cluster.bootstrap, topic, [b"after"]))
        codes, late = [], []
        deadline = time.monotonic() + ENFORCED_WITHIN_S + 5
        while time.monotonic() < deadline and KafkaError.TOPIC_AUTHORIZATION_FAILED not in codes:
            msg = consumer.poll(0.5)
            if msg is not None:
                (codes.append(msg.error().code()) if msg.error() else late.append(msg.value()))
        assert KafkaError.TOPIC_AUTHORIZATION_FAILED in codes, codes
        assert time.monotonic() - revoked < ENFORCED_WITHIN_S + 5
        assert late in ([], [b"after"])  # at most a fetch already in flight when READ went
    finally:
        consumer.close()


def test_idempotent_and_transactional_producers(cluster, acls):
    """InitProducerId: with no WRITE anywhere CLUSTER_AUTHORIZATION_FAILED; WRITE on one topic is
    enough for an idempotent producer (KIP-679); a transactional one also needs WRITE on its
    transactional id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED)."""
    topic, txn = unique("idem"), unique("txn")
    init = request(INIT_PRODUCER_ID, 4, transactional_id=None, transaction_timeout=wire.NO_THROTTLE,
                   producer_id=i64(-1), producer_epoch=-1)

    def refused() -> None:  # (an earlier test's WRITE ACLs may still be on their way out)
        (answer,) = ask(cluster.broker_ports[0], [init])
        assert answer.error_code == ErrorCode.cluster_authorization_failed, answer

    eventually(refused, "InitProducerId without WRITE anywhere")

    acls.add(acl(RT.TOPIC, topic, OP.CREATE), acl(RT.TOPIC, topic, OP.WRITE))
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    eventually(lambda: admin.create_topics([NewTopic(topic, 1, 2)], request_timeout=10)[topic].result(20),
               "CreateTopics")
    assert eventually(lambda: _all_delivered(produce(cluster.bootstrap, topic, [b"a", b"b"], **{
        "enable.idempotence": True, "retries": 5})), "idempotent produce with WRITE on the topic only")

    tx_config = {"bootstrap.servers": cluster.bootstrap, "transactional.id": txn, "transaction.timeout.ms": 10000}
    producer = Producer(tx_config)
    with pytest.raises(KafkaException) as e:
        producer.init_transactions(15)
    assert error_code(e) == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED

    acls.add(acl(RT.TRANSACTIONAL_ID, txn, OP.WRITE))

    def transaction():
        p = Producer(tx_config)
        p.init_transactions(15)
        p.begin_transaction()
        p.produce(topic, b"in-txn")
        p.commit_transaction(15)
        return True

    assert eventually(transaction, "a transaction with WRITE on its id and on the topic", timeout=30)


def test_admin_apis_and_acls_through_one_broker_enforced_by_all(cluster, acls):
    """DescribeConfigs, AlterConfigs, DeleteTopics, CreatePartitions refused without the ACL;
    CreateAcls needs ALTER on the Cluster; an ACL created through broker 0 is enforced by
    broker 1 within 5 s."""
    topic = unique("admin")
    acls.add(acl(RT.TOPIC, topic, OP.CREATE), acl(RT.TOPIC, topic, OP.DESCRIBE))
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    eventually(lambda: admin.create_topics([NewTopic(topic, 1, 2)], request_timeout=10)[topic].result(20),
               "CreateTopics")

    described = ConfigResource("topic", topic)
    with pytest.raises(KafkaException) as e:
        admin.describe_configs([described])[described].result(20)
    assert error_code(e) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    acls.add(acl(RT.TOPIC, topic, OP.ALTER_CONFIGS))  # implies DESCRIBE_CONFIGS
    configs = eventually(lambda: admin.describe_configs([described])[described].result(20),
                         "ALTER_CONFIGS implies DESCRIBE_CONFIGS")
    assert "retention.ms" in configs

    resource = ConfigResource("topic", topic, set_config={"retention.ms": "3600000"})
    admin.alter_configs([resource])[resource].result(20)  # ALTER_CONFIGS granted above
    for future in admin.delete_topics([topic], request_timeout=10).values():
        with pytest.raises(KafkaException) as e:
            future.result(20)
        assert error_code(e) == KafkaError.TOPIC_AUTHORIZATION_FAILED

    # CreateAcls through broker 0 (raw, so it is that broker), enforced by broker 1
    other = unique("seen")
    creation = request_module(CREATE_ACLS, 3).AclCreation(
        resource_type=i8(RT.TOPIC), resource_name=other, resource_pattern_type=i8(PT.PREFIXED),
        principal=ANONYMOUS, host="*", operation=i8(OP.DESCRIBE), permission_type=i8(AclPermissionType.ALLOW))
    create = request(CREATE_ACLS, 3, creations=(creation,))
    (refused,) = ask(cluster.broker_ports[0], [create])
    assert [r.error_code for r in refused.results] == [ErrorCode.cluster_authorization_failed]
    acls.add(acl(RT.CLUSTER, "kafka-cluster", OP.ALTER))
    settle(cluster, acls)  # ALTER reaching broker 0 is not what is measured

    def metadata_error(port: int) -> ErrorCode:
        mod = request_module(METADATA, 12)
        (md,) = ask(port, [request(METADATA, 12, topics=(mod.MetadataRequestTopic(name=other + "x", topic_id=None),),
                                   allow_auto_topic_creation=False, include_topic_authorized_operations=False)])
        return md.topics[0].error_code

    assert metadata_error(cluster.broker_ports[1]) == ErrorCode.topic_authorization_failed
    (created,) = ask(cluster.broker_ports[0], [create])
    start = time.monotonic()
    assert [r.error_code for r in created.results] == [ErrorCode.none]
    acls.added.append(acl(RT.TOPIC, other, OP.DESCRIBE, PT.PREFIXED))  # removed at the end
    wait_until(lambda: metadata_error(cluster.broker_ports[1]) == ErrorCode.unknown_topic_or_partition,
               "broker 1 applies the ACL created through broker 0", ENFORCED_WITHIN_S, 0.05)
    print(f"ACL created through broker 0 enforced by broker 1 after {time.monotonic() - start:.3f}s")

    # bad input through the API: Kafka's per-item errors, nothing stored
    bad = request_module(CREATE_ACLS, 3).AclCreation(
        resource_type=i8(RT.TOPIC), resource_name="", resource_pattern_type=i8(PT.PREFIXED),
        principal="nobody", host="*", operation=i8(99), permission_type=i8(AclPermissionType.ALLOW))
    (answer,) = ask(cluster.broker_ports[1], [request(CREATE_ACLS, 3, creations=(bad,) * 3000)])
    assert {r.error_code for r in answer.results} == {ErrorCode.invalid_request}
    assert len(answer.results) == 3000


def test_kafka_python_clients(cluster, acls):
    """kafka-python's producer and consumer: TopicAuthorizationFailedError without the ACLs,
    records through with WRITE and READ."""
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.errors import KafkaError as KpError
    from kafka.errors import TopicAuthorizationFailedError

    topic = unique("kp")
    acls.add(acl(RT.TOPIC, topic, OP.CREATE), acl(RT.TOPIC, topic, OP.DESCRIBE))
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    eventually(lambda: admin.create_topics([NewTopic(topic, 1, 2)], request_timeout=10)[topic].result(20),
               "CreateTopics")
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, retries=0, request_timeout_ms=10000,
                             max_block_ms=10000)
    try:
        with pytest.raises(KpError) as e:
            producer.send(topic, b"x").get(15)
        assert isinstance(e.value, TopicAuthorizationFailedError) or "TopicAuthorizationFailed" in repr(e.value)
        acls.add(acl(RT.TOPIC, topic, OP.WRITE))
        eventually(lambda: producer.send(topic, b"hello").get(15), "kafka-python produce with WRITE")
    finally:
        producer.close(5)

    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap, auto_offset_reset="earliest",
                             consumer_timeout_ms=3000, request_timeout_ms=10000)
    try:
        consumer.assign([_kp_partition(topic)])
        with pytest.raises(TopicAuthorizationFailedError):
            _poll_until_raised(consumer)
        acls.add(acl(RT.TOPIC, topic, OP.READ))
        values = eventually(lambda: _kp_values(consumer), "kafka-python fetch with READ")
        assert b"hello" in values
    finally:
        consumer.close()


# --- helpers -------------------------------------------------------------------------------------


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"



def request_module(api: int, version: int):
    return sys.modules[wire.request_schema(api, version).__module__]


def request(api: int, version: int, **fields):
    return wire.make_entity(wire.request_schema(api, version), **fields)


def _all_delivered(errors: list) -> bool:
    assert errors and all(e is None for e in errors), errors
    return True


def _poll_errors(consumer, expected: int, seconds: float = 30.0) -> list[int]:
    """The consumer's error codes until `expected` is among them (or `seconds` pass). Polled for
    that event, not for a fixed time: the ACL change travels through ZooKeeper to each broker,
    and the consumer retries its coordinator and group on backoffs, each slower on a busy
    machine (a fixed 8 s missed it under load, and cost 8 s every time when idle)."""
    codes: list[int] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and expected not in codes:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error():
            codes.append(msg.error().code())
    return codes


def _consume(consumer, n: int, seconds: float) -> list[bytes]:
    got: list[bytes] = []
    deadline = time.monotonic() + seconds
    while len(got) < n and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            got.append(msg.value())
    return got


def _poll_until_raised(consumer) -> None:
    for _ in range(10):
        consumer.poll(1000)


def _kp_partition(topic):
    from kafka import TopicPartition as KpTopicPartition

    return KpTopicPartition(topic, 0)


def _kp_values(consumer) -> list[bytes]:
    got = [r.value for batch in consumer.poll(2000).values() for r in batch]
    assert got
    return got


def test_acls_tool(cluster, acls):
    """`odradek acls --add/--list/--remove` through the admin API: refused without ALTER on the
    Cluster, then adds, lists and removes (ALTER implies the DESCRIBE --list needs)."""
    import subprocess

    def tool(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "odradek.cli", "acls", "--bootstrap-server", cluster.bootstrap,
                               "--timeout", "15", *args], capture_output=True, text=True, timeout=60)

    topic, group = unique("tool"), unique("tool-group")
    add = ("--add", "--allow-principal", "User:alice", "--consumer", "--topic", topic, "--group", group)
    refused = tool(*add)
    assert refused.returncode == 1 and "CLUSTER_AUTHORIZATION_FAILED" in refused.stdout, refused
    acls.add(acl(RT.CLUSTER, "kafka-cluster", OP.ALTER))
    added = eventually(lambda: _ok(tool(*add)), "odradek acls --add with ALTER on the Cluster")
    assert added.stdout.count("Added ACL") == 3
    listed = tool("--list", "--topic", topic)
    assert listed.returncode == 0
    assert sorted(listed.stdout.splitlines()) == [
        f"Topic:LITERAL:{topic}\t(principal=User:alice, host=*, operation=DESCRIBE, permissionType=ALLOW)",
        f"Topic:LITERAL:{topic}\t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)"]
    removed = tool("--remove", "--topic", topic, "--group", group)
    assert removed.returncode == 0 and removed.stdout.count("Removed ACL") == 3, removed
    assert tool("--list", "--topic", topic).stdout == ""
    bad = tool("--add", "--allow-principal", "alice", "--topic", topic)
    assert bad.returncode == 2 and "principalType:principalName" in bad.stderr


def _ok(result):
    assert result.returncode == 0, (result.stdout, result.stderr)
    return result


def test_admin_matrix(cluster, acls):
    """The admin APIs a client can call: Kafka's refusal without the ACL, success with exactly the
    documented one (confluent-kafka's AdminClient)."""
    from confluent_kafka import ConsumerGroupTopicPartitions, ElectionType, TopicCollection
    from confluent_kafka.admin import (
        AclOperation as CkOp,
    )
    from confluent_kafka.admin import (
        AlterConfigOpType,
        ConfigEntry,
        NewPartitions,
        OffsetSpec,
    )

    topic, group = unique("matrix"), unique("matrix-group")
    acls.add(acl(RT.TOPIC, topic, OP.CREATE), acl(RT.TOPIC, topic, OP.WRITE))
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    eventually(lambda: admin.create_topics([NewTopic(topic, 1, 2)], request_timeout=10)[topic].result(20),
               "CreateTopics")
    eventually(lambda: _all_delivered(produce(cluster.bootstrap, topic, [b"a", b"b", b"c"])), "Produce")

    def refused(future) -> int:
        with pytest.raises(KafkaException) as e:
            future.result(20)
        return error_code(e)

    tp = TopicPartition(topic, 0)
    # KIP-430: WRITE and CREATE granted, DESCRIBE implied by WRITE; nothing else
    (described,) = admin.describe_topics(TopicCollection([topic]),
                                         include_authorized_operations=True).values()
    assert set(described.result(20).authorized_operations) == {CkOp.WRITE, CkOp.CREATE, CkOp.DESCRIBE}
    cluster_ops = admin.describe_cluster(include_authorized_operations=True).result(20).authorized_operations
    assert not cluster_ops  # no DESCRIBE on the Cluster: no bits
    # ListOffsets: DESCRIBE (implied by WRITE)
    latest = admin.list_offsets({tp: OffsetSpec.latest()}, request_timeout=10)[tp].result(20)
    assert latest.offset == 3

    # CreatePartitions: ALTER on the topic
    grow = NewPartitions(topic, 2)
    assert refused(admin.create_partitions([grow], request_timeout=10)[topic]) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    acls.add(acl(RT.TOPIC, topic, OP.ALTER))
    eventually(lambda: admin.create_partitions([grow], request_timeout=10)[topic].result(20), "CreatePartitions")

    # DeleteRecords: DELETE on the topic
    cut = TopicPartition(topic, 0, 1)
    assert refused(admin.delete_records([cut], request_timeout=10)[cut]) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    acls.add(acl(RT.TOPIC, topic, OP.DELETE))
    eventually(lambda: admin.delete_records([cut], request_timeout=10)[cut].result(20), "DeleteRecords")

    # a group with a committed offset, made with READ on the group and the topic
    acls.add(acl(RT.GROUP, group, OP.READ), acl(RT.TOPIC, topic, OP.READ))
    offsets = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0, 2)])
    def committed() -> None:
        # the result carries a partition's error (READ on the topic not yet applied by the
        # coordinator) instead of raising: the offset, and so the group, exist only once none has one
        result = admin.alter_consumer_group_offsets([offsets], request_timeout=10)[group].result(20)
        assert [tp.error for tp in result.topic_partitions] == [None]

    eventually(committed, "OffsetCommit through AlterConsumerGroupOffsets")
    acls.remove(acl(RT.GROUP, group, OP.READ))

    def describe_refused() -> None:
        code = None
        try:
            admin.describe_consumer_groups([group], request_timeout=10)[group].result(20)
        except KafkaException as err:
            code = err.args[0].code()
        assert code == KafkaError.GROUP_AUTHORIZATION_FAILED, code

    # DescribeGroups and ListGroups: DESCRIBE on the group (or the Cluster, for ListGroups)
    eventually(describe_refused, "DescribeGroups refused once READ on the group is revoked")
    listed = admin.list_consumer_groups(request_timeout=10).result(20)
    assert group not in {g.group_id for g in listed.valid}
    acls.add(acl(RT.GROUP, group, OP.DESCRIBE))
    eventually(lambda: admin.describe_consumer_groups([group], request_timeout=10)[group].result(20),
               "DescribeGroups with DESCRIBE")

    def listed_now() -> None:  # every broker answers ListGroups; a slow one leaves it out this time
        found = admin.list_consumer_groups(request_timeout=10).result(20)
        assert group in {g.group_id for g in found.valid}, found.errors

    eventually(listed_now, "ListGroups lists the group with DESCRIBE on it")
    # OffsetFetch: READ on the group
    fetched = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)], request_timeout=10)[group]
    assert refused(fetched) == KafkaError.GROUP_AUTHORIZATION_FAILED
    # DeleteGroups: DELETE on the group
    assert refused(admin.delete_consumer_groups([group], request_timeout=10)[group]) == \
        KafkaError.GROUP_AUTHORIZATION_FAILED
    acls.add(acl(RT.GROUP, group, OP.DELETE))
    eventually(lambda: admin.delete_consumer_groups([group], request_timeout=10)[group].result(20), "DeleteGroups")

    # Cluster-level: IncrementalAlterConfigs on a broker (ALTER_CONFIGS), ElectLeaders (ALTER)
    broker = ConfigResource("broker", "0", incremental_configs=[
        ConfigEntry("log.cleaner.threads", "1", incremental_operation=AlterConfigOpType.SET)])
    assert refused(admin.incremental_alter_configs([broker])[broker]) == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    assert refused(admin.elect_leaders(ElectionType.PREFERRED, [tp])) == \
        KafkaError.CLUSTER_AUTHORIZATION_FAILED


def test_spark_source_and_sink_with_least_privilege(spark, cluster, acls):
    """The PySpark sink (at-least-once: an idempotent producer) with WRITE on its topic only, and
    the source reading it back with READ only; without READ the read fails with Kafka's error."""
    topic = unique("spark")
    acls.add(acl(RT.TOPIC, topic, OP.CREATE), acl(RT.TOPIC, topic, OP.WRITE))
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    eventually(lambda: admin.create_topics([NewTopic(topic, 2, 2)], request_timeout=10)[topic].result(20),
               "CreateTopics")
    rows = [(b"k%d" % i, b"v%d" % i) for i in range(200)]
    df = spark.createDataFrame(rows, "key binary, value binary")
    (df.write.format("odradek").mode("append").option("kafka.bootstrap.servers", cluster.bootstrap)
     .option("topic", topic).option("deliveryGuarantee", "at-least-once").save())

    def read():
        return (spark.read.format("odradek").option("kafka.bootstrap.servers", cluster.bootstrap)
                .option("subscribe", topic).load().toArrow().to_pylist())

    from confluent_kafka.admin import OffsetSpec

    ends = admin.list_offsets({TopicPartition(topic, p): OffsetSpec.latest() for p in (0, 1)}, request_timeout=10)
    assert sum(f.result(20).offset for f in ends.values()) == len(rows)
    acls.remove(acl(RT.TOPIC, topic, OP.WRITE))
    acls.add(acl(RT.TOPIC, topic, OP.DESCRIBE))  # the source can list offsets, not fetch
    settle(cluster, acls)
    assert topic in admin.list_topics(timeout=10).topics
    start = time.monotonic()
    with pytest.raises(Exception, match=r"(?i)authori[sz]"):
        read()  # Fetch refused: the source fails at once, it never reads "no records"
    assert time.monotonic() - start < 60  # not the 120 s poll timeout
    acls.add(acl(RT.TOPIC, topic, OP.READ))
    settle(cluster, acls)
    assert sorted((r["key"], r["value"]) for r in read()) == sorted(rows)


def test_delegation_token_and_user_acls(cluster, acls):
    """ACLs on the DelegationToken (6) and User (7) resource types through Create/Describe/
    DeleteAcls, stored where Kafka keeps them; a token request for another owner is refused on a
    PLAINTEXT listener before any ACL is consulted (Kafka's allowTokenRequests)."""
    port = cluster.broker_ports[0]
    token, owner = unique("token"), f"User:{unique('owner')}"
    mod = request_module(CREATE_ACLS, 3)
    creations = tuple(mod.AclCreation(
        resource_type=i8(rt), resource_name=name, resource_pattern_type=i8(PT.LITERAL), principal=ANONYMOUS,
        host="*", operation=i8(op), permission_type=i8(AclPermissionType.ALLOW))
        for rt, name, op in ((RT.DELEGATION_TOKEN, token, OP.DESCRIBE), (RT.USER, owner, OP.CREATE_TOKENS),
                             (RT.USER, owner, OP.DESCRIBE_TOKENS)))
    (refused,) = ask(port, [request(CREATE_ACLS, 3, creations=creations)])
    assert [r.error_code for r in refused.results] == [ErrorCode.cluster_authorization_failed] * 3
    acls.add(acl(RT.CLUSTER, "kafka-cluster", OP.ALTER))
    def created() -> None:
        (answer,) = ask(port, [request(CREATE_ACLS, 3, creations=creations)])
        assert [r.error_code for r in answer.results] == [ErrorCode.none] * 3, answer

    eventually(created, "CreateAcls with ALTER on the Cluster")
    acls.added += [acl(RT.DELEGATION_TOKEN, token, OP.DESCRIBE), acl(RT.USER, owner, OP.CREATE_TOKENS),
                   acl(RT.USER, owner, OP.DESCRIBE_TOKENS)]
    zk = cluster.zk_client()
    try:
        assert zk.exists(f"/kafka-acl/DelegationToken/{token}") and zk.exists(f"/kafka-acl/User/{owner}")
    finally:
        zk.stop()
        zk.close()
    acls.add(acl(RT.CLUSTER, "kafka-cluster", OP.DESCRIBE))

    def described() -> None:
        (answer,) = ask(port, [request(29, 3, resource_type_filter=i8(RT.USER), resource_name_filter=owner,
                                       pattern_type_filter=i8(PT.ANY), principal_filter=None, host_filter=None,
                                       operation=i8(OP.ANY), permission_type=i8(AclPermissionType.ANY))])
        assert answer.error_code == ErrorCode.none
        assert sorted(int(a.operation) for r in answer.resources for a in r.acls) == [OP.CREATE_TOKENS,
                                                                                      OP.DESCRIBE_TOKENS]

    eventually(described, "DescribeAcls lists the User ACLs")
    # token requests on PLAINTEXT: never allowed, whatever the ACLs
    token_request = request(38, 3, owner_principal_type="User", owner_principal_name=owner[5:], renewers=(),
                            max_lifetime=datetime.timedelta(milliseconds=-1))

    async def token_error() -> int:  # read by hand: kio cannot decode the -1 timestamps Kafka sends
        from odradek.common.network.client import NetworkClient

        client = NetworkClient("127.0.0.1", port)
        try:
            body = bytes(await client.send_frame(lambda cid: wire.encode_request(token_request, cid, "t"), "token"))
        finally:
            await client.close()
        return int.from_bytes(body[5:7], "big", signed=True)  # correlation id, empty tags, error_code

    assert asyncio.run(token_error()) == ErrorCode.delegation_token_request_not_allowed
    # DeleteAcls removes them
    dmod = request_module(31, 3)
    (deleted,) = ask(port, [request(31, 3, filters=(dmod.DeleteAclsFilter(
        resource_type_filter=i8(RT.DELEGATION_TOKEN), resource_name_filter=token, pattern_type_filter=i8(PT.LITERAL),
        principal_filter=None, host_filter=None, operation=i8(OP.ANY), permission_type=i8(AclPermissionType.ANY)),))])
    assert [len(r.matching_acls) for r in deleted.filter_results] == [1]

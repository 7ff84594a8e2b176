"""The authorizer with authenticated principals (issues 25 and 26): a SASL_PLAINTEXT client
listener with SCRAM users, each its own principal, least-privilege ACLs per role, a super user
managing them with `odradek acls --command-config`.

One broker (no replication traffic). The controller still reaches the broker's control-plane
listener over PLAINTEXT, as User:ANONYMOUS: as in Kafka, that principal needs CLUSTER_ACTION on
the Cluster, written to ZooKeeper before the cluster starts.
"""

import subprocess
import sys
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.broker.authorizer import zk_acl_store as store
from odradek.broker.authorizer.acl import (
    AccessControlEntry,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from odradek.common.zk_calls import BoundedCalls
from odradek.common.zk_connect import ensure_chroot
from odradek.dev.waiting import wait_until

from .conftest import new_cluster

USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret", "mallory": "mallory-secret"}


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory):
    c = new_cluster(zookeeper, tmp_path_factory.mktemp("authz-sasl"), brokers=1, broker_overrides={
        "listener.security.protocol.map": "PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
        "sasl.enabled.mechanisms": "SCRAM-SHA-256",
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:admin",
        "offsets.topic.replication.factor": 1, "offsets.topic.num.partitions": 2,
        "group.initial.rebalance.delay.ms": 0,
    })
    try:
        ensure_chroot(c.zookeeper_connect, timeout=15)
        for user, password in USERS.items():
            subprocess.run([sys.executable, "-m", "odradek.cli", "users", "--zookeeper", c.zookeeper_connect,
                            "--entity-name", user, "--add-scram", f"SCRAM-SHA-256=[password={password}]"],
                           check=True, capture_output=True, timeout=60)
        zk = c.zk_client()
        try:
            calls = BoundedCalls(zk, 10)
            store.ensure_paths(calls)
            control_plane = AccessControlEntry("User:ANONYMOUS", "*", AclOperation.CLUSTER_ACTION,
                                               AclPermissionType.ALLOW)
            store.update_resource(calls, ResourcePattern(ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL),
                                  lambda cur: cur | {control_plane})
        finally:
            zk.stop()
            zk.close()
        for p in c.controllers + c.brokers:
            p.start()
        wait_until(lambda: _serving(c), "the broker answers an authenticated Metadata request", 60, 0.2)
        yield c
    finally:
        c.stop()


def _serving(c) -> bool:
    try:
        return bool(AdminClient(conf(c, "admin")).list_topics(timeout=2).brokers)
    except KafkaException:
        return False


def conf(c, user: str) -> dict:
    return {"bootstrap.servers": c.bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": user, "sasl.password": USERS[user]}


def acls_tool(c, tmp_path, user: str, *args: str) -> subprocess.CompletedProcess:
    props = tmp_path / f"{user}.properties"
    props.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n"
                     "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
                     f'username="{user}" password="{USERS[user]}";\n')
    return subprocess.run([sys.executable, "-m", "odradek.cli", "acls", "--bootstrap-server", c.bootstrap,
                           "--command-config", str(props), "--timeout", "15", *args],
                          capture_output=True, text=True, timeout=60)


def produce(c, user: str, topic: str, n: int, **extra) -> list:
    p = Producer({**conf(c, user), "message.timeout.ms": 8000, **extra})
    errors: list = []
    for i in range(n):
        p.produce(topic, b"%d" % i, on_delivery=lambda err, _m: errors.append(err))
    p.flush(20)
    return errors


def consume(c, user: str, topic: str, group: str, n: int, seconds: float = 20) -> tuple[list[bytes], list[int]]:
    consumer = Consumer({**conf(c, user), "group.id": group, "auto.offset.reset": "earliest",
                         "session.timeout.ms": 6000})
    consumer.subscribe([topic])
    got, codes = [], []
    deadline = time.monotonic() + seconds
    try:
        while len(got) < n and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                codes.append(msg.error().code())
                if len(codes) > 3:
                    break
            else:
                got.append(msg.value())
        if got:
            consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return got, codes


def test_each_user_gets_exactly_its_acls(cluster, tmp_path):
    topic, group = f"orders-{uuid.uuid4().hex[:6]}", f"billing-{uuid.uuid4().hex[:6]}"
    admin = AdminClient(conf(cluster, "admin"))  # a super user
    admin.create_topics([NewTopic(topic, 2, 1)], request_timeout=15)[topic].result(30)

    # mallory, with no ACL, may not grant herself any
    refused = acls_tool(cluster, tmp_path, "mallory", "--add", "--allow-principal", "User:mallory",
                        "--operation", "All", "--topic", topic)
    assert refused.returncode == 1 and "CLUSTER_AUTHORIZATION_FAILED" in refused.stdout, refused

    granted = acls_tool(cluster, tmp_path, "admin", "--add", "--allow-principal", "User:alice", "--producer",
                        "--topic", topic)
    assert granted.returncode == 0, granted
    granted = acls_tool(cluster, tmp_path, "admin", "--add", "--allow-principal", "User:bob", "--consumer",
                        "--topic", topic, "--group", group)
    assert granted.returncode == 0, granted

    # alice: an idempotent producer with WRITE on the topic only (KIP-679); no READ
    assert produce(cluster, "alice", topic, 10, **{"enable.idempotence": True}) == [None] * 10
    _, codes = consume(cluster, "alice", topic, group, 1, 10)
    assert KafkaError.GROUP_AUTHORIZATION_FAILED in codes, codes

    # bob: consumes in his group, may not produce
    got, codes = consume(cluster, "bob", topic, group, 10)
    assert sorted(got) == sorted(b"%d" % i for i in range(10)), codes
    assert [e.code() for e in produce(cluster, "bob", topic, 1, **{"enable.idempotence": False})] == [
        KafkaError.TOPIC_AUTHORIZATION_FAILED]

    # mallory: sees no topic, may neither produce nor join the group
    assert topic not in AdminClient(conf(cluster, "mallory")).list_topics(timeout=10).topics
    assert topic in AdminClient(conf(cluster, "bob")).list_topics(timeout=10).topics  # READ implies DESCRIBE
    assert [e.code() for e in produce(cluster, "mallory", topic, 1, **{"enable.idempotence": False})] == [
        KafkaError.TOPIC_AUTHORIZATION_FAILED]
    _, codes = consume(cluster, "mallory", topic, group, 1, 10)
    assert KafkaError.GROUP_AUTHORIZATION_FAILED in codes, codes

    listed = acls_tool(cluster, tmp_path, "admin", "--list", "--topic", topic)
    principals = {line.split("principal=")[1].split(",")[0] for line in listed.stdout.splitlines()}
    assert principals == {"User:alice", "User:bob"}
    # revoking bob's READ on the topic: his next consumer is refused
    removed = acls_tool(cluster, tmp_path, "admin", "--remove", "--allow-principal", "User:bob",
                        "--operation", "Read", "--topic", topic)
    assert removed.returncode == 0 and "Removed ACL" in removed.stdout, removed
    _, codes = consume(cluster, "bob", topic, group, 1, 10)
    assert KafkaError.TOPIC_AUTHORIZATION_FAILED in codes, codes

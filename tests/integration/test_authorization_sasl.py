"""The authorizer with authenticated principals (issues 25 and 26): a SASL_PLAINTEXT client
listener with SCRAM users, each its own principal, least-privilege ACLs per role, a super user
managing them with `odradek acls --command-config`.

Brokers replicate and write transaction markers as User:broker, the controller sends its requests
as User:controller, both super users: User:ANONYMOUS gets nothing.
"""

import subprocess
import sys
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

from odradek.common.security import jaas
from odradek.common.zk_connect import ensure_chroot
from odradek.dev.waiting import wait_until
from odradek.dev.zookeeper import free_ports

from .conftest import new_cluster
from .test_authorization import _metadata_error

USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret", "mallory": "mallory-secret",
         "broker": "broker-secret", "controller": "controller-secret"}
SCRAM = "SCRAM-SHA-256"


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory):
    """Two brokers: CLIENT (SASL) for the clients, INTERNAL (SASL, user `broker`) for replication
    and transaction markers, CONTROLLER (SASL, user `controller`) for the controller's requests,
    PLAINTEXT only for the harness's readiness check. Brokers and controller are super users;
    User:ANONYMOUS has no ACL at all."""
    client_ports, internal_ports = free_ports(2), free_ports(2)
    c = new_cluster(zookeeper, tmp_path_factory.mktemp("authz-sasl"), brokers=2, broker_overrides={
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CLIENT:SASL_PLAINTEXT,INTERNAL:SASL_PLAINTEXT,"
                                          "CONTROLLER:SASL_PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL",
        "sasl.enabled.mechanisms": SCRAM,
        "sasl.mechanism.inter.broker.protocol": SCRAM,
        "listener.name.internal.scram-sha-256.sasl.jaas.config": jaas.client_config(SCRAM, "broker", USERS["broker"]),
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:admin;User:broker;User:controller",
        "offsets.topic.replication.factor": 2, "offsets.topic.num.partitions": 2,
        "transaction.state.log.replication.factor": 2, "transaction.state.log.min.isr": 1,
        "transaction.state.log.num.partitions": 2, "group.initial.rebalance.delay.ms": 0,
    }, controller_overrides={
        "inter.broker.listener.name": "INTERNAL",
        "sasl.mechanism.controller.protocol": SCRAM,
        "sasl.mechanism.inter.broker.protocol": SCRAM,
        "listener.name.controller.scram-sha-256.sasl.jaas.config": jaas.client_config(
            SCRAM, "controller", USERS["controller"]),
        "listener.name.internal.scram-sha-256.sasl.jaas.config": jaas.client_config(
            SCRAM, "controller", USERS["controller"]),
    })
    for i, broker in enumerate(c.brokers):
        broker.overrides["listeners"] += (f",CLIENT://127.0.0.1:{client_ports[i]},"
                                          f"INTERNAL://127.0.0.1:{internal_ports[i]}")
    c.client_bootstrap = ",".join(f"127.0.0.1:{p}" for p in client_ports)
    try:
        ensure_chroot(c.zookeeper_connect, timeout=15)
        for user, password in USERS.items():
            subprocess.run([sys.executable, "-m", "odradek.cli", "users", "--zookeeper", c.zookeeper_connect,
                            "--entity-name", user, "--add-scram", f"{SCRAM}=[password={password}]"],
                           check=True, capture_output=True, timeout=60)
        c.start()
        wait_until(lambda: _serving(c), "the brokers answer an authenticated Metadata request", 60, 0.2)
        yield c
    finally:
        c.stop()


def _serving(c) -> bool:
    try:
        return len(AdminClient(conf(c, "admin")).list_topics(timeout=2).brokers) == 2
    except KafkaException:
        return False


def conf(c, user: str) -> dict:
    return {"bootstrap.servers": c.client_bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": user, "sasl.password": USERS[user]}


def acls_tool(c, tmp_path, user: str, *args: str) -> subprocess.CompletedProcess:
    props = tmp_path / f"{user}.properties"
    props.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n"
                     "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
                     f'username="{user}" password="{USERS[user]}";\n')
    return subprocess.run([sys.executable, "-m", "odradek.cli", "acls", "--bootstrap-server", c.client_bootstrap,
                           "--command-config", str(props), "--timeout", "15", *args],
                          capture_output=True, text=True, timeout=60)


def settle(c, tmp_path) -> None:
    """Until every broker applied the ACL changes made so far: a barrier ACL written after them
    (User:ANONYMOUS, the harness's PLAINTEXT listener, may describe a topic that never exists) is
    visible on a broker only once the earlier notifications were applied (read in order). It stays:
    it grants nothing on any topic there is."""
    barrier = f"barrier-{uuid.uuid4().hex[:6]}"
    done = acls_tool(c, tmp_path, "admin", "--add", "--allow-principal", "User:ANONYMOUS", "--operation", "Describe",
                     "--topic", barrier)
    assert done.returncode == 0, done
    for port in c.broker_ports:
        wait_until(lambda port=port: _metadata_error(port, barrier) == ErrorCode.unknown_topic_or_partition,
                   f"broker on port {port} applies the ACL changes", 30, 0.05)


def produce(c, user: str, topic: str, n: int, **extra) -> list:
    p = Producer({**conf(c, user), "message.timeout.ms": 8000, **extra})
    errors: list = []
    for i in range(n):
        p.produce(topic, b"%d" % i, on_delivery=lambda err, _m: errors.append(err))
    p.flush(20)
    return errors


def consume(c, user: str, topic: str, group: str, n: int, seconds: float = 20,
            refused: int | None = None) -> tuple[list[bytes], list[int]]:
    """Up to `n` records within `seconds`, and the error codes seen; stops at the fourth error,
    or at the first `refused` one (the refusal a test waits for: nothing later can undo it)."""
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
                if len(codes) > 3 or codes[-1] == refused:
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
    admin.create_topics([NewTopic(topic, 2, 2)], request_timeout=15)[topic].result(30)

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
    settle(cluster, tmp_path)

    # alice: an idempotent producer with WRITE on the topic only (KIP-679); no READ
    assert produce(cluster, "alice", topic, 10, **{"enable.idempotence": True}) == [None] * 10
    _, codes = consume(cluster, "alice", topic, group, 1, 10, KafkaError.GROUP_AUTHORIZATION_FAILED)
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
    _, codes = consume(cluster, "mallory", topic, group, 1, 10, KafkaError.GROUP_AUTHORIZATION_FAILED)
    assert KafkaError.GROUP_AUTHORIZATION_FAILED in codes, codes

    listed = acls_tool(cluster, tmp_path, "admin", "--list", "--topic", topic)
    principals = {line.split("principal=")[1].split(",")[0] for line in listed.stdout.splitlines()}
    assert principals == {"User:alice", "User:bob"}
    # revoking bob's READ on the topic: his next consumer is refused
    removed = acls_tool(cluster, tmp_path, "admin", "--remove", "--allow-principal", "User:bob",
                        "--operation", "Read", "--topic", topic)
    assert removed.returncode == 0 and "Removed ACL" in removed.stdout, removed
    _, codes = consume(cluster, "bob", topic, group, 1, 10, KafkaError.TOPIC_AUTHORIZATION_FAILED)
    assert KafkaError.TOPIC_AUTHORIZATION_FAILED in codes, codes


def test_transactions_replicate_and_commit_with_least_privilege(cluster, tmp_path):
    """A transactional producer with WRITE on its transactional id and topic: its markers and its
    replicated records go between brokers as User:broker; a read_committed consumer sees them."""
    topic, txn, group = (f"{p}-{uuid.uuid4().hex[:6]}" for p in ("ledger", "tx", "audit"))
    admin = AdminClient(conf(cluster, "admin"))  # outlives its futures
    admin.create_topics([NewTopic(topic, 1, 2)], request_timeout=15)[topic].result(30)
    for args in (("--producer", "--topic", topic, "--transactional-id", txn),
                 ("--consumer", "--topic", topic, "--group", group)):
        done = acls_tool(cluster, tmp_path, "admin", "--add", "--allow-principal", "User:alice", *args)
        assert done.returncode == 0, done
    settle(cluster, tmp_path)
    p = Producer({**conf(cluster, "alice"), "transactional.id": txn, "transaction.timeout.ms": 10000})
    p.init_transactions(20)
    p.begin_transaction()
    for i in range(5):
        p.produce(topic, b"t%d" % i)
    p.commit_transaction(20)
    consumer = Consumer({**conf(cluster, "alice"), "group.id": group, "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed"})
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < 5 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                got.append(msg.value())
    finally:
        consumer.close()
    assert got == [b"t%d" % i for i in range(5)]

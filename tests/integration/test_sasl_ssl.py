"""SASL_SSL as `odradek dev --security` sets it up: TLS on every path, clients on SCRAM over TLS.

A 2-broker secure cluster (dev/security, with the SCRAM client listener and its generated super
user, created through `odradek users`' bootstrap path before the brokers start); the client
properties it writes are used as they are by confluent-kafka, kcat, kafka-python and aiokafka.
A password changed through AlterUserScramCredentials is in force on every broker within seconds.
"""

import asyncio
import json
import ssl
import subprocess
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

from odradek.common.config import parse_properties
from odradek.dev.cluster import LocalCluster, secure_cluster
from odradek.dev.waiting import wait_until
from odradek.dev.zookeeper import free_ports

from .test_sasl import Raw, raw_scram_login


@pytest.fixture(scope="module")
def secure(zookeeper, tmp_path_factory):
    data = tmp_path_factory.mktemp("sasl-ssl")
    security = secure_cluster(data / "security", 2, 1)
    cluster = LocalCluster(
        data, brokers=2, controllers=1, broker_ports=free_ports(2),
        zookeeper_connect=f"{zookeeper.connect}/odradek-{uuid.uuid4().hex[:8]}",
        broker_overrides={"zookeeper.session.timeout.ms": 6000, "offsets.topic.num.partitions": 3,
                          "offsets.topic.replication.factor": 2, "transaction.state.log.num.partitions": 3,
                          "transaction.state.log.replication.factor": 2, "transaction.state.log.min.isr": 1,
                          "group.initial.rebalance.delay.ms": 0,
                          "listener.name.client.sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512"},
        controller_overrides={"zookeeper.session.timeout.ms": 6000}, security=security)
    cluster.start()
    yield cluster
    cluster.stop()


def client_conf(cluster, **extra) -> dict:
    props = parse_properties(cluster.security.client_config_path.read_text())
    return {"bootstrap.servers": cluster.bootstrap, **props, **extra}


def test_client_config_is_sasl_ssl_with_scram(secure):
    props = parse_properties(secure.security.client_config_path.read_text())
    assert props["security.protocol"] == "SASL_SSL" and props["sasl.mechanism"] == "SCRAM-SHA-512"
    assert props["sasl.username"] == "admin" and len(props["sasl.password"]) >= 24
    assert (secure.security.client_config_path.stat().st_mode & 0o077) == 0  # the password is private


def test_confluent_group_and_transactions(secure):
    conf = client_conf(secure)
    producer = Producer({**conf, "transactional.id": "ssl-txn", "message.timeout.ms": 30_000})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(20):
        producer.produce("ssl-topic", f"m{i}".encode())
    producer.commit_transaction(30)
    consumer = Consumer({**conf, "group.id": "ssl-group", "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed"})
    consumer.subscribe(["ssl-topic"])
    got = []
    deadline = time.monotonic() + 60
    while len(got) < 20 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append(msg.value())
    consumer.close()
    assert sorted(got) == sorted(f"m{i}".encode() for i in range(20))


def test_kcat_with_the_client_config(secure):
    base = ["kcat", "-F", str(secure.security.client_config_path), "-b", secure.bootstrap, "-t", "kcat-ssl"]
    subprocess.run([*base, "-P"], input="a\nb\n", text=True, check=True, timeout=60)
    out = subprocess.run([*base, "-C", "-o", "beginning", "-c", "2", "-e"], capture_output=True, text=True,
                         check=True, timeout=60)
    assert out.stdout.split() == ["a", "b"]


def python_client_kwargs(cluster, mechanism="SCRAM-SHA-512", user=None, password=None) -> dict:
    props = parse_properties(cluster.security.client_config_path.read_text())
    ctx = ssl.create_default_context(cafile=props["ssl.ca.location"])
    return dict(bootstrap_servers=cluster.bootstrap, security_protocol="SASL_SSL", ssl_context=ctx,
                sasl_mechanism=mechanism, sasl_plain_username=user or props["sasl.username"],
                sasl_plain_password=password or props["sasl.password"])


def test_kafka_python_and_aiokafka_scram_256_and_512(secure):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from kafka import KafkaConsumer, KafkaProducer

    admin = AdminClient(client_conf(secure))
    admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
        "sha256-user", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"pw-256")])["sha256-user"].result(15)
    # the authorizer is on: the new user needs an ACL (the super user grants it)
    from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, ResourcePatternType, ResourceType

    topic_all = AclBinding(ResourceType.TOPIC, "py-ssl", ResourcePatternType.LITERAL, "User:sha256-user", "*",
                           AclOperation.ALL, AclPermissionType.ALLOW)
    admin.create_acls([topic_all])[topic_all].result(15)
    wait_known_everywhere(secure, "sha256-user", "pw-256", "SCRAM-SHA-256", topic="py-ssl")
    kw256 = python_client_kwargs(secure, "SCRAM-SHA-256", "sha256-user", "pw-256")
    producer = KafkaProducer(**kw256, acks="all", max_block_ms=30_000)
    for i in range(5):
        producer.send("py-ssl", f"k{i}".encode())
    producer.flush(30)
    producer.close(10)
    consumer = KafkaConsumer("py-ssl", **kw256, auto_offset_reset="earliest", consumer_timeout_ms=20_000)
    assert sorted(m.value for _, m in zip(range(5), consumer, strict=False)) == [f"k{i}".encode() for i in range(5)]
    consumer.close()

    kw512 = python_client_kwargs(secure)

    async def run() -> list[bytes]:
        producer = AIOKafkaProducer(**kw512)
        await producer.start()
        try:
            for i in range(5):
                await producer.send_and_wait("aio-ssl", f"a{i}".encode())
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer("aio-ssl", **kw512, auto_offset_reset="earliest")
        await consumer.start()
        got = []
        try:
            async with asyncio.timeout(30):
                async for msg in consumer:
                    got.append(msg.value)
                    if len(got) == 5:
                        break
        finally:
            await consumer.stop()
        return got

    assert sorted(asyncio.run(run())) == [f"a{i}".encode() for i in range(5)]


class TlsRaw(Raw):
    def __init__(self, port: int, cafile: str):
        import socket

        ctx = ssl.create_default_context(cafile=cafile)
        self.sock = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10),
                                    server_hostname="localhost")
        self.correlation = 0


def login_everywhere(cluster, user: str, password: str, mechanism: str = "SCRAM-SHA-512") -> list[bool]:
    ca = str(cluster.security.ca_path)
    return [raw_scram_login(port, user, password, mechanism, raw=TlsRaw(port, ca))[0] == ErrorCode.none
            for port in cluster.broker_ports]


def wait_known_everywhere(cluster, user: str, password: str, mechanism: str = "SCRAM-SHA-512",
                          topic: str | None = None, timeout: float = 30.0) -> None:
    """Until `user` logs in on every broker (its credential arrived through the change
    notifications) and, with `topic`, may describe the topic there (its ACL arrived too)."""
    ca = str(cluster.security.ca_path)
    request = MetadataRequest(topics=None if topic is None else (MetadataRequestTopic(name=topic, topic_id=None),),
                              allow_auto_topic_creation=False, include_topic_authorized_operations=False)

    def known(port: int) -> bool:
        code, _, raw = raw_scram_login(port, user, password, mechanism, raw=TlsRaw(port, ca))
        try:
            return code == ErrorCode.none and all(
                t.error_code != ErrorCode.topic_authorization_failed for t in raw.call(request).topics)
        finally:
            raw.close()

    wait_until(lambda: all(known(port) for port in cluster.broker_ports),
               f"{user}'s credential{' and ACL' if topic else ''} on every broker", timeout, 0.1)


def test_password_change_applies_on_every_broker(secure):
    admin = AdminClient(client_conf(secure))

    def set_password(password: bytes) -> None:
        admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
            "rotating", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), password)])["rotating"].result(15)

    def wait(expected_old: bool, expected_new: bool, old: str, new: str, timeout: float = 10.0) -> float:
        started = time.monotonic()
        while True:
            olds, news = login_everywhere(secure, "rotating", old), login_everywhere(secure, "rotating", new)
            if all(o == expected_old for o in olds) and all(n == expected_new for n in news):
                return time.monotonic() - started
            assert time.monotonic() - started < timeout, f"old {olds}, new {news}"
            time.sleep(0.1)

    set_password(b"old-password")
    wait(True, False, "old-password", "new-password")
    set_password(b"new-password")
    took = wait(False, True, "old-password", "new-password")
    assert took < 10


def test_spark_writes_and_reads_over_sasl_ssl(spark, secure):
    """The data source and the sink pass kafka.security.protocol, kafka.sasl.* and kafka.ssl.*
    through: an exactly-once write and a batch read, both over SCRAM-SHA-512 on TLS."""
    props = parse_properties(secure.security.client_config_path.read_text())
    options = {f"kafka.{k}": v for k, v in props.items()}
    topic = f"spark-sasl-{uuid.uuid4().hex[:6]}"
    admin = AdminClient(client_conf(secure))
    from confluent_kafka.admin import NewTopic
    admin.create_topics([NewTopic(topic, 2, 2)])[topic].result(30)
    df = spark.createDataFrame([(f"k{i}", f"v{i}") for i in range(200)], "key string, value string")
    writer = df.write.format("odradek").mode("append").option("kafka.bootstrap.servers", secure.bootstrap)
    for k, v in {**options, "topic": topic}.items():
        writer = writer.option(k, v)
    writer.save()
    reader = spark.read.format("odradek").option("kafka.bootstrap.servers", secure.bootstrap)
    for k, v in {**options, "subscribe": topic}.items():
        reader = reader.option(k, v)
    values = sorted(bytes(r.value).decode() for r in reader.load().select("value").collect())
    assert values == sorted(f"v{i}" for i in range(200))


def test_tools_take_the_client_config(secure):
    """`odradek transactions --command-config client.properties` authenticates with SCRAM over TLS."""
    import sys

    out = subprocess.run([sys.executable, "-m", "odradek.cli", "transactions", "--bootstrap-server", secure.bootstrap,
                          "--command-config", str(secure.security.client_config_path), "--list"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert isinstance(json.loads(out.stdout), list)
    assert secure.security.scram_users["admin"] not in out.stdout + out.stderr


def test_the_sasl_user_is_the_principal_the_authorizer_checks(secure):
    """A SCRAM user without ACLs may log in, but neither alter credentials nor write a topic."""
    admin = AdminClient(client_conf(secure))
    admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
        "nobody-special", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"np")])["nobody-special"].result(15)
    wait_known_everywhere(secure, "nobody-special", "np")
    limited = client_conf(secure, **{"sasl.username": "nobody-special", "sasl.password": "np"})
    limited_admin = AdminClient(limited)  # kept: the futures fail once their client is gone
    futures = limited_admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
        "admin", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"taken-over")])
    with pytest.raises(Exception, match=r"(?i)CLUSTER_AUTHORIZATION_FAILED|authoriz"):
        futures["admin"].result(15)
    errors: list = []
    producer = Producer({**limited, "message.timeout.ms": 5000})
    producer.produce("ssl-topic", b"x", on_delivery=lambda e, m: errors.append(e))
    producer.flush(10)
    assert errors and errors[0] is not None and "AUTHORIZATION" in errors[0].name()
    assert login_everywhere(secure, "admin", secure.security.scram_users["admin"]) == [True, True]

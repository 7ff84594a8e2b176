"""TLS on every path (issue 25), with real processes and real clients: a 3-broker cluster from
`odradek dev --security`'s LocalCluster, whose clients, replication, controller-to-broker and
broker-to-controller traffic all go over TLS (there is no plaintext listener).

confluent-kafka, kafka-python, aiokafka and kcat produce and consume over SSL; idempotent and
transactional producers and consumer groups work; mTLS on the internal listener; the `odradek`
tools take --command-config; a certificate replaced on disk is served to new connections within a
minute while a producer keeps going without an error; a plaintext client is refused with one log line.
One cluster for the module."""

import asyncio
import os
import socket
import ssl
import struct
import subprocess
import sys
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from cryptography import x509

from odradek.common.config import parse_listeners, parse_protocol_map
from odradek.dev.cluster import LocalCluster
from odradek.dev.security import ClusterSecurity
from odradek.dev.zookeeper import free_ports

from .conftest import BROKER_DEFAULTS, CONTROLLER_DEFAULTS

pytestmark = pytest.mark.timeout(300)

TOPIC_PARTITIONS = 3


@pytest.fixture(scope="module")
def secure(zookeeper, tmp_path_factory):
    d = tmp_path_factory.mktemp("tls-cluster")
    cluster = LocalCluster(
        d, brokers=3, controllers=1, broker_ports=free_ports(3),
        zookeeper_connect=f"{zookeeper.connect}/odradek-{uuid.uuid4().hex[:8]}",
        broker_overrides={**BROKER_DEFAULTS, "default.replication.factor": 3, "min.insync.replicas": 2,
                          "offsets.topic.num.partitions": 3, "transaction.state.log.num.partitions": 3,
                          "group.initial.rebalance.delay.ms": 0,
                          # principals from certificates, checked: brokers and the controller are
                          # super users by their certificates' names (replication, LeaderAndIsr need
                          # CLUSTER_ACTION); anonymous TLS clients may do what no ACL forbids
                          "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                          "super.users": "User:broker-0;User:broker-1;User:broker-2;User:controller-0;User:client",
                          "allow.everyone.if.no.acl.found": "true"},
        controller_overrides=CONTROLLER_DEFAULTS,
        security=ClusterSecurity(d / "security"),
    )
    cluster.start()
    yield cluster
    cluster.stop()


def conf(cluster: LocalCluster, **extra) -> dict:
    return {"bootstrap.servers": cluster.bootstrap, **cluster.client_properties, **extra}


def ports(cluster: LocalCluster, process) -> dict[str, int]:
    return {name: port for name, _, port in parse_listeners(process.overrides["listeners"])}


def make_topic(cluster: LocalCluster, name: str) -> str:
    admin = AdminClient(conf(cluster))
    admin.create_topics([NewTopic(name, TOPIC_PARTITIONS, 3)])[name].result(30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        md = admin.list_topics(name, timeout=10).topics[name]
        if md.error is None and len(md.partitions) == TOPIC_PARTITIONS and all(
                p.leader >= 0 and len(p.isrs) == 3 for p in md.partitions.values()):
            return name
        time.sleep(0.2)
    raise AssertionError(f"{name}: no full ISR in time")


def produce(cluster: LocalCluster, topic: str, n: int, **extra) -> int:
    producer = Producer(conf(cluster, **{"acks": "all", "enable.idempotence": True, **extra}))
    errors = []
    for i in range(n):
        producer.produce(topic, key=str(i).encode(), value=f"v{i}".encode(),
                         on_delivery=lambda err, msg: errors.append(err) if err else None)
        producer.poll(0)
    assert producer.flush(60) == 0
    assert not errors, errors
    return n


def consume(cluster: LocalCluster, topic: str, n: int, **extra) -> list[bytes]:
    consumer = Consumer(conf(cluster, **{"group.id": f"g-{uuid.uuid4().hex[:6]}", "auto.offset.reset": "earliest",
                                         **extra}))
    consumer.subscribe([topic])
    out: list[bytes] = []
    deadline = time.monotonic() + 60
    try:
        while len(out) < n and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                out.append(msg.value())
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return out


def test_plaintext_client_on_a_tls_port_is_closed_with_one_log_line(secure):
    """First in the module: handshake failures are logged once per 10 s per listener, and later
    tests send plaintext on purpose."""
    log = secure.brokers[1].log_path
    before = log.read_text(errors="replace").count("TLS handshake failed")
    for _ in range(3):
        with socket.create_connection(("127.0.0.1", secure.broker_ports[1]), timeout=5) as s:
            s.sendall(struct.pack(">ihhi", 10, 18, 0, 7) + b"\0\0" + os.urandom(64))
            s.settimeout(10)
            try:
                while s.recv(4096):
                    pass
            except (ConnectionResetError, TimeoutError):
                pass
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace")
        if text.count("TLS handshake failed") > before:
            break
        time.sleep(0.2)
    lines = [line for line in text.splitlines() if "TLS handshake failed" in line][before:]
    assert len(lines) == 1, lines  # rate-limited: one line for the three
    assert AdminClient(conf(secure)).list_topics(timeout=10).brokers  # still serving


def test_every_listener_is_tls_and_refuses_plaintext(secure):
    """No process has a plaintext listener: every port closes a plaintext ApiVersions unanswered."""
    api_versions = struct.pack(">ihhi", 10, 18, 0, 1) + b"\0\0"
    for process in secure.processes():
        protocols = parse_protocol_map(process.overrides["listener.security.protocol.map"])
        for name, port in ports(secure, process).items():
            assert protocols[name] == "SSL", (process.name, name)
            with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
                s.sendall(api_versions)
                s.settimeout(15)
                try:
                    data = s.recv(64)
                except ConnectionResetError:
                    data = b""
                assert len(data) == 0 or data[0] == 0x15, (process.name, name, data)  # EOF or a TLS alert


def test_confluent_idempotent_producer_and_group_over_tls(secure):
    topic = make_topic(secure, "tls-idempotent")
    produce(secure, topic, 500)
    got = consume(secure, topic, 500)
    assert sorted(got) == sorted(f"v{i}".encode() for i in range(500))


def test_replication_and_controller_traffic_use_the_tls_listeners(secure):
    """Replication goes to the INTERNAL listeners, controller requests to the CONTROLLER listeners
    and broker requests to the controller's listener: established connections on those ports."""
    make_topic(secure, "tls-paths")
    produce(secure, "tls-paths", 100)
    internal = {ports(secure, b)["INTERNAL"] for b in secure.brokers}
    control = {ports(secure, b)["CONTROLLER"] for b in secure.brokers}
    out = subprocess.run(["ss", "-Htn", "state", "established"], capture_output=True, text=True, check=True).stdout
    remote_ports = {int(line.split()[-1].rsplit(":", 1)[1]) for line in out.splitlines() if line.strip()}
    assert internal & remote_ports, "no replica fetcher connection to an INTERNAL listener"
    assert control <= remote_ports, "the controller is not connected to every broker's CONTROLLER listener"


def test_transactional_producer_over_tls(secure):
    topic = make_topic(secure, "tls-txn")
    producer = Producer(conf(secure, **{"transactional.id": "tls-txn-1", "acks": "all"}))
    producer.init_transactions(60)
    producer.begin_transaction()
    for i in range(50):
        producer.produce(topic, value=f"committed-{i}".encode())
    producer.commit_transaction(60)
    producer.begin_transaction()
    producer.produce(topic, value=b"aborted")
    producer.flush(30)
    producer.abort_transaction(60)
    got = consume(secure, topic, 50, **{"isolation.level": "read_committed"})
    assert sorted(got) == sorted(f"committed-{i}".encode() for i in range(50))


def test_kafka_python_over_tls(secure):
    from kafka import KafkaConsumer, KafkaProducer

    topic = make_topic(secure, "tls-kafka-python")
    ca = str(secure.security.ca_path)
    producer = KafkaProducer(bootstrap_servers=secure.bootstrap, security_protocol="SSL", ssl_cafile=ca, acks="all")
    for i in range(100):
        producer.send(topic, f"kp-{i}".encode())
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer(topic, bootstrap_servers=secure.bootstrap, security_protocol="SSL", ssl_cafile=ca,
                             auto_offset_reset="earliest", group_id="kp-group", consumer_timeout_ms=20000)
    got = []
    for m in consumer:  # until all 100 arrived (not until 20 s pass without one), or that timeout
        got.append(m.value)
        if len(got) == 100:
            break
    consumer.close()
    assert sorted(got) == sorted(f"kp-{i}".encode() for i in range(100))


def test_aiokafka_over_tls(secure):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    topic = make_topic(secure, "tls-aiokafka")
    context = ssl.create_default_context(cafile=str(secure.security.ca_path))

    async def run():
        producer = AIOKafkaProducer(bootstrap_servers=secure.bootstrap, security_protocol="SSL", ssl_context=context)
        await producer.start()
        try:
            for i in range(100):
                await producer.send(topic, f"aio-{i}".encode())
            await producer.flush()
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=secure.bootstrap, security_protocol="SSL",
                                    ssl_context=context, auto_offset_reset="earliest", group_id="aio-group")
        await consumer.start()
        got = []
        try:
            async with asyncio.timeout(60):
                async for msg in consumer:
                    got.append(msg.value)
                    if len(got) == 100:
                        break
        finally:
            await consumer.stop()
        return got

    assert sorted(asyncio.run(run())) == sorted(f"aio-{i}".encode() for i in range(100))


def test_kcat_with_the_client_config_file(secure):
    topic = make_topic(secure, "tls-kcat")
    config = str(secure.security.client_config_path)
    lines = "\n".join(f"kcat-{i}" for i in range(100)) + "\n"
    subprocess.run(["kcat", "-F", config, "-b", secure.bootstrap, "-P", "-t", topic, "-X", "acks=all"],
                   input=lines, text=True, check=True, timeout=60, capture_output=True)
    out = subprocess.run(["kcat", "-F", config, "-b", secure.bootstrap, "-C", "-t", topic, "-o", "beginning", "-e",
                          "-c", "100"], capture_output=True, text=True, check=True, timeout=60).stdout
    assert sorted(out.split()) == sorted(f"kcat-{i}" for i in range(100))


def test_mtls_on_the_internal_listener(secure):
    """INTERNAL requires a client certificate signed by the cluster's CA: with one, clients work;
    without one, or with a stranger's, they are refused."""
    internal = ",".join(f"127.0.0.1:{ports(secure, b)['INTERNAL']}" for b in secure.brokers)
    d = secure.security.directory
    base = {"bootstrap.servers": internal, "security.protocol": "SSL", "ssl.ca.location": str(d / "ca.pem")}
    with_cert = {**base, "ssl.certificate.location": str(d / "client.pem"), "ssl.key.location": str(d / "client.pem")}
    topic = make_topic(secure, "tls-mtls")
    producer = Producer({**with_cert, "acks": "all"})
    producer.produce(topic, b"over mTLS")
    assert producer.flush(30) == 0
    assert AdminClient(with_cert).list_topics(topic, timeout=10).topics[topic].error is None

    from odradek.dev.security import CertificateAuthority
    stranger = CertificateAuthority.create("stranger CA").write_keystore(d / "stranger.pem", "stranger")
    for refused in (base, {**base, "ssl.certificate.location": str(stranger), "ssl.key.location": str(stranger)}):
        with pytest.raises(KafkaException):
            AdminClient(refused).list_topics(timeout=5)


def test_mtls_principal_is_the_mapped_certificate_subject(secure):
    """The authorizer sees `User:<CN>` (ssl.principal.mapping.rules): a DENY for User:mallory
    refuses mallory's certificate and not the super user's, on the same listener."""
    from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, ResourcePatternType, ResourceType

    internal = ",".join(f"127.0.0.1:{ports(secure, b)['INTERNAL']}" for b in secure.brokers)
    d = secure.security.directory
    mallory = secure.security.ca.write_keystore(d / "mallory.pem", "mallory", secure.security.hosts)

    def client(keystore):
        return {"bootstrap.servers": internal, "security.protocol": "SSL", "ssl.ca.location": str(d / "ca.pem"),
                "ssl.certificate.location": str(keystore), "ssl.key.location": str(keystore)}

    topic = make_topic(secure, "tls-principal")
    deny = AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:mallory", "*",
                      AclOperation.WRITE, AclPermissionType.DENY)
    admin = AdminClient(client(d / "client.pem"))  # a super user by its certificate
    admin.create_acls([deny])[deny].result(30)

    def write(keystore) -> object:
        errors: list = []
        producer = Producer({**client(keystore), "acks": "all", "message.timeout.ms": 10000})
        producer.produce(topic, b"x", on_delivery=lambda err, msg: errors.append(err))
        producer.flush(20)
        return errors[0] if errors else "no answer"

    deadline = time.monotonic() + 30
    while (refused := write(mallory)) is None and time.monotonic() < deadline:
        time.sleep(0.5)  # the ACL reaches every broker within a second or so
    assert refused is not None and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, refused
    assert write(d / "client.pem") is None


def test_odradek_tools_take_command_config(secure):
    make_topic(secure, "tls-tools")
    cmd = [sys.executable, "-m", "odradek.cli", "transactions", "--bootstrap-server", secure.bootstrap,
           "--command-config", str(secure.security.client_config_path), "--list"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    plain = subprocess.run(cmd[:-3] + ["--timeout", "3", "--list"], capture_output=True, text=True, timeout=60)
    assert plain.returncode != 0


def _served_serial(port: int, ca: str) -> int:
    context = ssl.create_default_context(cafile=ca)
    with (socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
          context.wrap_socket(raw, server_hostname="127.0.0.1") as tls):
        return x509.load_der_x509_certificate(tls.getpeercert(binary_form=True)).serial_number


def test_a_replaced_certificate_is_served_to_new_connections(secure):
    """Broker 0's key store replaced on disk (as a Secret update): new connections get the new
    certificate within a minute, a producer running meanwhile sees no error."""
    topic = make_topic(secure, "tls-reload")
    port = secure.broker_ports[0]
    ca = str(secure.security.ca_path)
    before = _served_serial(port, ca)
    producer = Producer(conf(secure, acks="all"))
    errors: list = []
    keystore = secure.security.directory / "broker-0.pem"
    secure.security.ca.write_keystore(keystore, "broker-0", secure.security.hosts)
    deadline = time.monotonic() + 60
    after = before
    sent = 0
    while time.monotonic() < deadline and after == before:
        for _ in range(20):
            producer.produce(topic, f"r{sent}".encode(), on_delivery=lambda err, msg: errors.append(err) if err else None)
            sent += 1
        producer.poll(0.5)
        after = _served_serial(port, ca)
    assert producer.flush(30) == 0
    assert after != before, "the new certificate was not served within a minute"
    assert not errors, errors


def test_a_listeners_key_store_changes_per_broker_without_a_restart(secure, tmp_path):
    """listener.name.client.ssl.keystore.location set for broker 1 (IncrementalAlterConfigs,
    Kafka's per-broker dynamic SSL update): its CLIENT listener serves the new store's certificate
    to new connections, same process; a store that does not load is refused (INVALID_CONFIG)."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    key = "listener.name.client.ssl.keystore.location"
    port, ca, process = secure.broker_ports[1], str(secure.security.ca_path), secure.brokers[1].popen
    before = _served_serial(port, ca)
    store = secure.security.ca.write_keystore(tmp_path / "broker-1-new.pem", "broker-1", secure.security.hosts)
    admin = AdminClient(conf(secure))

    def alter(value, op=AlterConfigOpType.SET):
        resource = ConfigResource(ConfigResource.Type.BROKER, "1", incremental_configs=[
            ConfigEntry(key, value, incremental_operation=op)])
        admin.incremental_alter_configs([resource])[resource].result(30)

    try:
        with pytest.raises(KafkaException, match=r"INVALID_CONFIG|missing"):
            alter(str(tmp_path / "missing.pem"))
        alter(str(store))
        deadline = time.monotonic() + 30  # applied at the change notification
        after = before
        while time.monotonic() < deadline and after == before:
            time.sleep(0.2)
            after = _served_serial(port, ca)
        assert after != before, "the new key store was not served within 30 s"
        assert process.poll() is None and secure.brokers[1].popen is process  # no restart
    finally:
        alter(None, AlterConfigOpType.DELETE)


def test_spark_transaction_probe_passes_the_security_keys(secure):
    """The Spark sink asks ApiVersions before a transactional write: with the `kafka.*` security
    keys it reaches a TLS listener; without them it cannot."""
    from odradek.pipeline.transactions import transactions_supported

    assert transactions_supported(secure.bootstrap, 10, props=secure.client_properties)
    with pytest.raises(ConnectionError):
        transactions_supported(secure.bootstrap, 3)

"""SASL on a real broker with real clients (issue 25, SASL half).

Two brokers whose client listener is SASL_PLAINTEXT with PLAIN (users in the listener's JAAS
config) and SCRAM-SHA-256/512 (users created before the brokers start with `odradek users`, as
kafka-configs --zookeeper does), replicating and taking controller requests over SCRAM-SHA-512
listeners, and a
SASL listener with a short session lifetime for the re-authentication rules. confluent-kafka,
kafka-python, aiokafka and kcat produce and consume; the bad inputs of the issue are sent on raw
sockets.
"""

import asyncio
import socket
import struct
import subprocess
import sys
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from odradek.common import wire
from odradek.common.security import jaas
from odradek.common.security.sasl_client import ScramClient
from odradek.common.zk_connect import ensure_chroot
from odradek.dev.zookeeper import free_ports

from .conftest import new_cluster

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="bob" '
              'password="bob-secret" user_bob="bob-secret";')
ALICE = ("alice", "alice-secret")
BROKER = ("broker", "broker-secret")
CONTROLLER = ("controller", "controller-secret")
REAUTH_MS = 1500
INTERNAL_REAUTH_MS = 3000
"""Replication connections last 3 s: the brokers replace them (common/security/sasl_client._retire)."""


@pytest.fixture(scope="module")
def sasl_cluster(zookeeper, tmp_path_factory):
    """Two brokers: CLIENT (SASL_PLAINTEXT, every mechanism) for the clients, INTERNAL
    (SASL_PLAINTEXT, SCRAM-SHA-512 as user `broker`) for replication and transaction markers,
    CONTROLLER (SASL_PLAINTEXT, SCRAM-SHA-512 as user `controller`) for the controller's requests,
    REAUTH (broker 0, 1.5 s sessions), and PLAINTEXT kept only for the harness's readiness check."""
    client_ports, internal_ports, reauth_port = free_ports(2), free_ports(2), free_ports(1)[0]
    cluster = new_cluster(zookeeper, tmp_path_factory.mktemp("sasl"), brokers=2, broker_overrides={
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CLIENT:SASL_PLAINTEXT,INTERNAL:SASL_PLAINTEXT,"
                                          "REAUTH:SASL_PLAINTEXT,CONTROLLER:SASL_PLAINTEXT",
        "listener.name.controller.sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "sasl.mechanism.controller.protocol": "SCRAM-SHA-512",
        "listener.name.controller.scram-sha-512.sasl.jaas.config": jaas.client_config("SCRAM-SHA-512", *CONTROLLER),
        "inter.broker.listener.name": "INTERNAL",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        "listener.name.internal.sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "listener.name.internal.connections.max.reauth.ms": INTERNAL_REAUTH_MS,
        "listener.name.internal.scram-sha-512.sasl.jaas.config": jaas.client_config("SCRAM-SHA-512", *BROKER),
        "listener.name.client.sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.client.plain.sasl.jaas.config": PLAIN_JAAS,
        "listener.name.reauth.connections.max.reauth.ms": REAUTH_MS,
        "listener.name.reauth.sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "connection.failed.authentication.delay.ms": 300,
        "offsets.topic.replication.factor": 2, "offsets.topic.num.partitions": 3,
        "transaction.state.log.replication.factor": 2, "transaction.state.log.min.isr": 1,
        "transaction.state.log.num.partitions": 3, "group.initial.rebalance.delay.ms": 0,
    }, controller_overrides={
        "inter.broker.listener.name": "INTERNAL",
        "sasl.mechanism.controller.protocol": "SCRAM-SHA-512",
        "listener.name.controller.scram-sha-512.sasl.jaas.config": jaas.client_config("SCRAM-SHA-512", *CONTROLLER),
    })
    for i, broker in enumerate(cluster.brokers):
        broker.overrides["listeners"] += (f",CLIENT://127.0.0.1:{client_ports[i]},"
                                          f"INTERNAL://127.0.0.1:{internal_ports[i]}")
    cluster.brokers[0].overrides["listeners"] += f",REAUTH://127.0.0.1:{reauth_port}"
    try:
        ensure_chroot(cluster.zookeeper_connect, timeout=15)
        run_users(cluster, "--entity-name", ALICE[0], "--add-scram",
                  f"SCRAM-SHA-512=[iterations=8192,password={ALICE[1]}],SCRAM-SHA-256=[password={ALICE[1]}]")
        for user, password in (BROKER, CONTROLLER):
            run_users(cluster, "--entity-name", user, "--add-scram", "SCRAM-SHA-512", "--password-file", "-",
                      stdin=password + "\n")
        cluster.start()
        cluster.sasl_port = client_ports[0]
        cluster.client_bootstrap = ",".join(f"127.0.0.1:{p}" for p in client_ports)
        cluster.reauth_port = reauth_port
        wait_serving(cluster)
        yield cluster
    finally:
        cluster.stop()


def run_users(cluster, *args, stdin: str | None = None) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-m", "odradek.cli", "users", "--zookeeper", cluster.zookeeper_connect,
                             *args], input=stdin, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result


def conf(cluster, mechanism="SCRAM-SHA-512", user=ALICE[0], password=ALICE[1]) -> dict:
    return {"bootstrap.servers": cluster.client_bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password}


def wait_serving(cluster, timeout: float = 60.0) -> None:
    """The broker answers an authenticated Metadata request with itself in it."""
    admin = AdminClient(conf(cluster))
    deadline = time.monotonic() + timeout
    while True:
        try:
            if len(admin.list_topics(timeout=2).brokers) == len(cluster.brokers):
                return
        except Exception:
            pass
        for p in cluster.processes():
            assert p.popen is None or p.alive, f"{p.name} exited; read {p.log_path}\n{p.log_tail()}"
        assert time.monotonic() < deadline, f"broker not serving SASL within {timeout}s\n{cluster.brokers[0].log_tail()}"
        time.sleep(0.2)


def produce_consume_confluent(config: dict, topic: str, n: int = 20, extra: dict | None = None) -> list[bytes]:
    producer = Producer({**config, "message.timeout.ms": 30_000, **(extra or {})})
    errors: list = []
    for i in range(n):
        producer.produce(topic, f"{topic}-{i}".encode(), on_delivery=lambda e, m: e and errors.append(e))
    assert producer.flush(30) == 0 and not errors, errors
    consumer = Consumer({**config, "group.id": f"g-{uuid.uuid4().hex[:6]}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    try:
        while len(got) < n and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return got


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_confluent_produce_consume_group(sasl_cluster, mechanism):
    user = ("bob", "bob-secret") if mechanism == "PLAIN" else ALICE
    topic = f"cf-{mechanism.lower()}"
    got = produce_consume_confluent(conf(sasl_cluster, mechanism, *user), topic)
    assert sorted(got) == sorted(f"{topic}-{i}".encode() for i in range(20))


def test_idempotent_and_transactional_producer_over_scram(sasl_cluster):
    config = conf(sasl_cluster)
    got = produce_consume_confluent(config, "idempotent", extra={"enable.idempotence": True})
    assert len(got) == 20
    producer = Producer({**config, "transactional.id": "sasl-txn", "message.timeout.ms": 30_000})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(5):
        producer.produce("txn", f"t{i}".encode())
    producer.commit_transaction(30)
    consumer = Consumer({**config, "group.id": "txn-reader", "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed"})
    consumer.subscribe(["txn"])
    got = []
    deadline = time.monotonic() + 60
    while len(got) < 5 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append(msg.value())
    consumer.close()
    assert sorted(got) == [f"t{i}".encode() for i in range(5)]


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_kafka_python(sasl_cluster, mechanism):
    from kafka import KafkaConsumer, KafkaProducer

    user, password = ("bob", "bob-secret") if mechanism == "PLAIN" else ALICE
    kw = dict(bootstrap_servers=sasl_cluster.client_bootstrap, security_protocol="SASL_PLAINTEXT",
              sasl_mechanism=mechanism, sasl_plain_username=user, sasl_plain_password=password)
    topic = f"kp-{mechanism.lower()}"
    producer = KafkaProducer(**kw, acks=1, max_block_ms=30_000)
    for i in range(10):
        producer.send(topic, f"v{i}".encode())
    producer.flush(30)
    producer.close(10)
    consumer = KafkaConsumer(topic, **kw, group_id=None, auto_offset_reset="earliest", consumer_timeout_ms=20_000)
    got = [m.value for _, m in zip(range(10), consumer, strict=False)]
    consumer.close()
    assert sorted(got) == [f"v{i}".encode() for i in range(10)]


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_aiokafka(sasl_cluster, mechanism):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    user, password = ("bob", "bob-secret") if mechanism == "PLAIN" else ALICE
    kw = dict(bootstrap_servers=sasl_cluster.client_bootstrap, security_protocol="SASL_PLAINTEXT",
              sasl_mechanism=mechanism, sasl_plain_username=user, sasl_plain_password=password)
    topic = f"aio-{mechanism.lower()}"

    async def run() -> list[bytes]:
        producer = AIOKafkaProducer(**kw)
        await producer.start()
        try:
            for i in range(10):
                await producer.send_and_wait(topic, f"a{i}".encode())
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, **kw, auto_offset_reset="earliest")
        await consumer.start()
        got = []
        try:
            async with asyncio.timeout(30):
                async for msg in consumer:
                    got.append(msg.value)
                    if len(got) == 10:
                        break
        finally:
            await consumer.stop()
        return got

    assert sorted(asyncio.run(run())) == [f"a{i}".encode() for i in range(10)]


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_kcat(sasl_cluster, mechanism, tmp_path):
    user, password = ("bob", "bob-secret") if mechanism == "PLAIN" else ALICE
    props = tmp_path / "client.properties"
    props.write_text(f"security.protocol=SASL_PLAINTEXT\nsasl.mechanisms={mechanism}\n"
                     f"sasl.username={user}\nsasl.password={password}\n")
    topic = f"kcat-{mechanism.lower()}"
    base = ["kcat", "-F", str(props), "-b", sasl_cluster.client_bootstrap, "-t", topic]
    subprocess.run([*base, "-P"], input="one\ntwo\nthree\n", text=True, check=True, timeout=60)
    out = subprocess.run([*base, "-C", "-o", "beginning", "-c", "3", "-e"], capture_output=True, text=True,
                         check=True, timeout=60)
    assert out.stdout.split() == ["one", "two", "three"]


def test_wrong_password_and_unknown_user_are_refused_alike(sasl_cluster):
    answers = []
    for user, password in (("alice", "wrong-pw"), ("nobody", "whatever")):
        code, answer, raw = raw_scram_login(sasl_cluster.sasl_port, user, password)
        assert code == ErrorCode.sasl_authentication_failed and raw.closed()
        answers.append(answer.error_message)
    assert answers[0] == answers[1] == ("Authentication failed during authentication due to invalid credentials "
                                        "with SASL mechanism SCRAM-SHA-512")
    admin = AdminClient(conf(sasl_cluster, "SCRAM-SHA-512", "alice", "wrong-pw"))
    with pytest.raises(Exception, match=r"(?i)authentication|transport|timed out"):
        admin.list_topics(timeout=3)
    log = sasl_cluster.brokers[0].log_path.read_text()
    assert "wrong-pw" not in log and "whatever" not in log and "alice-secret" not in log


def test_password_change_through_admin_client(sasl_cluster):
    admin = AdminClient(conf(sasl_cluster))
    futures = admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
        "carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"first-pw")])
    futures["carol"].result(15)
    wait_login(sasl_cluster, "carol", "first-pw", "SCRAM-SHA-256", True)
    futures = admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
        "carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192), b"second-pw")])
    futures["carol"].result(15)
    wait_login(sasl_cluster, "carol", "second-pw", "SCRAM-SHA-256", True)
    wait_login(sasl_cluster, "carol", "first-pw", "SCRAM-SHA-256", False)
    described = {u: f.result(15) for u, f in admin.describe_user_scram_credentials(["carol", "alice"]).items()}
    assert [(i.mechanism, i.iterations) for i in described["carol"].scram_credential_infos] == \
        [(ScramMechanism.SCRAM_SHA_256, 8192)]
    assert {i.iterations for i in described["alice"].scram_credential_infos} == {4096, 8192}
    bad = admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
        "dave", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 1000), b"pw")])
    with pytest.raises(Exception, match=r"UNACCEPTABLE_CREDENTIAL|iterations"):
        bad["dave"].result(15)
    missing = admin.describe_user_scram_credentials(["nobody"])
    with pytest.raises(Exception, match=r"RESOURCE_NOT_FOUND|does not exist"):
        missing["nobody"].result(15)
    # the bootstrap tool sees what the admin API wrote
    assert "SCRAM-SHA-256=iterations=8192" in run_users(sasl_cluster, "--describe", "--entity-name", "carol").stdout


def wait_login(cluster, user: str, password: str, mechanism: str, accepted: bool, timeout: float = 10.0) -> None:
    """Logs in on a raw connection until the answer is `accepted` (the change reached the broker)."""
    deadline = time.monotonic() + timeout
    while True:
        ok = raw_scram_login(cluster.sasl_port, user, password, mechanism)[0] == ErrorCode.none
        if ok == accepted:
            return
        assert time.monotonic() < deadline, f"{user} login still {'refused' if accepted else 'accepted'}"
        time.sleep(0.2)


# --- raw connections: the bad inputs ---------------------------------------------------------------


class Raw:
    def __init__(self, port: int):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.correlation = 0

    def send(self, request) -> None:
        self.correlation += 1
        self.sock.sendall(wire.encode_request(request, self.correlation, "raw"))

    def receive(self, request):
        size = struct.unpack(">i", self._exact(4))[0]
        return wire.decode_response(type(request), self._exact(size))[1]

    def call(self, request):
        self.send(request)
        return self.receive(request)

    def _exact(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("closed by the broker")
            out += chunk
        return out

    def closed(self) -> bool:
        try:
            return self.sock.recv(1) == b""
        except (ConnectionError, TimeoutError):
            return True

    def close(self) -> None:
        self.sock.close()


def raw_scram_login(port: int, user: str, password: str, mechanism: str = "SCRAM-SHA-512", raw: Raw | None = None):
    raw = raw or Raw(port)
    assert raw.call(SaslHandshakeRequest(mechanism=mechanism)).error_code == ErrorCode.none
    client = ScramClient(mechanism, user, password)
    first = raw.call(SaslAuthenticateRequest(auth_bytes=client.first()))
    if first.error_code != ErrorCode.none:
        return first.error_code, first, raw
    final = raw.call(SaslAuthenticateRequest(auth_bytes=client.evaluate(first.auth_bytes)))
    return final.error_code, final, raw


METADATA = MetadataRequest(topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False)


def test_request_before_authentication_closes(sasl_cluster):
    raw = Raw(sasl_cluster.sasl_port)
    raw.send(METADATA)
    assert raw.closed()


def test_unknown_mechanism(sasl_cluster):
    raw = Raw(sasl_cluster.sasl_port)
    started = time.monotonic()
    answer = raw.call(SaslHandshakeRequest(mechanism="GSSAPI"))
    assert answer.error_code == ErrorCode.unsupported_sasl_mechanism
    assert set(answer.mechanisms) == {"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}
    assert time.monotonic() - started >= 0.25  # connection.failed.authentication.delay.ms
    assert raw.closed()


def test_illegal_sasl_state_and_oversized_token(sasl_cluster):
    raw = Raw(sasl_cluster.sasl_port)
    raw.call(SaslHandshakeRequest(mechanism="PLAIN"))
    again = raw.call(SaslHandshakeRequest(mechanism="PLAIN"))
    assert again.error_code == ErrorCode.illegal_sasl_state and raw.closed()
    big = Raw(sasl_cluster.sasl_port)
    big.call(SaslHandshakeRequest(mechanism="SCRAM-SHA-512"))
    answer = big.call(SaslAuthenticateRequest(auth_bytes=b"n,,n=" + b"x" * 100_000 + b",r=abc"))
    assert answer.error_code == ErrorCode.sasl_authentication_failed and big.closed()
    huge = Raw(sasl_cluster.sasl_port)  # a size beyond sasl.server.max.receive.size: closed at once, unread
    huge.sock.sendall(struct.pack(">i", 600_000))
    assert huge.closed()


def test_large_requests_once_authenticated(sasl_cluster):
    value = b"x" * 800_000  # more than sasl.server.max.receive.size, less than message.max.bytes
    producer = Producer({**conf(sasl_cluster), "message.max.bytes": 1_000_000})
    errors: list = []
    producer.produce("large", value, on_delivery=lambda e, m: e and errors.append(e))
    assert producer.flush(30) == 0 and not errors, errors


def test_reauthentication_and_session_expiry(sasl_cluster):
    code, answer, raw = raw_scram_login(sasl_cluster.reauth_port, *ALICE)
    assert code == ErrorCode.none and answer.session_lifetime.total_seconds() * 1000 == REAUTH_MS
    assert raw.call(METADATA).brokers
    # KIP-368: a re-authentication on the same connection renews the session
    code, answer, raw = raw_scram_login(sasl_cluster.reauth_port, *ALICE, raw=raw)
    assert code == ErrorCode.none
    time.sleep(REAUTH_MS / 1000 + 0.3)
    raw.send(METADATA)  # past the lifetime: closed
    assert raw.closed()


def test_password_from_stdin(sasl_cluster):
    run_users(sasl_cluster, "--entity-name", "erin", "--add-scram", "SCRAM-SHA-512=[iterations=4096]",
              "--password-file", "-", stdin="erin-pw\n")
    wait_login(sasl_cluster, "erin", "erin-pw", "SCRAM-SHA-512", True)
    run_users(sasl_cluster, "--entity-name", "erin", "--delete-scram", "SCRAM-SHA-512")
    wait_login(sasl_cluster, "erin", "erin-pw", "SCRAM-SHA-512", False)


def test_replication_over_the_sasl_listener(sasl_cluster):
    from .kafka_helpers import wait_isr_full

    admin = AdminClient(conf(sasl_cluster))
    from confluent_kafka.admin import NewTopic
    admin.create_topics([NewTopic("replicated", 2, 2)])["replicated"].result(30)
    got = produce_consume_confluent(conf(sasl_cluster), "replicated", n=50, extra={"acks": "all"})
    assert len(got) == 50
    views = wait_isr_full(sasl_cluster.bootstrap, "replicated", 2)  # the plaintext harness listener
    assert all(len(v.isr) == 2 for v in views.values())
    for p in range(2):
        sasl_cluster.wait_logs_identical("replicated", p)
    # replication keeps going across the 3 s sessions of the INTERNAL listener, never past one
    time.sleep(INTERNAL_REAUTH_MS * 1.5 / 1000)
    got = produce_consume_confluent(conf(sasl_cluster), "replicated", n=10, extra={"acks": "all"})
    assert len(got) >= 10
    for p in range(2):
        sasl_cluster.wait_logs_identical("replicated", p)
    logs = "".join(b.log_path.read_text() for b in sasl_cluster.brokers)
    assert "authentication of user 'broker' failed" not in logs
    assert "session of user 'broker' expired" not in logs


def test_librdkafka_reauthenticates_without_a_disconnect(sasl_cluster):
    """KIP-368 with a real client: librdkafka re-authenticates before each 1.5 s session ends."""
    from confluent_kafka.admin import NewTopic

    admin = AdminClient(conf(sasl_cluster))
    admin.create_topics([NewTopic("reauth", 1, replica_assignment=[[0]])])["reauth"].result(30)
    config = {**conf(sasl_cluster), "bootstrap.servers": f"127.0.0.1:{sasl_cluster.reauth_port}"}
    errors: list = []
    delivered: list = []
    producer = Producer({**config, "message.timeout.ms": 20_000, "error_cb": errors.append})
    deadline = time.monotonic() + 3.5 * REAUTH_MS / 1000
    sent = 0
    while time.monotonic() < deadline:
        producer.produce("reauth", f"r{sent}".encode(), on_delivery=lambda e, m: delivered.append(e))
        sent += 1
        producer.poll(0.05)
    assert producer.flush(20) == 0
    assert delivered == [None] * sent
    assert not errors, errors


def test_sasl_requests_on_a_listener_without_sasl(sasl_cluster):
    """As Kafka's KafkaApis: ILLEGAL_SASL_STATE, and both APIs are advertised everywhere."""
    from kio.schema.api_versions.v3.request import ApiVersionsRequest

    raw = Raw(sasl_cluster.broker_ports[0])  # the PLAINTEXT listener
    versions = raw.call(ApiVersionsRequest(client_software_name="t", client_software_version="1"))
    keys = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in versions.api_keys}
    assert keys[17] == (0, 1) and keys[36] == (0, 2) and keys[50] == (0, 0) and keys[51] == (0, 0)
    assert raw.call(SaslHandshakeRequest(mechanism="PLAIN")).error_code == ErrorCode.illegal_sasl_state


def test_an_unknown_user_gets_the_same_challenge_from_every_broker(sasl_cluster):
    """A made-up user's salt is stable and the same on both brokers, as a real user's is."""
    ports = [int(hp.rsplit(":", 1)[1]) for hp in sasl_cluster.client_bootstrap.split(",")]

    def salt(port: int, user: str) -> str:
        raw = Raw(port)
        raw.call(SaslHandshakeRequest(mechanism="SCRAM-SHA-512"))
        first = raw.call(SaslAuthenticateRequest(auth_bytes=f"n,,n={user},r=abc".encode()))
        raw.close()
        attrs = dict(kv.split("=", 1) for kv in first.auth_bytes.decode().split(","))
        return attrs["s"] + "/" + attrs["i"]

    for user in ("ghost", "alice"):
        salts = {salt(port, user) for port in ports for _ in range(2)}
        assert len(salts) == 1, (user, salts)

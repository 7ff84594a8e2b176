"""KafkaUser resources end to end (issue 29): the operator (kopf, in a thread) against an emulated
API server, and a real cluster with the ACL authorizer on and the listeners the operator renders for
a secured cluster (operator/cluster_security): CLIENT is SASL_SSL with SCRAM-SHA-512 and a broker
certificate of the cluster CA; TLS is SSL with `ssl.client.auth=required`, the clients CA as its
trust store and the operator's user principal mapping rules. A PLAINTEXT listener, where
User:ANONYMOUS is the super user, is the operator's (its own authenticated connection is another
issue's). What the users can do is checked with librdkafka (confluent-kafka) connecting with the
values of the user's Secret: SCRAM users with their password, TLS users with their certificate.
"""

import asyncio
import base64
import json
import subprocess
import sys
import time
import uuid

import kmock
import pytest
import pytest_asyncio
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from operator_harness import NS, SECRETS, USERS, Api, OperatorThread, condition, new_server, wait_for

from odradek.common.security import jaas
from odradek.dev.cluster import LocalCluster
from odradek.dev.zookeeper import free_ports
from odradek.operator.certificates import clock_now, common_name, issue, new_ca
from odradek.operator.cluster_security import USER_PRINCIPAL_RULES
from odradek.operator.rolling import fetch_view
from odradek.operator.topics import Tuning
from odradek.operator.user_models import FINALIZER

pytestmark = [pytest.mark.timeout(180), pytest.mark.asyncio]

RESYNC = 1.5
CLUSTER = "demo"
BASE = f"/apis/odradek.io/v1alpha1/namespaces/{NS}/kafkausers"
MECHANISM = "SCRAM-SHA-512"


@pytest.fixture(scope="module")
def kafka(zookeeper, tmp_path_factory):
    data = tmp_path_factory.mktemp("user-operator-cluster")
    client_port, tls_port = free_ports(2)
    # The CAs as operator/certificates makes them: the broker's certificate from the cluster CA, the
    # TLS listener trusting the clients CA, which the tests hand to the operator in its Secret.
    now = clock_now()
    cluster_ca, clients_ca = new_ca(f"{CLUSTER}-cluster-ca", now, 365), new_ca(f"{CLUSTER}-clients-ca", now, 365)
    key, cert = issue(cluster_ca, common_name(CLUSTER, "broker"), ("127.0.0.1", "localhost"), now, 365)
    (data / "broker.pem").write_text(key + cert + cluster_ca.cert_pem)
    (data / "ca.crt").write_text(cluster_ca.cert_pem)
    (data / "clients-ca.crt").write_text(clients_ca.cert_pem)
    cluster = LocalCluster(
        data, brokers=1, controllers=1, broker_ports=free_ports(1),
        zookeeper_connect=f"{zookeeper.connect}/odradek-{uuid.uuid4().hex[:8]}",
        broker_overrides={
            "zookeeper.session.timeout.ms": 6000, "auto.create.topics.enable": "false",
            "listener.security.protocol.map":
                "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,CLIENT:SASL_SSL,TLS:SSL",
            "ssl.keystore.type": "PEM", "ssl.keystore.location": str(data / "broker.pem"),
            "listener.name.client.sasl.enabled.mechanisms": MECHANISM,
            "listener.name.tls.ssl.client.auth": "required",
            "listener.name.tls.ssl.truststore.type": "PEM",
            "listener.name.tls.ssl.truststore.location": str(data / "clients-ca.crt"),
            "listener.name.tls.ssl.principal.mapping.rules": USER_PRINCIPAL_RULES,
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            "super.users": "User:ANONYMOUS",
            "offsets.topic.replication.factor": 1, "offsets.topic.num.partitions": 1,
            "group.initial.rebalance.delay.ms": 0},
        controller_overrides={"zookeeper.session.timeout.ms": 6000})
    cluster.brokers[0].overrides["listeners"] += f",CLIENT://127.0.0.1:{client_port},TLS://127.0.0.1:{tls_port}"
    cluster.client_bootstrap = f"127.0.0.1:{client_port}"
    cluster.tls_bootstrap = f"127.0.0.1:{tls_port}"
    cluster.ca_location = str(data / "ca.crt")
    cluster.clients_ca = clients_ca
    cluster.start()
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    futures = admin.create_topics([NewTopic(t, 1, 1) for t in ("granted", "other")], operation_timeout=20)
    for f in futures.values():
        f.result(timeout=25)
    producer = Producer({"bootstrap.servers": cluster.bootstrap})
    for topic in ("granted", "other"):
        for i in range(5):
            producer.produce(topic, b"%d" % i)
    assert producer.flush(20) == 0
    yield cluster
    cluster.stop()


def sasl(kafka, user: str, password: str) -> dict:
    """SCRAM-SHA-512 over TLS, trusting the cluster CA (the host name is checked: librdkafka's default)."""
    return {"bootstrap.servers": kafka.client_bootstrap, "security.protocol": "SASL_SSL",
            "ssl.ca.location": kafka.ca_location, "sasl.mechanism": MECHANISM, "sasl.username": user,
            "sasl.password": password}


def mtls(kafka, directory, secret: dict[str, str]) -> dict:
    """The TLS listener with a KafkaUser's Secret: its user.crt and user.key as files, as a pod mounts them."""
    for key in ("user.crt", "user.key"):
        (directory / key).write_text(secret[key])
    (directory / "user.key").chmod(0o600)
    return {"bootstrap.servers": kafka.tls_bootstrap, "security.protocol": "SSL",
            "ssl.ca.location": kafka.ca_location, "ssl.certificate.location": str(directory / "user.crt"),
            "ssl.key.location": str(directory / "user.key")}


def read(conf: dict, topic: str, group: str, n: int = 5, seconds: float = 15.0) -> tuple[int, list[int]]:
    """(records read, error codes seen) reading `topic` from the start in consumer group `group`."""
    consumer = Consumer({**conf, "group.id": group, "auto.offset.reset": "earliest", "session.timeout.ms": 6000})
    consumer.subscribe([topic])
    got, codes = 0, []
    deadline = time.monotonic() + seconds
    try:
        while got < n and time.monotonic() < deadline and len(codes) < 3:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                codes.append(msg.error().code())
            else:
                got += 1
    finally:
        consumer.close()
    return got, codes


def write(conf: dict, topic: str) -> KafkaError | None:
    producer = Producer({**conf, "message.timeout.ms": 6000})
    errors: list = []
    producer.produce(topic, b"x", on_delivery=lambda err, _m: errors.append(err))
    producer.flush(15)
    return errors[0] if errors else KafkaError(KafkaError._MSG_TIMED_OUT)


def authenticates(conf: dict, seconds: float = 10.0) -> bool:
    """Whether a new connection logs in (librdkafka reports a refused login to error_cb, from poll)."""
    errors: list[KafkaError] = []
    producer = Producer({**conf, "error_cb": errors.append})
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        producer.poll(0.2)
        if any(e.code() == KafkaError._AUTHENTICATION for e in errors):
            return False
        try:
            producer.list_topics(timeout=0.5)
            return True
        except KafkaException:
            continue
    raise AssertionError(f"neither logged in nor refused in {seconds}s: {errors}")


class Env:
    def __init__(self, server, url, kafka: LocalCluster):
        self.server, self.url, self.cluster = server, url, kafka
        self.api = Api(url)
        self.admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
        self.operator: OperatorThread | None = None

    def start_operator(self):
        ports = list(self.cluster.broker_ports)

        async def view(body):
            return await fetch_view([("127.0.0.1", p) for p in ports], timeout=5.0)

        self.operator = OperatorThread(
            self.url, view, interval=2.0, topic_bootstrap=lambda cluster: [("127.0.0.1", p) for p in ports],
            user_tuning=Tuning(workers=8, resync=RESYNC, linger=0.02))

    async def create_cluster(self):
        await self.api.create_cluster({"zookeeper": {"connect": self.cluster.zookeeper_connect}}, name=CLUSTER)

    async def apply(self, name, spec):
        status, body = await self.api.call("POST", BASE, {
            "apiVersion": "odradek.io/v1alpha1", "kind": "KafkaUser", "metadata": {"name": name, "namespace": NS},
            "spec": {"clusterRef": CLUSTER, **spec}})
        assert status in (200, 201), body
        return body

    async def patch(self, name, patch):
        status, body = await self.api.call("PATCH", f"{BASE}/{name}", patch, "application/merge-patch+json")
        assert status == 200, body
        return body

    async def delete(self, name):
        status, body = await self.api.call("DELETE", f"{BASE}/{name}")
        assert status == 200, body

    async def put_secret(self, name, data: dict[str, str]):
        body = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": NS},
                "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}}
        status, answer = await self.api.call("POST", f"/api/v1/namespaces/{NS}/secrets", body)
        if status == 409:
            status, answer = await self.api.call("PATCH", f"/api/v1/namespaces/{NS}/secrets/{name}",
                                                 {"data": body["data"]}, "application/merge-patch+json")
        assert status in (200, 201), answer

    def user(self, name):
        return self.server.live(USERS, NS, name)

    def secret(self, name) -> dict[str, str] | None:
        body = self.server.live(SECRETS, NS, name)
        if body is None:
            return None
        return {k: base64.b64decode(v).decode() for k, v in (body.get("data") or {}).items()}

    async def ready(self, name, timeout=30.0):
        def check():
            body = self.user(name)
            ready = condition(body, "Ready")
            return (ready.get("status") == "True" and ready.get("observedGeneration") == body["metadata"]["generation"]
                    and body)
        return await wait_for(check, timeout, f"KafkaUser {name} Ready")

    def acls_of(self, principal: str) -> set[tuple]:
        f = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, principal, None, AclOperation.ANY,
                             AclPermissionType.ANY)
        found = self.admin.describe_acls(f, request_timeout=10).result(timeout=15)
        return {(b.restype.name, b.name, b.resource_pattern_type.name, b.operation.name, b.permission_type.name)
                for b in found}

    async def wait_acls(self, principal, expected, timeout=20.0):
        await wait_for(lambda: self.acls_of(principal) == expected, timeout, f"ACLs of {principal}: {expected}",
                       step=0.3)


@pytest_asyncio.fixture
async def env(kafka):
    server = new_server()
    async with server, kmock.Server(server) as http:
        e = Env(server, str(http.url), kafka)
        try:
            yield e
        finally:
            if e.operator is not None and e.operator.thread.is_alive():
                await e.operator.stop()
            await e.api.close()


READER_ACLS = [{"resource": {"type": "topic", "name": "granted"}, "operations": ["Read", "Describe"]},
               {"resource": {"type": "group", "name": "reader-", "patternType": "prefix"}, "operations": ["Read"]}]
GRANTED = {("TOPIC", "granted", "LITERAL", "READ", "ALLOW"), ("TOPIC", "granted", "LITERAL", "DESCRIBE", "ALLOW"),
           ("GROUP", "reader-", "PREFIXED", "READ", "ALLOW")}


async def test_a_scram_user_reads_what_its_acls_grant_and_nothing_else(env):
    await env.create_cluster()
    env.start_operator()
    await env.apply("reader", {"authentication": {"type": "scram-sha-512"},
                               "authorization": {"type": "simple", "acls": READER_ACLS},
                               "quotas": {"producerByteRate": 1048576, "requestPercentage": 50}})
    body = await env.ready("reader")
    assert body["status"]["username"] == "reader" and body["status"]["secret"] == "reader"
    assert FINALIZER in body["metadata"]["finalizers"]
    secret = env.secret("reader")
    password = secret["password"]
    assert len(password) == 32
    assert jaas.parse(secret["sasl.jaas.config"]).options == {"username": "reader", "password": password}
    owner = env.server.live(SECRETS, NS, "reader")["metadata"]["ownerReferences"][0]
    assert owner["kind"] == "KafkaUser" and owner["uid"] == body["metadata"]["uid"]
    assert password not in json.dumps(body), "the password is in the KafkaUser"
    assert env.acls_of("User:reader") == GRANTED

    conf = sasl(env.cluster, "reader", password)
    got, codes = await asyncio.to_thread(read, conf, "granted", "reader-1")
    assert got == 5 and codes == []
    got, codes = await asyncio.to_thread(read, conf, "other", "reader-2", seconds=8)
    assert got == 0 and KafkaError.TOPIC_AUTHORIZATION_FAILED in codes
    for topic in ("granted", "other"):
        error = await asyncio.to_thread(write, conf, topic)
        assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, error
    assert not await asyncio.to_thread(authenticates, sasl(env.cluster, "reader", "wrong-password"))

    # Out-of-band changes are reverted at the next resync: an ACL added, one removed, a quota changed.
    extra = AclBinding(ResourceType.TOPIC, "other", ResourcePatternType.LITERAL, "User:reader", "*",
                       AclOperation.WRITE, AclPermissionType.ALLOW)
    env.admin.create_acls([extra])[extra].result(timeout=15)
    gone = AclBinding(ResourceType.TOPIC, "granted", ResourcePatternType.LITERAL, "User:reader", "*",
                      AclOperation.DESCRIBE, AclPermissionType.ALLOW)
    env.admin.delete_acls([AclBindingFilter(*gone_args(gone))])[AclBindingFilter(*gone_args(gone))].result(timeout=15)
    await env.wait_acls("User:reader", GRANTED, timeout=6 * RESYNC + 10)
    assert await asyncio.to_thread(quotas, env.cluster, "reader") == {"producer_byte_rate": 1048576.0,
                                                                      "request_percentage": 50.0}

    # Changing the ACLs takes effect: READ on "other" too, the quota removed.
    await env.patch("reader", {"spec": {"authorization": {"acls": [
        *READER_ACLS, {"resource": {"type": "topic", "name": "other"}, "operations": ["Read"]}]},
        "quotas": {"requestPercentage": None}}})
    await env.ready("reader")
    await env.wait_acls("User:reader", GRANTED | {("TOPIC", "other", "LITERAL", "READ", "ALLOW")})
    got, codes = await asyncio.to_thread(read, conf, "other", "reader-3")
    assert got == 5 and codes == []
    assert await asyncio.to_thread(quotas, env.cluster, "reader") == {"producer_byte_rate": 1048576.0}

    # Deleting the KafkaUser removes its credential, ACLs and quotas: the next connection fails.
    await env.delete("reader")
    await wait_for(lambda: env.user("reader") is None, 30, "KafkaUser reader removed")
    assert env.acls_of("User:reader") == set()
    assert await asyncio.to_thread(quotas, env.cluster, "reader") == {}
    assert not await asyncio.to_thread(authenticates, conf)
    assert env.secret("reader") is None, "the Secret is garbage-collected with its owner"
    await env.operator.stop()


def gone_args(b: AclBinding) -> tuple:
    return (b.restype, b.name, b.resource_pattern_type, b.principal, b.host, b.operation, b.permission_type)


def quotas(kafka, user: str) -> dict[str, float]:
    """The user's quotas as `odradek quotas --describe` prints them."""
    out = subprocess.run([sys.executable, "-m", "odradek.cli", "quotas", "--bootstrap-server", kafka.bootstrap,
                          "--describe", "--entity-type", "users", "--entity-name", user],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    found: dict[str, float] = {}
    for line in out.splitlines():
        if f"'{user}'" in line:
            for item in line.split(" are ", 1)[1].split(", "):
                key, value = item.split("=")
                found[key] = float(value)
    return found


async def test_a_password_from_a_secret_and_its_change(env):
    await env.put_secret("app-password", {"pw": "first-password-1234"})
    await env.create_cluster()
    env.start_operator()
    await env.apply("app", {"authentication": {"type": "scram-sha-512", "password": {
        "valueFrom": {"secretKeyRef": {"name": "app-password", "key": "pw"}}}}})
    await env.ready("app")
    assert env.secret("app")["password"] == "first-password-1234"
    assert await asyncio.to_thread(authenticates, sasl(env.cluster, "app", "first-password-1234"))
    await env.put_secret("app-password", {"pw": "second-password-5678"})
    await wait_for(lambda: (env.secret("app") or {}).get("password") == "second-password-5678", 6 * RESYNC + 10,
                   "the new password in the user's Secret")
    # The Secret is written once the controller took the credential; each broker learns of it
    # through ZooKeeper's change notification a moment later (as in Kafka): bounded retries.
    for _ in range(50):
        if await asyncio.to_thread(authenticates, sasl(env.cluster, "app", "second-password-5678")):
            break
        await asyncio.sleep(0.2)
    else:
        raise AssertionError("the new password never logged in")
    assert not await asyncio.to_thread(authenticates, sasl(env.cluster, "app", "first-password-1234"))

    # A missing source Secret is waited for (Reconciling), never Stalled; no value in the message.
    await env.apply("late", {"authentication": {"type": "scram-sha-512", "password": {
        "valueFrom": {"secretKeyRef": {"name": "late-password", "key": "pw"}}}}})
    body = await wait_for(lambda: condition(env.user("late"), "Reconciling").get("status") == "True"
                          and env.user("late"), 20, "late Reconciling")
    assert condition(body, "Ready")["reason"] == "PasswordSecretNotFound"
    assert condition(body, "Stalled")["status"] == "False"
    await env.put_secret("late-password", {"pw": "late-password-0000"})
    await env.ready("late", timeout=6 * RESYNC + 20)
    await env.delete("app")
    await env.delete("late")
    await wait_for(lambda: env.user("app") is None and env.user("late") is None, 30, "users removed")
    await env.operator.stop()


async def test_a_tls_user_connects_with_its_certificate_and_reads_what_its_acls_grant(env, tmp_path):
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.serialization import pkcs12

    from odradek.operator.users import issue_client_certificate

    await env.create_cluster()
    env.start_operator()
    await env.apply("certified", {"authentication": {"type": "tls"}, "authorization": {"acls": READER_ACLS}})
    body = await wait_for(lambda: condition(env.user("certified"), "Ready").get("reason") == "ClientsCaNotFound"
                          and env.user("certified"), 20, "waiting for the clients CA")
    assert condition(body, "Reconciling")["status"] == "True" and condition(body, "Stalled")["status"] == "False"
    ca = env.cluster.clients_ca  # the CA the broker's TLS listener trusts, in the Secret the operator reads
    await env.put_secret("demo-clients-ca", {"ca.key": ca.key_pem, "ca.crt": ca.cert_pem})
    body = await env.ready("certified", timeout=6 * RESYNC + 20)
    assert body["status"]["username"] == "CN=certified" and body["status"]["secret"] == "certified"
    secret = env.secret("certified")
    assert set(secret) == {"ca.crt", "user.crt", "user.key", "user.p12", "user.password"}
    assert secret["ca.crt"] == ca.cert_pem
    cert = x509.load_pem_x509_certificate(secret["user.crt"].encode())
    assert cert.subject.rfc4514_string() == "CN=certified" and cert.issuer == ca.certificate.subject
    ca.certificate.public_key().verify(cert.signature, cert.tbs_certificate_bytes,
                                       ec.ECDSA(cert.signature_hash_algorithm))
    key, p12_cert, _ = pkcs12.load_key_and_certificates(base64.b64decode(secret["user.p12"]),
                                                        secret["user.password"].encode())
    assert p12_cert == cert and key is not None
    # The broker maps the certificate to the principal the operator wrote the ACLs for.
    assert env.acls_of("User:CN=certified") == GRANTED
    conf = mtls(env.cluster, tmp_path, secret)
    got, codes = await asyncio.to_thread(read, conf, "granted", "reader-tls-1")
    assert got == 5 and codes == []
    got, codes = await asyncio.to_thread(read, conf, "other", "reader-tls-2", seconds=8)
    assert got == 0 and KafkaError.TOPIC_AUTHORIZATION_FAILED in codes
    for topic in ("granted", "other"):
        error = await asyncio.to_thread(write, conf, topic)
        assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, error
    # The same subject from a CA the listener does not trust gets no connection.
    forged = issue_client_certificate(new_ca("demo-clients-ca", clock_now(), 365), "certified", clock_now(), 30)
    forged_dir = tmp_path / "forged"
    forged_dir.mkdir()
    assert not await asyncio.to_thread(connects, mtls(env.cluster, forged_dir, forged))

    # A pass that finds the certificate good keeps it.
    await env.patch("certified", {"spec": {"quotas": {"consumerByteRate": 2048}}})
    await env.ready("certified")
    assert env.secret("certified")["user.crt"] == secret["user.crt"]
    # Deleted, the user keeps a certificate valid until its end (no revocation) but no ACL: refused
    # (its group first, as Kafka checks the group before the topic).
    await env.delete("certified")
    await wait_for(lambda: env.user("certified") is None, 30, "KafkaUser certified removed")
    assert env.acls_of("User:CN=certified") == set()
    got, codes = await asyncio.to_thread(read, conf, "granted", "reader-tls-3", seconds=8)
    assert got == 0 and {KafkaError.GROUP_AUTHORIZATION_FAILED, KafkaError.TOPIC_AUTHORIZATION_FAILED} & set(codes)
    await env.operator.stop()


def connects(conf: dict, seconds: float = 10.0) -> bool:
    """Whether a client reaches the broker's metadata (a refused TLS handshake reports to error_cb)."""
    errors: list[KafkaError] = []
    producer = Producer({**conf, "error_cb": errors.append})
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            producer.list_topics(timeout=1.0)
            return True
        except KafkaException:
            producer.poll(0.1)
            if errors:
                return False
    raise AssertionError(f"neither connected nor refused in {seconds}s")

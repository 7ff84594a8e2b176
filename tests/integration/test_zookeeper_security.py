"""ZooKeeper security as `odradek dev --security` sets it up: `zookeeper.set.acl` with the cluster's
digest identity, and ZooKeeper reached over TLS only (its plaintext client port is off).

One secure cluster (its own TLS-only ZooKeeper, 1 broker, 1 controller): clients produce and
consume, `odradek users --zk-tls-config-file` adds a SCRAM user who then logs in, and a ZooKeeper
client without the digest reads the cluster's znodes but cannot change them nor read credentials.
"""

import subprocess
import sys
import time

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.exceptions import NoAuthError

from odradek.common.config import parse_properties
from odradek.common.zk_connect import close_client, new_client, start_client
from odradek.common.zk_security import ZkSecurity
from odradek.dev.cluster import LocalCluster, secure_cluster
from odradek.dev.zookeeper import four_letter, free_ports


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    data = tmp_path_factory.mktemp("zk-security")
    security = secure_cluster(data / "security", 1, 1, zookeeper_tls=True)
    c = LocalCluster(data, brokers=1, controllers=1, broker_ports=free_ports(1), security=security,
                     broker_overrides={"zookeeper.session.timeout.ms": 6000, "offsets.topic.num.partitions": 1,
                                       "offsets.topic.replication.factor": 1, "group.initial.rebalance.delay.ms": 0},
                     controller_overrides={"zookeeper.session.timeout.ms": 6000})
    c.start()
    yield c
    c.stop()


def client_conf(cluster, **extra) -> dict:
    return {"bootstrap.servers": cluster.bootstrap,
            **parse_properties(cluster.security.client_config_path.read_text()), **extra}


def outsider(cluster, path: str = "/odradek"):
    """A ZooKeeper client on the TLS port with no digest identity (and no client certificate)."""
    zk = new_client(cluster.zookeeper.connect + path, 10,
                    ZkSecurity(ssl=True, truststore=str(cluster.security.ca_path)))
    start_client(zk, 10)
    return zk


def test_zookeeper_serves_tls_only(cluster):
    cfg = (cluster.zookeeper.data_dir / "zoo.cfg").read_text()
    assert "secureClientPort=" in cfg and "\nclientPort=" not in cfg
    try:
        plain = four_letter(cluster.zookeeper.host, cluster.zookeeper.port, timeout=2)
    except OSError:
        plain = b""
    assert b"Mode:" not in plain  # a plaintext client gets nothing from the TLS port
    assert b"Mode:" in four_letter(cluster.zookeeper.host, cluster.zookeeper.port, tls=cluster.zookeeper.tls)
    broker = cluster.broker(0).overrides
    assert broker["zookeeper.ssl.client.enable"] == "true" and broker["zookeeper.set.acl"] == "true"


def test_produce_consume_and_a_scram_user_from_the_tool(cluster, tmp_path):
    admin = AdminClient(client_conf(cluster))
    admin.create_topics([NewTopic("zk-acl", 1, 1)])["zk-acl"].result(30)
    producer = Producer(client_conf(cluster))
    for i in range(10):
        producer.produce("zk-acl", f"m{i}".encode())
    assert producer.flush(30) == 0
    consumer = Consumer(client_conf(cluster, **{"group.id": "zk-acl", "auto.offset.reset": "earliest"}))
    consumer.subscribe(["zk-acl"])
    got: list[bytes] = []
    deadline = time.monotonic() + 40
    while len(got) < 10 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append(msg.value())
    consumer.close()
    assert sorted(got) == sorted(f"m{i}".encode() for i in range(10))

    password_file = tmp_path / "bob.password"
    password_file.write_text("bob-secret\n")
    users = [sys.executable, "-m", "odradek.cli", "users", "--zookeeper", cluster.zookeeper_connect,
             "--zk-tls-config-file", str(cluster.security.zookeeper_client_config_path), "--timeout", "10"]
    added = subprocess.run([*users, "--entity-name", "bob", "--add-scram", "SCRAM-SHA-512",
                            "--password-file", str(password_file)], capture_output=True, text=True, timeout=60)
    assert added.returncode == 0, added.stderr
    # without the cluster's ZooKeeper settings the tool cannot even connect (TLS only)
    refused = subprocess.run([*users[:6], "--timeout", "3", "--describe"], capture_output=True, text=True, timeout=60)
    assert refused.returncode != 0
    bob = client_conf(cluster, **{"sasl.username": "bob", "sasl.password": "bob-secret"})
    deadline = time.monotonic() + 20
    while True:  # the broker applies the credential on its change notification
        try:
            AdminClient(bob).list_topics(timeout=5)
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)


def test_znodes_are_read_only_for_others_and_credentials_hidden(cluster):
    zk = cluster.zk_client()
    try:
        acls, _ = zk.get_acls("/config/users/admin")
        assert [a.id.scheme for a in acls] == ["digest"]  # no world read on credentials
        topic_acls, _ = zk.get_acls("/brokers/ids/0")
        # creator-all is every identity of the creator: its digest and its TLS certificate (x509)
        assert {a.id.scheme for a in topic_acls} == {"digest", "world", "x509"}
        assert next(a for a in topic_acls if a.id.scheme == "world").perms == 1  # READ only
    finally:
        close_client(zk)
    zk = outsider(cluster)
    try:
        assert zk.get_children("/brokers/ids") == ["0"]
        zk.get("/brokers/ids/0")
        for write in (lambda: zk.create("/intruder"), lambda: zk.create("/brokers/topics/intruder"),
                      lambda: zk.set("/brokers/ids/0", b"{}"), lambda: zk.delete("/brokers/ids/0"),
                      lambda: zk.delete("/config/changes", recursive=True),
                      lambda: zk.get("/config/users/admin"), lambda: zk.get_children("/config/users")):
            with pytest.raises(NoAuthError):
                write()
    finally:
        close_client(zk)
    logs = "".join(p.log_tail(500) for p in cluster.processes())
    zk_password = (cluster.security.directory / "odradek.zookeeper.password").read_text().strip()
    assert "bob-secret" not in logs and zk_password not in logs


def test_set_acl_on_a_cluster_created_without_acls(cluster):
    """Existing znodes keep their open ACLs (no migration); new ones get the secure ones, and the
    tool works on such a cluster."""
    chroot = "/legacy"
    open_client = new_client(cluster.zookeeper.connect, 10, ZkSecurity(ssl=True, truststore=str(cluster.security.ca_path)))
    start_client(open_client, 10)
    try:
        open_client.ensure_path(chroot + "/config/changes")
    finally:
        close_client(open_client)
    result = subprocess.run(
        [sys.executable, "-m", "odradek.cli", "users", "--zookeeper", cluster.zookeeper.connect + chroot,
         "--zk-tls-config-file", str(cluster.security.zookeeper_client_config_path), "--entity-name", "carol",
         "--add-scram", "SCRAM-SHA-256=[password=carol-secret]"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    zk = outsider(cluster, chroot)
    try:
        zk.create("/config/changes/still-open")  # the old znode kept its open ACL
        with pytest.raises(NoAuthError):
            zk.get("/config/users/carol")
    finally:
        close_client(zk)

"""The configuration the operator renders for a secured cluster runs as it is: real broker and
controller processes started from operator/cluster_security's properties and operator/certificates'
files (only addresses and paths moved onto this machine), a SCRAM client on the SASL_SSL listener,
the operator's own admin connection on REPLICATION with its certificate, and the authorizer on.
"""

import asyncio
import time
import uuid

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.common.zk_connect import ensure_chroot
from odradek.common.zk_security import ZkSecurity
from odradek.dev.cluster import ManagedProcess
from odradek.dev.zookeeper import free_port
from odradek.operator import certificates, cluster_security
from odradek.operator.cluster_access import ClusterAccess, OperatorCredentials, access
from odradek.operator.models import parse_spec
from odradek.users import bootstrap_user

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

BROKERS = 2
SPEC = {"brokers": {"replicas": BROKERS},
        "listeners": [{"name": "tls", "port": 9093, "tls": True, "authentication": {"type": "scram-sha-512"}}],
        "authorization": {"type": "simple", "superUsers": ["User:ops"]}}
BODY = {"metadata": {"name": "demo", "namespace": "kafka", "uid": "u"}, "spec": SPEC}


def local(props: dict, certs: str, moves: dict[str, str]) -> dict[str, str]:
    """The rendered properties with paths and addresses moved onto this machine."""
    out = {}
    for key, value in props.items():
        text = str(value).lower() if isinstance(value, bool) else str(value)
        text = text.replace(certificates.CERTS_DIR, certs).replace(certificates.ZOOKEEPER_JAAS_DIR, certs)
        for old, new in moves.items():
            text = text.replace(old, new)
        out[key] = text
    return out


def test_rendered_secured_configuration_serves_scram_clients_and_the_operator(zookeeper, tmp_path):
    spec = parse_spec(SPEC)
    now = certificates.clock_now()
    external = dict.fromkeys(range(BROKERS), ("127.0.0.1", "localhost"))
    plan = certificates.plan("demo", "kafka", spec, BROKERS, {}, now, external)
    certs = tmp_path / "certs"
    certs.mkdir()
    for secret in ("demo-broker-certs", "demo-controller-certs", "demo-zookeeper-client"):
        for name, text in plan.secrets[secret].items():
            (certs / name).write_text(text)
            (certs / name).chmod(0o600)
    zk_identity = plan.secrets["demo-zookeeper-client"]
    zk_security = ZkSecurity(set_acl=True, digest=(zk_identity["username"], zk_identity["password"]))
    connect = f"{zookeeper.connect}/odradek-{uuid.uuid4().hex[:8]}"
    ensure_chroot(connect, timeout=15, security=zk_security)
    bootstrap_user(connect, "ops", "ops-secret", security=zk_security)
    bootstrap_user(connect, "nobody", "nobody-secret", security=zk_security)

    processes = []
    controller_port = free_port()
    controller = local(cluster_security.controller_properties(BODY, spec), str(certs),
                       {builders_zk(): connect, "0.0.0.0": "127.0.0.1"})
    controller.update({"controller.id": "1000", "listeners": f"CONTROLLER://127.0.0.1:{controller_port}",
                       "metrics.port": str(free_port()), "metrics.host": "127.0.0.1"})
    processes.append(ManagedProcess("controller-0", "controller", controller, tmp_path / "logs" / "controller-0.log"))
    client_ports, replication_ports = [], []
    for i in range(BROKERS):
        ports = {p: free_port() for p in (9093, 9090, 9091)}
        moves = {builders_zk(): connect, **{f"0.0.0.0:{p}": f"127.0.0.1:{q}" for p, q in ports.items()}}
        props = local(cluster_security.broker_properties(BODY, spec), str(certs), moves)
        props.update({
            "broker.id": str(i), "log.dirs": str(tmp_path / f"broker-{i}"),
            "advertised.listeners": props["listeners"],
            "ssl.keystore.location": str(certs / certificates.broker_file("demo", i)),
            "metrics.port": str(free_port()), "metrics.host": "127.0.0.1",
            "zookeeper.session.timeout.ms": "6000", "offsets.topic.replication.factor": str(BROKERS)})
        processes.append(ManagedProcess(f"broker-{i}", "broker", props, tmp_path / "logs" / f"broker-{i}.log"))
        client_ports.append(ports[9093])
        replication_ports.append(ports[9090])
    for p in processes:
        p.start()
    try:
        bootstrap = ",".join(f"127.0.0.1:{p}" for p in client_ports)
        sasl = {"bootstrap.servers": bootstrap, "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                "ssl.ca.location": str(certs / "ca.crt")}
        ops = {**sasl, "sasl.username": "ops", "sasl.password": "ops-secret"}
        admin = AdminClient(ops)
        deadline = time.monotonic() + 60
        while True:  # until both brokers registered and serve the SASL_SSL listener
            try:
                if len(admin.list_topics(timeout=5).brokers) == BROKERS:
                    for f in admin.create_topics([NewTopic("secured", 2, BROKERS)]).values():
                        f.result(30)
                    break
            except KafkaException:
                pass
            assert time.monotonic() < deadline, [p.out_path.read_text()[-2000:] for p in processes]
            time.sleep(1)
        producer = Producer({**ops, "acks": "all"})
        for n in range(20):
            producer.produce("secured", f"m{n}".encode())
        assert producer.flush(30) == 0

        # a user without ACLs is refused (authorization is on), the super user was not
        refused = []
        denied = Producer({**sasl, "sasl.username": "nobody", "sasl.password": "nobody-secret",
                           "message.timeout.ms": 10_000})
        denied.produce("secured", b"x", on_delivery=lambda err, msg: refused.append(err))
        denied.flush(20)
        assert refused and refused[0] is not None and "AUTHORIZATION" in refused[0].name()

        # the operator's admin connection: REPLICATION, mutual TLS, its certificate
        found = access(BODY, OperatorCredentials(plan.secrets["demo-operator-certs"]["user.crt"],
                                                 plan.secrets["demo-operator-certs"]["user.key"],
                                                 plan.secrets["demo-operator-certs"]["ca.crt"]))
        local_access = ClusterAccess((("127.0.0.1", replication_ports[0]),), found.security, fingerprint="x")

        async def describe():
            kafka = local_access.admin(request_timeout=15)
            try:
                return await kafka.describe_topics(["secured"])
            finally:
                await kafka.close()

        topic = asyncio.run(describe())["secured"]
        assert topic is not None and topic.partitions == 2 and topic.replicas == BROKERS
    finally:
        for p in reversed(processes):
            p.stop()


def builders_zk() -> str:
    from odradek.operator import builders

    return builders.zookeeper_connect(BODY, parse_spec(SPEC))

"""Certificate renewal end to end: the reconciler's certificate step (operator/reconciler
`write_certificates`) against the emulated API server, real TLS brokers using the files it writes,
the clock moved past renewalDays.

A test-side kubelet copies the Secrets' contents to the files the brokers read (as a Secret volume
updates its files in place). The brokers are LocalCluster's secure ones (dev/security) whose
key stores and CA are the operator's: each broker's certificate names 127.0.0.1, its external
address, taken from its load balancer Service's status. After the clock moves, every broker serves
its renewed certificate to new connections, a producer running throughout sees no error, and no
broker process restarted.
"""

import asyncio
import base64
import socket
import ssl
import threading
import time
import uuid

import kmock
import kopf
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from cryptography import x509
from operator_harness import NS, SECRETS, new_server

from odradek.common.clock import now_ms
from odradek.dev.cluster import LocalCluster
from odradek.dev.security import ClusterSecurity
from odradek.dev.zookeeper import free_ports
from odradek.operator import certificates
from odradek.operator.kube import KubeClient
from odradek.operator.models import parse_spec
from odradek.operator.reconciler import write_certificates

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

BROKERS = 3
DAY_MS = 86_400_000
SPEC = {"listeners": [{"name": "ext", "port": 9094, "type": "loadbalancer", "tls": True}],
        "clusterCa": {"validityDays": 30, "renewalDays": 10}}
BODY = {"metadata": {"name": "demo", "namespace": NS, "uid": "uid-demo"}, "spec": SPEC}


def served_serial(port: int, ca: str) -> int:
    """The serial number of the certificate a broker presents to a new TLS connection."""
    context = ssl.create_default_context(cafile=ca)
    with context.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=5),
                             server_hostname="127.0.0.1") as s:
        der = s.getpeercert(binary_form=True)
    return x509.load_der_x509_certificate(der).serial_number


def secret_data(server, name: str) -> dict[str, str]:
    obj = server.live(SECRETS, NS, name)
    return {k: base64.b64decode(v).decode() for k, v in (obj or {}).get("data", {}).items()}


def sync_files(server, directory) -> None:
    """The kubelet's part: the mounted Secrets' files, replaced whole (rename) when they differ."""
    files = {"ca.pem": secret_data(server, "demo-cluster-ca-cert")["ca.crt"],
             "ca-key.pem": secret_data(server, "demo-cluster-ca")["ca.key"]}
    brokers = secret_data(server, "demo-broker-certs")
    files.update({f"broker-{i}.pem": brokers[f"demo-broker-{i}.pem"] for i in range(BROKERS)})
    for name, text in files.items():
        path = directory / name
        if path.exists() and path.read_text() == text:
            continue
        tmp = directory / f".{name}.tmp"
        tmp.write_text(text)
        tmp.chmod(0o600)
        tmp.replace(path)


class Producing:
    """acks=all records at a steady pace on a thread; every failed delivery or client error kept."""

    def __init__(self, conf: dict):
        self.producer = Producer({**conf, "acks": "all", "linger.ms": 5, "message.timeout.ms": 30_000,
                                  "error_cb": lambda e: self.errors.append(e)})
        self.errors: list = []
        self.acked = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _delivered(self, err, msg) -> None:
        if err is not None:
            self.errors.append(err)
        else:
            self.acked += 1

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            self.producer.produce("renewed", f"r{i}".encode(), on_delivery=self._delivered)
            self.producer.poll(0.005)
            i += 1

    def start(self) -> "Producing":
        self._thread.start()
        return self

    def stop(self) -> None:
        if not self._stop.is_set():
            self._stop.set()
            self._thread.join(10)
            self.producer.flush(30)


def test_renewal_by_moving_the_clock_keeps_clients_producing_without_a_restart(zookeeper, tmp_path):
    # The certificates are first issued by a clock 21 days behind, then the clock moves to now:
    # past renewalDays (10 of 30) for every certificate, and the renewed ones valid for real clients.
    offset = [-21 * DAY_MS]

    def clock() -> int:
        return now_ms() + offset[0]

    spec = parse_spec(SPEC)
    server = new_server()
    for i in range(BROKERS):  # the load balancers have their addresses
        server.put_raw("v1/services", NS, {"apiVersion": "v1", "kind": "Service",
                                           "metadata": {"name": f"demo-broker-{i}-ext", "namespace": NS},
                                           "spec": {"type": "LoadBalancer"},
                                           "status": {"loadBalancer": {"ingress": [{"ip": "127.0.0.1"}]}}})

    async def issue() -> None:
        async with server, kmock.Server(server) as http:
            client = KubeClient.from_connection(kopf.ConnectionInfo(server=str(http.url), insecure=True))
            try:
                assert await write_certificates(client, BODY, spec, BROKERS, certificates.clock_now(clock)) is None
            finally:
                await client.close()

    loop = asyncio.new_event_loop()  # one loop: the emulator's queues belong to it
    loop.run_until_complete(issue())
    security_dir = tmp_path / "security"
    security_dir.mkdir()
    sync_files(server, security_dir)
    security = ClusterSecurity(security_dir)
    cluster = LocalCluster(tmp_path, brokers=BROKERS, controllers=1, broker_ports=free_ports(BROKERS),
                           zookeeper_connect=f"{zookeeper.connect}/odradek-{uuid.uuid4().hex[:8]}",
                           broker_overrides={"zookeeper.session.timeout.ms": 6000},
                           controller_overrides={"zookeeper.session.timeout.ms": 6000}, security=security)
    producer = None
    try:
        cluster.start()
        ca = str(security.ca_path)
        ports = cluster.broker_ports
        before = {i: served_serial(p, ca) for i, p in enumerate(ports)}
        pids = {i: cluster.brokers[i].pid for i in range(BROKERS)}
        conf = {"bootstrap.servers": cluster.bootstrap, **security.client_properties()}
        admin = AdminClient(conf)
        for f in admin.create_topics([NewTopic("renewed", 3, 3)]).values():
            f.result(30)
        producer = Producing(conf).start()
        time.sleep(3)
        offset[0] = 0
        loop.run_until_complete(issue())
        assert secret_data(server, "demo-cluster-ca-cert")["ca.crt"] == (security_dir / "ca.pem").read_text()
        sync_files(server, security_dir)
        deadline = time.monotonic() + 30
        after = dict(before)
        while time.monotonic() < deadline and any(after[i] == before[i] for i in after):
            time.sleep(1)
            after = {i: served_serial(p, ca) for i, p in enumerate(ports)}
        assert all(after[i] != before[i] for i in after), "brokers still serve the old certificates"
        time.sleep(3)  # and keep producing on the new ones
        producer.stop()
        assert producer.errors == []
        assert producer.acked > 100
        assert {i: cluster.brokers[i].pid for i in range(BROKERS)} == pids  # no restart
    finally:
        if producer is not None:
            producer.stop()
        cluster.stop()
        loop.close()

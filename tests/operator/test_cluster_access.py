"""How the operator reaches a cluster (operator/cluster_access): plaintext bootstrap for an
unsecured cluster, the REPLICATION listener with its certificate for a secured one."""

import asyncio
import base64

import pytest

from odradek.operator import cluster_access
from odradek.operator.cluster_access import NotReady, OperatorCredentials, access

SECURED = {"listeners": [{"name": "tls", "port": 9093, "tls": True, "authentication": {"type": "scram-sha-512"}}]}


def cluster(spec: dict, name: str = "demo") -> dict:
    return {"metadata": {"name": name, "namespace": "kafka", "uid": "u"}, "spec": spec}


class SecretsOnly:
    def __init__(self, secrets: dict[str, dict[str, str]]):
        self.secrets, self.reads = secrets, 0

    async def get(self, kind, namespace, name):
        assert kind == "Secret"
        self.reads += 1
        data = self.secrets.get(name)
        return None if data is None else {"data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}}


def test_unsecured_cluster_is_reached_on_the_bootstrap_service_in_plaintext():
    a = access(cluster({}))
    assert a.bootstrap == (("demo-bootstrap.kafka.svc", 9092),)
    assert a.security.security_protocol == "PLAINTEXT"
    assert a.zookeeper_connect == "demo-zookeeper.kafka.svc:2181/odradek"


def test_secured_cluster_without_credentials_is_not_ready():
    with pytest.raises(NotReady):
        access(cluster(SECURED))


def test_secured_cluster_is_reached_on_replication_with_the_operator_certificate():
    from odradek.operator import certificates

    ca = certificates.new_ca("demo cluster CA", certificates.clock_now(), 365)
    key, cert = certificates.issue(ca, "demo-operator", (), certificates.clock_now(), 30)
    kube = SecretsOnly({"demo-operator-certs": {"user.crt": cert + ca.cert_pem, "user.key": key, "ca.crt": ca.cert_pem},
                        "demo-zookeeper-client": {"username": "odradek", "password": "pw"}})
    found = asyncio.run(cluster_access.cluster_access(kube, cluster(SECURED, "demo")))
    assert found.bootstrap == (("demo-bootstrap.kafka.svc", 9090),)
    assert found.security.security_protocol == "SSL" and found.security.ssl_context() is not None
    assert found.zookeeper.set_acl and found.zookeeper.digest == ("odradek", "pw")
    again = asyncio.run(cluster_access.cluster_access(kube, cluster(SECURED, "demo")))
    assert again == found and kube.reads == 2  # cached: no second read
    assert "pw" not in repr(found) and "PRIVATE" not in repr(OperatorCredentials(cert, key, ca.cert_pem))
    cluster_access.forget("kafka", "demo")

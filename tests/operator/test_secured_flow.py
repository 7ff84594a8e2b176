"""A secured KafkaCluster through the operator process and the emulated API server: the
certificate Secrets it writes, what they carry, and how they follow the broker count."""

import base64

import pytest
from operator_harness import NETPOL, NS, SECRETS, wait_for
from test_operator_flow import env  # noqa: F401  (the fixture)

pytestmark = [pytest.mark.timeout(90), pytest.mark.asyncio]

SECURED = {"listeners": [{"name": "tls", "port": 9093, "tls": True, "authentication": {"type": "scram-sha-512"}}],
           "authorization": {"type": "simple", "superUsers": ["User:ops"]}}


def data(e, name: str) -> dict[str, str]:
    obj = e.server.live(SECRETS, NS, name) or {}
    return {k: base64.b64decode(v).decode() for k, v in (obj.get("data") or {}).items()}


async def test_secured_cluster_gets_its_certificates_and_keeps_them_as_it_grows(env):  # noqa: F811
    env.start_operator()
    created = await env.api.create_cluster(SECURED)
    await env.ready()
    assert set(data(env, "demo-cluster-ca-cert")) == {"ca.crt"}  # what applications may read
    assert set(data(env, "demo-cluster-ca")) == {"ca.crt", "ca.key"}
    brokers, ca = data(env, "demo-broker-certs"), data(env, "demo-cluster-ca")
    assert {f"demo-broker-{i}.pem" for i in range(3)} <= set(brokers)
    assert set(data(env, "demo-operator-certs")) == {"user.crt", "user.key", "ca.crt"}
    secret = env.server.live(SECRETS, NS, "demo-broker-certs")
    assert secret["metadata"]["ownerReferences"][0]["uid"] == created["metadata"]["uid"]
    assert env.server.live(NETPOL, NS, "demo-zookeeper") is not None
    assert env.server.live(NETPOL, NS, "demo-listener-tls") is not None

    await env.api.patch_spec({**SECURED, "brokers": {"replicas": 4}})
    await wait_for(lambda: "demo-broker-3.pem" in data(env, "demo-broker-certs"), 20, "a certificate for broker 3")
    grown = data(env, "demo-broker-certs")
    assert all(grown[f"demo-broker-{i}.pem"] == brokers[f"demo-broker-{i}.pem"] for i in range(3))  # kept
    assert data(env, "demo-cluster-ca") == ca

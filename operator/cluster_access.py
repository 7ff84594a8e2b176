"""How the operator reaches cluster X: the bootstrap addresses, the TLS client certificate and the
ZooKeeper identity of its own admin connections (Topics, KafkaUsers, the reconciler's look).

An unsecured cluster is reached as before: the bootstrap Service's client listener, PLAINTEXT.
A secured one (spec.listeners with TLS or authentication, or spec.authorization) is reached on the
brokers' REPLICATION listener with the operator's certificate from the cluster CA (Secret
`<cluster>-operator-certs`), which makes it a super user; its ZooKeeper identity is the cluster's
digest (Secret `<cluster>-zookeeper-client`). The material is read from the Secrets the reconciler
writes, kept for a few seconds, and compared by fingerprint, so a caller that caches an admin
connection reopens it only when the address or the certificates change (a renewal).
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from odradek.common.clock import monotonic_s
from odradek.common.security.channel import PLAINTEXT, ClientSecurity, client_security
from odradek.common.zk_security import ZkSecurity
from odradek.operator import builders
from odradek.operator.kafka_admin import KafkaAdmin
from odradek.operator.kube import KubeClient
from odradek.operator.models import parse_spec

CACHE_SECONDS = 10.0
"""How long read Secrets are reused (one read per cluster, not per Topic)."""

AccessSource = Callable[[KubeClient, dict[str, Any]], Awaitable["ClusterAccess"]]
"""(API client, KafkaCluster resource) → how to reach it; tests substitute their own."""


class NotReady(ConnectionError):
    """The cluster is secured but the operator's credentials are not written yet."""


@dataclass(frozen=True)
class OperatorCredentials:
    """The operator's client certificate (PEM chain and key) and the cluster CA it trusts."""
    certificate_chain: str = field(repr=False)
    key: str = field(repr=False)
    ca: str = field(repr=False)

    def fingerprint(self) -> str:
        return hashlib.sha256("\0".join((self.certificate_chain, self.key, self.ca)).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class ClusterAccess:
    """Equal accesses (same addresses, same credentials' fingerprint) can share a connection."""
    bootstrap: tuple[tuple[str, int], ...]
    security: ClientSecurity = field(default=PLAINTEXT, compare=False, repr=False)
    zookeeper_connect: str = ""
    zookeeper: ZkSecurity = field(default_factory=ZkSecurity, compare=False, repr=False)
    fingerprint: str = ""
    """Of the credentials: a renewed certificate makes a different access."""

    def admin(self, *, request_timeout: float = 30.0, client_id: str = "odradek-operator") -> KafkaAdmin:
        """A KafkaAdmin over this access (the caller closes it)."""
        return KafkaAdmin(list(self.bootstrap), request_timeout=request_timeout, client_id=client_id,
                          security=self.security)


def access(cluster: dict[str, Any], credentials: OperatorCredentials | None = None,
           zookeeper_digest: tuple[str, str] | None = None) -> ClusterAccess:
    """The access to `cluster` with the given credentials (pure). NotReady when the cluster is
    secured and `credentials` is None."""
    spec = parse_spec(cluster.get("spec"))
    zk_connect = builders.zookeeper_connect(cluster, spec)
    if not spec.secured:
        host, port = builders.bootstrap_servers(cluster).rsplit(":", 1)
        return ClusterAccess(((host, int(port)),), zookeeper_connect=zk_connect)
    if credentials is None:
        raise NotReady(f"the operator's certificate of {cluster['metadata']['name']} is not issued yet")
    security = client_security("SSL", {
        "ssl.keystore.certificate.chain": credentials.certificate_chain, "ssl.keystore.key": credentials.key,
        "ssl.truststore.certificates": credentials.ca}, f"operator to {cluster['metadata']['name']}")
    zk = ZkSecurity(set_acl=True, digest=zookeeper_digest) if zookeeper_digest is not None else ZkSecurity()
    return ClusterAccess((builders.replication_bootstrap(cluster),), security, zk_connect, zk,
                         credentials.fingerprint())


_cache: dict[tuple[str, str], tuple[float, ClusterAccess]] = {}


def _decoded(secret: dict[str, Any] | None, key: str) -> str | None:
    value = ((secret or {}).get("data") or {}).get(key)
    return None if value is None else base64.b64decode(value).decode()


async def cluster_access(kube: KubeClient, cluster: dict[str, Any]) -> ClusterAccess:
    """How the operator reaches `cluster` now (its Secrets read at most every CACHE_SECONDS).
    NotReady (a ConnectionError) while a secured cluster's credentials are missing."""
    meta = cluster["metadata"]
    key = (meta["namespace"], meta["name"])
    if not parse_spec(cluster.get("spec")).secured:
        _cache.pop(key, None)
        return access(cluster)
    now = monotonic_s()
    hit = _cache.get(key)
    if hit is not None and hit[0] > now:
        return hit[1]
    n = builders.names(meta["name"])
    certs = await kube.get("Secret", meta["namespace"], n["operator_certs"])
    chain, pem_key, ca = (_decoded(certs, k) for k in ("user.crt", "user.key", "ca.crt"))
    credentials = OperatorCredentials(chain, pem_key, ca) if chain and pem_key and ca else None
    zk = await kube.get("Secret", meta["namespace"], n["zookeeper_client"])
    user, password = _decoded(zk, "username"), _decoded(zk, "password")
    found = access(cluster, credentials, (user, password) if user and password else None)
    _cache[key] = (now + CACHE_SECONDS, found)
    return found


def cached_access(cluster: dict[str, Any]) -> ClusterAccess:
    """The access cluster_access last found for `cluster` (for callers without an API client,
    after the reconcile pass read it); NotReady when a secured cluster's was never read."""
    meta = cluster["metadata"]
    hit = _cache.get((meta["namespace"], meta["name"]))
    return hit[1] if hit is not None else access(cluster)


def forget(namespace: str, name: str) -> None:
    """Drop the cached access (the reconciler just wrote new credentials)."""
    _cache.pop((namespace, name), None)

"""KafkaUser resources at scale (issue 29): N KafkaUsers applied at once, wall time until every
one is Ready, and the operator's peak memory.

Built as bench/topics.py is, on bench/operator_bench.py: a real cluster (ZooKeeper, one
controller, brokers as processes) with the ACL authorizer on (User:ANONYMOUS, the operator's
PLAINTEXT connection, is the super user), the tests' emulated Kubernetes API served from this
process, the operator as its own process.
Each user is scram-sha-512 (a generated password), two ACLs (READ on its topic, READ on its
group prefix) and a consumer quota: per user one SCRAM upsert, two ACLs, one quota entity and a
Secret. Ready means its Ready condition is True for its generation; at the end the cluster is
checked with librdkafka (SCRAM credentials and ACLs of every user).

The peer, on a cluster of its own: librdkafka's AdminClient upserting the same credentials
(AlterUserScramCredentials) and creating the same ACLs (CreateAcls), 1,000 users per request, no
operator, no Kubernetes (librdkafka has no client-quota call). Its time is what the cluster itself
needs; the ratio says what the operator adds.

Run: .venv/bin/python bench/users.py [--users 1000]   (target: all Ready within 60 s)
"""

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from operator_bench import (  # bench/operator_bench.py, beside this file
    CLUSTER,
    NS,
    add_operator_command,
    apply_until_ready,
    run_operator_command,
    started_cluster,
)

TARGET_S = 60.0
BROKER_OVERRIDES = {"auto.create.topics.enable": "false",
                    "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                    "super.users": "User:ANONYMOUS"}


def user_name(i: int) -> str:
    return f"bench-{i:05d}"


def user_body(i: int) -> dict:
    name = user_name(i)
    return {"apiVersion": "odradek.io/v1alpha1", "kind": "KafkaUser",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"clusterRef": CLUSTER, "authentication": {"type": "scram-sha-512"},
                     "authorization": {"type": "simple", "acls": [
                         {"resource": {"type": "topic", "name": name}, "operations": ["Read"]},
                         {"resource": {"type": "group", "name": f"{name}-", "patternType": "prefix"},
                          "operations": ["Read"]}]},
                     "quotas": {"consumerByteRate": 1048576}}}


def _acls(name: str) -> list:
    from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, ResourcePatternType, ResourceType

    return [AclBinding(ResourceType.TOPIC, name, ResourcePatternType.LITERAL, f"User:{name}", "*",
                       AclOperation.READ, AclPermissionType.ALLOW),
            AclBinding(ResourceType.GROUP, f"{name}-", ResourcePatternType.PREFIXED, f"User:{name}", "*",
                       AclOperation.READ, AclPermissionType.ALLOW)]


def peer(bootstrap: str, n: int, timeout: float) -> float:
    """Seconds for librdkafka to upsert n SCRAM credentials and create 2n ACLs, 1,000 users per request."""
    from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": int(min(timeout, 300) * 1000)})
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096)
    started = time.monotonic()
    for first in range(0, n, 1000):
        names = [f"peer-{i:05d}" for i in range(first, min(n, first + 1000))]
        upserts = [UserScramCredentialUpsertion(u, info, b"peer-password-" + u.encode()) for u in names]
        for f in admin.alter_user_scram_credentials(upserts, request_timeout=timeout).values():
            f.result()
        for f in admin.create_acls([b for u in names for b in _acls(u)], request_timeout=timeout).values():
            f.result()
    return time.monotonic() - started


def verify(bootstrap: str, n: int) -> str:
    from confluent_kafka.admin import (
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        AdminClient,
        ResourcePatternType,
        ResourceType,
    )

    admin = AdminClient({"bootstrap.servers": bootstrap})
    described = admin.describe_user_scram_credentials(request_timeout=60).result()
    users = [u for u in described if u.startswith("bench-")]
    acls = admin.describe_acls(AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                                AclOperation.ANY, AclPermissionType.ANY), request_timeout=60).result()
    ours = [a for a in acls if a.principal.startswith("User:bench-")]
    if len(users) != n or len(ours) != 2 * n:
        raise RuntimeError(f"the cluster holds {len(users)} of {n} credentials and {len(ours)} of {2 * n} ACLs")
    return f"{len(users)} SCRAM-SHA-512 credentials, {len(ours)} ACLs"


async def bench(n: int, cluster, data_dir: Path, workers: int, timeout: float, peer_s: float | None) -> dict:
    import kmock
    from operator_harness import USERS

    m = await apply_until_ready(__file__, cluster, data_dir, workers, timeout, "kafkausers", USERS, "KafkaUsers",
                                user_body, n)
    secrets = sum(1 for key, obj in list(m.server.objects.items())
                  if key[0] == kmock.resource("v1/secrets") and not obj.deleted)
    checked = await asyncio.to_thread(verify, cluster.bootstrap, n)
    return {"users": n, "apply_s": round(m.applied_s, 1), "all_ready_s": round(m.all_ready_s, 1),
            "operator_peak_mb": round(m.operator_peak_mb), "target_s": TARGET_S, "secrets": secrets,
            "checked": checked, "peer_librdkafka_s": None if peer_s is None else round(peer_s, 1),
            "ratio_to_peer": None if peer_s is None else round(m.all_ready_s / peer_s, 2),
            "requests_to_api": m.requests_to_api}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="what")
    add_operator_command(sub)
    p.add_argument("--users", type=int, default=1000)
    p.add_argument("--brokers", type=int, default=1)
    p.add_argument("--workers", type=int, default=256, help="the operator's concurrent reconciles")
    p.add_argument("--timeout", type=float, default=600.0)
    p.add_argument("--no-peer", action="store_true", help="skip the librdkafka peer run")
    args = p.parse_args(argv)
    if args.what == "operator":
        run_operator_command(args, "user_tuning")
        return 0
    print(f"{args.users} KafkaUsers (scram-sha-512, 2 ACLs, 1 quota each), {args.brokers} broker(s)", flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="odradek-bench-users-"))
    peer_s = None
    if not args.no_peer:
        with started_cluster(tmp / "peer-cluster", args.brokers, BROKER_OVERRIDES) as cluster:
            peer_s = peer(cluster.bootstrap, args.users, args.timeout)
        print(f"  peer: librdkafka made {args.users} users in {peer_s:.1f}s", flush=True)
    with started_cluster(tmp / "cluster", args.brokers, BROKER_OVERRIDES) as cluster:
        result = asyncio.run(bench(args.users, cluster, tmp, args.workers, args.timeout, peer_s))
    shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

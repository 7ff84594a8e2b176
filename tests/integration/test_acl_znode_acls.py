"""`zookeeper.set.acl` on the authorizer's znodes: /kafka-acl, /kafka-acl-extended, both change
folders and every resource and notification znode the ACL store creates get Kafka's ACLs
(ZkData.defaultAcls: all for the creator's identity, read for the world; none of them sensitive),
so another ZooKeeper client reads the ACLs but cannot change them. A missing ancestor gets the
ACLs of its own path, not those of the znode being created."""

import uuid

import pytest
from kazoo.exceptions import NoAuthError
from kazoo.security import Permissions

from odradek.broker.authorizer import zk_acl_store as store
from odradek.broker.authorizer.acl import (
    AccessControlEntry,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from odradek.common.zk_calls import BoundedCalls
from odradek.common.zk_connect import close_client, ensure_chroot, new_client, start_client
from odradek.common.zk_security import ZkSecurity

pytestmark = pytest.mark.integration

DIGEST = ("kafka", "zk-secret")
ROOTS = ("/kafka-acl", "/kafka-acl-extended", "/kafka-acl-changes", "/kafka-acl-extended-changes")


def walk(zk, path: str) -> list[str]:
    out = [path]
    for child in zk.get_children(path):
        out += walk(zk, f"{path.rstrip('/')}/{child}")
    return out


def test_acl_znodes_get_kafkas_acls(zookeeper):
    connect = f"{zookeeper.connect}/acl-znodes-{uuid.uuid4().hex[:8]}"
    ensure_chroot(connect, timeout=15)
    zk = new_client(connect, 10, ZkSecurity(set_acl=True, digest=DIGEST))
    other = new_client(connect, 10)
    start_client(zk, 10)
    start_client(other, 10)
    try:
        calls = BoundedCalls(zk, 10)
        store.ensure_paths(calls)
        entry = AccessControlEntry("User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW)
        for pattern in (ResourcePattern(ResourceType.TOPIC, "t", PatternType.LITERAL),
                        ResourcePattern(ResourceType.GROUP, "g-", PatternType.PREFIXED),
                        ResourcePattern(ResourceType.USER, "User:bob", PatternType.LITERAL),
                        ResourcePattern(ResourceType.DELEGATION_TOKEN, "token-1", PatternType.LITERAL)):
            store.update_resource(calls, pattern, lambda current: current | {entry})
        paths = [p for root in ROOTS for p in walk(zk, root)]
        assert any(p.startswith("/kafka-acl-changes/acl_changes_") for p in paths)
        assert "/kafka-acl-extended/prefixed/Group/g-" in paths and "/kafka-acl/DelegationToken/token-1" in paths
        for path in paths:
            acls, _ = zk.get_acls(path)
            assert sorted((a.perms, a.id.scheme) for a in acls) == [
                (Permissions.READ, "world"), (Permissions.ALL, "digest")], path
            assert next(a.id.id for a in acls if a.id.scheme == "digest").startswith("kafka:"), path
        # another client reads the ACLs but cannot change them
        data, _ = other.get("/kafka-acl/Topic/t")
        assert b"User:alice" in data
        with pytest.raises(NoAuthError):
            other.set("/kafka-acl/Topic/t", b'{"version":1,"acls":[]}')
        with pytest.raises(NoAuthError):
            other.create("/kafka-acl-changes/acl_changes_", b"Topic:LITERAL:t", sequence=True)
        # ancestors made on the way get their own path's ACLs
        zk.create("/config/users/carol", b"{}", makepath=True)
        assert sorted(a.id.scheme for a in zk.get_acls("/config")[0]) == ["digest", "world"]
        assert [a.id.scheme for a in zk.get_acls("/config/users")[0]] == ["digest"]
        assert [a.id.scheme for a in zk.get_acls("/config/users/carol")[0]] == ["digest"]
    finally:
        close_client(zk)
        close_client(other)

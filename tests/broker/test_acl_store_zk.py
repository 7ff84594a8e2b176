"""The ACL store and the authorizer's change following against a real ZooKeeper: Kafka's znodes,
compare-and-set updates that lose nothing to a concurrent writer, and a change made through one
authorizer applied by another within seconds."""

import asyncio
import threading
from types import SimpleNamespace

from kazoo.client import KazooClient

from odradek.broker.authorizer import zk_acl_store as store
from odradek.broker.authorizer.acl import (
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)
from odradek.broker.authorizer.acl_authorizer import AclAuthorizer
from odradek.broker.authorizer.decision import Settings
from odradek.common.network.request_context import RequestContext
from odradek.common.zk_calls import BoundedCalls

OP, RT, PT = AclOperation, ResourceType, PatternType
ALLOW = AclPermissionType.ALLOW


def client(zk_connect: str) -> KazooClient:
    hosts, _, chroot = zk_connect.partition("/")
    root = KazooClient(hosts=hosts)
    root.start(timeout=10)
    root.ensure_path("/" + chroot)
    root.stop()
    root.close()
    zk = KazooClient(hosts=zk_connect)
    zk.start(timeout=10)
    return zk


def entry(principal="User:alice", op=OP.READ):
    return AccessControlEntry(principal, "*", op, ALLOW)


def test_store_writes_kafkas_znodes_and_cas_loses_nothing(zk_connect):
    zk = client(zk_connect)
    try:
        calls = BoundedCalls(zk, 10)
        store.ensure_paths(calls)
        assert {"Topic", "Group", "Cluster", "TransactionalId"} <= set(zk.get_children("/kafka-acl"))
        assert "Topic" in zk.get_children("/kafka-acl-extended/prefixed")
        literal = ResourcePattern(RT.TOPIC, "orders", PT.LITERAL)
        prefixed = ResourcePattern(RT.GROUP, "app-", PT.PREFIXED)
        store.update_resource(calls, literal, lambda cur: cur | {entry()})
        store.update_resource(calls, prefixed, lambda cur: cur | {entry(op=OP.DESCRIBE)})
        data, _ = zk.get("/kafka-acl/Topic/orders")
        assert data == (b'{"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow",'
                        b'"operation":"Read","host":"*"}]}')
        assert zk.exists("/kafka-acl-extended/prefixed/Group/app-") is not None
        literal_changes = zk.get_children("/kafka-acl-changes")
        assert [zk.get(f"/kafka-acl-changes/{c}")[0] for c in literal_changes] == [b"TOPIC:orders"]
        assert all(c.startswith("acl_changes_") for c in literal_changes)
        (extended,) = zk.get_children("/kafka-acl-extended-changes")
        assert zk.get(f"/kafka-acl-extended-changes/{extended}")[0] == \
            b'{"version":1,"resourceType":"GROUP","name":"app-","patternType":"PREFIXED"}'

        # two writers adding 20 principals each to one resource: every one is kept
        def add_many(prefix: str) -> None:
            own = BoundedCalls(zk, 10)
            for i in range(20):
                store.update_resource(own, literal, lambda cur, i=i: cur | {entry(f"User:{prefix}{i}")})

        threads = [threading.Thread(target=add_many, args=(p,)) for p in ("x", "y")]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        acls, _ = store.read_resource(calls, literal)
        assert len(acls) == 41
        assert store.load_all(calls) == {literal: acls, prefixed: frozenset({entry(op=OP.DESCRIBE)})}
        # the last ACL removed deletes the znode
        store.update_resource(calls, prefixed, lambda cur: frozenset())
        assert zk.exists("/kafka-acl-extended/prefixed/Group/app-") is None
    finally:
        zk.stop()
        zk.close()


def test_a_change_through_one_authorizer_reaches_another(zk_connect):
    zk_a, zk_b = client(zk_connect), client(zk_connect)
    ctx = RequestContext(SimpleNamespace(request_api_version=0, client_id=""), "/127.0.0.1", principal="User:alice")

    async def scenario():
        a = AclAuthorizer(Settings(), lambda: BoundedCalls(zk_a, 10))
        b = AclAuthorizer(Settings(), lambda: BoundedCalls(zk_b, 10))
        await a.start()
        await b.start()
        try:
            assert not b.authorize(ctx, OP.READ, RT.TOPIC, "orders")
            binding = AclBinding(ResourcePattern(RT.TOPIC, "ord", PT.PREFIXED), entry())
            assert await a.create_acls([binding]) == [None]
            assert a.authorize(ctx, OP.READ, RT.TOPIC, "orders")  # at once where it was made
            for _ in range(100):
                if b.authorize(ctx, OP.READ, RT.TOPIC, "orders"):
                    break
                await asyncio.sleep(0.05)
            assert b.authorize(ctx, OP.DESCRIBE, RT.TOPIC, "orders")
            everything = AclBindingFilter(ResourcePatternFilter(RT.ANY, None, PT.ANY),
                                          AccessControlEntryFilter(None, None, OP.ANY, AclPermissionType.ANY))
            assert b.acls(everything) == [binding]
            deleted = await b.delete_acls([everything])
            assert deleted == [[(binding, None)]]
            for _ in range(100):
                if not a.authorize(ctx, OP.READ, RT.TOPIC, "orders"):
                    break
                await asyncio.sleep(0.05)
            assert not a.authorize(ctx, OP.READ, RT.TOPIC, "orders")
            # a third authorizer starting now loads what is stored
            await a.create_acls([AclBinding(ResourcePattern(RT.GROUP, "g", PT.LITERAL), entry())])
            c = AclAuthorizer(Settings(), lambda: BoundedCalls(zk_b, 10))
            await c.start()
            assert c.authorize(ctx, OP.READ, RT.GROUP, "g")
            await c.stop()
        finally:
            await a.stop()
            await b.stop()

    try:
        asyncio.run(scenario())
    finally:
        for zk in (zk_a, zk_b):
            zk.stop()
            zk.close()


def test_many_resources_at_once_with_a_racing_writer(zk_connect):
    """update_resources pipelines the writes; a resource another writer changed between its read
    and its write is retried, keeping both changes; every resource is announced."""
    zk = client(zk_connect)
    try:
        calls = BoundedCalls(zk, 10)
        store.ensure_paths(calls)
        raced = ResourcePattern(RT.TOPIC, "raced", PT.LITERAL)
        store.update_resource(calls, raced, lambda cur: cur | {entry("User:first")})
        patterns = [ResourcePattern(RT.GROUP, f"g{i}", PT.PREFIXED) for i in range(300)] + [raced]

        def add(cur, pattern=None):
            if pattern == raced and not any(e.principal == "User:racer" for e in cur):
                # another admin writes this resource after our read: our write must not lose it
                store.update_resource(BoundedCalls(zk, 10), raced, lambda c: c | {entry("User:racer")})
            return cur | {entry()}

        done = store.update_resources(calls, {p: (lambda cur, p=p: add(cur, p)) for p in patterns})
        assert all(not isinstance(v, Exception) for v in done.values())
        assert {e.principal for e in store.read_resource(calls, raced)[0]} == {"User:first", "User:racer", "User:alice"}
        assert len(store.load_all(calls)) == 301
        assert len(zk.get_children("/kafka-acl-extended-changes")) == 300
    finally:
        zk.stop()
        zk.close()

"""The authorizer's pure parts: Kafka's AclAuthorizer rules as a table, the ZooKeeper formats
against Kafka's exact strings, filters, and the validation of bindings."""

import json

import pytest

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
    binding_error,
    filter_error,
    parse_operation,
    parse_resource_type,
)
from odradek.broker.authorizer.decision import AclSnapshot, Settings, authorize, authorize_by_type, parse_super_users

OP, RT, PT = AclOperation, ResourceType, PatternType
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
ALICE, BOB = "User:alice", "User:bob"
HOST = "10.0.0.1"


def ace(principal=ALICE, op=OP.READ, permission=ALLOW, host="*"):
    return AccessControlEntry(principal, host, op, permission)


def topic(name, pattern=PT.LITERAL):
    return ResourcePattern(RT.TOPIC, name, pattern)


NO_SETTINGS = Settings()


def decide(acls, op, name="orders", principal=ALICE, host=HOST, rt=RT.TOPIC, settings=NO_SETTINGS):
    return authorize(AclSnapshot.of(acls), settings, principal, host, op, rt, name)


# (ACLs, operation, expected) on topic "orders" for alice from 10.0.0.1
RULES = [
    ({}, OP.READ, False),  # no ACL: deny by default
    ({topic("orders"): [ace()]}, OP.READ, True),
    ({topic("orders"): [ace()]}, OP.WRITE, False),
    ({topic("orders"): [ace(BOB)]}, OP.READ, False),  # another principal's ACL
    ({topic("orders"): [ace("User:*")]}, OP.READ, True),  # wildcard principal
    ({topic("*"): [ace()]}, OP.READ, True),  # wildcard resource
    ({topic("ord", PT.PREFIXED): [ace()]}, OP.READ, True),  # prefix
    ({topic("orders-", PT.PREFIXED): [ace()]}, OP.READ, False),  # longer than the name
    ({topic("other"): [ace()]}, OP.READ, False),
    ({topic("orders"): [ace(host=HOST)]}, OP.READ, True),
    ({topic("orders"): [ace(host="10.0.0.2")]}, OP.READ, False),
    ({topic("orders"): [ace(op=OP.ALL)]}, OP.DELETE, True),
    ({topic("orders"): [ace(), ace(permission=DENY)]}, OP.READ, False),  # DENY wins
    ({topic("orders"): [ace()], topic("*"): [ace(permission=DENY)]}, OP.READ, False),
    ({topic("orders"): [ace()], topic("or", PT.PREFIXED): [ace("User:*", permission=DENY)]}, OP.READ, False),
    ({topic("orders"): [ace(op=OP.ALL, permission=DENY), ace(op=OP.ALL)]}, OP.DESCRIBE, False),
    # implications: READ/WRITE/DELETE/ALTER allow DESCRIBE; ALTER_CONFIGS allows DESCRIBE_CONFIGS
    ({topic("orders"): [ace(op=OP.READ)]}, OP.DESCRIBE, True),
    ({topic("orders"): [ace(op=OP.WRITE)]}, OP.DESCRIBE, True),
    ({topic("orders"): [ace(op=OP.DELETE)]}, OP.DESCRIBE, True),
    ({topic("orders"): [ace(op=OP.ALTER)]}, OP.DESCRIBE, True),
    ({topic("orders"): [ace(op=OP.CREATE)]}, OP.DESCRIBE, False),
    ({topic("orders"): [ace(op=OP.ALTER_CONFIGS)]}, OP.DESCRIBE_CONFIGS, True),
    ({topic("orders"): [ace(op=OP.DESCRIBE)]}, OP.READ, False),  # no implication upwards
    ({topic("orders"): [ace(op=OP.ALTER_CONFIGS)]}, OP.DESCRIBE, False),
    # a DENY of READ does not deny DESCRIBE implied by WRITE
    ({topic("orders"): [ace(op=OP.WRITE), ace(op=OP.READ, permission=DENY)]}, OP.DESCRIBE, True),
    ({topic("orders"): [ace(op=OP.WRITE), ace(op=OP.DESCRIBE, permission=DENY)]}, OP.DESCRIBE, False),
]


@pytest.mark.parametrize(("acls", "op", "expected"), RULES)
def test_kafka_rules(acls, op, expected):
    assert decide(acls, op) is expected


def test_super_users_and_allow_everyone():
    supers = Settings(parse_super_users(" User:admin ; User:broker;"))
    assert supers.super_users == {"User:admin", "User:broker"}
    assert decide({topic("orders"): [ace("User:*", permission=DENY)]}, OP.READ, principal="User:admin",
                  settings=supers)
    everyone = Settings(allow_everyone_if_no_acl_found=True)
    assert decide({}, OP.WRITE, settings=everyone)
    # once any ACL applies to the resource, the setting no longer matters
    assert not decide({topic("orders"): [ace(BOB)]}, OP.WRITE, settings=everyone)
    assert decide({topic("other"): [ace(BOB)]}, OP.WRITE, settings=everyone)


def test_cluster_and_group_and_transactional_id():
    cluster = ResourcePattern(RT.CLUSTER, "kafka-cluster", PT.LITERAL)
    acls = {cluster: [ace(op=OP.IDEMPOTENT_WRITE)],
            ResourcePattern(RT.GROUP, "app-", PT.PREFIXED): [ace(op=OP.READ)],
            ResourcePattern(RT.TRANSACTIONAL_ID, "tx", PT.LITERAL): [ace(op=OP.WRITE)]}
    assert decide(acls, OP.IDEMPOTENT_WRITE, "kafka-cluster", rt=RT.CLUSTER)
    assert not decide(acls, OP.CLUSTER_ACTION, "kafka-cluster", rt=RT.CLUSTER)
    assert decide(acls, OP.READ, "app-1", rt=RT.GROUP)
    assert not decide(acls, OP.READ, "app-1", rt=RT.TOPIC)  # types do not mix
    assert decide(acls, OP.DESCRIBE, "tx", rt=RT.TRANSACTIONAL_ID)


def test_authorize_by_type():
    snap = AclSnapshot.of({topic("a"): [ace(op=OP.WRITE)]})
    assert authorize_by_type(snap, Settings(), ALICE, HOST, OP.WRITE, RT.TOPIC)
    assert not authorize_by_type(snap, Settings(), BOB, HOST, OP.WRITE, RT.TOPIC)
    denied = AclSnapshot.of({topic("a"): [ace(op=OP.WRITE)], topic("*"): [ace(op=OP.WRITE, permission=DENY)]})
    assert not authorize_by_type(denied, Settings(), ALICE, HOST, OP.WRITE, RT.TOPIC)
    dominated = AclSnapshot.of({topic("ab", PT.PREFIXED): [ace(op=OP.WRITE)],
                                topic("a", PT.PREFIXED): [ace(op=OP.WRITE, permission=DENY)]})
    assert not authorize_by_type(dominated, Settings(), ALICE, HOST, OP.WRITE, RT.TOPIC)


def test_snapshot_updates_replace_and_remove():
    snap = AclSnapshot.of({topic("a"): [ace()]})
    snap = snap.updated({topic("p", PT.PREFIXED): [ace(BOB)], topic("a"): []})
    assert topic("a") not in snap.acls
    assert authorize(snap, Settings(), BOB, HOST, OP.READ, RT.TOPIC, "pq")


# --- ZooKeeper formats, as Kafka writes them ---------------------------------------------------


def test_paths_and_json_as_kafka_writes_them():
    assert store.resource_path(topic("t1")) == "/kafka-acl/Topic/t1"
    assert store.resource_path(ResourcePattern(RT.TRANSACTIONAL_ID, "x", PT.PREFIXED)) == \
        "/kafka-acl-extended/prefixed/TransactionalId/x"
    assert store.resource_path(ResourcePattern(RT.CLUSTER, "kafka-cluster", PT.LITERAL)) == \
        "/kafka-acl/Cluster/kafka-cluster"
    data = store.encode_acls([ace(op=OP.CLUSTER_ACTION), ace(BOB, OP.IDEMPOTENT_WRITE, DENY, "1.2.3.4")])
    assert data == (b'{"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow",'
                    b'"operation":"ClusterAction","host":"*"},{"principal":"User:bob","permissionType":"Deny",'
                    b'"operation":"IdempotentWrite","host":"1.2.3.4"}]}')
    assert store.decode_acls(data) == {ace(op=OP.CLUSTER_ACTION), ace(BOB, OP.IDEMPOTENT_WRITE, DENY, "1.2.3.4")}


def test_decodes_what_kafka_tools_write():
    kafka = (b'{"version": 1, "acls": [ { "host":"host1", "permissionType": "Deny","operation": "Read",'
             b'"principal": "User:alice"}, {"host":"*","permissionType":"Allow","operation":"AlterConfigs",'
             b'"principal":"User:*"}]}')
    assert store.decode_acls(kafka) == {ace(op=OP.READ, permission=DENY, host="host1"),
                                        ace("User:*", OP.ALTER_CONFIGS)}
    assert store.decode_acls(b"") == frozenset()
    for bad in (b'{"version":2,"acls":[]}', b"not json", b'{"version":1}',
                b'{"version":1,"acls":[{"principal":"alice","permissionType":"Allow","operation":"Read","host":"*"}]}',
                b'{"version":1,"acls":[{"principal":"User:a","permissionType":"Allow","operation":"Fly","host":"*"}]}'):
        with pytest.raises(ValueError):
            store.decode_acls(bad)


def test_change_notifications_as_kafka_writes_them():
    assert store.encode_change(topic("a:b")) == ("/kafka-acl-changes", b"TOPIC:a:b")
    folder, data = store.encode_change(ResourcePattern(RT.GROUP, "g-", PT.PREFIXED))
    assert folder == "/kafka-acl-extended-changes"
    assert json.loads(data) == {"version": 1, "resourceType": "GROUP", "name": "g-", "patternType": "PREFIXED"}
    assert data == b'{"version":1,"resourceType":"GROUP","name":"g-","patternType":"PREFIXED"}'
    assert store.decode_change(folder, data) == ResourcePattern(RT.GROUP, "g-", PT.PREFIXED)
    # older Kafka wrote the PascalCase name; both decode
    assert store.decode_change("/kafka-acl-changes", b"Topic:a:b") == topic("a:b")
    assert store.decode_change("/kafka-acl-changes", b"TransactionalId:x") == \
        ResourcePattern(RT.TRANSACTIONAL_ID, "x", PT.LITERAL)
    for folder, bad in (("/kafka-acl-changes", b"nocolon"), ("/kafka-acl-changes", b"Nope:x"),
                        ("/kafka-acl-extended-changes", b"{}"), ("/kafka-acl-extended-changes", b"[")):
        with pytest.raises(ValueError):
            store.decode_change(folder, bad)
    assert store.change_sequence("acl_changes_0000000042") == 42
    assert store.change_sequence("config_change_1") is None


def test_names_parse_both_spellings():
    assert parse_operation("ClusterAction") is OP.CLUSTER_ACTION
    assert parse_operation("CLUSTER_ACTION") is OP.CLUSTER_ACTION
    assert parse_operation("describeconfigs") is OP.UNKNOWN  # Kafka needs the word boundaries too
    assert parse_resource_type("TransactionalId") is RT.TRANSACTIONAL_ID
    assert parse_resource_type("Topic") is RT.TOPIC


# --- filters and validation --------------------------------------------------------------------


def f(rt=RT.ANY, name=None, pt=PT.ANY, principal=None, host=None, op=OP.ANY, perm=AclPermissionType.ANY):
    return AclBindingFilter(ResourcePatternFilter(rt, name, pt), AccessControlEntryFilter(principal, host, op, perm))


def test_filters_match_as_kafka():
    lit, star, pre = topic("orders"), topic("*"), topic("ord", PT.PREFIXED)
    assert all(f().pattern.matches(p) for p in (lit, star, pre))
    match = f(RT.TOPIC, "orders", PT.MATCH).pattern
    assert [match.matches(p) for p in (lit, star, pre, topic("other"))] == [True, True, True, False]
    exact = f(RT.TOPIC, "orders", PT.LITERAL).pattern
    assert [exact.matches(p) for p in (lit, star, pre)] == [True, False, False]
    anyp = f(RT.TOPIC, "ord", PT.ANY).pattern
    assert [anyp.matches(p) for p in (lit, pre)] == [False, True]
    assert f(principal=ALICE, op=OP.READ).entry.matches(ace())
    assert not f(principal=BOB).entry.matches(ace())
    assert f(RT.TOPIC, "x", PT.PREFIXED).pattern.exact_patterns() == [topic("x", PT.PREFIXED)]
    assert f(RT.TOPIC, "x", PT.MATCH).pattern.exact_patterns() == []


@pytest.mark.parametrize(("binding", "message"), [
    (AclBinding(ResourcePattern(RT.UNKNOWN, "t", PT.LITERAL), ace()), "resource type"),
    (AclBinding(ResourcePattern(RT.ANY, "t", PT.LITERAL), ace()), "resource type"),
    (AclBinding(topic("t", PT.MATCH), ace()), "pattern type"),
    (AclBinding(topic("t", PT.ANY), ace()), "pattern type"),
    (AclBinding(topic("t"), ace(op=OP.UNKNOWN)), "operation"),
    (AclBinding(topic("t"), ace(op=OP.ANY)), "operation"),
    (AclBinding(topic("t"), ace(permission=AclPermissionType.ANY)), "permission"),
    (AclBinding(topic("", PT.PREFIXED), ace()), "empty resource name"),
    (AclBinding(topic(""), ace()), "empty resource name"),
    (AclBinding(ResourcePattern(RT.CLUSTER, "c", PT.LITERAL), ace()), "kafka-cluster"),
    (AclBinding(topic("a/b"), ace()), "invalid resource name"),
    (AclBinding(topic("x" * 5000), ace()), "limited"),
    (AclBinding(topic("t"), ace("alice")), "principalType:principalName"),
    (AclBinding(topic("t"), ace(":alice")), "principalType:principalName"),
    (AclBinding(topic("t"), ace("")), "principal"),
    (AclBinding(topic("t"), ace(host="")), "host"),
])
def test_bad_bindings_are_refused(binding, message):
    why = binding_error(binding)
    assert why is not None and message in why


def test_good_bindings_and_filters_pass():
    assert binding_error(AclBinding(topic("t"), ace(op=OP.ALL))) is None
    assert binding_error(AclBinding(ResourcePattern(RT.CLUSTER, "kafka-cluster", PT.LITERAL), ace())) is None
    assert filter_error(f()) is None
    assert "resource type" in filter_error(f(rt=RT.UNKNOWN))
    assert "operation" in filter_error(f(op=OP.UNKNOWN))


def test_start_up_hint_for_plaintext_cluster_listeners():
    from odradek.broker.authorizer.acl_authorizer import AclAuthorizer

    a = AclAuthorizer(Settings(), lambda: None)
    listeners = {"CONTROLLER": "PLAINTEXT", "INTERNAL": "SASL_SSL"}
    assert a.unauthenticated_peers_refused(listeners) == ["CONTROLLER"]
    a.snapshot = AclSnapshot.of({ResourcePattern(RT.CLUSTER, "kafka-cluster", PT.LITERAL): [
        ace("User:ANONYMOUS", OP.CLUSTER_ACTION)]})
    assert a.unauthenticated_peers_refused(listeners) == []
    assert AclAuthorizer(Settings(frozenset({"User:ANONYMOUS"})), lambda: None).unauthenticated_peers_refused(
        listeners) == []

"""`odradek acls` planning: kafka-acls' arguments → the bindings or filters sent, and refusals."""

import pytest

from odradek.acls import Plan, UsageError, describe, load_client_config, parse_args, plan
from odradek.broker.authorizer.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)

BS = ["--bootstrap-server", "127.0.0.1:9092"]
OP, RT, PT = AclOperation, ResourceType, PatternType
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY


def planned(*args: str) -> Plan:
    return plan(parse_args([*BS, *args]))


def test_add_with_operations_hosts_and_pattern():
    p = planned("--add", "--allow-principal", "User:alice", "--allow-host", "10.0.0.1", "--operation", "Read",
                "--operation", "DESCRIBE", "--topic", "orders", "--resource-pattern-type", "prefixed")
    pattern = ResourcePattern(RT.TOPIC, "orders", PT.PREFIXED)
    assert p == Plan("add", bindings=(
        AclBinding(pattern, AccessControlEntry("User:alice", "10.0.0.1", OP.READ, ALLOW)),
        AclBinding(pattern, AccessControlEntry("User:alice", "10.0.0.1", OP.DESCRIBE, ALLOW))))
    deny = planned("--add", "--deny-principal", "User:eve", "--cluster")
    assert deny.bindings == (AclBinding(ResourcePattern(RT.CLUSTER, "kafka-cluster", PT.LITERAL),
                                        AccessControlEntry("User:eve", "*", OP.ALL, DENY)),)
    assert describe(deny.bindings[0]) == \
        "Cluster:LITERAL:kafka-cluster\t(principal=User:eve, host=*, operation=ALL, permissionType=DENY)"


def test_producer_and_consumer_shortcuts():
    p = planned("--add", "--allow-principal", "User:app", "--producer", "--idempotent", "--topic", "t",
                "--transactional-id", "tx")
    got = {(b.pattern.resource_type, b.pattern.name, b.entry.operation) for b in p.bindings}
    assert got == {(RT.TOPIC, "t", OP.WRITE), (RT.TOPIC, "t", OP.DESCRIBE), (RT.TOPIC, "t", OP.CREATE),
                   (RT.TRANSACTIONAL_ID, "tx", OP.WRITE), (RT.TRANSACTIONAL_ID, "tx", OP.DESCRIBE),
                   (RT.CLUSTER, "kafka-cluster", OP.IDEMPOTENT_WRITE)}
    c = planned("--add", "--allow-principal", "User:app", "--consumer", "--topic", "t", "--group", "g")
    assert {(b.pattern.resource_type, b.entry.operation) for b in c.bindings} == {
        (RT.TOPIC, OP.READ), (RT.TOPIC, OP.DESCRIBE), (RT.GROUP, OP.READ)}


def test_remove_and_list_filters():
    everything = planned("--remove", "--topic", "t")
    (f,) = everything.filters
    assert (f.pattern.name, f.entry.principal, f.entry.operation) == ("t", None, OP.ANY)
    specific = planned("--remove", "--allow-principal", "User:a", "--operation", "Write", "--group", "g",
                       "--resource-pattern-type", "any")
    (f,) = specific.filters
    assert (f.pattern.pattern_type, f.entry.principal, f.entry.operation, f.entry.permission_type) == (
        PT.ANY, "User:a", OP.WRITE, ALLOW)
    (all_acls,) = planned("--list").filters
    assert (all_acls.pattern.resource_type, all_acls.pattern.pattern_type) == (RT.ANY, PT.ANY)
    (mine,) = planned("--list", "--topic", "t", "--resource-pattern-type", "match", "--principal", "User:a").filters
    assert (mine.pattern.pattern_type, mine.entry.principal) == (PT.MATCH, "User:a")


@pytest.mark.parametrize("args", [
    ["--add", "--topic", "t"],  # no principal
    ["--add", "--allow-principal", "alice", "--topic", "t"],  # no principal type
    ["--add", "--allow-principal", "User:a", "--operation", "Fly", "--topic", "t"],
    ["--add", "--allow-principal", "User:a", "--topic", "t", "--resource-pattern-type", "match"],
    ["--add", "--allow-principal", "User:a", "--topic", "", "--resource-pattern-type", "prefixed"],
    ["--add", "--allow-principal", "User:a"],  # no resource
    ["--add", "--allow-principal", "User:a", "--consumer", "--topic", "t"],  # no group
])
def test_bad_arguments_are_refused_before_anything_is_sent(args):
    with pytest.raises(UsageError):
        planned(*args)


def test_command_config_as_librdkafka_settings(tmp_path):
    path = tmp_path / "client.properties"
    path.write_text('security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n'
                    'sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required '
                    'username="alice" password="s3cret";\nbootstrap.servers=ignored:1\n')
    assert load_client_config(str(path)) == {"security.protocol": "SASL_PLAINTEXT",
                                             "sasl.mechanism": "SCRAM-SHA-256",
                                             "sasl.username": "alice", "sasl.password": "s3cret"}
    assert load_client_config(None) == {}

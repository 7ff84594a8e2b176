"""Client quotas through the wire (DescribeClientQuotas / AlterClientQuotas, KIP-546) against a real
broker and ZooKeeper: Kafka's znodes and notifications, Kafka's validation, a user's SCRAM keys and
quota keys sharing one znode. (Neither confluent-kafka nor kafka-python has these admin calls.)"""

import json
import math

import pytest
from kazoo.client import KazooClient
from kio.schema.errors import ErrorCode

from odradek.common import wire
from odradek.common.api_key import ApiKey

from .kafka_helpers import ask

pytestmark = pytest.mark.integration



def alter_request(entries, validate_only=False, version=1):
    """entries: [([(type, name)], [(key, value, remove)])]"""
    schema = wire.request_schema(ApiKey.ALTER_CLIENT_QUOTAS, version)
    mod = __import__(schema.__module__, fromlist=["x"])
    return schema(validate_only=validate_only, entries=tuple(
        mod.EntryData(entity=tuple(mod.EntityData(entity_type=t, entity_name=n) for t, n in entity),
                      ops=tuple(mod.OpData(key=k, value=float(v), remove=r) for k, v, r in ops))
        for entity, ops in entries))


def describe_request(components, strict=False, version=1):
    schema = wire.request_schema(ApiKey.DESCRIBE_CLIENT_QUOTAS, version)
    mod = __import__(schema.__module__, fromlist=["x"])
    return schema(strict=strict, components=tuple(
        mod.ComponentData(entity_type=t, match_type=m, match=n) for t, m, n in components))


def described(response):
    assert response.error_code == ErrorCode.none, response.error_message
    return by_repr([(tuple((e.entity_type, e.entity_name) for e in entry.entity),
                     tuple((v.key, float(v.value)) for v in entry.values)) for entry in response.entries])


def by_repr(items):
    return sorted(items, key=repr)


@pytest.fixture
def cluster(cluster_factory):
    return cluster_factory(brokers=1)


@pytest.fixture
def zk(cluster):
    client = KazooClient(hosts=cluster.zookeeper_connect)
    client.start(timeout=10)
    yield client
    client.stop()
    client.close()


def znode(zk, path):
    if not zk.exists(path):
        return None
    data, _ = zk.get(path)
    return json.loads(data)["config"] if data else {}


def notified(zk) -> list[str]:
    return sorted(json.loads(zk.get(f"/config/changes/{c}")[0])["entity_path"]
                  for c in zk.get_children("/config/changes"))


def test_alter_and_describe_store_kafkas_znodes(cluster, zk):
    port = cluster.broker_ports[0]
    (ok,) = ask(port, [alter_request([
        ([("user", "alice")], [("producer_byte_rate", 1024, False), ("request_percentage", 12.5, False)]),
        ([("user", "alice"), ("client-id", "app 1")], [("consumer_byte_rate", 2048, False)]),
        ([("client-id", None)], [("producer_byte_rate", 4096, False)]),
        ([("user", None)], [("controller_mutation_rate", 3.0, False)]),
    ])])
    assert [(int(e.error_code), e.error_message) for e in ok.entries] == [(0, None)] * 4
    assert znode(zk, "/config/users/alice") == {"producer_byte_rate": "1024", "request_percentage": "12.5"}
    assert znode(zk, "/config/users/alice/clients/app%201") == {"consumer_byte_rate": "2048"}
    assert znode(zk, "/config/clients/<default>") == {"producer_byte_rate": "4096"}
    assert znode(zk, "/config/users/<default>") == {"controller_mutation_rate": "3.0"}
    assert {"users/alice", "users/alice/clients/app%201", "clients/<default>", "users/<default>"} <= set(notified(zk))

    everything, only_alice, users_strict, default_client = ask(port, [
        describe_request([]),
        describe_request([("user", 0, "alice")]),
        describe_request([("user", 2, None)], strict=True),
        describe_request([("client-id", 1, None)], strict=True),
    ])
    assert described(everything) == by_repr([
        ((("user", "alice"),), (("producer_byte_rate", 1024.0), ("request_percentage", 12.5))),
        ((("user", "alice"), ("client-id", "app 1")), (("consumer_byte_rate", 2048.0),)),
        ((("client-id", None),), (("producer_byte_rate", 4096.0),)),
        ((("user", None),), (("controller_mutation_rate", 3.0),)),
    ])
    assert {e for e, _ in described(only_alice)} == {(("user", "alice"),), (("user", "alice"), ("client-id", "app 1"))}
    assert {e for e, _ in described(users_strict)} == {(("user", "alice"),), (("user", None),)}
    assert [e for e, _ in described(default_client)] == [(("client-id", None),)]

    (removed,) = ask(port, [alter_request([([("user", "alice")], [("producer_byte_rate", 0, True)])], version=0)])
    assert removed.entries[0].error_code == ErrorCode.none
    assert znode(zk, "/config/users/alice") == {"request_percentage": "12.5"}


def test_scram_credentials_and_quotas_share_the_user_znode(cluster, zk):
    port = cluster.broker_ports[0]
    credential = "salt=c2FsdA==,stored_key=c3RvcmVk,server_key=c2VydmVy,iterations=4096"
    zk.create("/config/users/bob", json.dumps({"version": 1, "config": {"SCRAM-SHA-256": credential}}).encode(),
              makepath=True)
    (ok,) = ask(port, [alter_request([([("user", "bob")], [("producer_byte_rate", 5000, False)])])])
    assert ok.entries[0].error_code == ErrorCode.none
    assert znode(zk, "/config/users/bob") == {"SCRAM-SHA-256": credential, "producer_byte_rate": "5000"}
    (described_bob,) = ask(port, [describe_request([("user", 0, "bob")], strict=True)])
    assert described(described_bob) == [((("user", "bob"),), (("producer_byte_rate", 5000.0),))]
    # and the other way: a SCRAM change keeps the quota
    schema = wire.request_schema(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0)
    mod = __import__(schema.__module__, fromlist=["x"])
    (deleted,) = ask(port, [schema(deletions=(mod.ScramCredentialDeletion(name="bob", mechanism=1),), upsertions=())])
    assert deleted.results[0].error_code == ErrorCode.none
    assert znode(zk, "/config/users/bob") == {"producer_byte_rate": "5000"}


@pytest.mark.parametrize(("entity", "op", "message"), [
    ([("user", "carol")], ("producer_byte_rate", -1, False), "Quota producer_byte_rate must be greater than 0"),
    ([("user", "carol")], ("consumer_byte_rate", math.nan, False),
     "Invalid value nan for configuration consumer_byte_rate: Not a number of type LONG"),
    ([("user", "carol")], ("producer_byte_rate", 10.5, False), "Configuration producer_byte_rate must be a LONG value"),
    ([("user", "carol")], ("bogus_rate", 5, False), "Invalid configuration key bogus_rate"),
    ([("user", "carol")], ("request_percentage", -1, False), "Quota request_percentage must be greater than 0"),
    ([("user", "carol")], ("controller_mutation_rate", math.inf, False),
     "Invalid value inf for configuration controller_mutation_rate: Not a number of type DOUBLE"),
    ([("user", "carol")], ("SCRAM-SHA-256", 5, False), "Invalid configuration key SCRAM-SHA-256"),
    ([], ("producer_byte_rate", 5, False), "Invalid empty client quota entity"),
    ([("group", "g")], ("producer_byte_rate", 5, False), "Unhandled client quota entity type: group"),
    ([("user", "")], ("producer_byte_rate", 5, False), "Empty user not supported"),
    ([("user", "carol"), ("ip", "1.2.3.4")], ("producer_byte_rate", 5, False),
     "Invalid quota entity combination, IP entity should not be used with user/client ID entity."),
])
def test_bad_alterations_get_kafkas_error_and_store_nothing(cluster, zk, entity, op, message):
    port = cluster.broker_ports[0]
    (answer,) = ask(port, [alter_request([(entity, [("request_percentage", 50, False), op])])])
    assert (answer.entries[0].error_code, answer.entries[0].error_message) == (ErrorCode.invalid_request, message)
    assert not zk.exists("/config/users/carol")
    assert not zk.exists("/config/changes") or not notified(zk)


def test_validate_only_and_bad_filters(cluster, zk):
    port = cluster.broker_ports[0]
    (checked,) = ask(port, [alter_request([([("client-id", "x")], [("producer_byte_rate", 5, False)])],
                                          validate_only=True)])
    assert checked.entries[0].error_code == ErrorCode.none
    assert not zk.exists("/config/clients/x")
    dup, custom, mixed = ask(port, [
        describe_request([("user", 2, None), ("user", 1, None)]),
        describe_request([("group", 2, None)]),
        describe_request([("user", 2, None), ("ip", 2, None)]),
    ])
    assert (dup.error_code, dup.error_message) == (ErrorCode.invalid_request,
                                                   "Duplicate user filter component entity type")
    assert (custom.error_code, custom.error_message) == (ErrorCode.unsupported_version,
                                                         "Custom entity type 'group' not supported")
    assert mixed.error_code == ErrorCode.invalid_request and mixed.entries is None


def test_advertised_in_api_versions(cluster):
    schema = wire.request_schema(ApiKey.API_VERSIONS, 3)
    (versions,) = ask(cluster.broker_ports[0], [schema(client_software_name="t", client_software_version="1")])
    got = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in versions.api_keys}
    assert got[ApiKey.DESCRIBE_CLIENT_QUOTAS] == (0, 1) and got[ApiKey.ALTER_CLIENT_QUOTAS] == (0, 1)


def test_odradek_quotas_tool(cluster, zk):
    import subprocess
    import sys

    def tool(*args):
        return subprocess.run([sys.executable, "-m", "odradek.cli", "quotas", "--bootstrap-server", cluster.bootstrap,
                               *args], capture_output=True, text=True, timeout=60)

    done = tool("--alter", "--add-config", "producer_byte_rate=1048576,request_percentage=25",
                "--entity-type", "users", "--entity-name", "alice", "--entity-type", "clients", "--entity-default")
    assert done.returncode == 0, done.stderr
    assert "Completed updating quota configs for user-principal 'alice', client-id the default." in done.stdout
    assert znode(zk, "/config/users/alice/clients/<default>") == {"producer_byte_rate": "1048576",
                                                                   "request_percentage": "25.0"}
    assert tool("--alter", "--add-config", "consumer_byte_rate=10", "--client", "app").returncode == 0
    assert tool("--describe", "--entity-type", "users").stdout == ""  # strict: users without a client id only
    listed = tool("--describe", "--user", "alice", "--entity-type", "clients")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines() == [
        "Quota configs for user-principal 'alice', client-id the default are producer_byte_rate=1048576.0, "
        "request_percentage=25.0"]
    assert "client-id 'app' are consumer_byte_rate=10.0" in tool("--describe").stdout
    refused = tool("--alter", "--add-config", "producer_byte_rate=-1", "--user", "bob")
    assert refused.returncode == 1
    assert "INVALID_REQUEST: Quota producer_byte_rate must be greater than 0" in refused.stderr
    assert not zk.exists("/config/users/bob")
    assert tool("--alter", "--delete-config", "request_percentage", "--user", "alice", "--client-defaults").returncode == 0
    assert znode(zk, "/config/users/alice/clients/<default>") == {"producer_byte_rate": "1048576"}

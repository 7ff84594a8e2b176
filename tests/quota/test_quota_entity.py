"""Quota entities, keys and Kafka's validation (broker/quota/quota_entity), without ZooKeeper."""

import math
import struct

import pytest
from kio.schema.errors import ErrorCode

from odradek.broker.quota import quota_entity as q
from odradek.broker.quota.quota_entity import InvalidQuotaRequest, UnsupportedEntityType
from odradek.common import wire
from odradek.common.api_key import ApiKey


def test_entities_name_kafkas_znodes():
    assert q.parse_alter_entity([("user", "alice")]).entity_path == "users/alice"
    assert q.parse_alter_entity([("user", "User:a b")]).entity_path == "users/User%3Aa%20b"
    assert q.parse_alter_entity([("user", None)]).entity_path == "users/<default>"
    assert q.parse_alter_entity([("client-id", "c"), ("user", "u")]).entity_path == "users/u/clients/c"
    assert q.parse_alter_entity([("user", None), ("client-id", None)]).entity_path == "users/<default>/clients/<default>"
    assert q.parse_alter_entity([("client-id", None)]).entity_path == "clients/<default>"
    assert q.parse_alter_entity([("ip", "10.0.0.1")]).entity_path == "ips/10.0.0.1"
    with pytest.raises(InvalidQuotaRequest, match="not a valid IP"):
        q.parse_alter_entity([("ip", "not an ip")])


def test_ops_keep_other_keys_and_write_kafkas_text():
    user = q.parse_alter_entity([("user", "u")])
    config = {"SCRAM-SHA-256": "secret-ish", "consumer_byte_rate": "10"}
    out = q.apply_ops(user, config, [("producer_byte_rate", 1048576.0, False), ("consumer_byte_rate", 0, True),
                                     ("request_percentage", 50.0, False)])
    assert out == {"SCRAM-SHA-256": "secret-ish", "producer_byte_rate": "1048576", "request_percentage": "50.0"}
    assert config == {"SCRAM-SHA-256": "secret-ish", "consumer_byte_rate": "10"}  # not modified in place
    assert q.apply_ops(user, {}, [("producer_byte_rate", 100.0000001, False)]) == {"producer_byte_rate": "100"}


@pytest.mark.parametrize(("key", "value", "message"), [
    ("producer_byte_rate", -5.0, "Quota producer_byte_rate must be greater than 0"),
    ("request_percentage", 0.0, "Quota request_percentage must be greater than 0"),
    ("consumer_byte_rate", math.inf, "Invalid value inf for configuration consumer_byte_rate"),
    ("controller_mutation_rate", math.nan, "Invalid value nan for configuration controller_mutation_rate"),
    ("producer_byte_rate", 1.5, "Configuration producer_byte_rate must be a LONG value"),
    ("connection_creation_rate", 5.0, "Invalid configuration key connection_creation_rate"),
])
def test_bad_values_and_keys(key, value, message):
    with pytest.raises(InvalidQuotaRequest, match=message):
        q.apply_ops(q.parse_alter_entity([("client-id", "c")]), {}, [(key, value, False)])


def test_ip_entities_take_only_connection_creation_rate():
    ip = q.parse_alter_entity([("ip", None)])
    assert q.apply_ops(ip, {}, [("connection_creation_rate", 10.0, False)]) == {"connection_creation_rate": "10"}
    with pytest.raises(InvalidQuotaRequest, match="Invalid configuration key producer_byte_rate"):
        q.apply_ops(ip, {}, [("producer_byte_rate", 10.0, False)])


def test_filters_and_matching():
    users = {"alice": {"producer_byte_rate": "1"}, "<default>": {"producer_byte_rate": "2"},
             "scram-only": {"SCRAM-SHA-256": "x"}}
    pairs = {("alice", "c1"): {"consumer_byte_rate": "3"}, ("<default>", "<default>"): {"consumer_byte_rate": "4"}}
    clients = {"c1": {"request_percentage": "5.5"}}

    def run(components, strict=False):
        return sorted(repr(e) for e, _ in q.describe(q.parse_filter(components), strict, users, pairs, clients, {}))

    everything = run([])
    assert len(everything) == 5 and not any("scram-only" in e for e in everything)  # no quota keys: not listed
    assert run([("user", q.MATCH_EXACT, "alice")], strict=True) == ["[('user', 'alice')]"]
    assert run([("user", q.MATCH_DEFAULT, None), ("client-id", q.MATCH_DEFAULT, None)]) == [
        "[('user', None), ('client-id', None)]"]
    assert run([("client-id", q.MATCH_SPECIFIED, None)], strict=True) == ["[('client-id', 'c1')]"]
    assert run([("client-id", q.MATCH_EXACT, "c1")]) == ["[('client-id', 'c1')]", "[('user', 'alice'), ('client-id', 'c1')]"]
    with pytest.raises(InvalidQuotaRequest, match="Duplicate client filter"):
        q.parse_filter([("client-id", 2, None), ("client-id", 0, "x")])
    with pytest.raises(InvalidQuotaRequest, match="Unexpected match type: 7"):
        q.parse_filter([("user", 7, None)])
    with pytest.raises(InvalidQuotaRequest, match="Unexpected empty filter"):
        q.parse_filter([("", 2, None)])
    with pytest.raises(UnsupportedEntityType):
        q.parse_filter([("topic", 2, None)])


def test_error_responses_of_the_cluster_gate():
    from odradek.broker.error_response import error_response

    alter = wire.request_schema(ApiKey.ALTER_CLIENT_QUOTAS, 1)
    amod = __import__(alter.__module__, fromlist=["x"])
    request = alter(validate_only=False, entries=(amod.EntryData(
        entity=(amod.EntityData(entity_type="user", entity_name="u"),),
        ops=(amod.OpData(key="producer_byte_rate", value=1.0, remove=False),)),))
    response = error_response(request, ErrorCode.cluster_authorization_failed)
    assert [(e.error_code, [(x.entity_type, x.entity_name) for x in e.entity]) for e in response.entries] == [
        (ErrorCode.cluster_authorization_failed, [("user", "u")])]
    describe = wire.request_schema(ApiKey.DESCRIBE_CLIENT_QUOTAS, 1)
    dmod = __import__(describe.__module__, fromlist=["x"])
    response = error_response(describe(strict=False, components=(
        dmod.ComponentData(entity_type="user", match_type=2, match=None),)), ErrorCode.cluster_authorization_failed)
    assert response.error_code == ErrorCode.cluster_authorization_failed and not response.entries
    wire.encode_response(response, 1, flexible_header=True)


def test_huge_claimed_lengths_are_refused_before_kio_reads_them():
    """FINDINGS: kio's native reader aborts on a huge compact-array count; the decode path bounds it."""
    for api in (ApiKey.DESCRIBE_CLIENT_QUOTAS, ApiKey.ALTER_CLIENT_QUOTAS):
        header = struct.pack(">hhih", api, 1, 1, 0) + b"\x00"  # v1 (flexible), empty client id, no tags
        with pytest.raises(ValueError):
            wire.decode_request(header + b"\xff\xff\xff\xff\x0f")
        v0 = struct.pack(">hhih", api, 0, 1, 0)
        with pytest.raises(ValueError):
            wire.decode_request(v0 + struct.pack(">i", 2**31 - 1))

"""SCRAM credentials without ZooKeeper: the cache, and Describe/AlterUserScramCredentials' rules
(Kafka's ZkAdminManager) over an in-memory store."""

import asyncio
import json
from types import SimpleNamespace

from kazoo.exceptions import NoNodeError
from kazoo.protocol.paths import normpath
from kio.schema.alter_user_scram_credentials.v0.request import (
    AlterUserScramCredentialsRequest,
    ScramCredentialDeletion,
    ScramCredentialUpsertion,
)
from kio.schema.describe_user_scram_credentials.v0.request import DescribeUserScramCredentialsRequest, UserName
from kio.schema.errors import ErrorCode
from kio.schema.request_header.v2.header import RequestHeader
from kio.static.primitive import i8, i16, i32

from odradek.broker.security.credential_cache import (
    CredentialCache,
    read_user_configs_blocking,
    user_entity_path,
    user_path,
)
from odradek.broker.security.scram_apis import ScramApis
from odradek.broker.zk_client import ConfigChangedError
from odradek.common.api_key import ApiKey
from odradek.common.network.request_context import RequestContext
from odradek.common.security import scram

SHA256, SHA512 = scram.SCRAM_SHA_256, scram.SCRAM_SHA_512


class FakeZk:
    """`/config/users` in memory, with the compare-and-set of change_entity_config."""

    def __init__(self):
        self.users: dict[str, tuple[dict[str, str], int]] = {}
        self.notifications: list[str] = []

    async def change_entity_config(self, entity_path, config, expected_version):
        user = scram.desanitize(entity_path.split("/", 1)[1])
        current = self.users.get(user)
        if (current[1] if current else -1) != expected_version:
            raise ConfigChangedError(entity_path)
        self.users[user] = (dict(config), expected_version + 1)
        self.notifications.append(entity_path)


def apis(zk: FakeZk) -> ScramApis:
    a = ScramApis(zk)

    async def read(users):
        if users is None:
            users = list(zk.users)
        return {u: zk.users.get(u) for u in users}

    a._read = read
    return a


def context(api_key: int) -> RequestContext:
    return RequestContext(RequestHeader(request_api_key=i16(api_key), request_api_version=i16(0),
                                        correlation_id=i32(1), client_id="t"))


def upsert(name, mech=SHA256, iterations=4096, password="pw", salt=b"salt"):
    return ScramCredentialUpsertion(name=name, mechanism=i8(mech.type), iterations=i32(iterations), salt=salt,
                                    salted_password=mech.salted_password(password, salt, iterations))


def alter(a, upsertions=(), deletions=()):
    response = asyncio.run(a.handle_alter(context(ApiKey.ALTER_USER_SCRAM_CREDENTIALS),
                                          AlterUserScramCredentialsRequest(deletions=tuple(deletions),
                                                                           upsertions=tuple(upsertions))))
    return {r.user: (r.error_code, r.error_message) for r in response.results}


def describe(a, names):
    users = None if names is None else tuple(UserName(name=n) for n in names)
    response = asyncio.run(a.handle_describe(context(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS),
                                             DescribeUserScramCredentialsRequest(users=users)))
    return [(r.user, r.error_code, tuple((int(i.mechanism), int(i.iterations)) for i in r.credential_infos))
            for r in response.results]


def test_alter_then_describe_and_the_stored_form_is_kafkas():
    zk = FakeZk()
    a = apis(zk)
    assert alter(a, [upsert("alice"), upsert("alice", SHA512, 8192)]) == {"alice": (ErrorCode.none, None)}
    stored = zk.users["alice"][0]
    assert set(stored) == {"SCRAM-SHA-256", "SCRAM-SHA-512"}
    c = scram.credential_from_string(stored["SCRAM-SHA-512"])
    assert c == SHA512.credential(SHA512.salted_password("pw", b"salt", 8192), b"salt", 8192)
    assert zk.notifications == [user_entity_path("alice")]
    assert describe(a, ["alice"]) == [("alice", ErrorCode.none, ((1, 4096), (2, 8192)))]
    assert describe(a, None) == [("alice", ErrorCode.none, ((1, 4096), (2, 8192)))]
    # the credential logs in, through the cache a broker fills from the same znode
    cache = CredentialCache()
    cache.update("alice", stored)
    assert cache.get("alice", "SCRAM-SHA-512") == c and cache.get("bob", "SCRAM-SHA-512") is None


def test_alter_refusals_are_kafkas():
    zk = FakeZk()
    a = apis(zk)
    results = alter(a, [upsert("few", iterations=4095), upsert("many", iterations=16385), upsert(""),
                        ScramCredentialUpsertion(name="odd", mechanism=i8(7), iterations=i32(4096), salt=b"s",
                                                 salted_password=b"x" * 32),
                        upsert("twice"), upsert("twice")],
                    [ScramCredentialDeletion(name="ghost", mechanism=i8(1))])
    assert results["few"] == (ErrorCode.unacceptable_credential, "Too few iterations")
    assert results["many"] == (ErrorCode.unacceptable_credential, "Too many iterations")
    assert results[""] == (ErrorCode.unacceptable_credential, "Username must not be empty")
    assert results["odd"] == (ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism")
    assert results["twice"][0] == ErrorCode.duplicate_resource
    assert results["ghost"] == (ErrorCode.resource_not_found, "Attempt to delete a user credential that does not exist")
    assert zk.users == {}


def test_delete_and_describe_errors():
    zk = FakeZk()
    a = apis(zk)
    alter(a, [upsert("carol")])
    assert alter(a, deletions=[ScramCredentialDeletion(name="carol", mechanism=i8(1))]) == {
        "carol": (ErrorCode.none, None)}
    got = {u: code for u, code, _ in describe(a, ["carol", "", "dup", "dup"])}
    assert got == {"carol": ErrorCode.resource_not_found, "": ErrorCode.resource_not_found,
                   "dup": ErrorCode.duplicate_resource}
    assert describe(a, None) == []


class PathCheckingCalls:
    """The kazoo calls read_user_configs_blocking makes, with kazoo's own path check (it refuses a
    "." or ".." component before anything is sent) and one stored user."""

    def __init__(self, user: str, config: dict[str, str]):
        self.zk, self.stored = self, {user_path(user): json.dumps({"version": 1, "config": config}).encode()}

    def get_async(self, path):
        normpath(path)
        return path

    def wait(self, path):
        if path not in self.stored:
            raise NoNodeError(path)
        return self.stored[path], SimpleNamespace(version=3)


def test_a_user_no_znode_can_name_is_not_found_and_the_others_are_answered():
    """Kafka's Sanitizer leaves "." and ".." as they are, which are no znode names: a request naming
    them beside real users answers those users, not the whole request, with an error."""
    credential = scram.credential_to_string(SHA512.credential_from_password("pw", 4096))
    calls = PathCheckingCalls("alice", {SHA512.name: credential})
    a = ScramApis(None)

    async def read(users):
        return read_user_configs_blocking(calls, users)

    a._read = read
    assert describe(a, [".", "alice", ".."]) == [
        (".", ErrorCode.resource_not_found, ()),
        ("alice", ErrorCode.none, ((SHA512.type, 4096),)),
        ("..", ErrorCode.resource_not_found, ()),
    ]


def test_cache_ignores_malformed_and_other_keys():
    cache = CredentialCache()
    good = scram.credential_to_string(SHA256.credential_from_password("pw", 4096))
    cache.update("dave", {"SCRAM-SHA-256": good, "SCRAM-SHA-512": "garbage", "producer_byte_rate": "1024"})
    assert cache.get("dave", "SCRAM-SHA-256") is not None and cache.get("dave", "SCRAM-SHA-512") is None
    cache.update("dave", None)
    assert cache.users() == []
    cache.replace_all({"erin": {"SCRAM-SHA-256": good}, "frank": {"producer_byte_rate": "1"}})
    assert cache.users() == ["erin"]


def test_error_responses_name_every_user():
    from odradek.broker.kafka_apis import error_response

    request = AlterUserScramCredentialsRequest(deletions=(ScramCredentialDeletion(name="a", mechanism=i8(1)),),
                                               upsertions=(upsert("b"), upsert("a", SHA512)))
    response = error_response(request, ErrorCode.cluster_authorization_failed)
    assert [(r.user, r.error_code) for r in response.results] == [
        ("a", ErrorCode.cluster_authorization_failed), ("b", ErrorCode.cluster_authorization_failed)]
    described = error_response(DescribeUserScramCredentialsRequest(users=(UserName(name="a"),)),
                               ErrorCode.cluster_authorization_failed)
    assert described.error_code == ErrorCode.cluster_authorization_failed and described.results == ()


def test_huge_claimed_lengths_are_refused_before_kio_reads_them():
    """FINDINGS: kio's native reader aborts the process on a huge compact-array count (API 50 among
    them); the broker's decode path bounds every length by the frame first."""
    import struct

    import pytest

    from odradek.common import wire

    header = struct.pack(">hhih", 50, 0, 1, 0) + b"\x00"  # DescribeUserScramCredentials v0, empty client id
    with pytest.raises(ValueError):
        wire.decode_request(header + b"\xff\xff\xff\xff\x0f")  # users: 2^32-2 entries claimed
    header51 = struct.pack(">hhih", 51, 0, 1, 0) + b"\x00"
    with pytest.raises(ValueError):
        wire.decode_request(header51 + b"\x01" + b"\xff\xff\xff\xff\x0f")  # no deletions, 2^32-2 upsertions
    with pytest.raises(ValueError):
        wire.decode_request(struct.pack(">hhih", 36, 2, 1, 0) + b"\x00" + b"\xff\xff\xff\x7f")  # auth_bytes

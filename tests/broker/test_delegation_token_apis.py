"""broker/delegation_token_apis: Kafka 3.9's answers without delegation-token support."""

import asyncio
import datetime
import sys

from kio.schema.errors import ErrorCode
from kio.schema.request_header.v2.header import RequestHeader
from kio.static.primitive import i16, i32, i64Timedelta

from odradek.broker.authorizer.authorizer import ALLOW_ALL
from odradek.broker.delegation_token_apis import DelegationTokenApis
from odradek.common import wire
from odradek.common.network.request_context import RequestContext


def context(api: int, version: int, protocol: str, principal: str = "User:alice") -> RequestContext:
    header = RequestHeader(request_api_key=i16(api), request_api_version=i16(version), correlation_id=i32(1),
                           client_id="t")
    return RequestContext(header, principal=principal, security_protocol=protocol)


def create(protocol: str, version: int = 3, owner: str | None = None, renewer_type: str = "User",
           authorizer=ALLOW_ALL):
    cls = wire.request_schema(38, version)
    mod = sys.modules[cls.__module__]
    request = wire.make_entity(cls, owner_principal_type="User" if owner else None, owner_principal_name=owner,
                               renewers=(mod.CreatableRenewers(principal_type=renewer_type, principal_name="bob"),),
                               max_lifetime=i64Timedelta.parse(datetime.timedelta(hours=1)))
    apis = DelegationTokenApis(lambda: authorizer)
    return asyncio.run(apis.handle_create(context(38, version, protocol), request))


def test_token_requests_are_never_allowed_on_plaintext_and_otherwise_disabled():
    assert create("PLAINTEXT").error_code == ErrorCode.delegation_token_request_not_allowed
    answer = create("SASL_SSL")
    assert answer.error_code == ErrorCode.delegation_token_auth_disabled
    assert (answer.principal_type, answer.principal_name) == ("User", "alice")
    assert create("SASL_SSL", renewer_type="Group").error_code == ErrorCode.invalid_principal_type
    assert create("SASL_PLAINTEXT", version=1).error_code == ErrorCode.delegation_token_auth_disabled
    apis = DelegationTokenApis(lambda: ALLOW_ALL)
    for api, version in ((39, 2), (40, 1), (41, 3)):
        request = wire.make_entity(wire.request_schema(api, version), hmac=b"x", owners=None,
                                   renew_period=i64Timedelta.parse(datetime.timedelta(hours=1)),
                                   expiry_time_period=i64Timedelta.parse(datetime.timedelta(hours=1)))
        handler = apis.handlers[api]
        assert asyncio.run(handler(context(api, version, "SSL", "User:ANONYMOUS"), request)).error_code == \
            ErrorCode.delegation_token_request_not_allowed
        assert asyncio.run(handler(context(api, version, "SSL", "User:CN=client"), request)).error_code == \
            ErrorCode.delegation_token_auth_disabled


class CreateTokensFor:
    """Grants CREATE_TOKENS on one User resource, nothing else; remembers what it was asked."""

    enabled = True

    def __init__(self, user: str):
        self.user = user
        self.asked: list = []

    def authorize(self, context, op, resource_type, name):
        from odradek.broker.authorizer.acl import AclOperation, ResourceType

        self.asked.append((op, resource_type, name))
        return (op, resource_type, name) == (AclOperation.CREATE_TOKENS, ResourceType.USER, self.user)


def test_a_token_for_another_owner_needs_create_tokens_on_that_user():
    """Kafka's handleCreateTokenRequest: an owner other than the requester needs CREATE_TOKENS on
    User:<owner> (DELEGATION_TOKEN_AUTHORIZATION_FAILED without), checked after the listener rule
    and before the token secret's absence; the requester's own token needs no ACL."""
    from odradek.broker.authorizer.acl import AclOperation, ResourceType

    carol = CreateTokensFor("User:carol")
    assert create("SASL_SSL", owner="dave", authorizer=carol).error_code == \
        ErrorCode.delegation_token_authorization_failed
    answer = create("SASL_SSL", owner="carol", authorizer=carol)
    assert answer.error_code == ErrorCode.delegation_token_auth_disabled
    assert (answer.principal_name, answer.token_requester_principal_name) == ("carol", "alice")
    assert carol.asked == [(AclOperation.CREATE_TOKENS, ResourceType.USER, "User:dave"),
                           (AclOperation.CREATE_TOKENS, ResourceType.USER, "User:carol")]
    own = CreateTokensFor("User:nobody")
    assert create("SASL_SSL", authorizer=own).error_code == ErrorCode.delegation_token_auth_disabled
    assert own.asked == []
    assert create("PLAINTEXT", owner="carol", authorizer=carol).error_code == \
        ErrorCode.delegation_token_request_not_allowed

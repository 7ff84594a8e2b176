"""The delegation-token APIs (KIP-48) answered as Kafka 3.9 answers them without a token secret.

Kafka serves CreateDelegationToken, RenewDelegationToken, ExpireDelegationToken and
DescribeDelegationToken on every ZooKeeper-mode broker; without `delegation.token.secret.key`
(this broker has no token support) each answers DELEGATION_TOKEN_AUTH_DISABLED, after the checks
KafkaApis makes first: token requests are never allowed on PLAINTEXT or from an anonymous 1-way
SSL client (DELEGATION_TOKEN_REQUEST_NOT_ALLOWED), a token for another owner needs CREATE_TOKENS
on that user, and renewers must be users. v0 of each comes from common/legacy_schemas.
"""

import datetime
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from odradek.common.api_key import ApiKey
from odradek.common.network.request_context import Handler, RequestContext
from odradek.common.wire import NO_THROTTLE, make_entity, response_module

from .authorizer.acl import AclOperation, ResourceType
from .authorizer.authorizer import Authorizer

VERSIONS: dict[int, tuple[int, int]] = {
    ApiKey.CREATE_DELEGATION_TOKEN: (0, 3),
    ApiKey.RENEW_DELEGATION_TOKEN: (0, 2),
    ApiKey.EXPIRE_DELEGATION_TOKEN: (0, 2),
    ApiKey.DESCRIBE_DELEGATION_TOKEN: (0, 3),
}
ANONYMOUS = "User:ANONYMOUS"


def tokens_allowed(context: RequestContext) -> bool:
    """Kafka's allowTokenRequests: only over SASL, or SSL with a client certificate."""
    protocol = context.security_protocol
    return protocol != "PLAINTEXT" and not (protocol == "SSL" and str(context.principal) == ANONYMOUS)


class DelegationTokenApis:
    def __init__(self, authorizer: Callable[[], Authorizer]):
        self.authorizer = authorizer
        """The broker's authorizer as it is now (it is installed after the handlers are built)."""
        self.versions: dict[int, tuple[int, int]] = dict(VERSIONS)
        self.handlers: dict[int, Handler] = {
            ApiKey.CREATE_DELEGATION_TOKEN: self.handle_create,
            ApiKey.RENEW_DELEGATION_TOKEN: self.handle_renew_or_expire,
            ApiKey.EXPIRE_DELEGATION_TOKEN: self.handle_renew_or_expire,
            ApiKey.DESCRIBE_DELEGATION_TOKEN: self.handle_describe,
        }

    def _refusal(self, context: RequestContext) -> ErrorCode:
        if not tokens_allowed(context):
            return ErrorCode.delegation_token_request_not_allowed
        return ErrorCode.delegation_token_auth_disabled

    async def handle_create(self, context: RequestContext, request: Any) -> Any:
        mod = response_module(ApiKey.CREATE_DELEGATION_TOKEN, context.api_version)
        requester = str(context.principal)
        owner_name = getattr(request, "owner_principal_name", None)
        owner = f"{request.owner_principal_type}:{owner_name}" if owner_name else requester
        code = self._refusal(context)
        if code == ErrorCode.delegation_token_auth_disabled:
            if owner != requester and not self.authorizer().authorize(
                    context, AclOperation.CREATE_TOKENS, ResourceType.USER, owner):
                code = ErrorCode.delegation_token_authorization_failed
            elif any(r.principal_type != "User" for r in request.renewers):
                code = ErrorCode.invalid_principal_type
        owner_type, _, owner_rest = owner.partition(":")
        requester_type, _, requester_rest = requester.partition(":")
        return make_entity(
            mod.CreateDelegationTokenResponse, error_code=code, principal_type=owner_type, principal_name=owner_rest,
            token_requester_principal_type=requester_type, token_requester_principal_name=requester_rest,
            issue_timestamp=_time(-1), expiry_timestamp=_time(-1), max_timestamp=_time(-1), token_id="", hmac=b"",
            throttle_time=NO_THROTTLE)

    async def handle_renew_or_expire(self, context: RequestContext, request: Any) -> Any:
        api = ApiKey(int(request.__api_key__))
        mod = response_module(api, context.api_version)
        cls = mod.RenewDelegationTokenResponse if api == ApiKey.RENEW_DELEGATION_TOKEN else \
            mod.ExpireDelegationTokenResponse
        return make_entity(cls, error_code=self._refusal(context), expiry_timestamp=_time(-1),
                           throttle_time=NO_THROTTLE)

    async def handle_describe(self, context: RequestContext, request: Any) -> Any:
        mod = response_module(ApiKey.DESCRIBE_DELEGATION_TOKEN, context.api_version)
        return make_entity(mod.DescribeDelegationTokenResponse, error_code=self._refusal(context), tokens=(),
                           throttle_time=NO_THROTTLE)


def _time(ms: int) -> datetime.datetime:
    """A datetime_i64 field's value: -1 is "no time", as Kafka's answers say."""
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)

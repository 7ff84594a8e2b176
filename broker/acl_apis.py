"""DescribeAcls, CreateAcls and DeleteAcls (v1-v3) as Kafka answers them with no authorizer.

Odradek has no authorizer yet (every client may do everything). Kafka's AclApis, when
`authorizer.class.name` is unset, still serves the three ACL APIs and answers SECURITY_DISABLED:
kafka-acls, AdminClient.describeAcls and librdkafka's DescribeAcls then say "No Authorizer is
configured" instead of "not supported by broker", and nothing is stored. v0 is not served: the
kio release in use has no v0 classes (Kafka 4 dropped it).
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from odradek.common import wire
from odradek.common.api_key import ApiKey
from odradek.common.network.request_context import Handler, RequestContext

VERSIONS = (1, 3)

DESCRIBE_MESSAGE = "No Authorizer is configured on the broker"
ALTER_MESSAGE = "No Authorizer is configured."
"""Kafka's two texts: DescribeAcls sets its own, Create/DeleteAcls carry SecurityDisabledException's."""


def describe_acls_response(version: int):
    mod = wire.response_module(ApiKey.DESCRIBE_ACLS, version)
    return wire.make_entity(mod.DescribeAclsResponse, throttle_time=wire.NO_THROTTLE,
                            error_code=ErrorCode.security_disabled, error_message=DESCRIBE_MESSAGE, resources=())


def create_acls_response(request, version: int):
    """One refused result per creation asked for, in order (CreateAclsRequest.getErrorResponse)."""
    mod = wire.response_module(ApiKey.CREATE_ACLS, version)
    results = tuple(wire.make_entity(mod.AclCreationResult, error_code=ErrorCode.security_disabled,
                                     error_message=ALTER_MESSAGE) for _ in request.creations)
    return wire.make_entity(mod.CreateAclsResponse, throttle_time=wire.NO_THROTTLE, results=results)


def delete_acls_response(request, version: int):
    """One refused result, matching nothing, per filter asked for (DeleteAclsRequest.getErrorResponse)."""
    mod = wire.response_module(ApiKey.DELETE_ACLS, version)
    results = tuple(wire.make_entity(mod.DeleteAclsFilterResult, error_code=ErrorCode.security_disabled,
                                     error_message=ALTER_MESSAGE, matching_acls=()) for _ in request.filters)
    return wire.make_entity(mod.DeleteAclsResponse, throttle_time=wire.NO_THROTTLE, filter_results=results)


class AclApis:
    def __init__(self) -> None:
        self.versions: dict[int, tuple[int, int]] = {
            ApiKey.DESCRIBE_ACLS: VERSIONS, ApiKey.CREATE_ACLS: VERSIONS, ApiKey.DELETE_ACLS: VERSIONS}
        self.handlers: dict[int, Handler] = {
            ApiKey.DESCRIBE_ACLS: self.handle_describe_acls,
            ApiKey.CREATE_ACLS: self.handle_create_acls,
            ApiKey.DELETE_ACLS: self.handle_delete_acls,
        }

    async def handle_describe_acls(self, context: RequestContext, request):
        return describe_acls_response(int(request.__version__))

    async def handle_create_acls(self, context: RequestContext, request):
        return create_acls_response(request, int(request.__version__))

    async def handle_delete_acls(self, context: RequestContext, request):
        return delete_acls_response(request, int(request.__version__))

"""DescribeAcls, CreateAcls and DeleteAcls (v1-v3), as Kafka's AclApis answers them.

With no authorizer (`authorizer.class.name` unset) Kafka still serves the three APIs and answers
SECURITY_DISABLED: kafka-acls, AdminClient.describeAcls and librdkafka's DescribeAcls then say "No
Authorizer is configured" instead of "not supported by broker", and nothing is stored. With the
authorizer on, Describe needs DESCRIBE on the Cluster and Create/Delete need ALTER (else
CLUSTER_AUTHORIZATION_FAILED for the whole request); each creation and each filter gets its own
result: an invalid binding (unknown type, operation or permission, a pattern type other than
LITERAL/PREFIXED, an empty name, a Cluster not named kafka-cluster, a principal without a type)
gets INVALID_REQUEST with Kafka's message and changes nothing. v0 is not served: the kio release
in use has no v0 classes (Kafka 4 dropped it).
"""

from __future__ import annotations

import logging
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i8

from odradek.common import wire
from odradek.common.api_key import ApiKey
from odradek.common.errors import KafkaError
from odradek.common.network.request_context import Handler, RequestContext

from .authorizer.acl import (
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
    enum_or_unknown,
    filter_error,
)
from .authorizer.acl_authorizer import AclAuthorizer
from .authorizer.authorizer import authorize_cluster

log = logging.getLogger(__name__)

VERSIONS = (0, 3)  # v0 (no pattern types: LITERAL) from common/legacy_schemas

DESCRIBE_MESSAGE = "No Authorizer is configured on the broker"
ALTER_MESSAGE = "No Authorizer is configured."
"""Kafka's two texts: DescribeAcls sets its own, Create/DeleteAcls carry SecurityDisabledException's."""


def describe_acls_response(version: int, code: ErrorCode = ErrorCode.security_disabled,
                           message: str | None = DESCRIBE_MESSAGE, bindings: list[AclBinding] | None = None) -> Any:
    """The answer: an error, or the matching bindings grouped by resource (DescribeAclsResponse.aclsResources)."""
    mod = wire.response_module(ApiKey.DESCRIBE_ACLS, version)
    by_resource: dict[ResourcePattern, list[AccessControlEntry]] = {}
    for b in bindings or ():
        by_resource.setdefault(b.pattern, []).append(b.entry)
    resources = tuple(
        wire.make_entity(mod.DescribeAclsResource, resource_type=i8(p.resource_type), resource_name=p.name,
                         pattern_type=i8(p.pattern_type), acls=tuple(
                             wire.make_entity(mod.AclDescription, principal=e.principal, host=e.host,
                                              operation=i8(e.operation), permission_type=i8(e.permission_type))
                             for e in sorted(entries, key=lambda e: (e.principal, e.host, e.operation))))
        for p, entries in sorted(by_resource.items()))
    return wire.make_entity(mod.DescribeAclsResponse, throttle_time=wire.NO_THROTTLE,
                            error_code=code, error_message=message, resources=resources)


def create_acls_response(request: Any, version: int, code: ErrorCode = ErrorCode.security_disabled,
                         message: str | None = ALTER_MESSAGE) -> Any:
    """One refused result per creation asked for, in order (CreateAclsRequest.getErrorResponse)."""
    return _create_results(version, [(code, message)] * len(request.creations))


def _create_results(version: int, results: list[tuple[ErrorCode, str | None]]) -> Any:
    mod = wire.response_module(ApiKey.CREATE_ACLS, version)
    return wire.make_entity(mod.CreateAclsResponse, throttle_time=wire.NO_THROTTLE, results=tuple(
        wire.make_entity(mod.AclCreationResult, error_code=code, error_message=message) for code, message in results))


def delete_acls_response(request: Any, version: int, code: ErrorCode = ErrorCode.security_disabled,
                         message: str | None = ALTER_MESSAGE) -> Any:
    """One refused result, matching nothing, per filter asked for (DeleteAclsRequest.getErrorResponse)."""
    mod = wire.response_module(ApiKey.DELETE_ACLS, version)
    results = tuple(wire.make_entity(mod.DeleteAclsFilterResult, error_code=code,
                                     error_message=message, matching_acls=()) for _ in request.filters)
    return wire.make_entity(mod.DeleteAclsResponse, throttle_time=wire.NO_THROTTLE, filter_results=results)


def creation_binding(c: Any) -> AclBinding:
    """CreateAclsRequest.aclBinding, with codes this side does not know as UNKNOWN."""
    return AclBinding(
        ResourcePattern(enum_or_unknown(ResourceType, int(c.resource_type)), c.resource_name or "",
                        enum_or_unknown(PatternType, int(c.resource_pattern_type))),
        AccessControlEntry(c.principal or "", c.host or "", enum_or_unknown(AclOperation, int(c.operation)),
                           enum_or_unknown(AclPermissionType, int(c.permission_type))))


def binding_filter(f: Any) -> AclBindingFilter:
    """DescribeAclsRequest/DeleteAclsRequest filter fields as an AclBindingFilter."""
    return AclBindingFilter(
        ResourcePatternFilter(enum_or_unknown(ResourceType, int(f.resource_type_filter)), f.resource_name_filter,
                              enum_or_unknown(PatternType, int(f.pattern_type_filter))),
        AccessControlEntryFilter(f.principal_filter, f.host_filter, enum_or_unknown(AclOperation, int(f.operation)),
                                 enum_or_unknown(AclPermissionType, int(f.permission_type))))


def _error_of(e: Exception) -> tuple[ErrorCode, str]:
    if isinstance(e, KafkaError):
        return e.error_code, str(e)
    return ErrorCode.unknown_server_error, "Failed to update ACLs in ZooKeeper"


class AclApis:
    def __init__(self, authorizer: AclAuthorizer | None = None) -> None:
        self.authorizer = authorizer
        """None: no authorizer configured (SECURITY_DISABLED answers)."""
        self.versions: dict[int, tuple[int, int]] = {
            ApiKey.DESCRIBE_ACLS: VERSIONS, ApiKey.CREATE_ACLS: VERSIONS, ApiKey.DELETE_ACLS: VERSIONS}
        self.handlers: dict[int, Handler] = {
            ApiKey.DESCRIBE_ACLS: self.handle_describe_acls,
            ApiKey.CREATE_ACLS: self.handle_create_acls,
            ApiKey.DELETE_ACLS: self.handle_delete_acls,
        }

    async def handle_describe_acls(self, context: RequestContext, request: Any) -> Any:
        version = int(request.__version__)
        auth = self.authorizer
        if auth is None:
            return describe_acls_response(version)
        if not authorize_cluster(auth, context, AclOperation.DESCRIBE):
            return describe_acls_response(version, ErrorCode.cluster_authorization_failed, None)
        f = binding_filter(request)
        why = filter_error(f)
        if why is not None:
            return describe_acls_response(version, ErrorCode.invalid_request, why)
        return describe_acls_response(version, ErrorCode.none, None, auth.acls(f))

    async def handle_create_acls(self, context: RequestContext, request: Any) -> Any:
        version = int(request.__version__)
        auth = self.authorizer
        if auth is None:
            return create_acls_response(request, version)
        if not authorize_cluster(auth, context, AclOperation.ALTER):
            return create_acls_response(request, version, ErrorCode.cluster_authorization_failed, None)
        bindings = [creation_binding(c) for c in request.creations]
        results: list[tuple[ErrorCode, str | None]] = [(ErrorCode.none, None)] * len(bindings)
        valid: list[int] = []
        for i, b in enumerate(bindings):
            why = binding_error(b)
            if why is None:
                valid.append(i)
            else:
                results[i] = (ErrorCode.invalid_request, why)
        if valid:
            errors = await auth.create_acls([bindings[i] for i in valid])
            for i, e in zip(valid, errors):
                if e is not None:
                    results[i] = _error_of(e)
            log.info("%s created %d ACLs (%d refused)", context.principal, len(valid) - sum(e is not None for e in errors),
                     len(bindings) - len(valid))
        return _create_results(version, results)

    async def handle_delete_acls(self, context: RequestContext, request: Any) -> Any:
        version = int(request.__version__)
        auth = self.authorizer
        if auth is None:
            return delete_acls_response(request, version)
        if not authorize_cluster(auth, context, AclOperation.ALTER):
            return delete_acls_response(request, version, ErrorCode.cluster_authorization_failed, None)
        mod = wire.response_module(ApiKey.DELETE_ACLS, version)
        filters = [binding_filter(f) for f in request.filters]
        usable = [i for i, f in enumerate(filters) if filter_error(f) is None]
        deleted = await auth.delete_acls([filters[i] for i in usable]) if usable else []
        by_filter = dict(zip(usable, deleted))
        out = []
        for i, f in enumerate(filters):
            why = filter_error(f)
            if why is not None:
                out.append(wire.make_entity(mod.DeleteAclsFilterResult, error_code=ErrorCode.invalid_request,
                                            error_message=why, matching_acls=()))
                continue
            matching = []
            for binding, error in by_filter.get(i, []):
                code, message = (ErrorCode.none, None) if error is None else _error_of(error)
                p, e = binding.pattern, binding.entry
                matching.append(wire.make_entity(
                    mod.DeleteAclsMatchingAcl, error_code=code, error_message=message,
                    resource_type=i8(p.resource_type), resource_name=p.name, pattern_type=i8(p.pattern_type),
                    principal=e.principal, host=e.host, operation=i8(e.operation),
                    permission_type=i8(e.permission_type)))
            out.append(wire.make_entity(mod.DeleteAclsFilterResult, error_code=ErrorCode.none, error_message=None,
                                        matching_acls=tuple(matching)))
        return wire.make_entity(mod.DeleteAclsResponse, throttle_time=wire.NO_THROTTLE, filter_results=tuple(out))

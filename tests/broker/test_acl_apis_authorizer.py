"""CreateAcls, DescribeAcls and DeleteAcls with the authorizer on: Kafka's checks and validation,
bad input answered per item and never stored (a stub authorizer stands for ZooKeeper here)."""

import asyncio
from types import SimpleNamespace

from kio.schema.errors import ErrorCode

from odradek.broker.acl_apis import AclApis
from odradek.broker.authorizer.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from odradek.broker.authorizer.decision import AclSnapshot, Settings, authorize
from odradek.common import wire
from odradek.common.network.request_context import RequestContext

OP, RT, PT = AclOperation, ResourceType, PatternType


class StubAuthorizer:
    """The decision core over a dict, with create/delete recorded instead of written."""

    enabled = True

    def __init__(self, acls=None, supers=()):
        self.snapshot = AclSnapshot.of(acls or {})
        self.settings = Settings(frozenset(supers))
        self.created: list[AclBinding] = []

    def authorize(self, context, op, rt, name):
        return authorize(self.snapshot, self.settings, context.principal, "127.0.0.1", op, rt, name)

    def acls(self, binding_filter):
        return [AclBinding(p, e) for p, es in self.snapshot.acls.items() if binding_filter.pattern.matches(p)
                for e in es if binding_filter.entry.matches(e)]

    async def create_acls(self, bindings):
        self.created.extend(bindings)
        changed: dict = {}
        for b in bindings:
            changed[b.pattern] = changed.get(b.pattern, self.snapshot.get(b.pattern)) | {b.entry}
        self.snapshot = self.snapshot.updated(changed)
        return [None] * len(bindings)

    async def delete_acls(self, filters):
        out = []
        for f in filters:
            found = self.acls(f)
            out.append([(b, None) for b in found])
        return out


def context(principal="User:admin"):
    return RequestContext(SimpleNamespace(request_api_version=3, client_id="t"), principal=principal)


def creation(rt=RT.TOPIC, name="t", pt=PT.LITERAL, principal="User:alice", host="*", op=OP.READ,
             perm=AclPermissionType.ALLOW, version=3):
    cls = wire.request_schema(30, version)
    creation_cls = __import__(cls.__module__, fromlist=["AclCreation"]).AclCreation
    return creation_cls(resource_type=int(rt), resource_name=name, resource_pattern_type=int(pt), principal=principal,
                        host=host, operation=int(op), permission_type=int(perm))


def create_request(creations, version=3):
    return wire.request_schema(30, version)(creations=tuple(creations))


def run(coro):
    return asyncio.run(coro)


ADMIN_ALTER = {ResourcePattern(RT.CLUSTER, "kafka-cluster", PT.LITERAL): [
    AccessControlEntry("User:admin", "*", OP.ALTER, AclPermissionType.ALLOW)]}


def test_create_needs_cluster_alter():
    stub = StubAuthorizer()
    apis = AclApis(stub)
    response = run(apis.handle_create_acls(context("User:mallory"), create_request([creation(), creation()])))
    assert [r.error_code for r in response.results] == [ErrorCode.cluster_authorization_failed] * 2
    assert stub.created == []


def test_bad_bindings_get_invalid_request_and_nothing_is_stored():
    stub = StubAuthorizer(ADMIN_ALTER)
    apis = AclApis(stub)
    bad = [creation(rt=RT.ANY), creation(rt=99), creation(op=OP.ANY), creation(op=77), creation(pt=PT.MATCH),
           creation(pt=PT.PREFIXED, name=""), creation(principal="alice"), creation(rt=RT.CLUSTER, name="x"),
           creation(name="n" * 100_000), creation(perm=AclPermissionType.ANY)]
    response = run(apis.handle_create_acls(context(), create_request([*bad, creation(name="good")])))
    codes = [r.error_code for r in response.results]
    assert codes == [ErrorCode.invalid_request] * len(bad) + [ErrorCode.none]
    assert all(r.error_message for r in response.results[:-1])
    assert [b.pattern.name for b in stub.created] == ["good"]
    wire.encode_response(response, 1, flexible_header=True)


def test_thousands_of_bindings_in_one_request():
    stub = StubAuthorizer(ADMIN_ALTER)
    apis = AclApis(stub)
    many = [creation(name=f"t{i}") for i in range(5000)]
    response = run(apis.handle_create_acls(context(), create_request(many)))
    assert {r.error_code for r in response.results} == {ErrorCode.none}
    assert len(stub.created) == 5000


def test_describe_needs_cluster_describe_and_groups_by_resource():
    stub = StubAuthorizer(ADMIN_ALTER)
    apis = AclApis(stub)
    run(apis.handle_create_acls(context(), create_request([creation(), creation(op=OP.WRITE)])))
    req = wire.request_schema(29, 3)(resource_type_filter=int(RT.TOPIC), resource_name_filter=None,
                                    pattern_type_filter=int(PT.ANY), principal_filter=None, host_filter=None,
                                    operation=int(OP.ANY), permission_type=int(AclPermissionType.ANY))
    refused = run(apis.handle_describe_acls(context("User:mallory"), req))
    assert refused.error_code == ErrorCode.cluster_authorization_failed and refused.resources == ()
    got = run(apis.handle_describe_acls(context(), req))  # ALTER implies DESCRIBE
    assert got.error_code == ErrorCode.none
    assert [(r.resource_name, len(r.acls)) for r in got.resources] == [("t", 2)]
    unknown = wire.request_schema(29, 3)(resource_type_filter=0, resource_name_filter=None, pattern_type_filter=1,
                                        principal_filter=None, host_filter=None, operation=1, permission_type=1)
    assert run(apis.handle_describe_acls(context(), unknown)).error_code == ErrorCode.invalid_request


def test_delete_reports_per_filter():
    stub = StubAuthorizer(ADMIN_ALTER)
    apis = AclApis(stub)
    run(apis.handle_create_acls(context(), create_request([creation()])))
    mod = __import__(wire.request_schema(31, 3).__module__, fromlist=["DeleteAclsFilter"])

    def flt(rt):
        return mod.DeleteAclsFilter(resource_type_filter=int(rt), resource_name_filter="t",
                                    pattern_type_filter=int(PT.LITERAL), principal_filter=None, host_filter=None,
                                    operation=int(OP.ANY), permission_type=int(AclPermissionType.ANY))

    req = wire.request_schema(31, 3)(filters=(flt(RT.TOPIC), flt(RT.UNKNOWN), flt(RT.GROUP)))
    response = run(apis.handle_delete_acls(context(), req))
    results = response.filter_results
    assert [r.error_code for r in results] == [ErrorCode.none, ErrorCode.invalid_request, ErrorCode.none]
    assert [len(r.matching_acls) for r in results] == [1, 0, 0]
    wire.encode_response(response, 1, flexible_header=True)
    denied = run(apis.handle_delete_acls(context("User:mallory"), req))
    assert {r.error_code for r in denied.filter_results} == {ErrorCode.cluster_authorization_failed}

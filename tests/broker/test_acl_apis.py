"""The ACL APIs' refusals (no authorizer), in every served version."""

from types import SimpleNamespace

from kio.schema.errors import ErrorCode

from odradek.broker.acl_apis import VERSIONS, create_acls_response, delete_acls_response, describe_acls_response
from odradek.common import wire


def test_every_version_refuses_each_item_and_encodes():
    for v in range(VERSIONS[0], VERSIONS[1] + 1):
        describe = describe_acls_response(v)
        assert (describe.error_code, describe.resources) == (ErrorCode.security_disabled, ())
        create = create_acls_response(SimpleNamespace(creations=[None] * 3), v)
        assert [r.error_code for r in create.results] == [ErrorCode.security_disabled] * 3
        delete = delete_acls_response(SimpleNamespace(filters=[None] * 2), v)
        assert [(r.error_code, r.matching_acls) for r in delete.filter_results] == [
            (ErrorCode.security_disabled, ())] * 2
        for response in (describe, create, delete):
            wire.encode_response(response, 7, flexible_header=v >= 2)

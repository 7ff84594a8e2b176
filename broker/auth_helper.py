"""Authorized operations (KIP-430) as Kafka's AuthHelper.authorizedOperations answers them.

A client that asks (Metadata v8+, DescribeCluster, DescribeGroups v3+) gets a bit field with bit
`code` set for every ACL operation of the resource's type that the principal may do: with no
authorizer every operation the type supports, with one those the authorizer allows on that very
resource. A client that does not ask gets INT32_MIN ("not requested").
"""

from collections.abc import Iterable

from odradek.common.network.request_context import RequestContext

from .authorizer.acl import CLUSTER_NAME, SUPPORTED_OPERATIONS, AclOperation, ResourceType
from .authorizer.authorizer import ALLOW_ALL, Authorizer

__all__ = ["NOT_REQUESTED", "AclOperation", "ResourceType", "authorized_operations", "to_bit_field"]

NOT_REQUESTED = -(2**31)
"""Kafka's "authorized operations not requested" (Integer.MIN_VALUE)."""


def to_bit_field(operations: Iterable[AclOperation]) -> int:
    """Kafka's Utils.to32BitField: bit `code` set for every operation."""
    field = 0
    for op in operations:
        field |= 1 << int(op)
    return field


def authorized_operations(resource_type: ResourceType, requested: bool, authorizer: Authorizer = ALLOW_ALL,
                          context: RequestContext | None = None, name: str = CLUSTER_NAME) -> int:
    """What a response carries for a resource: the operations the principal may do on it when
    asked, else NOT_REQUESTED."""
    if not requested:
        return NOT_REQUESTED
    supported = SUPPORTED_OPERATIONS[resource_type]
    if not authorizer.enabled or context is None:
        return to_bit_field(supported)
    return to_bit_field(op for op in supported if authorizer.authorize(context, op, resource_type, name))

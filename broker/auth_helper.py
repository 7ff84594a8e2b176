"""Authorized operations (KIP-430) as Kafka's AuthHelper answers them with no authorizer configured.

A client that asks (Metadata v8+, DescribeCluster, DescribeGroups v3+) gets a bit field with bit
`code` set for every ACL operation the resource's type supports: with no authorizer every request
is allowed, so Kafka reports all of them. A client that does not ask gets INT32_MIN ("not
requested"). Once ACLs exist, this is where the subset would be computed.
"""

import enum


class AclOperation(enum.IntEnum):
    """Kafka's org.apache.kafka.common.acl.AclOperation codes."""

    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12


class ResourceType(enum.IntEnum):
    """Kafka's org.apache.kafka.common.resource.ResourceType codes (those answered here)."""

    TOPIC = 2
    GROUP = 3
    CLUSTER = 4


_OP = AclOperation
SUPPORTED_OPERATIONS: dict[ResourceType, frozenset[AclOperation]] = {
    ResourceType.TOPIC: frozenset({_OP.READ, _OP.WRITE, _OP.CREATE, _OP.DESCRIBE, _OP.DELETE, _OP.ALTER,
                                   _OP.DESCRIBE_CONFIGS, _OP.ALTER_CONFIGS}),
    ResourceType.GROUP: frozenset({_OP.READ, _OP.DESCRIBE, _OP.DELETE}),
    ResourceType.CLUSTER: frozenset({_OP.CREATE, _OP.CLUSTER_ACTION, _OP.DESCRIBE_CONFIGS, _OP.ALTER_CONFIGS,
                                     _OP.IDEMPOTENT_WRITE, _OP.ALTER, _OP.DESCRIBE}),
}
"""Kafka's AclEntry.supportedOperations for the resource types a response may describe."""

NOT_REQUESTED = -(2**31)
"""Kafka's "authorized operations not requested" (Integer.MIN_VALUE)."""


def to_bit_field(operations) -> int:
    """Kafka's Utils.to32BitField: bit `code` set for every operation."""
    field = 0
    for op in operations:
        field |= 1 << int(op)
    return field


def authorized_operations(resource_type: ResourceType, requested: bool) -> int:
    """What a response carries for a resource: every supported operation when asked (no authorizer
    denies anything), else NOT_REQUESTED."""
    return to_bit_field(SUPPORTED_OPERATIONS[resource_type]) if requested else NOT_REQUESTED

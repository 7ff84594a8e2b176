"""ACL vocabulary as Kafka's clients module defines it: resource types, pattern types, operations,
permission types (with their wire codes and their PascalCase names), resource patterns, entries,
bindings, and the filters CreateAcls/DescribeAcls/DeleteAcls carry.

Plain frozen data and pure functions only: the decision core (decision), the ZooKeeper formats
(zk_acl_store) and the API handlers (broker/acl_apis) share them.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from typing import TypeVar


class ResourceType(enum.IntEnum):
    """org.apache.kafka.common.resource.ResourceType."""

    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    """org.apache.kafka.common.resource.PatternType (MATCH and ANY only in filters)."""

    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(enum.IntEnum):
    """org.apache.kafka.common.acl.AclOperation."""

    UNKNOWN = 0
    ANY = 1
    ALL = 2
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
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(enum.IntEnum):
    """org.apache.kafka.common.acl.AclPermissionType."""

    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


CLUSTER_NAME = "kafka-cluster"
"""The one name of the Cluster resource (Resource.CLUSTER_NAME)."""
WILDCARD_RESOURCE = "*"
WILDCARD_HOST = "*"
WILDCARD_PRINCIPAL = "User:*"

CONCRETE_RESOURCE_TYPES = frozenset(ResourceType) - {ResourceType.UNKNOWN, ResourceType.ANY}
CONCRETE_OPERATIONS = frozenset(AclOperation) - {AclOperation.UNKNOWN, AclOperation.ANY}

_OP = AclOperation
SUPPORTED_OPERATIONS: dict[ResourceType, frozenset[AclOperation]] = {
    ResourceType.TOPIC: frozenset({_OP.READ, _OP.WRITE, _OP.CREATE, _OP.DESCRIBE, _OP.DELETE, _OP.ALTER,
                                   _OP.DESCRIBE_CONFIGS, _OP.ALTER_CONFIGS}),
    ResourceType.GROUP: frozenset({_OP.READ, _OP.DESCRIBE, _OP.DELETE}),
    ResourceType.CLUSTER: frozenset({_OP.CREATE, _OP.CLUSTER_ACTION, _OP.DESCRIBE_CONFIGS, _OP.ALTER_CONFIGS,
                                     _OP.IDEMPOTENT_WRITE, _OP.ALTER, _OP.DESCRIBE}),
    ResourceType.TRANSACTIONAL_ID: frozenset({_OP.DESCRIBE, _OP.WRITE}),
    ResourceType.DELEGATION_TOKEN: frozenset({_OP.DESCRIBE}),
    ResourceType.USER: frozenset({_OP.CREATE_TOKENS, _OP.DESCRIBE_TOKENS}),
}
"""AclEntry.supportedOperations: what KIP-430's authorized operations may report per type."""

IMPLIED_BY: dict[AclOperation, frozenset[AclOperation]] = {
    _OP.DESCRIBE: frozenset({_OP.DESCRIBE, _OP.READ, _OP.WRITE, _OP.DELETE, _OP.ALTER}),
    _OP.DESCRIBE_CONFIGS: frozenset({_OP.DESCRIBE_CONFIGS, _OP.ALTER_CONFIGS}),
}
"""An ALLOW of any of these operations allows the key (AclAuthorizer.allowAclExists); DENY has
no such implication."""


def pascal_case(name: str) -> str:
    """SecurityUtils.toPascalCase: TRANSACTIONAL_ID → TransactionalId."""
    return "".join(part.capitalize() for part in name.split("_"))


E = TypeVar("E", ResourceType, AclOperation, AclPermissionType, PatternType)


def _from_name(enum_type: type[E], text: str) -> E:
    """SecurityUtils' parsing: PascalCase ("ClusterAction") or the enum name ("CLUSTER_ACTION"),
    any case; UNKNOWN for anything else."""
    snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", text.strip()).upper()
    return enum_type.__members__.get(snake, enum_type.UNKNOWN)


def resource_type_name(rt: ResourceType) -> str:
    return pascal_case(rt.name)


def operation_name(op: AclOperation) -> str:
    return pascal_case(op.name)


def permission_type_name(pt: AclPermissionType) -> str:
    return pascal_case(pt.name)


def parse_resource_type(text: str) -> ResourceType:
    return _from_name(ResourceType, text)


def parse_operation(text: str) -> AclOperation:
    return _from_name(AclOperation, text)


def parse_permission_type(text: str) -> AclPermissionType:
    return _from_name(AclPermissionType, text)


def parse_pattern_type(text: str) -> PatternType:
    return _from_name(PatternType, text)


def enum_or_unknown(enum_type: type[E], code: int) -> E:
    """A wire code as the enum, UNKNOWN for codes this side does not know (Kafka's fromCode)."""
    try:
        return enum_type(code)
    except ValueError:
        return enum_type.UNKNOWN


def principal_error(principal: str | None) -> str | None:
    """Why `principal` is not a "Type:name" string (SecurityUtils.parseKafkaPrincipal), or None."""
    if not principal:
        return "principal must not be empty"
    kind, sep, name = principal.partition(":")
    if not sep or not kind or not name:
        return f"expected a string in format principalType:principalName but got {principal}"
    return None


@dataclass(frozen=True, order=True)
class ResourcePattern:
    resource_type: ResourceType
    name: str
    pattern_type: PatternType


@dataclass(frozen=True)
class AccessControlEntry:
    principal: str
    host: str
    operation: AclOperation
    permission_type: AclPermissionType


@dataclass(frozen=True)
class AclBinding:
    pattern: ResourcePattern
    entry: AccessControlEntry


@dataclass(frozen=True)
class ResourcePatternFilter:
    resource_type: ResourceType
    name: str | None
    pattern_type: PatternType

    def matches(self, pattern: ResourcePattern) -> bool:
        """ResourcePatternFilter.matches: MATCH also finds the wildcard and the prefixes that
        would apply to the named resource."""
        if self.resource_type != ResourceType.ANY and self.resource_type != pattern.resource_type:
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH) and self.pattern_type != pattern.pattern_type:
            return False
        if self.name is None:
            return True
        if self.pattern_type in (PatternType.ANY, pattern.pattern_type):
            return self.name == pattern.name
        if pattern.pattern_type == PatternType.LITERAL:
            return self.name == pattern.name or pattern.name == WILDCARD_RESOURCE
        if pattern.pattern_type == PatternType.PREFIXED:
            return self.name.startswith(pattern.name)
        return False

    def exact_patterns(self) -> list[ResourcePattern]:
        """The patterns this filter names exactly (none when it names a set; Kafka's
        matchesAtMostOne and filterToResources), so a delete also finds ACLs not yet cached."""
        if self.name is None or self.resource_type not in CONCRETE_RESOURCE_TYPES:
            return []
        if self.pattern_type in (PatternType.LITERAL, PatternType.PREFIXED):
            return [ResourcePattern(self.resource_type, self.name, self.pattern_type)]
        return []


@dataclass(frozen=True)
class AccessControlEntryFilter:
    principal: str | None
    host: str | None
    operation: AclOperation
    permission_type: AclPermissionType

    def matches(self, entry: AccessControlEntry) -> bool:
        return ((self.principal is None or self.principal == entry.principal)
                and (self.host is None or self.host == entry.host)
                and (self.operation == AclOperation.ANY or self.operation == entry.operation)
                and (self.permission_type == AclPermissionType.ANY or self.permission_type == entry.permission_type))


@dataclass(frozen=True)
class AclBindingFilter:
    pattern: ResourcePatternFilter
    entry: AccessControlEntryFilter

    def matches(self, binding: AclBinding) -> bool:
        return self.pattern.matches(binding.pattern) and self.entry.matches(binding.entry)


MAX_FIELD_LENGTH = 1000
"""Longest resource name, principal or host an ACL may carry (Odradek's guard, not Kafka's: a
name is a znode name, and one huge name would make every broker's read of the folder fail)."""


def binding_error(binding: AclBinding) -> str | None:
    """Why `binding` cannot be created (Kafka's AclApis, AclAuthorizer and the constructors of
    ResourcePattern and AccessControlEntry), or None."""
    p, e = binding.pattern, binding.entry
    if p.resource_type not in CONCRETE_RESOURCE_TYPES:
        return f"Invalid resource type {p.resource_type.name}"
    if p.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return f"Invalid resource pattern type {p.pattern_type.name}"
    if e.operation not in CONCRETE_OPERATIONS:
        return f"Invalid operation {e.operation.name}"
    if e.permission_type not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
        return f"Invalid permission type {e.permission_type.name}"
    if p.resource_type == ResourceType.CLUSTER and p.name != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    if not p.name:
        return "Invalid empty resource name"
    if "/" in p.name:
        return f"ACL binding contains invalid resource name: {p.name[:100]}"
    if max(len(p.name), len(e.principal or ""), len(e.host or "")) > MAX_FIELD_LENGTH:
        return f"resource name, principal and host are limited to {MAX_FIELD_LENGTH} characters"
    why = principal_error(e.principal)
    if why is not None:
        return why
    if not e.host:
        return "Invalid empty host"
    return None


def filter_error(f: AclBindingFilter) -> str | None:
    """Why a DescribeAcls/DeleteAcls filter is unusable (AclBindingFilter.isUnknown), or None."""
    if f.pattern.resource_type == ResourceType.UNKNOWN:
        return "Filter contains an UNKNOWN resource type"
    if f.pattern.pattern_type == PatternType.UNKNOWN:
        return "Filter contains an UNKNOWN pattern type"
    if f.entry.operation == AclOperation.UNKNOWN:
        return "Filter contains an UNKNOWN operation"
    if f.entry.permission_type == AclPermissionType.UNKNOWN:
        return "Filter contains an UNKNOWN permission type"
    return None

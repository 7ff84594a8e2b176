"""The authorizer's decision core: Kafka's AclAuthorizer rules over an immutable ACL snapshot.

`authorize` is AclAuthorizer.authorizeAction: super users may do everything; the ACLs that apply
to a resource are those of the literal name, of the literal wildcard `*` and of every prefix of
the name; with none of them `allow.everyone.if.no.acl.found` decides; otherwise a matching DENY
(same principal or `User:*`, same host or `*`, the operation or ALL) refuses, and else a matching
ALLOW is needed, where an ALLOW of READ, WRITE, DELETE or ALTER also allows DESCRIBE and one of
ALTER_CONFIGS also allows DESCRIBE_CONFIGS. `authorize_by_type` is authorizeByResourceType (is
the principal allowed `op` on at least one resource of a type, KIP-679's idempotent producer).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from .acl import (
    IMPLIED_BY,
    WILDCARD_HOST,
    WILDCARD_PRINCIPAL,
    WILDCARD_RESOURCE,
    AccessControlEntry,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)

ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
Acls = frozenset[AccessControlEntry]


@dataclass(frozen=True)
class Settings:
    super_users: frozenset[str] = frozenset()
    allow_everyone_if_no_acl_found: bool = False


def parse_super_users(value: str | None) -> frozenset[str]:
    """`super.users`: principals separated by semicolons."""
    return frozenset(p.strip() for p in (value or "").split(";") if p.strip())


@dataclass(frozen=True)
class AclSnapshot:
    """Every ACL the broker knows, by resource pattern; never changed, replaced on each update."""

    acls: Mapping[ResourcePattern, Acls] = field(default_factory=dict)
    prefixes: Mapping[ResourceType, Mapping[str, Acls]] = field(default_factory=dict)
    """Prefixed patterns by type then prefix: the index `matching` walks."""
    prefix_lengths: Mapping[ResourceType, frozenset[int]] = field(default_factory=dict)

    @classmethod
    def of(cls, acls: Mapping[ResourcePattern, Iterable[AccessControlEntry]]) -> AclSnapshot:
        kept = {p: frozenset(a) for p, a in acls.items() if a}
        prefixes: dict[ResourceType, dict[str, Acls]] = {}
        for p, a in kept.items():
            if p.pattern_type == PatternType.PREFIXED:
                prefixes.setdefault(p.resource_type, {})[p.name] = a
        lengths = {rt: frozenset(len(n) for n in names) for rt, names in prefixes.items()}
        return cls(kept, prefixes, lengths)

    def updated(self, changes: Mapping[ResourcePattern, Iterable[AccessControlEntry]]) -> AclSnapshot:
        """A snapshot with these resources' ACLs replaced (an empty set removes the resource)."""
        acls = dict(self.acls)
        for pattern, entries in changes.items():
            acls[pattern] = frozenset(entries)
        return AclSnapshot.of(acls)

    def get(self, pattern: ResourcePattern) -> Acls:
        return self.acls.get(pattern, frozenset())

    def matching(self, resource_type: ResourceType, name: str) -> list[Acls]:
        """The ACL sets that apply to the literal resource (AclAuthorizer.matchingAcls)."""
        found = []
        for key in {WILDCARD_RESOURCE, name}:
            got = self.acls.get(ResourcePattern(resource_type, key, PatternType.LITERAL))
            if got:
                found.append(got)
        prefixes = self.prefixes.get(resource_type)
        if prefixes:
            for length in self.prefix_lengths[resource_type]:
                if length <= len(name):
                    got = prefixes.get(name[:length])
                    if got:
                        found.append(got)
        return found


def _matches(ace: AccessControlEntry, principal: str, host: str, ops: frozenset[AclOperation],
             permission: AclPermissionType) -> bool:
    return (ace.permission_type == permission
            and (ace.principal == principal or ace.principal == WILDCARD_PRINCIPAL)
            and (ace.operation in ops or ace.operation == AclOperation.ALL)
            and (ace.host == host or ace.host == WILDCARD_HOST))


def authorize(snapshot: AclSnapshot, settings: Settings, principal: str, host: str, op: AclOperation,
              resource_type: ResourceType, name: str) -> bool:
    if principal in settings.super_users:
        return True
    sets = snapshot.matching(resource_type, name)
    if not sets:
        return settings.allow_everyone_if_no_acl_found
    exact = frozenset({op})
    if any(_matches(a, principal, host, exact, DENY) for acls in sets for a in acls):
        return False
    allowing = IMPLIED_BY.get(op, exact)
    return any(_matches(a, principal, host, allowing, ALLOW) for acls in sets for a in acls)


def authorize_by_type(snapshot: AclSnapshot, settings: Settings, principal: str, host: str, op: AclOperation,
                      resource_type: ResourceType) -> bool:
    """Whether some resource of the type could allow `op` (AclAuthorizer.authorizeByResourceType):
    a DENY on the literal wildcard refuses everything; a prefix DENY cancels ALLOWs it covers."""
    if principal in settings.super_users:
        return True
    ops = frozenset({op})
    deny_literal: set[str] = set()
    deny_prefix: set[str] = set()
    allow_literal: set[str] = set()
    allow_prefix: set[str] = set()
    for pattern, acls in snapshot.acls.items():
        if pattern.resource_type != resource_type:
            continue
        for a in acls:
            for permission, literal, prefix in ((DENY, deny_literal, deny_prefix), (ALLOW, allow_literal, allow_prefix)):
                if _matches(a, principal, host, ops, permission):
                    (literal if pattern.pattern_type == PatternType.LITERAL else prefix).add(pattern.name)
    if WILDCARD_RESOURCE in deny_literal:
        return False
    if settings.allow_everyone_if_no_acl_found:
        return True

    def dominated(name: str) -> bool:
        return any(name[:n] in deny_prefix for n in range(len(name) + 1))

    if any(not dominated(p) for p in allow_prefix):
        return True
    return any(lit == WILDCARD_RESOURCE or (lit not in deny_literal and not dominated(lit)) for lit in allow_literal)

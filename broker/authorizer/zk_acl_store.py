"""ACLs in ZooKeeper exactly as Kafka's ZK-mode AclAuthorizer keeps them (kafka.zk.ZkData), so
kafka-acls with --authorizer-properties and any ZooKeeper tool read and write the same data.

- literal patterns: `/kafka-acl/<ResourceType>/<name>`, prefixed ones:
  `/kafka-acl-extended/prefixed/<ResourceType>/<prefix>` (type names in PascalCase: Topic,
  Group, Cluster, TransactionalId, DelegationToken, User);
- each holds `{"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow",
  "operation":"Read","host":"*"}]}`; a resource whose last ACL goes is deleted;
- every change is announced by a sequential `acl_changes_N` znode: under `/kafka-acl-changes`
  for a literal pattern, holding `TOPIC:name` (ResourceType's enum name, a colon, the name), and
  under `/kafka-acl-extended-changes` for a prefixed one, holding
  `{"version":1,"resourceType":"TOPIC","name":"p-","patternType":"PREFIXED"}`.

The codecs are pure; the I/O functions are synchronous kazoo calls through `BoundedCalls`, for a
worker thread (the broker's shell) or a command-line tool.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Iterable, Mapping

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from odradek.common.zk_calls import BoundedCalls

from .acl import (
    CONCRETE_RESOURCE_TYPES,
    AccessControlEntry,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    operation_name,
    parse_operation,
    parse_pattern_type,
    parse_permission_type,
    parse_resource_type,
    permission_type_name,
    principal_error,
    resource_type_name,
)

LITERAL_ACL_PATH = "/kafka-acl"
EXTENDED_ACL_PATH = "/kafka-acl-extended"
PREFIXED_ACL_PATH = f"{EXTENDED_ACL_PATH}/prefixed"
LITERAL_CHANGES_PATH = "/kafka-acl-changes"
EXTENDED_CHANGES_PATH = "/kafka-acl-extended-changes"
CHANGE_PREFIX = "acl_changes_"
CHANGE_PATHS = (LITERAL_CHANGES_PATH, EXTENDED_CHANGES_PATH)
STORE_PATHS = {PatternType.LITERAL: LITERAL_ACL_PATH, PatternType.PREFIXED: PREFIXED_ACL_PATH}

VERSION = 1
UPDATE_RETRIES = 10
"""Compare-and-set rounds on one resource before giving up (AclAuthorizer.maxUpdateRetries)."""
RETRY_BACKOFF_S, RETRY_JITTER_S = 0.1, 0.05


Change = Callable[[frozenset[AccessControlEntry]], frozenset[AccessControlEntry]]
"""A resource's ACLs now → the ACLs it should have."""


class AclStoreError(Exception):
    """ZooKeeper kept changing under an update (more than UPDATE_RETRIES races)."""


# --- codecs (pure) ---------------------------------------------------------------------------------


def resource_path(pattern: ResourcePattern) -> str:
    return f"{STORE_PATHS[pattern.pattern_type]}/{resource_type_name(pattern.resource_type)}/{pattern.name}"


def encode_acls(entries: Iterable[AccessControlEntry]) -> bytes:
    """The resource znode's JSON (AclEntry.toJsonCompatibleMap), entries in a stable order."""
    acls = [{"principal": e.principal, "permissionType": permission_type_name(e.permission_type),
             "operation": operation_name(e.operation), "host": e.host}
            for e in sorted(entries, key=lambda e: (e.principal, e.host, e.operation, e.permission_type))]
    return json.dumps({"version": VERSION, "acls": acls}, separators=(",", ":")).encode()


def decode_acls(data: bytes | None) -> frozenset[AccessControlEntry]:
    """AclEntry.fromBytes: empty data is no ACL; a wrong version or shape raises ValueError."""
    if not data:
        return frozenset()
    try:
        doc = json.loads(data)
        if doc.get("version") != VERSION:
            raise ValueError(f"unsupported ACL version {doc.get('version')!r}")
        out = set()
        for item in doc["acls"]:
            principal, host = str(item["principal"]), str(item["host"])
            op = parse_operation(str(item["operation"]))
            permission = parse_permission_type(str(item["permissionType"]))
            if principal_error(principal) or op in (AclOperation.UNKNOWN, AclOperation.ANY) or \
                    permission not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
                raise ValueError(f"invalid ACL entry {item!r}")
            out.add(AccessControlEntry(principal, host, op, permission))
        return frozenset(out)
    except (KeyError, TypeError, AttributeError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"unreadable ACL znode: {e}") from None


def encode_change(pattern: ResourcePattern) -> tuple[str, bytes]:
    """(folder, data) of the change notification for a resource (the two ZkAclChangeStores)."""
    if pattern.pattern_type == PatternType.LITERAL:
        return LITERAL_CHANGES_PATH, f"{pattern.resource_type.name}:{pattern.name}".encode()
    doc = {"version": VERSION, "resourceType": pattern.resource_type.name, "name": pattern.name,
           "patternType": pattern.pattern_type.name}
    return EXTENDED_CHANGES_PATH, json.dumps(doc, separators=(",", ":")).encode()


def decode_change(folder: str, data: bytes) -> ResourcePattern:
    """The resource a notification names; ValueError when it names none."""
    text = data.decode("utf-8", errors="strict")
    if folder == LITERAL_CHANGES_PATH:
        kind, sep, name = text.partition(":")
        rt = parse_resource_type(kind)
        if not sep or rt not in CONCRETE_RESOURCE_TYPES:
            raise ValueError(f"expected a string in format ResourceType:ResourceName but got {text[:200]}")
        return ResourcePattern(rt, name, PatternType.LITERAL)
    try:
        doc = json.loads(text)
        if int(doc["version"]) > VERSION:
            raise ValueError(f"unsupported ACL change event version {doc['version']}")
        rt, pt = parse_resource_type(str(doc["resourceType"])), parse_pattern_type(str(doc["patternType"]))
        name = str(doc["name"])
    except (KeyError, TypeError, json.JSONDecodeError) as e:
        raise ValueError(f"unreadable ACL change event: {e}") from None
    if rt not in CONCRETE_RESOURCE_TYPES or pt not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise ValueError(f"ACL change event names no resource: {text[:200]}")
    return ResourcePattern(rt, name, pt)


def change_sequence(child: str) -> int | None:
    """N of `acl_changes_N`, None for anything else."""
    if not child.startswith(CHANGE_PREFIX):
        return None
    digits = child[len(CHANGE_PREFIX):]
    return int(digits) if digits.isdigit() else None


# --- I/O (synchronous, bounded) --------------------------------------------------------------------


def ensure_paths(calls: BoundedCalls) -> None:
    """Kafka's createAclPaths: both stores with a folder per resource type, both change folders."""
    for root in STORE_PATHS.values():
        for rt in sorted(CONCRETE_RESOURCE_TYPES):
            calls.ensure_path(f"{root}/{resource_type_name(rt)}")
    for path in CHANGE_PATHS:
        calls.ensure_path(path)


def read_resource(calls: BoundedCalls, pattern: ResourcePattern) -> tuple[frozenset[AccessControlEntry], int]:
    """(ACLs, znode version); (empty, -1) when the znode does not exist."""
    try:
        data, stat = calls.get(resource_path(pattern))
    except NoNodeError:
        return frozenset(), -1
    return decode_acls(data), stat.version


def load_all(calls: BoundedCalls, on_error: Callable[[str, Exception], None] | None = None
             ) -> dict[ResourcePattern, frozenset[AccessControlEntry]]:
    """Every ACL in both stores (AclAuthorizer.loadAllAcls); unreadable znodes and unknown type
    folders are reported to `on_error` and skipped."""
    out: dict[ResourcePattern, frozenset[AccessControlEntry]] = {}
    for pattern_type, root in STORE_PATHS.items():
        try:
            folders = calls.get_children(root)
        except NoNodeError:
            continue
        for folder in folders:
            rt = parse_resource_type(folder)
            if rt not in CONCRETE_RESOURCE_TYPES:
                if on_error is not None:
                    on_error(f"{root}/{folder}", ValueError("unknown resource type"))
                continue
            try:
                names = calls.get_children(f"{root}/{folder}")
            except NoNodeError:
                continue
            pending = [(ResourcePattern(rt, n, pattern_type), calls.zk.get_async(f"{root}/{folder}/{n}"))
                       for n in names]
            for pattern, result in pending:
                try:
                    data, _ = calls.wait(result)
                    acls = decode_acls(data)
                except NoNodeError:
                    continue
                except ValueError as e:
                    if on_error is not None:
                        on_error(resource_path(pattern), e)
                    continue
                if acls:
                    out[pattern] = acls
    return out


def update_resource(calls: BoundedCalls, pattern: ResourcePattern,
                    change: Callable[[frozenset[AccessControlEntry]], frozenset[AccessControlEntry]],
                    retries: int = UPDATE_RETRIES) -> frozenset[AccessControlEntry]:
    """Apply `change` to the resource's ACLs, compare-and-set on the znode version, re-reading and
    retrying when another writer got there first (AclAuthorizer.updateResourceAcls); announce the
    change when something changed. Returns the ACLs now stored."""
    path = resource_path(pattern)
    for attempt in range(retries + 1):
        current, version = read_resource(calls, pattern)
        wanted = change(current)
        if wanted == current:
            return current
        try:
            if not wanted:
                calls.delete(path, version=version)
            elif version < 0:
                calls.create(path, encode_acls(wanted), makepath=True)
            else:
                calls.set(path, encode_acls(wanted), version=version)
        except (BadVersionError, NodeExistsError, NoNodeError):
            if attempt < retries:
                time.sleep(RETRY_BACKOFF_S + random.uniform(0, RETRY_JITTER_S))
            continue
        folder, data = encode_change(pattern)
        calls.create(f"{folder}/{CHANGE_PREFIX}", data, sequence=True, makepath=True)
        return wanted
    raise AclStoreError(f"failed to update ACLs for {resource_type_name(pattern.resource_type)}:"
                        f"{pattern.pattern_type.name}:{pattern.name[:100]} after {retries} retries")


def update_resources(calls: BoundedCalls, changes: Mapping[ResourcePattern, Change]
                     ) -> dict[ResourcePattern, frozenset[AccessControlEntry] | Exception]:
    """`update_resource` for many resources at once (a CreateAcls of thousands of bindings): the
    reads, then the compare-and-set writes, then the notifications are each sent together, so the
    round trips overlap; a resource whose write lost a race goes through `update_resource`."""
    out: dict[ResourcePattern, frozenset[AccessControlEntry] | Exception] = {}
    reads = {p: calls.zk.get_async(resource_path(p)) for p in changes}
    writes = {}
    for pattern, result in reads.items():
        try:
            data, stat = calls.wait(result)
            current, version = decode_acls(data), stat.version
        except NoNodeError:
            current, version = frozenset(), -1
        except Exception as e:
            out[pattern] = e
            continue
        wanted = changes[pattern](current)
        if wanted == current:
            out[pattern] = current
            continue
        path = resource_path(pattern)
        if not wanted:
            writes[pattern] = (wanted, calls.zk.delete_async(path, version=version))
        elif version < 0:
            writes[pattern] = (wanted, calls.zk.create_async(path, encode_acls(wanted), makepath=True))
        else:
            writes[pattern] = (wanted, calls.zk.set_async(path, encode_acls(wanted), version=version))
    notes = []
    for pattern, (wanted, result) in writes.items():
        try:
            calls.wait(result)
        except (BadVersionError, NodeExistsError, NoNodeError):
            try:
                out[pattern] = update_resource(calls, pattern, changes[pattern])
            except Exception as e:
                out[pattern] = e
            continue
        except Exception as e:
            out[pattern] = e
            continue
        folder, data = encode_change(pattern)
        notes.append((pattern, wanted, calls.zk.create_async(f"{folder}/{CHANGE_PREFIX}", data, sequence=True)))
    for pattern, wanted, result in notes:
        try:
            calls.wait(result)
            out[pattern] = wanted
        except Exception as e:  # stored, but the other brokers were not told
            out[pattern] = e
    return out


def changes(calls: BoundedCalls, folder: str, watch: Callable[[object], None] | None = None) -> list[str]:
    try:
        return calls.get_children(folder, watch=watch)
    except NoNodeError:
        calls.ensure_path(folder)
        return calls.get_children(folder, watch=watch)


def read_changes(calls: BoundedCalls, folder: str, names: list[str]) -> dict[str, tuple[bytes, int] | None]:
    """Each notification's data and creation time (ms); None when already gone."""
    pending = [(n, calls.zk.get_async(f"{folder}/{n}")) for n in names]
    out: dict[str, tuple[bytes, int] | None] = {}
    for name, result in pending:
        try:
            data, stat = calls.wait(result)
            out[name] = (data, stat.ctime)
        except NoNodeError:
            out[name] = None
    return out


def delete_changes(calls: BoundedCalls, folder: str, names: list[str]) -> None:
    pending = [calls.zk.delete_async(f"{folder}/{n}") for n in names]
    for result in pending:
        try:
            calls.wait(result)
        except NoNodeError:
            pass

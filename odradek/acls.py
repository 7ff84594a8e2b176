"""`odradek acls`: add, remove and list ACLs through the admin API (Kafka's kafka-acls.sh).

    odradek acls --bootstrap-server H:P [--command-config client.properties] --add \\
        --allow-principal User:alice [--allow-host 10.0.0.1] --operation Read --operation Describe \\
        --topic orders [--resource-pattern-type prefixed]
    odradek acls --bootstrap-server H:P --add --allow-principal User:alice --consumer --topic orders --group app
    odradek acls --bootstrap-server H:P --add --allow-principal User:bob --producer --topic orders [--idempotent]
    odradek acls --bootstrap-server H:P --remove --deny-principal User:eve --operation All --cluster
    odradek acls --bootstrap-server H:P --list [--topic orders] [--principal User:alice]

kafka-acls' conventions: resources from --topic, --group, --cluster, --transactional-id (each may
repeat); --resource-pattern-type literal (default) or prefixed, and also match or any for
--list/--remove; --operation defaults to All; hosts default to `*`; --remove with no principal
removes every ACL of the named resources. --command-config is a client properties file
(security.protocol, sasl.mechanism, sasl.jaas.config or sasl.username/sasl.password, ssl.*),
handed to confluent-kafka's AdminClient. The planning (arguments → bindings or filters) is pure;
only `run` talks to the cluster. Exit status 1 when the cluster refuses anything.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from typing import Any, TextIO

from odradek.broker.authorizer.acl import (
    CLUSTER_NAME,
    WILDCARD_HOST,
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
    operation_name,
    parse_operation,
    permission_type_name,
    principal_error,
    resource_type_name,
)

TIMEOUT_S = 30.0


class UsageError(ValueError):
    pass


@dataclass(frozen=True)
class Plan:
    action: str  # "add", "remove" or "list"
    bindings: tuple[AclBinding, ...] = ()
    filters: tuple[AclBindingFilter, ...] = ()


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="odradek acls", description="Manage ACLs (kafka-acls.sh conventions).")
    p.add_argument("--bootstrap-server", required=True, help="host:port[,host:port]")
    p.add_argument("--command-config", help="client properties file (security settings)")
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--add", action="store_true")
    action.add_argument("--remove", action="store_true")
    action.add_argument("--list", action="store_true")
    p.add_argument("--allow-principal", action="append", default=[])
    p.add_argument("--deny-principal", action="append", default=[])
    p.add_argument("--allow-host", action="append", default=[])
    p.add_argument("--deny-host", action="append", default=[])
    p.add_argument("--principal", action="append", default=[], help="--list: only these principals' ACLs")
    p.add_argument("--operation", action="append", default=[])
    p.add_argument("--topic", action="append", default=[])
    p.add_argument("--group", action="append", default=[])
    p.add_argument("--transactional-id", action="append", default=[])
    p.add_argument("--cluster", action="store_true")
    p.add_argument("--resource-pattern-type", default="literal",
                   choices=["literal", "prefixed", "match", "any", "LITERAL", "PREFIXED", "MATCH", "ANY"])
    p.add_argument("--producer", action="store_true", help="WRITE, DESCRIBE, CREATE on the topics")
    p.add_argument("--consumer", action="store_true", help="READ, DESCRIBE on the topics, READ on the groups")
    p.add_argument("--idempotent", action="store_true", help="with --producer: IDEMPOTENT_WRITE on the cluster")
    p.add_argument("--force", action="store_true", help="accepted for kafka-acls compatibility (never asks)")
    p.add_argument("--timeout", type=float, default=TIMEOUT_S)
    return p.parse_args(argv)


def _resources(args: argparse.Namespace, pattern: PatternType) -> list[tuple[ResourceType, str]]:
    out = [(ResourceType.TOPIC, t) for t in args.topic]
    out += [(ResourceType.GROUP, g) for g in args.group]
    out += [(ResourceType.TRANSACTIONAL_ID, x) for x in args.transactional_id]
    if args.cluster:
        out.append((ResourceType.CLUSTER, CLUSTER_NAME))
    return out


def _operations(args: argparse.Namespace) -> list[AclOperation]:
    ops = [parse_operation(o) for o in args.operation] or [AclOperation.ALL]
    for text, op in zip(args.operation, ops):
        if op in (AclOperation.UNKNOWN, AclOperation.ANY):
            raise UsageError(f"unknown operation {text!r}")
    return ops


def _entries(args: argparse.Namespace, ops: list[AclOperation]) -> list[AccessControlEntry]:
    out = []
    for permission, principals, hosts in ((AclPermissionType.ALLOW, args.allow_principal, args.allow_host),
                                          (AclPermissionType.DENY, args.deny_principal, args.deny_host)):
        for principal in principals:
            why = principal_error(principal)
            if why is not None:
                raise UsageError(why)
            for host in hosts or [WILDCARD_HOST]:
                out += [AccessControlEntry(principal, host, op, permission) for op in ops]
    return out


def _convenience(args: argparse.Namespace, pattern: PatternType) -> list[tuple[ResourcePattern, AclOperation]]:
    """kafka-acls' --producer and --consumer: the operations each role needs, per resource."""
    out: list[tuple[ResourcePattern, AclOperation]] = []
    topics = [ResourcePattern(ResourceType.TOPIC, t, pattern) for t in args.topic]
    if args.producer:
        if not topics:
            raise UsageError("--producer needs --topic")
        out += [(t, op) for t in topics for op in (AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.CREATE)]
        out += [(ResourcePattern(ResourceType.TRANSACTIONAL_ID, x, pattern), op)
                for x in args.transactional_id for op in (AclOperation.WRITE, AclOperation.DESCRIBE)]
        if args.idempotent:
            out.append((ResourcePattern(ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL),
                        AclOperation.IDEMPOTENT_WRITE))
    if args.consumer:
        if not topics or not args.group:
            raise UsageError("--consumer needs --topic and --group")
        out += [(t, op) for t in topics for op in (AclOperation.READ, AclOperation.DESCRIBE)]
        out += [(ResourcePattern(ResourceType.GROUP, g, pattern), AclOperation.READ) for g in args.group]
    return out


def plan(args: argparse.Namespace) -> Plan:
    """What the arguments ask for, checked as the broker would check it."""
    pattern = PatternType[args.resource_pattern_type.upper()]
    if args.list:
        named = _resources(args, pattern)
        principals = args.principal or [None]
        patterns = ([ResourcePatternFilter(rt, name, pattern) for rt, name in named]
                    or [ResourcePatternFilter(ResourceType.ANY, None, PatternType.ANY)])
        return Plan("list", filters=tuple(
            AclBindingFilter(pf, AccessControlEntryFilter(pr, None, AclOperation.ANY, AclPermissionType.ANY))
            for pf in patterns for pr in principals))
    if args.add and pattern not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise UsageError("--add takes --resource-pattern-type literal or prefixed")
    if args.producer or args.consumer:
        if args.remove:
            raise UsageError("--producer/--consumer go with --add")
        principals = [(AclPermissionType.ALLOW, p) for p in args.allow_principal]
        principals += [(AclPermissionType.DENY, p) for p in args.deny_principal]
        if not principals:
            raise UsageError("--add needs --allow-principal or --deny-principal")
        bindings = [AclBinding(res, AccessControlEntry(pr, WILDCARD_HOST, op, perm))
                    for res, op in _convenience(args, pattern) for perm, pr in principals]
    else:
        resources = _resources(args, pattern)
        if not resources:
            raise UsageError("name a resource: --topic, --group, --transactional-id or --cluster")
        ops = _operations(args)
        entries = _entries(args, ops)
        if args.remove:
            if not entries:  # kafka-acls: every ACL of these resources
                return Plan("remove", filters=tuple(
                    AclBindingFilter(ResourcePatternFilter(rt, name, pattern),
                                     AccessControlEntryFilter(None, None, AclOperation.ANY, AclPermissionType.ANY))
                    for rt, name in resources))
            return Plan("remove", filters=tuple(
                AclBindingFilter(ResourcePatternFilter(rt, name, pattern),
                                 AccessControlEntryFilter(e.principal, e.host, e.operation, e.permission_type))
                for rt, name in resources for e in entries))
        if not entries:
            raise UsageError("--add needs --allow-principal or --deny-principal")
        bindings = [AclBinding(ResourcePattern(rt, name, pattern), e) for rt, name in resources for e in entries]
    for b in bindings:
        why = binding_error(b)
        if why is not None:
            raise UsageError(why)
    return Plan("add", bindings=tuple(dict.fromkeys(bindings)))


def describe(binding: AclBinding) -> str:
    """One line as kafka-acls prints an ACL."""
    p, e = binding.pattern, binding.entry
    return (f"{resource_type_name(p.resource_type)}:{p.pattern_type.name}:{p.name}\t(principal={e.principal}, "
            f"host={e.host}, operation={operation_name(e.operation).upper()}, "
            f"permissionType={permission_type_name(e.permission_type).upper()})")


def load_client_config(path: str | None) -> dict[str, str]:
    """A Java-style client properties file as librdkafka settings: sasl.jaas.config becomes
    sasl.username/sasl.password; keys librdkafka does not know are left out."""
    if path is None:
        return {}
    from odradek.common.config import load_properties
    from odradek.common.security import jaas

    props = load_properties(path, [])
    out = {k: v for k, v in props.items() if k.startswith(("security.", "sasl.", "ssl.", "client."))}
    text = out.pop("sasl.jaas.config", None)
    if text:
        parsed = jaas.parse(text)
        out.setdefault("sasl.username", parsed.options.get("username", ""))
        out.setdefault("sasl.password", parsed.options.get("password", ""))
    renamed = {"ssl.truststore.location": "ssl.ca.location", "ssl.endpoint.identification.algorithm":
               "ssl.endpoint.identification.algorithm"}
    return {renamed.get(k, k): v for k, v in out.items() if k not in ("ssl.truststore.password", "ssl.truststore.type")}


# --- the I/O shell (confluent-kafka's AdminClient) -------------------------------------------------


def _ck_binding(b: AclBinding) -> Any:
    from confluent_kafka import admin as ck

    return ck.AclBinding(ck.ResourceType[b.pattern.resource_type.name], b.pattern.name,
                         ck.ResourcePatternType[b.pattern.pattern_type.name], b.entry.principal, b.entry.host,
                         ck.AclOperation[b.entry.operation.name], ck.AclPermissionType[b.entry.permission_type.name])


def _ck_filter(f: AclBindingFilter) -> Any:
    from confluent_kafka import admin

    ck: Any = admin  # its stubs want names where a filter may leave them out (None)

    return ck.AclBindingFilter(ck.ResourceType[f.pattern.resource_type.name], f.pattern.name,
                               ck.ResourcePatternType[f.pattern.pattern_type.name], f.entry.principal, f.entry.host,
                               ck.AclOperation[f.entry.operation.name],
                               ck.AclPermissionType[f.entry.permission_type.name])


def _from_ck(b: Any) -> AclBinding:
    return AclBinding(ResourcePattern(ResourceType[b.restype.name], b.name, PatternType[b.resource_pattern_type.name]),
                      AccessControlEntry(b.principal, b.host, AclOperation[b.operation.name],
                                         AclPermissionType[b.permission_type.name]))


def run(the_plan: Plan, bootstrap: str, client_config: dict[str, str], timeout_s: float,
        out: TextIO = sys.stdout) -> int:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, **client_config})
    failed = 0
    try:
        if the_plan.action == "add":
            futures = admin.create_acls([_ck_binding(b) for b in the_plan.bindings], request_timeout=timeout_s)
            for binding, future in zip(the_plan.bindings, futures.values()):
                try:
                    future.result(timeout_s + 5)
                    print(f"Added ACL {describe(binding)}", file=out)
                except KafkaException as e:
                    failed += 1
                    print(f"Error adding ACL {describe(binding)}: {e.args[0].name()} ({e.args[0].str()})", file=out)
        elif the_plan.action == "remove":
            deleting = admin.delete_acls([_ck_filter(f) for f in the_plan.filters], request_timeout=timeout_s)
            for future in deleting.values():
                try:
                    for b in future.result(timeout_s + 5):
                        print(f"Removed ACL {describe(_from_ck(b))}", file=out)
                except KafkaException as e:
                    failed += 1
                    print(f"Error removing ACLs: {e.args[0].name()} ({e.args[0].str()})", file=out)
        else:
            for f in the_plan.filters:
                try:
                    found = admin.describe_acls(_ck_filter(f), request_timeout=timeout_s).result(timeout_s + 5)
                except KafkaException as e:
                    failed += 1
                    print(f"Error listing ACLs: {e.args[0].name()} ({e.args[0].str()})", file=out)
                    continue
                for b in sorted((_from_ck(b) for b in found), key=describe):
                    print(describe(b), file=out)
    finally:
        del admin
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        the_plan = plan(args)
        client_config = load_client_config(args.command_config)
    except (UsageError, OSError, ValueError) as e:
        print(f"odradek acls: {e}", file=sys.stderr)
        return 2
    return run(the_plan, args.bootstrap_server, client_config, args.timeout)


if __name__ == "__main__":
    sys.exit(main())

"""`odradek quotas`: describe and alter client quotas through the admin API (kafka-configs.sh's
quota options: DescribeClientQuotas / AlterClientQuotas, KIP-546).

    odradek quotas --bootstrap-server H:P [--command-config client.properties] --alter \\
        --add-config 'producer_byte_rate=1048576,consumer_byte_rate=2097152' --entity-type users --entity-name alice
    odradek quotas --bootstrap-server H:P --alter --delete-config producer_byte_rate --user alice --client app
    odradek quotas --bootstrap-server H:P --alter --add-config consumer_byte_rate=1024 --client-defaults
    odradek quotas --bootstrap-server H:P --describe [--entity-type users [--entity-name alice | --entity-default]]

An entity is one or two (type, name) pairs: `--entity-type users|clients|ips` followed by
`--entity-name N` or `--entity-default`, or the shorthands `--user N`, `--client N`,
`--user-defaults`, `--client-defaults`, `--ip N`, `--ip-defaults`. Exit status 1 when the broker
refuses something (its error and message are printed).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from typing import Any

from odradek.common import wire
from odradek.common.api_key import ApiKey
from odradek.common.config_def import ConfigException
from odradek.common.network.bootstrap import (
    AdminConnections,
    ToolError,
    add_command_config,
    command_security,
    parse_bootstrap,
)

ENTITY_TYPES = {"users": "user", "clients": "client-id", "ips": "ip"}
LABELS = {"user": "user-principal", "client-id": "client-id", "ip": "ip"}


class _EntityAction(argparse.Action):
    """Builds `entities` ([type, name or None]) in command-line order."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        entities: list[list[Any]] = getattr(namespace, "entities", None) or []
        namespace.entities = entities
        opt = option_string or ""
        if opt == "--entity-type":
            if values not in ENTITY_TYPES:
                raise argparse.ArgumentError(self, f"one of {', '.join(ENTITY_TYPES)}")
            entities.append([ENTITY_TYPES[values], ...])
        elif opt in ("--entity-name", "--entity-default"):
            if not entities or entities[-1][1] is not ...:
                raise argparse.ArgumentError(self, "follows an --entity-type")
            entities[-1][1] = values if opt == "--entity-name" else None
        else:
            kind = {"--user": "user", "--client": "client-id", "--ip": "ip"}[opt.removesuffix("-defaults")]
            entities.append([kind, None if opt.endswith("-defaults") else values])


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="odradek quotas", description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--bootstrap-server", required=True)
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--alter", action="store_true")
    action.add_argument("--describe", action="store_true")
    p.add_argument("--add-config", default="", help="k=v[,k=v...]")
    p.add_argument("--delete-config", default="", help="k[,k...]")
    p.add_argument("--validate-only", action="store_true", help="--alter: check, store nothing")
    p.add_argument("--entity-type", action=_EntityAction)
    p.add_argument("--entity-name", action=_EntityAction)
    p.add_argument("--entity-default", action=_EntityAction, nargs=0)
    for name in ("user", "client", "ip"):
        p.add_argument(f"--{name}", action=_EntityAction)
        p.add_argument(f"--{name}-defaults", action=_EntityAction, nargs=0)
    p.add_argument("--timeout", type=float, default=15.0, help="seconds per request")
    add_command_config(p)
    args = p.parse_args(list(argv))
    args.entities = getattr(args, "entities", None) or []
    return args


def parse_ops(add: str, delete: str) -> list[tuple[str, float, bool]]:
    ops: list[tuple[str, float, bool]] = []
    for item in filter(None, (x.strip() for x in add.split(","))):
        key, sep, value = item.partition("=")
        if not sep:
            raise ToolError(f"--add-config {item!r}: expected key=value")
        try:
            ops.append((key.strip(), float(value), False))
        except ValueError:
            raise ToolError(f"--add-config {key}: {value!r} is not a number") from None
    ops += [(key, 0.0, True) for key in filter(None, (x.strip() for x in delete.split(",")))]
    return ops


def alter_request(entities: list[list[Any]], ops: list[tuple[str, float, bool]], validate_only: bool) -> Any:
    if not entities or any(name is ... for _, name in entities):
        raise ToolError("--alter needs an entity: --entity-type T with --entity-name N or --entity-default")
    if not ops:
        raise ToolError("--alter needs --add-config or --delete-config")
    schema = wire.request_schema(ApiKey.ALTER_CLIENT_QUOTAS, 1)
    mod = sys.modules[schema.__module__]
    return schema(validate_only=validate_only, entries=(mod.EntryData(
        entity=tuple(mod.EntityData(entity_type=t, entity_name=n) for t, n in entities),
        ops=tuple(mod.OpData(key=k, value=v, remove=r) for k, v, r in ops)),))


def describe_request(entities: list[list[Any]]) -> Any:
    schema = wire.request_schema(ApiKey.DESCRIBE_CLIENT_QUOTAS, 1)
    mod = sys.modules[schema.__module__]
    components = tuple(mod.ComponentData(entity_type=t, match_type=2 if n is ... else (1 if n is None else 0),
                                         match=n if isinstance(n, str) else None) for t, n in entities)
    return schema(components=components, strict=bool(components))


def entity_text(entity: Sequence[tuple[str, str | None]]) -> str:
    return ", ".join(f"{LABELS.get(t, t)} " + ("the default" if n is None else f"'{n}'") for t, n in entity)


async def run(args: argparse.Namespace) -> tuple[int, list[str]]:
    if args.alter:
        request = alter_request(args.entities, parse_ops(args.add_config, args.delete_config), args.validate_only)
    else:
        request = describe_request(args.entities)
    tool = AdminConnections(parse_bootstrap(args.bootstrap_server), args.timeout, "odradek-quotas",
                            command_security(args.command_config), software_name="odradek-quotas")
    try:
        response = await tool.send_any(request)
    finally:
        await tool.close()
    if args.alter:
        lines, status = [], 0
        for e in response.entries:
            entity = entity_text([(x.entity_type, x.entity_name) for x in e.entity])
            if int(e.error_code):
                status = 1
                lines.append(f"error: {entity}: {e.error_code.name.upper()}: {e.error_message}")
            else:
                lines.append(f"{'Validated' if args.validate_only else 'Completed'} updating quota configs for "
                             f"{entity}.")
        return status, lines
    if int(response.error_code):
        return 1, [f"error: {response.error_code.name.upper()}: {response.error_message}"]
    return 0, [f"Quota configs for {entity_text([(x.entity_type, x.entity_name) for x in e.entity])} are "
               + ", ".join(f"{v.key}={float(v.value)}" for v in e.values) for e in response.entries or ()]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        status, lines = asyncio.run(run(args))
    except (ToolError, ConfigException, ConnectionError, TimeoutError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    for line in lines:
        print(line, file=sys.stderr if line.startswith("error:") else sys.stdout)
    return status

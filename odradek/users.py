"""`odradek users`: SCRAM credentials straight in ZooKeeper, before any broker runs (kafka-configs --zookeeper).

    odradek users --zookeeper H:P/chroot --entity-name alice --add-scram 'SCRAM-SHA-512=[iterations=8192,password=...]'
    odradek users --zookeeper H:P/chroot --entity-name alice --add-scram SCRAM-SHA-512 --password-file FILE
    odradek users --zookeeper H:P/chroot --entity-name alice --delete-scram SCRAM-SHA-512
    odradek users --zookeeper H:P/chroot [--entity-name alice] --describe

`--password-file -` reads the password from stdin (first line), so it need not be on the command
line. The credential is written as Kafka writes it (`/config/users/<user>`, ScramCredentialUtils'
string) with a `/config/changes` notification in the same transaction, so running brokers apply
it within seconds. With `--zk-tls-config-file FILE` (Kafka's option; any of the brokers'
`zookeeper.*` client keys) the tool connects over TLS and/or with the cluster's digest identity,
and the znodes it creates get the cluster's ACLs. Once brokers run, AlterUserScramCredentials
(any Kafka admin client) does the same.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from typing import TypedDict

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from odradek.broker.security.credential_cache import (
    decode_user_config,
    scram_credentials,
    user_entity_path,
    user_path,
)
from odradek.common import zk_data, zk_security
from odradek.common.config_def import ConfigException
from odradek.common.network.bootstrap import ToolError
from odradek.common.security import scram
from odradek.common.zk_connect import close_client, ensure_chroot, new_client, start_client
from odradek.common.zk_security import NO_SECURITY, ZkSecurity

DEFAULT_ITERATIONS = scram.MIN_ITERATIONS
_ITEM = re.compile(r"\s*(SCRAM-SHA-(?:256|512))\s*(?:=\s*\[([^\]]*)\])?\s*(?:,|$)", re.IGNORECASE)


def parse_add_scram(value: str) -> list[tuple[str, int, str | None]]:
    """kafka-configs' `SCRAM-SHA-256=[iterations=8192,password=alice-secret],SCRAM-SHA-512=[password=...]`
    → [(mechanism, iterations, password or None)]. A password with `,` or `]` must come from a file."""
    out, pos = [], 0
    while pos < len(value):
        m = _ITEM.match(value, pos)
        if m is None or m.end() == pos:
            raise ToolError("--add-scram wants MECHANISM=[iterations=N,password=P],... (SCRAM-SHA-256, SCRAM-SHA-512)")
        pos = m.end()
        mechanism, body = m.group(1).upper(), m.group(2)
        iterations, password = DEFAULT_ITERATIONS, None
        for item in filter(None, (body or "").split(",")):
            key, sep, val = item.partition("=")
            key = key.strip()
            if key == "iterations" and val.strip().isdigit():
                iterations = int(val.strip())
            elif key == "password" and sep:
                password = val
            else:
                raise ToolError(f"--add-scram: unknown or malformed setting {key!r} for {mechanism}")
        if not scram.MIN_ITERATIONS <= iterations <= scram.MAX_ITERATIONS:
            raise ToolError(f"--add-scram: iterations must be between {scram.MIN_ITERATIONS} and "
                            f"{scram.MAX_ITERATIONS} (Kafka's bounds), not {iterations}")
        out.append((mechanism, iterations, password))
    return out


def read_password(path: str) -> str:
    text = sys.stdin.readline() if path == "-" else open(path, encoding="utf-8").readline()
    password = text.rstrip("\r\n")
    if not password:
        raise ToolError("the password file is empty")
    return password


def _user_config(zk: KazooClient, user: str) -> tuple[dict[str, str], int]:
    try:
        data, stat = zk.get(user_path(user))
    except NoNodeError:
        return {}, -1
    return decode_user_config(data), stat.version


def write_user(zk: KazooClient, user: str, change: Callable[[dict[str, str]], None]) -> None:
    """Read-modify-write `/config/users/<user>` and announce it, compare-and-set, in one transaction."""
    for _ in range(5):
        config, version = _user_config(zk, user)
        change(config)
        zk.ensure_path(zk_data.CONFIG_CHANGES)
        zk.ensure_path("/config/users")
        t = zk.transaction()
        data = zk_data.encode_entity_config(config)
        if version < 0:
            t.create(user_path(user), data)
        else:
            t.set_data(user_path(user), data, version=version)
        t.create(f"{zk_data.CONFIG_CHANGES}/{zk_data.CONFIG_CHANGE_PREFIX}",
                 zk_data.encode_config_change(user_entity_path(user)), sequence=True)
        results = t.commit()
        if not any(isinstance(r, (BadVersionError, NodeExistsError)) for r in results):
            failure = next((r for r in results if isinstance(r, Exception)), None)
            if failure is not None:
                raise ToolError(f"writing the credentials of {user!r} failed: {type(failure).__name__}")
            return
    raise ToolError(f"the configuration of {user!r} kept changing; try again")


class CredentialEntry(TypedDict):
    mechanism: str
    iterations: int


class UserEntry(TypedDict):
    """One user of `--describe` (`--json` prints it as is)."""

    user: str
    credentials: list[CredentialEntry]


def describe(zk: KazooClient, users: list[str] | None) -> list[UserEntry]:
    if users is None:
        try:
            users = sorted(scram.desanitize(n) for n in zk.get_children("/config/users"))
        except NoNodeError:
            users = []
    out: list[UserEntry] = []
    for user in users:
        creds = scram_credentials(user, _user_config(zk, user)[0])
        if creds:
            out.append({"user": user, "credentials": [{"mechanism": m, "iterations": c.iterations}
                                                        for m, c in sorted(creds.items())]})
    return out


def changes(adds: list[tuple[str, int, str]], deletes: list[str]) -> Callable[[dict[str, str]], None]:
    """The edit of a user's config: `deletes` removed, `adds` (mechanism, iterations, password) set."""
    def change(config: dict[str, str]) -> None:
        for mechanism in deletes:
            config.pop(mechanism, None)
        for mechanism, iterations, password in adds:
            credential = scram.MECHANISMS[mechanism].credential_from_password(password, iterations)
            config[mechanism] = scram.credential_to_string(credential)
    return change


def bootstrap_user(zookeeper_connect: str, user: str, password: str, mechanisms: tuple[str, ...] = ("SCRAM-SHA-512",),
                   iterations: int = DEFAULT_ITERATIONS, timeout: float = 15.0,
                   security: ZkSecurity = NO_SECURITY) -> None:
    """Create or replace a user's SCRAM credentials before (or while) brokers run (`odradek dev --security`)."""
    ensure_chroot(zookeeper_connect, timeout, security=security)
    zk = new_client(zookeeper_connect, timeout, security)
    start_client(zk, timeout)
    try:
        write_user(zk, user, changes([(m, iterations, password) for m in mechanisms], []))
    finally:
        close_client(zk)


def run(args: argparse.Namespace) -> int:

    adds = parse_add_scram(args.add_scram) if args.add_scram else []
    if any(p is None for _, _, p in adds):
        if not args.password_file:
            raise ToolError("--add-scram without password=... needs --password-file (or --password-file - for stdin)")
        password = read_password(args.password_file)
        adds = [(m, i, p if p is not None else password) for m, i, p in adds]
    complete = [(m, i, p) for m, i, p in adds if p is not None]
    deletes = [m.strip().upper() for m in (args.delete_scram or "").split(",") if m.strip()]
    if any(m not in scram.MECHANISMS for m in deletes):
        raise ToolError(f"--delete-scram takes {', '.join(scram.MECHANISMS)}")
    if (adds or deletes) and not args.entity_name:
        raise ToolError("--add-scram and --delete-scram need --entity-name")
    if not (adds or deletes or args.describe):
        raise ToolError("say what to do: --add-scram, --delete-scram or --describe")
    security = zk_security.from_properties_file(args.zk_tls_config_file) if args.zk_tls_config_file else NO_SECURITY
    ensure_chroot(args.zookeeper, args.timeout, security=security)
    zk = new_client(args.zookeeper, args.timeout, security)
    start_client(zk, args.timeout)
    try:
        if adds or deletes:
            write_user(zk, args.entity_name, changes(complete, deletes))
            done = [f"{m} (iterations {i}) added" for m, i, _ in adds] + [f"{m} deleted" for m in deletes]
            print(f"Completed updating config for user {args.entity_name}: {', '.join(done)}.")
        if args.describe:
            for entry in describe(zk, [args.entity_name] if args.entity_name else None):
                creds = ",".join(f"{c['mechanism']}=iterations={c['iterations']}" for c in entry["credentials"])
                print(json.dumps(entry) if args.json else f"SCRAM credential configs for user-principal "
                      f"'{entry['user']}' are {creds}")
    finally:
        close_client(zk)
    return 0


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="odradek users", description="SCRAM credentials in ZooKeeper (kafka-configs).")
    p.add_argument("--zookeeper", required=True, help="host:port[/chroot] (the brokers' zookeeper.connect)")
    p.add_argument("--entity-name", help="the user")
    p.add_argument("--entity-type", default="users", choices=["users"], help="only users (kafka-configs' spelling)")
    p.add_argument("--alter", action="store_true", help="accepted for kafka-configs' spelling")
    p.add_argument("--add-scram", help="MECHANISM=[iterations=N,password=P],...")
    p.add_argument("--delete-scram", help="MECHANISM[,MECHANISM]")
    p.add_argument("--password-file", help="read the password from this file's first line ('-': stdin)")
    p.add_argument("--describe", action="store_true", help="list users' SCRAM mechanisms and iterations")
    p.add_argument("--json", action="store_true", help="--describe as JSON lines")
    p.add_argument("--zk-tls-config-file", "--zk-config-file", metavar="FILE",
                   help="ZooKeeper client properties as the brokers have them: zookeeper.set.acl, "
                        "java.security.auth.login.config (digest identity), zookeeper.ssl.*")
    p.add_argument("--timeout", type=float, default=15.0, help="seconds to wait for ZooKeeper")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        return run(args)
    except (ToolError, OSError, TimeoutError, ConfigException) as e:
        print(f"odradek users: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())

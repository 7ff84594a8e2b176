"""The I/O shell of ZooKeeper scaling (decisions in zookeeper_reconfig): what the managed
ensemble says about itself, its super user's Secret, and one `reconfig` at a time.

Observing opens no session: the `srvr` four-letter word to every member says which ones serve
(and which leads), `conf` to the leader gives the committed member list; only a reconfiguration
opens a kazoo session, as ZooKeeper's super user (digest auth; the password is read from the
admin Secret for that call and is in no log line, status or event).
"""

from __future__ import annotations

import asyncio
import base64
import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kazoo.exceptions import KazooException

from odradek.common.zk_connect import close_client, new_client, start_client
from odradek.common.zk_security import ZkSecurity
from odradek.operator import builders
from odradek.operator.apply import apply
from odradek.operator.kube import KubeClient
from odradek.operator.zookeeper_reconfig import SUPER_USER, Member, Step, parse_conf, super_digest

log = logging.getLogger(__name__)

MemberSource = Callable[[dict[str, Any], int], dict[int, Member]]
"""(KafkaCluster, count) → members 1..count as the operator reaches them (builders.zookeeper_members;
tests map them to local ports)."""

FOUR_LETTER_TIMEOUT_S = 2.0
RECONFIG_TIMEOUT_S = 30.0


async def four_letter(host: str, port: int, word: bytes, timeout: float = FOUR_LETTER_TIMEOUT_S) -> bytes:
    """A four-letter word's whole answer (the server closes the connection after it)."""
    async def ask() -> bytes:
        reader, writer = await asyncio.open_connection(host, port)
        try:
            writer.write(word)
            await writer.drain()
            return await reader.read(65536 * 4)
        finally:
            writer.close()
    return await asyncio.wait_for(ask(), timeout)


def client_address(m: Member) -> tuple[str, int]:
    return (m.host if m.client_host in ("0.0.0.0", "") else m.client_host), m.client_port


async def mode(m: Member) -> str | None:
    """What `srvr` names as the member's mode (leader, follower, observer); None: not serving."""
    try:
        out = await four_letter(*client_address(m), b"srvr")
    except (OSError, TimeoutError):
        return None
    for line in out.decode(errors="replace").splitlines():
        if line.startswith("Mode: "):
            return line.removeprefix("Mode: ").strip()
    return None


@dataclass(frozen=True)
class Observed:
    members: dict[int, str] | None
    """The leader's committed member list (`conf`); None without a serving leader."""
    serving: frozenset[int]


async def observe(members: dict[int, Member]) -> Observed:
    modes = dict(zip(members, await asyncio.gather(*(mode(m) for m in members.values())), strict=True))
    serving = frozenset(i for i, found in modes.items() if found is not None)
    leader = next((i for i, found in modes.items() if found == "leader"), None)
    config = None
    if leader is not None:
        try:
            config = parse_conf(await four_letter(*client_address(members[leader]), b"conf"))
        except (OSError, TimeoutError):
            config = None
    return Observed(config, serving)


async def admin_password(client: KubeClient, body: dict[str, Any]) -> str:
    """The super user's password from `<cluster>-zookeeper-admin`, creating the Secret (a random
    password and its digest, which the pods read) when it is missing."""
    meta = body["metadata"]
    name = builders.names(meta["name"])["zookeeper_admin"]
    found = await client.get("Secret", meta["namespace"], name)
    data = (found or {}).get("data") or {}
    if "password" in data and "digest" in data:
        return base64.b64decode(data["password"]).decode()
    password = secrets.token_urlsafe(32)
    secret = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
              "metadata": builders.object_meta(body, name, "zookeeper"),
              "data": {k: base64.b64encode(v.encode()).decode()
                       for k, v in (("digest", super_digest(password)), ("password", password))}}
    await apply(client, secret)
    log.info("Secret %s/%s created: ZooKeeper's super user for reconfig", meta["namespace"], name)
    return password


def _reconfig(connect: str, password: str, step: Step, joining: str | None) -> None:
    zk = new_client(connect, 10.0, ZkSecurity(digest=(SUPER_USER, password)))
    try:
        start_client(zk, RECONFIG_TIMEOUT_S)
        # returns once the new configuration committed (a quorum of the old and the new one)
        zk.reconfig(joining=joining, leaving=None if step.remove is None else str(step.remove), new_members=None)
    finally:
        close_client(zk)


async def reconfig(members: dict[int, Member], serving: frozenset[int], password: str, step: Step) -> str | None:
    """Run one `reconfig` through the serving members; why it failed, if it did (the next pass
    observes again and decides afresh)."""
    connect = ",".join("{}:{}".format(*client_address(members[i])) for i in sorted(serving) if i in members)
    joining = None if step.add is None else members[step.add].line()
    try:
        await asyncio.to_thread(_reconfig, connect, password, step, joining)
    except (KazooException, TimeoutError, OSError) as e:
        return f"reconfig {step}: {type(e).__name__}: {e}"
    return None

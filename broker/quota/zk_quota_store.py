"""Quota config znodes in Kafka's layout (AdminZkClient's fetchEntityConfig / changeConfigs for
users, clients and ips), read and written from a thread through kazoo.

Writes are compare-and-set on the znode version, in one transaction with the
`/config/changes/config_change_N` notification (broker.zk_client.change_entity_config): a user's
znode is shared with its SCRAM credentials, so a quota change re-reads the whole map, changes only
quota keys and loses nothing written meanwhile by AlterUserScramCredentials (which does the same).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from odradek.broker.zk_client import ConfigChangedError
from odradek.common import zk_data

from .quota_entity import QuotaEntity, apply_ops

log = logging.getLogger(__name__)

WRITE_ATTEMPTS = 5


@dataclass
class QuotaConfigs:
    """Every quota-bearing config map, keyed by znode name (sanitized, `<default>`)."""

    users: dict[str, dict[str, str]] = field(default_factory=dict)
    user_clients: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)
    clients: dict[str, dict[str, str]] = field(default_factory=dict)
    ips: dict[str, dict[str, str]] = field(default_factory=dict)


def _decode(path: str, data: bytes) -> dict[str, str]:
    try:
        return zk_data.decode_entity_config(data)
    except (ValueError, TypeError, AttributeError):
        log.warning("ignoring unreadable %s", path)  # a user's znode holds SCRAM material: no data logged
        return {}


def read_entities_blocking(calls: Any, entity_paths: Iterable[str]) -> dict[str, tuple[dict[str, str], int] | None]:
    """entity path → (config, znode version), None when there is no znode (in a thread)."""
    from kazoo.exceptions import NoNodeError

    pending = [(p, calls.zk.get_async(zk_data.entity_config_path(p))) for p in entity_paths]
    out: dict[str, tuple[dict[str, str], int] | None] = {}
    for path, result in pending:
        try:
            data, stat = calls.wait(result)
        except NoNodeError:
            out[path] = None
            continue
        out[path] = (_decode(path, data), stat.version)
    return out


def _children(calls: Any, path: str) -> list[str]:
    from kazoo.exceptions import NoNodeError

    try:
        return list(calls.get_children(path))
    except NoNodeError:
        return []


def read_all_blocking(calls: Any) -> QuotaConfigs:
    """Every user, user/client-id, client-id and ip config (fetchAllEntityConfigs), in a thread."""
    users = _children(calls, "/config/users")
    paths = [f"users/{u}" for u in users]
    pairs: list[tuple[str, str]] = []
    for u in users:
        pairs += [(u, c) for c in _children(calls, f"/config/users/{u}/clients")]
    paths += [f"users/{u}/clients/{c}" for u, c in pairs]
    clients = _children(calls, "/config/clients")
    ips = _children(calls, "/config/ips")
    paths += [f"clients/{c}" for c in clients] + [f"ips/{i}" for i in ips]
    read = read_entities_blocking(calls, paths)

    def config(path: str) -> dict[str, str]:
        got = read.get(path)
        return got[0] if got is not None else {}

    return QuotaConfigs(
        users={u: config(f"users/{u}") for u in users},
        user_clients={(u, c): config(f"users/{u}/clients/{c}") for u, c in pairs},
        clients={c: config(f"clients/{c}") for c in clients},
        ips={i: config(f"ips/{i}") for i in ips},
    )


def _ensure_parents_blocking(calls: Any, entity: QuotaEntity) -> None:
    """The entity type's folder (`/config/users`, ...: Kafka's persistent paths) and, for
    `/config/users/<user>/clients/...`, its user's znode (created with an empty config, which
    every reader takes) and the `clients` folder."""
    from kazoo.exceptions import NodeExistsError

    parts = entity.entity_path.split("/")
    calls.ensure_path(f"/config/{parts[0]}")
    if parts[0] != "users" or len(parts) != 4:
        return
    user_node = f"/config/users/{parts[1]}"
    for path, data in ((user_node, zk_data.encode_entity_config({})), (f"{user_node}/clients", b"")):
        try:
            calls.create(path, data)
        except NodeExistsError:
            pass


class ZkQuotaStore:
    """Reads and writes quota configs through the broker's ZooKeeper client."""

    def __init__(self, zk: Any):
        self.zk = zk

    async def read_all(self) -> QuotaConfigs:
        found: QuotaConfigs = await self.zk.threads.run(read_all_blocking, self.zk.calls)
        return found

    async def read(self, entity_paths: Iterable[str]) -> dict[str, tuple[dict[str, str], int] | None]:
        found: dict[str, tuple[dict[str, str], int] | None] = await self.zk.threads.run(
            read_entities_blocking, self.zk.calls, list(entity_paths))
        return found

    async def alter(self, entity: QuotaEntity, ops: list[tuple[str, float, bool]], validate_only: bool) -> None:
        """Apply the ops to the entity's znode (compare-and-set, retried when someone else wrote
        meanwhile). InvalidQuotaRequest before anything is written when an op is invalid."""
        apply_ops(entity, {}, ops)  # validate first: an invalid op writes nothing
        if validate_only:
            return
        await self.zk.threads.run(_ensure_parents_blocking, self.zk.calls, entity)
        for _ in range(WRITE_ATTEMPTS):
            got = (await self.read([entity.entity_path])).get(entity.entity_path)
            config, version = got if got is not None else ({}, -1)
            try:
                await self.zk.change_entity_config(entity.entity_path, apply_ops(entity, config, ops), version)
            except ConfigChangedError:
                continue
            return
        raise ConfigChangedError(entity.entity_path)

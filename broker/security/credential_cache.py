"""SCRAM credentials of every user, kept current from ZooKeeper (Kafka's CredentialCache and the
users part of its ZkConfigManager).

Kafka stores them in `/config/users/<sanitized user>` as `{"version":1,"config":{"SCRAM-SHA-256":
"salt=...,stored_key=...,server_key=...,iterations=4096", ...}}` and announces a change with a
`/config/changes/config_change_N` notification naming `users/<sanitized user>`. The broker reads
every user at start-up (and after every new ZooKeeper session: DynamicConfigManager's full sync),
then re-reads the users a notification names. Nothing read here is ever logged: a malformed
credential is reported by user and mechanism only.
"""

from __future__ import annotations

import json
import logging
import secrets
from collections.abc import Iterable, Mapping
from typing import Any

from odradek.common.security import scram
from odradek.common.security.scram import ScramCredential
from odradek.common.zk_security import SCRAM_DECOY_SECRET_PATH

log = logging.getLogger(__name__)

USERS_PATH = "/config/users"
DECOY_SECRET_PATH = SCRAM_DECOY_SECRET_PATH
"""Keys the decoy salts of unknown users (broker/security/scram_server), the same on every broker of
the cluster, so that comparing two brokers' answers does not tell a made-up user from a real one.
Not Kafka's (Kafka answers an unknown user with a failure at once)."""
DECOY_SECRET_BYTES = 32


def user_path(user: str) -> str:
    return f"{USERS_PATH}/{scram.sanitize(user)}"


def user_entity_path(user: str) -> str:
    """The entity path a config change notification names (`users/<sanitized>`)."""
    return f"users/{scram.sanitize(user)}"


def scram_credentials(user: str, config: Mapping[str, str]) -> dict[str, ScramCredential]:
    """The well-formed SCRAM credentials of one user's config (other keys, e.g. quotas, ignored)."""
    out = {}
    for name in scram.MECHANISMS:
        text = config.get(name)
        if text is None:
            continue
        try:
            out[name] = scram.credential_from_string(text)
        except ValueError as e:
            log.warning("ignoring the malformed %s credential of user %r: %s", name, user, e)
    return out


class CredentialCache:
    """user → mechanism → credential; the SCRAM servers look users up here."""

    def __init__(self) -> None:
        self._users: dict[str, dict[str, ScramCredential]] = {}
        self.decoy_secret = secrets.token_bytes(DECOY_SECRET_BYTES)
        """This broker's until the cluster's is read (CredentialLoader.load_all)."""

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        return self._users.get(user, {}).get(mechanism)

    def update(self, user: str, config: Mapping[str, str] | None) -> None:
        """A user's config as read (None: the znode is gone)."""
        credentials = scram_credentials(user, config or {})
        if credentials:
            self._users[user] = credentials
        else:
            self._users.pop(user, None)

    def replace_all(self, configs: Mapping[str, Mapping[str, str]]) -> None:
        fresh = CredentialCache()
        for user, config in configs.items():
            fresh.update(user, config)
        self._users = fresh._users

    def users(self) -> list[str]:
        return sorted(self._users)


def decode_user_config(data: bytes) -> dict[str, str]:
    """The `config` map of a user znode; ValueError (without the data) when it is not Kafka's JSON."""
    try:
        obj = json.loads(data) if data else {}
    except ValueError:
        raise ValueError("not JSON") from None
    config = obj.get("config") if isinstance(obj, dict) else None
    if not isinstance(config, dict):
        raise ValueError("no config object")
    return {str(k): v for k, v in config.items() if isinstance(v, str)}


def read_user_configs_blocking(calls: Any, users: Iterable[str] | None) -> dict[str, tuple[dict[str, str], int] | None]:
    """user → (config, znode version), or None when the user has no znode; every user when
    `users` is None. Runs in a thread (kazoo's calls through common.zk_calls.BoundedCalls)."""
    from kazoo.exceptions import NoNodeError

    if users is None:
        try:
            users = [scram.desanitize(n) for n in calls.get_children(USERS_PATH)]
        except NoNodeError:
            return {}
    out: dict[str, tuple[dict[str, str], int] | None] = {}
    pending = []
    for user in users:
        try:
            pending.append((user, calls.zk.get_async(user_path(user))))
        except ValueError:  # "." or "..": sanitized as Kafka does, no znode can have that name
            out[user] = None
    for user, result in pending:
        try:
            data, stat = calls.wait(result)
        except NoNodeError:
            out[user] = None
            continue
        try:
            out[user] = (decode_user_config(data), stat.version)
        except ValueError as e:
            log.warning("ignoring unreadable %s: %s", user_path(user), e)
            out[user] = ({}, stat.version)
    return out


def decoy_secret_blocking(calls: Any) -> bytes:
    """The cluster's decoy secret, created by the first broker that asks (in a thread)."""
    from kazoo.exceptions import NodeExistsError, NoNodeError

    for _ in range(3):
        try:
            data, _ = calls.get(DECOY_SECRET_PATH)
            if len(data) == DECOY_SECRET_BYTES:
                return bytes(data)
            raise ValueError(f"{DECOY_SECRET_PATH} holds {len(data)} bytes, not {DECOY_SECRET_BYTES}")
        except NoNodeError:
            try:
                calls.create(DECOY_SECRET_PATH, secrets.token_bytes(DECOY_SECRET_BYTES))
            except NodeExistsError:
                pass
    raise ValueError(f"{DECOY_SECRET_PATH} could not be read")


class CredentialLoader:
    """Fills a CredentialCache from ZooKeeper; DynamicConfigManager calls `on_entity_changes`."""

    def __init__(self, zk: Any, cache: CredentialCache):
        self.zk = zk
        self.cache = cache

    async def _read(self, users: Iterable[str] | None) -> dict[str, tuple[dict[str, str], int] | None]:
        found: dict[str, tuple[dict[str, str], int] | None] = await self.zk.threads.run(
            read_user_configs_blocking, self.zk.calls, users)
        return found

    async def load_all(self) -> None:
        try:
            self.cache.decoy_secret = await self.zk.threads.run(decoy_secret_blocking, self.zk.calls)
        except ValueError as e:
            log.warning("keeping this broker's own SCRAM decoy secret: %s", e)
        read = await self._read(None)
        self.cache.replace_all({user: got[0] for user, got in read.items() if got is not None})
        log.info("SCRAM credentials loaded for %d users", len(self.cache.users()))

    async def on_entity_changes(self, entity_paths: list[str] | None) -> None:
        """Entity paths named by new notifications (None: everything may have changed)."""
        if entity_paths is None:
            await self.load_all()
            return
        users = set()
        for path in entity_paths:
            kind, sep, rest = path.partition("/")
            if kind == "users" and sep and rest and "/" not in rest:
                users.add(scram.desanitize(rest))
        if not users:
            return
        read = await self._read(sorted(users))
        for user, got in read.items():
            self.cache.update(user, got[0] if got is not None else None)
        log.info("SCRAM credentials re-read for %d users", len(users))

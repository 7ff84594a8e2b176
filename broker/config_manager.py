"""DynamicConfigManager: every broker applies config changes live (Kafka's ZkConfigManager).

A change to `/config/topics/<t>` or `/config/brokers/<id|<default>>` is announced by a sequential
`/config/changes/config_change_N` znode naming the entity. Each broker watches that folder,
processes the notifications after the last one it processed, in order, re-reads each named
entity (the notification carries no values) and applies it: a topic's overrides to every log of
the topic, a broker's dynamic configs to the effective broker config and from there to every log.
Notifications older than 15 minutes are deleted by whichever broker sees them first (Kafka's
changeExpirationMs): a broker that was away longer reads everything again when it comes back,
as it does at start-up and after every new ZooKeeper session.
"""

import logging
from collections.abc import Awaitable, Callable, Iterable

from odradek.common import zk_data
from odradek.common.clock import Clock, now_ms
from odradek.common.config import BrokerConfig
from odradek.common.zk_data import DEFAULT_ENTITY

from .admin_manager import topic_name_error
from .change_notifications import CHANGE_EXPIRATION_MS, ChangeFollower, new_notifications, obsolete
from .dynamic_config import DynamicBrokerConfig
from .log.log_manager import LogManager
from .zk_client import BrokerZkClient

log = logging.getLogger(__name__)


# --- pure rules ------------------------------------------------------------------------------------


def parse_entity_path(entity_path: str) -> tuple[str, str] | None:
    """("topics", name) or ("brokers", id-or-<default>) for the entities a broker acts on; None
    for anything else (clients, users, ips, or garbage)."""
    kind, sep, name = entity_path.partition("/")
    if not sep or not name or "/" in name:
        return None
    if kind == "topics" and topic_name_error(name) is None:
        return kind, name
    if kind == "brokers" and (name == DEFAULT_ENTITY or (name.isascii() and name.isdigit())):
        return kind, name
    return None


# --- the shell -------------------------------------------------------------------------------------


class DynamicConfigManager:
    def __init__(self, zk: BrokerZkClient, dynamic: DynamicBrokerConfig, log_manager: LogManager, *,
                 clock: Clock = now_ms):
        self.zk = zk
        self.clock = clock
        """The broker's clock: notifications older than CHANGE_EXPIRATION_MS by it are purged."""
        self.dynamic = dynamic
        self.log_manager = log_manager
        self.broker_entity = str(dynamic.broker_id)
        self._last_seen = -1
        self._created: dict[str, int] = {}
        """Creation times of the notifications seen and not yet deleted, to purge them later."""
        self._follower = ChangeFollower(self._sync, lambda: self.zk.session_id, "config changes")
        self.reconfigure_listeners: list[Callable[[BrokerConfig], None]] = []
        """Told the new effective broker config after the log manager (the listeners' connection
        limits follow it this way)."""
        self.entity_listeners: list[Callable[[list[str] | None], Awaitable[None]]] = []
        """Told the entity paths of new notifications that are neither topics nor brokers (users,
        clients...), or None after a full sync (everything may have changed): the SCRAM credential
        cache follows `users/<user>` this way."""

    async def start(self) -> None:
        """Read every config that matters here, then follow the notifications (in a task)."""
        await self._follower.start()
        self.zk.registration_listeners.append(self._follower.on_registration)

    async def stop(self) -> None:
        await self._follower.stop()

    async def _sync(self, full: bool) -> None:
        """Process new notifications (re-arming the watch); with `full`, first re-read every
        config this broker uses and skip the notifications that existed before."""
        children = await self.zk.config_changes(self._follower.wake)
        fresh = new_notifications(children, -1 if full else self._last_seen, zk_data.config_change_sequence)
        read = await self.zk.get_config_changes([name for _, name in fresh]) if fresh else {}
        self._created.update({name: got[1] for name, got in read.items() if got is not None})
        if full:
            self._created = {name: ctime for name, ctime in self._created.items() if name in set(children)}
            await self.apply(topics=self._topics_in_use(), default=True, own=True)
            await self._tell_listeners(None)
        else:
            await self._apply_notifications(fresh, read)
        if fresh:
            self._last_seen = max(self._last_seen, fresh[-1][0])
        await self._purge()

    async def _apply_notifications(self, fresh: list[tuple[int, str]], read: dict[str, tuple[bytes, int] | None]
                                   ) -> None:
        topics, default, own = set(), False, False
        others: list[str] = []
        for _, name in fresh:
            got = read.get(name)
            if got is None:
                continue
            try:
                entity_path = zk_data.decode_config_change(got[0])
                entity = parse_entity_path(entity_path)
            except (ValueError, KeyError, TypeError) as e:
                log.warning("ignoring unreadable config change %s: %s", name, e)
                continue
            if entity is None:
                others.append(entity_path)
                continue
            kind, entity_name = entity
            if kind == "topics":
                topics.add(entity_name)
            elif entity_name == DEFAULT_ENTITY:
                default = True
            elif entity_name == self.broker_entity:
                own = True
        await self.apply(topics, default, own)
        if others:
            await self._tell_listeners(others)

    async def _tell_listeners(self, entity_paths: list[str] | None) -> None:
        for listener in self.entity_listeners:
            await listener(entity_paths)

    def _topics_in_use(self) -> set[str]:
        return {lg.topic for lg in self.log_manager.all_logs()} | self.log_manager.topics_with_overrides()

    async def apply(self, topics: Iterable[str], default: bool = False, own: bool = False) -> None:
        """Re-read the named entities and apply them here."""
        if default or own:
            reads = await self._broker_configs(default, own)
            if self.dynamic.update(default=reads.get(DEFAULT_ENTITY), broker=reads.get(self.broker_entity)):
                log.info("dynamic broker configs now: default %s, broker %s",
                         self.dynamic.dynamic_default, self.dynamic.dynamic_broker)
                self.log_manager.reconfigure(self.dynamic.current)
                for listener in self.reconfigure_listeners:
                    listener(self.dynamic.current)
        topics = sorted(topics)
        if topics:
            applied = [topic for topic, read in (await self.zk.get_topic_configs(topics)).items()
                       if self.log_manager.update_topic_config(topic, read.config, read.mzxid)]
            log.info("applied the configs of %d topics (%s)", len(applied), ", ".join(applied[:10]))

    async def _broker_configs(self, default: bool, own: bool) -> dict[str, dict[str, str]]:
        out = {}
        for entity, wanted in ((DEFAULT_ENTITY, default), (self.broker_entity, own)):
            if wanted:
                out[entity] = (await self.zk.get_entity_config(f"brokers/{entity}")).config
        return out

    async def _purge(self) -> None:
        doomed = obsolete(self._created, self.clock())
        if doomed:
            await self.zk.delete_config_changes(doomed)
            for name in doomed:
                self._created.pop(name, None)
            log.info("deleted %d config change notifications older than %d min", len(doomed),
                     CHANGE_EXPIRATION_MS // 60_000)

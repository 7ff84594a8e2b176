"""The broker's ZooKeeper access: kazoo underneath, an asyncio facade on top.

kazoo calls block, so each runs in one of the client's own worker threads (`threads`, never
asyncio's shared default executor, where slow disk jobs could hold every thread) and never stalls
the event loop; each waits at most zookeeper.connection.timeout.ms (common/zk_calls), and all of them give
up once stop() is called, so no shutdown waits on an unreachable ZooKeeper. kazoo's state listener
runs on kazoo's own thread; it only hands events to the loop. After a session loss kazoo silently
opens a new session without our ephemeral znode, so the registration is redone here (Kafka's
broker does the same on session re-establishment), retried until it works. While the
registration is lost (or presumed lost: disconnected for half the session timeout), the
`fencing_listeners` hear it, so the broker stops acting as a leader the controller may already
have replaced.
"""

import asyncio
import base64
import json
import logging
import threading
import uuid
from collections.abc import Callable, Iterable, Sequence

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, RolledBackError
from kio.schema.errors import ErrorCode

from odradek.common import zk_data, zk_security
from odradek.common.config import ZkClientConfig
from odradek.common.errors import KafkaError
from odradek.common.executors import BlockingExecutor
from odradek.common.zk_calls import THREADS_STOP_S, ZOOKEEPER_THREADS, BoundedCalls
from odradek.common.zk_connect import (
    CLOSE_TIMEOUT_S,
    close_client,
    ensure_chroot,
    new_client,
    split_connect,
    start_client,
)
from odradek.common.zk_data import BrokerInfo, ControllerInfo, ProducerIdsBlock, TopicAssignment

log = logging.getLogger(__name__)

CLUSTER_ID = "/cluster/id"
PRESUMED_LOST_FRACTION = 0.5
"""Disconnected for this share of the session timeout, the broker presumes its session expired."""
REREGISTER_BACKOFF_S = 0.5
"""Pause between two attempts to register again after a session loss."""
LOG_DIR_EVENT_RETRY_S = 1.0
"""Pause between two attempts to write a log directory failure notification."""


class BrokerIdTakenError(Exception):
    """`/brokers/ids/<id>` belongs to another live session (another broker with our id)."""


class TopicExistsError(KafkaError):
    """`/brokers/topics/<t>` is already there, or the topic is being deleted (Kafka's
    AdminZkClient answers both with TopicExistsException)."""

    error_code = ErrorCode.topic_already_exists


CONFIG_WRITE_ATTEMPTS = 3
"""Set-or-create rounds for a topic's config znode before giving up to a racing writer."""


def set_or_create(zk: BoundedCalls, path: str, data: bytes, topic: str) -> None:
    """Kafka's setOrCreateEntityConfigs: set the znode, create it if it is missing, set again if
    someone created it meanwhile. A deletion racing the writes (NoNode, then NodeExists, ...) is
    retried CONFIG_WRITE_ATTEMPTS times, then reported as TopicExistsError: the name is busy."""
    for _ in range(CONFIG_WRITE_ATTEMPTS):
        try:
            zk.set(path, data)
            return
        except NoNodeError:
            pass
        try:
            zk.create(path, data, makepath=True)
            return
        except NodeExistsError:
            continue
    raise TopicExistsError(f"Topic '{topic}' is being created or deleted concurrently.")


class ConfigChangedError(Exception):
    """An entity's config znode changed (or appeared) since it was read: read it again."""


class AssignmentChangedError(Exception):
    """A topic's assignment znode changed (or went) since it was read: read it again."""


def new_base64_uuid() -> str:
    """A random UUID in Kafka's text form (URL-safe base64, no padding), never starting with '-'
    (Kafka's Uuid.randomUuid avoids that too: such ids look like command-line options)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not text.startswith("-"):
            return text


def base64_to_uuid(text: str) -> uuid.UUID:
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))


def encode_cluster_id(cluster_id: str) -> bytes:
    return json.dumps({"version": "1", "id": cluster_id}, separators=(",", ":")).encode()


def decode_cluster_id(data: bytes) -> str:
    return str(json.loads(data)["id"])


class BrokerZkClient:
    def __init__(self, config: ZkClientConfig):
        self.config = config
        self.hosts, self.chroot = split_connect(config.zookeeper_connect)
        self.session_timeout_s = config.zookeeper_session_timeout_ms / 1000
        self.connection_timeout_s = config.zookeeper_connection_timeout_ms / 1000
        self.zk_security = zk_security.from_config(config)
        self.zk: KazooClient | None = None
        self.calls: BoundedCalls | None = None
        self.threads = BlockingExecutor("zookeeper", ZOOKEEPER_THREADS)
        """Where every blocking ZooKeeper call runs (this client's and its users': the ACL, quota
        and credential stores); stopped by stop()."""
        self.broker_epoch: int = -1
        """czxid of our current registration; changes when we re-register after a session loss."""
        self.registered = False
        """True while `/brokers/ids/<id>` is ours as far as we know: set by each registration,
        cleared when the session is lost or presumed lost (see _on_state_change)."""
        self._registration: BrokerInfo | None = None
        self._registered_session: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._losses = 0
        """Session losses seen: a registration that straddles one is not trusted."""
        self._reregister_task: asyncio.Task[None] | None = None
        self._presumed_lost_timer: asyncio.TimerHandle | None = None
        self._stopping = False
        self._abort = threading.Event()
        """Set by stop(): every ZooKeeper call still waiting gives up at once."""
        self._own_sessions: set[int] = set()
        """Session ids we have held: a leftover registration from one of them is ours to outwait."""
        self.registration_listeners: list[Callable[[int], None]] = []
        """Callables(broker_epoch) run on the event loop after every (re-)registration."""
        self.fencing_listeners: list[Callable[[bool], None]] = []
        """Callables(fenced: bool) run on the event loop when `registered` changes: a broker that
        lost its registration must stop acting as leader until it has registered again."""

    # --- lifecycle ---------------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect (bounded by zookeeper.connection.timeout.ms), create the chroot and Kafka's
        persistent paths."""
        self._loop = asyncio.get_running_loop()
        await self.threads.run(self._start_blocking)

    def _start_blocking(self) -> None:
        try:
            ensure_chroot(self.config.zookeeper_connect, self.connection_timeout_s, self._abort, self.zk_security)
            zk = new_client(self.hosts + self.chroot, self.session_timeout_s, self.zk_security)
            zk.add_listener(self._on_state)
            start_client(zk, self.connection_timeout_s, self._abort)
        except TimeoutError as e:
            raise ConnectionError(f"ZooKeeper {self.config.zookeeper_connect} unreachable") from e
        self.zk = zk
        self.calls = BoundedCalls(zk, self.connection_timeout_s, self._abort)
        self._own_sessions.add(zk.client_id[0])
        for path in zk_data.PERSISTENT_PATHS:
            self.calls.ensure_path(path)

    async def stop(self) -> None:
        """Close the session: our ephemeral registration goes at once, not after the timeout.
        Bounded: calls still waiting on ZooKeeper give up, and closing waits CLOSE_TIMEOUT_S."""
        self._stopping = True
        self._abort.set()
        self._cancel_presumed_lost_timer()
        if self._reregister_task is not None:
            self._reregister_task.cancel()
        zk, self.zk = self.zk, None
        if zk is not None and not await self.threads.run(close_client, zk):
            log.warning("ZooKeeper session not closed within %.0fs; it will expire", CLOSE_TIMEOUT_S)
        if not await self.threads.aclose(THREADS_STOP_S):
            log.warning("%d ZooKeeper worker threads still running after %.0fs", self.threads.alive(), THREADS_STOP_S)

    @property
    def session_id(self) -> int | None:
        zk = self.zk
        return None if zk is None or zk.client_id is None else zk.client_id[0]

    # --- session events ----------------------------------------------------------------------------

    def _on_state(self, state: str) -> None:
        """kazoo's thread: hand the state change to the loop."""
        loop = self._loop
        if self._stopping or loop is None or loop.is_closed():
            return
        try:
            loop.call_soon_threadsafe(self._on_state_change, state)
        except RuntimeError:
            pass  # the loop closed in between

    def _on_state_change(self, state: str) -> None:
        """SUSPENDED: if it lasts half the session timeout, the session may have expired (the
        server expires it a timeout after it last heard from us, and the controller then moves our
        leaderships): stop acting as leader. LOST: the registration is gone; register again until
        it works. CONNECTED in the same session: the registration never went away."""
        if self._stopping or self._registration is None:
            return
        if state == KazooState.SUSPENDED:
            if self._presumed_lost_timer is None and self.registered:
                self._presumed_lost_timer = asyncio.get_running_loop().call_later(
                    self.session_timeout_s * PRESUMED_LOST_FRACTION, self._presume_lost)
        elif state == KazooState.LOST:
            self._cancel_presumed_lost_timer()
            self._losses += 1
            self._set_registered(False, "ZooKeeper session expired")
            self._schedule_reregistration()
        elif state == KazooState.CONNECTED:
            self._cancel_presumed_lost_timer()
            if self.session_id == self._registered_session and self._reregister_task_idle():
                self._set_registered(True, "reconnected within the session")
            else:
                self._schedule_reregistration()

    def _presume_lost(self) -> None:
        self._presumed_lost_timer = None
        self._set_registered(False, f"ZooKeeper unreachable for {self.session_timeout_s * PRESUMED_LOST_FRACTION:.1f}s")

    def _cancel_presumed_lost_timer(self) -> None:
        if self._presumed_lost_timer is not None:
            self._presumed_lost_timer.cancel()
            self._presumed_lost_timer = None

    def _set_registered(self, registered: bool, reason: str) -> None:
        if registered == self.registered:
            return
        self.registered = registered
        if registered:
            log.info("broker registration in force (%s)", reason)
        else:
            log.warning("broker registration lost (%s): fenced until registered again", reason)
        for listener in list(self.fencing_listeners):
            try:
                listener(not registered)
            except Exception:
                log.exception("fencing listener failed")

    def _reregister_task_idle(self) -> bool:
        return self._reregister_task is None or self._reregister_task.done()

    def _schedule_reregistration(self) -> None:
        if self._registration is None or self._stopping or not self._reregister_task_idle():
            return
        self._reregister_task = asyncio.get_running_loop().create_task(
            self._reregister(), name="broker-reregistration")

    async def _reregister(self) -> None:
        """Register again after a session loss until it works or the broker stops (Kafka's broker
        re-registers on every new session). A failure (ZooKeeper flapping again, the old
        registration not yet expired) is retried every REREGISTER_BACKOFF_S."""
        info = self._registration
        attempt = 0
        while info is not None and not self._stopping and not self.registered:
            attempt += 1
            try:
                await self.register_broker(info)
                log.info("re-registered broker %d after session loss (epoch %d, attempt %d)",
                         info.id, self.broker_epoch, attempt)
                return
            except Exception as e:
                level = logging.WARNING if attempt in (1, 10) or attempt % 60 == 0 else logging.DEBUG
                log.log(level, "re-registration of broker %d failed (attempt %d): %r; retrying in %.1fs",
                        info.id, attempt, e, REREGISTER_BACKOFF_S)
            await asyncio.sleep(REREGISTER_BACKOFF_S)

    # --- broker registration ---------------------------------------------------------------------

    async def register_broker(self, info: BrokerInfo) -> int:
        """Create ephemeral `/brokers/ids/<id>`; returns the broker epoch (the znode's czxid).

        A leftover znode from a session that was ours, or that advertises our very endpoints (which
        we now hold, so its owner is dead), is waited out up to the session timeout; any other
        owner means another live broker has our id: BrokerIdTakenError. A registration during which
        the session was lost does not count (ConnectionError).
        """
        self._registration = info
        losses = self._losses
        epoch, session = await self.threads.run(self._register_blocking, info)
        if losses != self._losses or session != self.session_id:
            raise ConnectionError("the ZooKeeper session was lost while registering")
        self.broker_epoch = epoch
        self._registered_session = session
        self._set_registered(True, f"registered with epoch {epoch}")
        for listener in list(self.registration_listeners):
            try:
                listener(epoch)
            except Exception:
                log.exception("registration listener failed")
        return epoch

    def _register_blocking(self, info: BrokerInfo) -> tuple[int, int]:
        calls = self._calls()
        zk = calls.zk
        path = zk_data.broker_path(info.id)
        data = zk_data.encode_broker(info)
        if zk.client_id is None:
            raise ConnectionError("no ZooKeeper session yet")
        session = zk.client_id[0]
        self._own_sessions.add(session)
        deadline_waits = int((self.session_timeout_s * 1.5 + 5) / 0.25)
        for _ in range(max(1, deadline_waits)):
            try:
                _, stat = calls.create(path, data, ephemeral=True, makepath=True, include_data=True)
                return stat.czxid, session
            except NodeExistsError:
                pass
            try:
                existing, stat = calls.get(path)
            except NoNodeError:
                continue  # gone in between: try again at once
            if stat.ephemeralOwner == session:
                return stat.czxid, session  # ours already (a retried create after a connection blip)
            if not self._is_leftover(info, existing, stat.ephemeralOwner):
                raise BrokerIdTakenError(
                    f"broker id {info.id} is registered by live session {stat.ephemeralOwner:#x}"
                )
            gone = _wait_deleted(calls, path, 0.25)
            if not gone:
                log.info("waiting for the previous registration of broker %d to expire", info.id)
        raise BrokerIdTakenError(f"broker id {info.id}: previous registration did not expire in time")

    def _is_leftover(self, info: BrokerInfo, data: bytes, owner: int) -> bool:
        if owner in self._own_sessions:
            return True
        try:
            other = zk_data.decode_broker(info.id, data)
        except (ValueError, KeyError):
            return False
        return {(e.host, e.port) for e in other.endpoints} == {(e.host, e.port) for e in info.endpoints}

    def current_calls(self) -> BoundedCalls:
        """The bounded calls of the current session, for components with synchronous ZooKeeper
        code of their own (the ACL store); ConnectionError before start or after stop."""
        return self._calls()

    def _calls(self) -> BoundedCalls:
        """The bounded calls of the current session; ConnectionError before start or after stop."""
        if self.zk is None or self.calls is None:
            raise ConnectionError("BrokerZkClient is not started")
        return self.calls

    # --- reads -------------------------------------------------------------------------------------

    async def get_topic_config(self, topic: str) -> dict[str, str]:
        """The topic's overrides from `/config/topics/<t>`; {} when none."""
        return (await self.get_topic_configs([topic]))[topic].config

    async def get_topic_configs(self, topics: Iterable[str]) -> dict[str, zk_data.EntityConfig]:
        """Each topic's overrides and the zxid of their last change, read in one go (pipelined).

        A missing znode reads as no overrides (zxid -1); an unreadable one too, with a warning:
        any tool may have written it, and a broker must not stop over it."""
        topics = list(topics)
        if not topics:
            return {}
        return await self.threads.run(self._entity_configs_blocking,
                                       {t: zk_data.topic_config_path(t) for t in topics})

    def _entity_configs_blocking(self, paths: dict[str, str]) -> dict[str, zk_data.EntityConfig]:
        calls = self._calls()
        pending = [(key, path, calls.zk.get_async(path)) for key, path in paths.items()]
        out: dict[str, zk_data.EntityConfig] = {}
        for key, path, result in pending:
            try:
                data, stat = calls.wait(result)
            except NoNodeError:
                out[key] = zk_data.EntityConfig({}, -1)
                continue
            try:
                out[key] = zk_data.EntityConfig(zk_data.decode_entity_config(data), stat.mzxid, stat.version)
            except (ValueError, TypeError, AttributeError) as e:
                log.warning("ignoring unreadable %s (%s): %r", path, e, data[:200])
                out[key] = zk_data.EntityConfig({}, stat.mzxid, stat.version)
        return out

    async def get_topic_assignment(self, topic: str) -> TopicAssignment | None:
        data = await self._get(zk_data.topic_path(topic))
        return None if data is None else zk_data.decode_topic_assignment(data)

    async def get_topic_assignment_versioned(self, topic: str) -> tuple[TopicAssignment, int] | None:
        """The topic's assignment and its znode version (the compare-and-set token); None if none."""
        def get() -> tuple[TopicAssignment, int] | None:
            try:
                data, stat = self._calls().get(zk_data.topic_path(topic))
            except NoNodeError:
                return None
            return zk_data.decode_topic_assignment(data), stat.version

        return await self.threads.run(get)

    async def set_topic_assignment(self, topic: str, assignment: TopicAssignment, expected_version: int) -> None:
        """Replace the topic's assignment (Kafka's writeTopicPartitionAssignment with an update),
        compare-and-set on the version read; the controller's data watch sees it.
        AssignmentChangedError when the znode changed or went meanwhile."""
        def set_() -> None:
            try:
                self._calls().set(zk_data.topic_path(topic), zk_data.encode_topic_assignment(assignment),
                                  version=expected_version)
            except (BadVersionError, NoNodeError) as e:
                raise AssignmentChangedError(topic) from e

        await self.threads.run(set_)

    async def get_topic_ids(self, topics: list[str]) -> dict[str, str | None]:
        """topic → its topic_id (Kafka's base64 text) from the assignment znodes, fetched in one go;
        None for a topic without one or without a znode."""
        if not topics:
            return {}
        return await self.threads.run(self._topic_ids_blocking, list(topics))

    def _topic_ids_blocking(self, topics: list[str]) -> dict[str, str | None]:
        calls = self._calls()
        pending = [(t, calls.zk.get_async(zk_data.topic_path(t))) for t in topics]
        out: dict[str, str | None] = {}
        for topic, result in pending:
            try:
                data, _ = calls.wait(result)
                out[topic] = zk_data.decode_topic_assignment(data).topic_id
            except NoNodeError:
                out[topic] = None
        return out

    async def get_entity_config(self, entity_path: str) -> zk_data.EntityConfig:
        """The overrides of `topics/<t>` or `brokers/<b>`, with the znode's version."""
        key = entity_path
        return (await self.threads.run(self._entity_configs_blocking,
                                        {key: zk_data.entity_config_path(entity_path)}))[key]

    async def change_entity_config(self, entity_path: str, config: dict[str, str], expected_version: int) -> None:
        """Write an entity's overrides (create when `expected_version` is -1, else compare-and-set)
        and announce the change (`/config/changes/config_change_N`) in one transaction, as Kafka's
        AdminZkClient does in two steps. ConfigChangedError when the znode changed meanwhile."""
        await self.threads.run(self._change_entity_config_blocking, entity_path, config, expected_version)

    def _change_entity_config_blocking(self, entity_path: str, config: dict[str, str], expected_version: int) -> None:
        calls = self._calls()
        path = zk_data.entity_config_path(entity_path)
        data = zk_data.encode_entity_config(config)
        if expected_version < 0:  # the first entity of its type: a transaction cannot make parents
            calls.ensure_path(path.rsplit("/", 1)[0])
        t = calls.zk.transaction()
        if expected_version < 0:
            t.create(path, data)
        else:
            t.set_data(path, data, version=expected_version)
        t.create(f"{zk_data.CONFIG_CHANGES}/{zk_data.CONFIG_CHANGE_PREFIX}", zk_data.encode_config_change(entity_path),
                 sequence=True)
        results = calls.commit(t)
        failure = next((r for r in results if isinstance(r, Exception) and not isinstance(r, RolledBackError)), None)
        if isinstance(failure, (BadVersionError, NodeExistsError, NoNodeError)):
            raise ConfigChangedError(path)
        if failure is not None:
            raise failure

    async def config_changes(self, on_change: Callable[[], None] | None = None) -> list[str]:
        """The children of /config/changes; `on_change()` runs once on the event loop at their
        next change (a one-shot watch, re-armed by the next call)."""
        loop = self._loop

        def watch(_event: object) -> None:
            if on_change is not None and loop is not None and not loop.is_closed():
                loop.call_soon_threadsafe(on_change)

        return await self.threads.run(
            lambda: self._calls().get_children(zk_data.CONFIG_CHANGES, watch=watch if on_change else None))

    async def get_config_changes(self, names: list[str]) -> dict[str, tuple[bytes, int] | None]:
        """Each notification's data and creation time (ms), read in one go; None when gone."""
        def read() -> dict[str, tuple[bytes, int] | None]:
            calls = self._calls()
            pending = [(n, calls.zk.get_async(f"{zk_data.CONFIG_CHANGES}/{n}")) for n in names]
            out: dict[str, tuple[bytes, int] | None] = {}
            for name, result in pending:
                try:
                    data, stat = calls.wait(result)
                    out[name] = (data, stat.ctime)
                except NoNodeError:
                    out[name] = None
            return out

        return await self.threads.run(read)

    async def delete_config_changes(self, names: list[str]) -> None:
        """Delete notifications (already gone ones are fine: every broker purges)."""
        def delete() -> None:
            calls = self._calls()
            pending = [calls.zk.delete_async(f"{zk_data.CONFIG_CHANGES}/{n}") for n in names]
            for result in pending:
                try:
                    calls.wait(result)
                except NoNodeError:
                    pass

        await self.threads.run(delete)

    async def get_all_topics(self) -> list[str]:
        """The children of `/brokers/topics` (every topic, whatever this broker's cache knows)."""

        def children() -> list[str]:
            try:
                return self._calls().get_children(zk_data.BROKER_TOPICS)
            except NoNodeError:
                return []

        return await self.threads.run(children)

    async def topic_exists(self, topic: str) -> bool:
        return await self.threads.run(lambda: self._calls().exists(zk_data.topic_path(topic)) is not None)

    async def is_topic_marked_for_deletion(self, topic: str) -> bool:
        return await self.threads.run(
            lambda: self._calls().exists(zk_data.delete_topic_path(topic)) is not None
        )

    async def get_consumer_offset(self, group: str, topic: str, partition: int) -> int | None:
        """OffsetFetch v0: the offset OffsetCommit v0 stored (Kafka's getConsumerOffset)."""
        data = await self._get(zk_data.consumer_offset_path(group, topic, partition))
        return int(data.decode()) if data else None

    async def set_consumer_offset(self, group: str, topic: str, partition: int, offset: int) -> None:
        """OffsetCommit v0 (Kafka's setOrCreateConsumerOffset)."""
        path = zk_data.consumer_offset_path(group, topic, partition)

        def write() -> None:
            calls = self._calls()
            try:
                calls.set(path, str(offset).encode())
            except NoNodeError:
                calls.ensure_path(path.rsplit("/", 1)[0])
                try:
                    calls.create(path, str(offset).encode())
                except NodeExistsError:
                    calls.set(path, str(offset).encode())

        await self.threads.run(write)

    async def _get(self, path: str) -> bytes | None:
        def get() -> bytes | None:
            try:
                return self._calls().get(path)[0]
            except NoNodeError:
                return None

        return await self.threads.run(get)

    # --- the active controller ------------------------------------------------------------------

    async def get_controller_epoch(self) -> tuple[int, int] | None:
        """(epoch of `/controller_epoch`, controller id of `/controller`) as ZooKeeper's leader has
        them (a sync first: this broker's server may lag); None when either is missing. Each call waits
        at most zookeeper.connection.timeout.ms (TimeoutError)."""
        def get() -> tuple[bytes, bytes] | None:
            calls = self._calls()
            calls.wait(calls.zk.sync_async(zk_data.CONTROLLER_EPOCH))
            try:
                return calls.get(zk_data.CONTROLLER_EPOCH)[0], calls.get(zk_data.CONTROLLER)[0]
            except NoNodeError:
                return None

        data = await self.threads.run(get)
        if data is None:
            return None
        try:
            return zk_data.decode_controller_epoch(data[0]), zk_data.decode_controller(data[1]).controller_id
        except (ValueError, KeyError):
            return None

    async def get_controller(self, on_change: Callable[[], None] | None = None,
                             timeout_s: float | None = None) -> ControllerInfo | None:
        """The active controller from `/controller`; None when there is none (or it is unreadable).

        `on_change()` runs once on the event loop at the znode's next change (a one-shot ZooKeeper
        watch, re-armed by the next read; no kazoo retry loop that could outlive the session).
        Waits at most `timeout_s` (default zookeeper.connection.timeout.ms): TimeoutError."""
        loop = self._loop

        def watch(_event: object) -> None:
            if on_change is not None and loop is not None and not loop.is_closed():
                loop.call_soon_threadsafe(on_change)

        def get() -> bytes | None:
            calls = self._calls()
            try:
                return calls.get(zk_data.CONTROLLER, watch=watch if on_change else None, timeout_s=timeout_s)[0]
            except NoNodeError:
                calls.exists(zk_data.CONTROLLER, watch=watch if on_change else None, timeout_s=timeout_s)
                return None

        data = await self.threads.run(get)
        if data is None:
            return None
        try:
            return zk_data.decode_controller(data)
        except (ValueError, KeyError):
            log.warning("unreadable %s: %r", zk_data.CONTROLLER, data[:200])
            return None

    # --- admin writes ----------------------------------------------------------------------------

    async def get_cluster_id(self) -> str:
        """The cluster id from `/cluster/id`, created (Kafka's JSON) by whoever asks first."""
        return await self.threads.run(self._cluster_id_blocking)

    def _cluster_id_blocking(self) -> str:
        calls = self._calls()
        for _ in range(5):
            try:
                return decode_cluster_id(calls.get(CLUSTER_ID)[0])
            except NoNodeError:
                pass
            try:
                candidate = new_base64_uuid()
                calls.create(CLUSTER_ID, encode_cluster_id(candidate), makepath=True)
                return candidate
            except NodeExistsError:
                continue  # someone else won the race: read theirs
        raise RuntimeError("could not read or create /cluster/id")

    async def create_topic(self, topic: str, assignment: TopicAssignment, config: dict[str, str]) -> None:
        """One topic's znodes (see create_topics); raises TopicExistsError when the assignment
        znode is already there or the topic is being deleted."""
        error = (await self.create_topics([(topic, assignment, config)]))[topic]
        if error is not None:
            raise error

    async def create_topics(
        self, topics: Sequence[tuple[str, TopicAssignment, dict[str, str]]]
    ) -> dict[str, Exception | None]:
        """Kafka's order for each topic: `/config/topics/<t>` (set or create) then
        `/brokers/topics/<t>` (create), which the controller watches, so the config is in place
        before it acts.

        Each step is pipelined across the topics (names distinct): a CreateTopics of a thousand
        topics waits a few round trips, not a few per topic, and ZooKeeper syncs the pipelined
        writes to disk together. Per topic: None when created, else the exception that stopped it
        (TopicExistsError when it exists or is being deleted).
        """
        topics = list(topics)
        if len({t for t, _, _ in topics}) != len(topics):
            raise ValueError("create_topics: topic names must be distinct")
        return await self.threads.run(self._create_topics_blocking, topics)

    def _create_topics_blocking(self, topics: list[tuple[str, TopicAssignment, dict[str, str]]]
                                ) -> dict[str, Exception | None]:
        calls = self._calls()
        zk = calls.zk
        out: dict[str, Exception | None] = {}
        marked = calls.settle({t: zk.exists_async(zk_data.delete_topic_path(t)) for t, _, _ in topics})
        present = calls.settle({t: zk.exists_async(zk_data.topic_path(t)) for t, _, _ in topics})
        for t, _, _ in topics:
            if isinstance(marked[t], Exception) or isinstance(present[t], Exception):
                out[t] = marked[t] if isinstance(marked[t], Exception) else present[t]
            elif marked[t] is not None:
                # the controller is still removing its znodes: writing now would recreate it half-way
                out[t] = TopicExistsError(f"Topic '{t}' is marked for deletion.")
            elif present[t] is not None:
                out[t] = TopicExistsError(f"Topic '{t}' already exists.")
        todo = [(t, a, zk_data.encode_entity_config(c)) for t, a, c in topics if t not in out]
        # set_or_create, pipelined: set; create the missing; a racing writer gets the retried path
        set_ = calls.settle({t: zk.set_async(zk_data.topic_config_path(t), data) for t, _, data in todo})
        created = calls.settle({t: zk.create_async(zk_data.topic_config_path(t), data, makepath=True)
                                for t, _, data in todo if isinstance(set_[t], NoNodeError)})
        for t, _, data in todo:
            error = created.get(t, set_[t])
            if isinstance(error, NodeExistsError):
                try:
                    set_or_create(calls, zk_data.topic_config_path(t), data, t)
                    error = None
                except Exception as e:
                    error = e
            if isinstance(error, Exception):
                out[t] = error
        to_assign = [(t, a) for t, a, _ in todo if t not in out]
        assigned = calls.settle({t: zk.create_async(zk_data.topic_path(t), zk_data.encode_topic_assignment(a),
                                                    makepath=True) for t, a in to_assign})
        for t, _ in to_assign:
            error = assigned[t]
            if isinstance(error, NodeExistsError):
                error = TopicExistsError(f"Topic '{t}' already exists.")
            out[t] = error if isinstance(error, Exception) else None
        return out

    async def topics_existing(self, topics: Sequence[str]) -> set[str]:
        """Those of `topics` whose `/brokers/topics/<t>` exists, read in one pipelined round."""
        def read() -> set[str]:
            calls = self._calls()
            found = calls.settle({t: calls.zk.exists_async(zk_data.topic_path(t)) for t in topics})
            for value in found.values():
                if isinstance(value, Exception):
                    raise value
            return {t for t, stat in found.items() if stat is not None}

        return await self.threads.run(read) if topics else set()

    async def delete_topic(self, topic: str) -> None:
        """Mark the topic for deletion (`/admin/delete_topics/<t>`); the controller does the rest."""

        def mark() -> None:
            try:
                self._calls().create(zk_data.delete_topic_path(topic), makepath=True)
            except NodeExistsError:
                pass  # already being deleted

        await self.threads.run(mark)

    # --- log directory failures ------------------------------------------------------------------

    async def propagate_log_dir_event(self, broker_id: int) -> None:
        """Tell the controller one of our log directories failed: a persistent sequential
        `/log_dir_event_notification/log_dir_event_<seq>` holding Kafka's JSON, which the
        controller reads and deletes. Retried every LOG_DIR_EVENT_RETRY_S until written or the
        broker stops (ZooKeeper may be down just then)."""
        data = zk_data.encode_log_dir_event(broker_id)
        attempt = 0
        while not self._stopping:
            attempt += 1
            try:
                path = await self.threads.run(
                    lambda: self._calls().create(zk_data.log_dir_event_path(), data, sequence=True, makepath=True))
                log.info("log directory failure announced in %s", path)
                return
            except Exception as e:
                if attempt in (1, 10) or attempt % 60 == 0:
                    log.warning("cannot announce the log directory failure (attempt %d): %r", attempt, e)
            await asyncio.sleep(LOG_DIR_EVENT_RETRY_S)

    # --- producer id blocks ------------------------------------------------------------------------

    async def claim_producer_id_block(self, next_block: Callable[[ProducerIdsBlock | None], ProducerIdsBlock],
                                      max_attempts: int = 100) -> ProducerIdsBlock:
        """Claim the block `next_block(current)` computes from `/latest_producer_id_block` (None when
        there is none yet) by a compare-and-set on the znode's version; on a conflict (another
        broker claimed one in between) read again and retry, at most `max_attempts` times.

        Each ZooKeeper call waits at most zookeeper.connection.timeout.ms (TimeoutError), so a
        disconnected client fails the claim instead of hanging."""
        return await self.threads.run(self._claim_producer_id_block_blocking, next_block, max_attempts)

    def _claim_producer_id_block_blocking(self, next_block: Callable[[ProducerIdsBlock | None], ProducerIdsBlock],
                                          max_attempts: int) -> ProducerIdsBlock:
        calls = self._calls()
        path = zk_data.LATEST_PRODUCER_ID_BLOCK
        for attempt in range(max_attempts):
            data: bytes | None
            try:
                data, stat = calls.get(path)
            except NoNodeError:
                data, stat = None, None
            current = zk_data.decode_producer_id_block(data) if data else None
            block = next_block(current)
            encoded = zk_data.encode_producer_id_block(block)
            try:
                if stat is None:
                    calls.create(path, encoded, makepath=True)
                else:
                    calls.set(path, encoded, version=stat.version)
            except (NodeExistsError, BadVersionError, NoNodeError):
                log.info("producer id block claim %d lost a race; reading %s again", attempt + 1, path)
                continue
            log.info("claimed producer id block %s", block)
            return block
        raise RuntimeError(f"no producer id block claimed in {max_attempts} attempts: {path} keeps changing")


def _wait_deleted(calls: BoundedCalls, path: str, timeout_s: float) -> bool:
    """Block up to timeout_s until `path` is gone; True if it is."""
    gone = threading.Event()

    def watch(_event: object) -> None:
        gone.set()

    if calls.exists(path, watch=watch) is None:
        return True
    gone.wait(timeout_s)
    return calls.exists(path) is None

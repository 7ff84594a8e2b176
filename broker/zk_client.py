"""The broker's ZooKeeper access: kazoo underneath, an asyncio facade on top.

kazoo calls block, so each runs in a worker thread (`asyncio.to_thread`) and never stalls the event
loop. kazoo's state listener runs on kazoo's own thread; it only hands events to the loop. After a
session loss kazoo silently opens a new session without our ephemeral znode, so the registration is
redone here (Kafka's broker does the same on session re-establishment).
"""

import asyncio
import base64
import json
import logging
import threading
import uuid

from kazoo.client import KazooClient, KazooState
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from odradek.common import zk_data
from odradek.common.zk_connect import close_client, ensure_chroot, split_connect, start_client
from odradek.common.config import ZkClientConfig
from odradek.common.zk_data import BrokerInfo, ControllerInfo, ProducerIdsBlock, TopicAssignment

log = logging.getLogger(__name__)

CLUSTER_ID = "/cluster/id"


class BrokerIdTakenError(Exception):
    """`/brokers/ids/<id>` belongs to another live session (another broker with our id)."""


class TopicExistsError(Exception):
    """`/brokers/topics/<t>` is already there."""


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
    return json.loads(data)["id"]


class BrokerZkClient:
    def __init__(self, config: ZkClientConfig):
        self.config = config
        self.hosts, self.chroot = split_connect(config.zookeeper_connect)
        self.session_timeout_s = config.zookeeper_session_timeout_ms / 1000
        self.connection_timeout_s = config.zookeeper_connection_timeout_ms / 1000
        self.zk: KazooClient | None = None
        self.broker_epoch: int = -1
        """czxid of our current registration; changes when we re-register after a session loss."""
        self._registration: BrokerInfo | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._session_lost = False
        self._reregister_task: asyncio.Task | None = None
        self._stopping = False
        self._own_sessions: set[int] = set()
        """Session ids we have held: a leftover registration from one of them is ours to outwait."""
        self.registration_listeners: list = []
        """Callables(broker_epoch) run on the event loop after every (re-)registration."""

    # --- lifecycle ---------------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect (bounded by zookeeper.connection.timeout.ms), create the chroot and Kafka's
        persistent paths."""
        self._loop = asyncio.get_running_loop()
        await asyncio.to_thread(self._start_blocking)

    def _start_blocking(self) -> None:
        try:
            ensure_chroot(self.config.zookeeper_connect, self.connection_timeout_s)
            zk = KazooClient(hosts=self.hosts + self.chroot, timeout=self.session_timeout_s)
            zk.add_listener(self._on_state)
            start_client(zk, self.connection_timeout_s)
        except TimeoutError as e:
            raise ConnectionError(f"ZooKeeper {self.config.zookeeper_connect} unreachable") from e
        self.zk = zk
        self._own_sessions.add(zk.client_id[0])
        for path in zk_data.PERSISTENT_PATHS:
            zk.ensure_path(path)

    async def stop(self) -> None:
        """Close the session: our ephemeral registration goes at once, not after the timeout."""
        self._stopping = True
        if self._reregister_task is not None:
            self._reregister_task.cancel()
        zk, self.zk = self.zk, None
        if zk is not None:
            await asyncio.to_thread(close_client, zk)

    @property
    def session_id(self) -> int | None:
        zk = self.zk
        return None if zk is None or zk.client_id is None else zk.client_id[0]

    def _on_state(self, state: str) -> None:
        """kazoo's thread: note a lost session; when connected again, re-register on the loop."""
        if self._stopping:
            return
        if state == KazooState.LOST:
            self._session_lost = True
            log.warning("ZooKeeper session lost; will re-register when reconnected")
        elif state == KazooState.CONNECTED and self._session_lost:
            self._session_lost = False
            if self._loop is not None and not self._loop.is_closed():
                self._loop.call_soon_threadsafe(self._schedule_reregistration)

    def _schedule_reregistration(self) -> None:
        if self._registration is None or self._stopping:
            return
        if self._reregister_task is None or self._reregister_task.done():
            self._reregister_task = asyncio.get_running_loop().create_task(self._reregister())

    async def _reregister(self) -> None:
        info = self._registration
        if info is None:
            return
        try:
            await self.register_broker(info)
            log.info("re-registered broker %d after session loss (epoch %d)", info.id, self.broker_epoch)
        except Exception:  # noqa: BLE001 - logged; the next session event tries again
            log.exception("re-registration of broker %d failed", info.id)

    # --- broker registration ---------------------------------------------------------------------

    async def register_broker(self, info: BrokerInfo) -> int:
        """Create ephemeral `/brokers/ids/<id>`; returns the broker epoch (the znode's czxid).

        A leftover znode from a session that was ours, or that advertises our very endpoints (which
        we now hold, so its owner is dead), is waited out up to the session timeout; any other
        owner means another live broker has our id: BrokerIdTakenError.
        """
        self._registration = info
        epoch = await asyncio.to_thread(self._register_blocking, info)
        self.broker_epoch = epoch
        for listener in list(self.registration_listeners):
            try:
                listener(epoch)
            except Exception:  # noqa: BLE001
                log.exception("registration listener failed")
        return epoch

    def _register_blocking(self, info: BrokerInfo) -> int:
        zk = self._client()
        path = zk_data.broker_path(info.id)
        data = zk_data.encode_broker(info)
        self._own_sessions.add(zk.client_id[0])
        deadline_waits = int((self.session_timeout_s * 1.5 + 5) / 0.25)
        for _ in range(max(1, deadline_waits)):
            try:
                _, stat = zk.create(path, data, ephemeral=True, makepath=True, include_data=True)
                return stat.czxid
            except NodeExistsError:
                pass
            try:
                existing, stat = zk.get(path)
            except NoNodeError:
                continue  # gone in between: try again at once
            if stat.ephemeralOwner == zk.client_id[0]:
                return stat.czxid  # ours already (a retried create after a connection blip)
            if not self._is_leftover(info, existing, stat.ephemeralOwner):
                raise BrokerIdTakenError(
                    f"broker id {info.id} is registered by live session {stat.ephemeralOwner:#x}"
                )
            gone = _wait_deleted(zk, path, 0.25)
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

    def _client(self) -> KazooClient:
        if self.zk is None:
            raise ConnectionError("BrokerZkClient is not started")
        return self.zk

    # --- reads -------------------------------------------------------------------------------------

    async def get_topic_config(self, topic: str) -> dict[str, str]:
        """The topic's overrides from `/config/topics/<t>`; {} when none."""
        data = await self._get(zk_data.topic_config_path(topic))
        return {} if data is None else zk_data.decode_topic_config(data)

    async def get_topic_assignment(self, topic: str) -> TopicAssignment | None:
        data = await self._get(zk_data.topic_path(topic))
        return None if data is None else zk_data.decode_topic_assignment(data)

    async def get_topic_ids(self, topics: list[str]) -> dict[str, str | None]:
        """topic → its topic_id (Kafka's base64 text) from the assignment znodes, fetched in one go;
        None for a topic without one or without a znode."""
        if not topics:
            return {}
        return await asyncio.to_thread(self._topic_ids_blocking, list(topics))

    def _topic_ids_blocking(self, topics: list[str]) -> dict[str, str | None]:
        zk = self._client()
        pending = [(t, zk.get_async(zk_data.topic_path(t))) for t in topics]
        out: dict[str, str | None] = {}
        for topic, result in pending:
            try:
                data, _ = result.get(timeout=self.session_timeout_s)
                out[topic] = zk_data.decode_topic_assignment(data).topic_id
            except NoNodeError:
                out[topic] = None
        return out

    async def topic_exists(self, topic: str) -> bool:
        return await asyncio.to_thread(lambda: self._client().exists(zk_data.topic_path(topic)) is not None)

    async def is_topic_marked_for_deletion(self, topic: str) -> bool:
        return await asyncio.to_thread(
            lambda: self._client().exists(zk_data.delete_topic_path(topic)) is not None
        )

    async def _get(self, path: str) -> bytes | None:
        def get() -> bytes | None:
            try:
                return self._client().get(path)[0]
            except NoNodeError:
                return None

        return await asyncio.to_thread(get)

    # --- the active controller ------------------------------------------------------------------

    async def get_controller(self, on_change=None) -> ControllerInfo | None:
        """The active controller from `/controller`; None when there is none (or it is unreadable).

        `on_change()` runs once on the event loop at the znode's next change (a one-shot ZooKeeper
        watch, re-armed by the next read; no kazoo retry loop that could outlive the session)."""
        loop = self._loop

        def watch(_event) -> None:
            if on_change is not None and loop is not None and not loop.is_closed():
                loop.call_soon_threadsafe(on_change)

        def get() -> bytes | None:
            zk = self._client()
            try:
                return zk.get(zk_data.CONTROLLER, watch=watch if on_change else None)[0]
            except NoNodeError:
                zk.exists(zk_data.CONTROLLER, watch=watch if on_change else None)
                return None

        data = await asyncio.to_thread(get)
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
        return await asyncio.to_thread(self._cluster_id_blocking)

    def _cluster_id_blocking(self) -> str:
        zk = self._client()
        for _ in range(5):
            try:
                return decode_cluster_id(zk.get(CLUSTER_ID)[0])
            except NoNodeError:
                pass
            try:
                candidate = new_base64_uuid()
                zk.create(CLUSTER_ID, encode_cluster_id(candidate), makepath=True)
                return candidate
            except NodeExistsError:
                continue  # someone else won the race: read theirs
        raise RuntimeError("could not read or create /cluster/id")

    async def create_topic(self, topic: str, assignment: TopicAssignment, config: dict[str, str]) -> None:
        """Kafka's order: `/config/topics/<t>` (set or create) then `/brokers/topics/<t>` (create).

        The controller watches the latter, so the config is in place before it acts.
        Raises TopicExistsError when the assignment znode is already there.
        """
        await asyncio.to_thread(self._create_topic_blocking, topic, assignment, config)

    def _create_topic_blocking(self, topic: str, assignment: TopicAssignment, config: dict[str, str]) -> None:
        zk = self._client()
        if zk.exists(zk_data.topic_path(topic)) is not None:
            raise TopicExistsError(topic)
        config_path = zk_data.topic_config_path(topic)
        config_data = zk_data.encode_topic_config(config)
        try:
            zk.create(config_path, config_data, makepath=True)
        except NodeExistsError:
            zk.set(config_path, config_data)
        try:
            zk.create(zk_data.topic_path(topic), zk_data.encode_topic_assignment(assignment), makepath=True)
        except NodeExistsError as e:
            raise TopicExistsError(topic) from e

    async def delete_topic(self, topic: str) -> None:
        """Mark the topic for deletion (`/admin/delete_topics/<t>`); the controller does the rest."""

        def mark() -> None:
            try:
                self._client().create(zk_data.delete_topic_path(topic), makepath=True)
            except NodeExistsError:
                pass  # already being deleted

        await asyncio.to_thread(mark)

    # --- producer id blocks ------------------------------------------------------------------------

    async def claim_producer_id_block(self, next_block, max_attempts: int = 100) -> ProducerIdsBlock:
        """Claim the block `next_block(current)` computes from `/latest_producer_id_block` (None when
        there is none yet) by a compare-and-set on the znode's version; on a conflict (another
        broker claimed one in between) read again and retry, at most `max_attempts` times.

        Each ZooKeeper call waits at most the session timeout (TimeoutError), so a disconnected
        client fails the claim instead of hanging."""
        return await asyncio.to_thread(self._claim_producer_id_block_blocking, next_block, max_attempts)

    def _claim_producer_id_block_blocking(self, next_block, max_attempts: int) -> ProducerIdsBlock:
        zk = self._client()
        path = zk_data.LATEST_PRODUCER_ID_BLOCK
        timeout = self.session_timeout_s
        for attempt in range(max_attempts):
            try:
                data, stat = _wait(zk.get_async(path), timeout)
            except NoNodeError:
                data, stat = None, None
            current = zk_data.decode_producer_id_block(data) if data else None
            block = next_block(current)
            encoded = zk_data.encode_producer_id_block(block)
            try:
                if stat is None:
                    _wait(zk.create_async(path, encoded, makepath=True), timeout)
                else:
                    _wait(zk.set_async(path, encoded, version=stat.version), timeout)
            except (NodeExistsError, BadVersionError, NoNodeError):
                log.info("producer id block claim %d lost a race; reading %s again", attempt + 1, path)
                continue
            log.info("claimed producer id block %s", block)
            return block
        raise RuntimeError(f"no producer id block claimed in {max_attempts} attempts: {path} keeps changing")


def _wait(result, timeout_s: float):
    """A kazoo async result's value within timeout_s; TimeoutError otherwise."""
    try:
        return result.get(timeout=timeout_s)
    except KazooTimeoutError as e:
        raise TimeoutError(f"ZooKeeper did not answer within {timeout_s}s") from e


def _wait_deleted(zk: KazooClient, path: str, timeout_s: float) -> bool:
    """Block up to timeout_s until `path` is gone; True if it is."""
    gone = threading.Event()

    def watch(_event) -> None:
        gone.set()

    if zk.exists(path, watch=watch) is None:
        return True
    gone.wait(timeout_s)
    return zk.exists(path) is None

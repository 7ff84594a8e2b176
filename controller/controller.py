"""KafkaController: election, then one event at a time through the state machines.

Life of a candidate, per ZooKeeper session: race for /controller; lose → stand by watching it and
race again when it goes; win → load the ControllerContext, send everyone the state (failover), then
handle watch events from an asyncio queue (kazoo calls watches in its own thread, which only posts
to the queue). Deposed — session lost, /controller no longer ours, or a write fenced by a newer
epoch — it stops at once (channels dropped, acting task cancelled), closes the session and starts
over with a fresh one as a candidate.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import threading
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from kazoo.protocol.states import KazooState
from kio.schema.errors import ErrorCode

from odradek.common import messages as m
from odradek.common import zk_data as z
from odradek.common import zk_security
from odradek.common.api_key import ApiKey
from odradek.common.config import ControllerConfig, parse_listeners
from odradek.common.executors import BlockingExecutor
from odradek.common.messages import LeaderAndIsrResponse
from odradek.common.network.socket_server import SocketServer
from odradek.common.security.channel import ClientSecurity
from odradek.common.security.listeners import listener_security, outgoing_security
from odradek.common.security.reload import CertificateWatcher
from odradek.common.zk_calls import THREADS_STOP_S, ZOOKEEPER_THREADS
from odradek.common.zk_data import ControllerInfo, EndPoint
from odradek.controller.metrics import ControllerStats, request_event_name

from . import elect_leaders as el
from . import reassignment as ra
from . import state_machine as sm
from .channel_manager import ControllerChannelManager
from .context import ControllerContext, ReplicaAssignment, TopicPartition
from .controller_apis import ControllerApis, isr_changes
from .zk_client import ControllerMovedError, ControllerZkClient

log = logging.getLogger(__name__)

MAX_DECISION_ATTEMPTS = 10
"""Compare-and-set conflicts tolerated per event before giving up the controllership (reload)."""
SLOW_DECISION_S = 1.0
"""A decision and its ZooKeeper writes taking this long are logged with both parts' times (a
controlled shutdown at thousands of partitions: which of them to cut)."""

MAX_REQUEST_BYTES = 100 * 1024 * 1024


# --- events (Kafka's ControllerEvent): what the event loop takes, one at a time ----------------------
# The watch-driven ones carry nothing and are coalesced (equal instances): each handler re-reads the
# current children.


@dataclass(frozen=True)
class ControllerChange:
    """/controller changed: are we still the one it names?"""


@dataclass(frozen=True)
class BrokerChange:
    """/brokers/ids changed."""


@dataclass(frozen=True)
class TopicChange:
    """/brokers/topics changed."""


@dataclass(frozen=True)
class PartitionModification:
    """A topic's assignment znode changed (CreatePartitions); the topics are in `_modified_topics`."""


@dataclass(frozen=True)
class TopicDeletion:
    """/admin/delete_topics changed."""


@dataclass(frozen=True)
class LogDirEvent:
    """/log_dir_event_notification changed: brokers announced failed log directories."""


@dataclass(frozen=True)
class ZkReassignment:
    """/admin/reassign_partitions was created, changed or deleted."""


@dataclass(frozen=True)
class AutoRebalance:
    """leader.imbalance.check.interval.seconds passed."""


@dataclass(frozen=True)
class Stop:
    """stop() was called."""


@dataclass(frozen=True)
class SessionLost:
    """The ZooKeeper session is gone or presumed expired: stop acting."""


A = TypeVar("A")
D = TypeVar("D", bound=sm.Decisions)


@dataclass(frozen=True, eq=False)
class BrokerRequest(Generic[A]):
    """A broker's request waiting for the event loop: `decide` decides it (on the loop), `future`
    gets the answer."""

    api_key: int
    decide: Callable[[ControllerZkClient], Awaitable[A | None]]
    future: asyncio.Future[A | None]


@dataclass(frozen=True, eq=False)
class BrokerResponse:
    """A broker's answer to a LeaderAndIsr that tells about failed log directories."""

    broker_id: int
    request: m.LeaderAndIsrRequest
    response: LeaderAndIsrResponse


WatchEvent = (ControllerChange | BrokerChange | TopicChange | PartitionModification | TopicDeletion | LogDirEvent
              | ZkReassignment | AutoRebalance)
Event = WatchEvent | Stop | SessionLost | BrokerRequest[Any] | BrokerResponse

EVENT_ORDER: tuple[WatchEvent, ...] = (
    ControllerChange(), BrokerChange(), TopicChange(), PartitionModification(), TopicDeletion(), LogDirEvent(),
    ZkReassignment(), AutoRebalance(),
)
"""Coalesced watch events are handled in this order (Kafka's: the controller first, then brokers,
topics, deletions)."""

_answer_now: contextvars.ContextVar[Callable[[Any], object] | None] = contextvars.ContextVar("answer_now", default=None)
"""While a broker's request is decided: answers it at once (`_execute`, once its writes are in)."""


class Deposed(Exception):
    """This controller must stop acting (reason in the message)."""


class KafkaController:
    def __init__(self, config: ControllerConfig, *, request_timeout: float = 30.0,
                 on_response: Callable[[int, object, object], None] | None = None, stop_grace: float = 10.0) -> None:
        self.config = config
        self._zk_security = zk_security.from_config(config)
        self.stop_grace = stop_grace
        self.controller_id = config.controller_id
        self.request_timeout = request_timeout
        self.on_response = on_response
        self.context: ControllerContext | None = None
        self.channels: ControllerChannelManager | None = None
        self.active = asyncio.Event()
        """Set while this process is the active controller (for tests and status)."""
        self._stopping = asyncio.Event()
        self._stopping_threads = threading.Event()
        """The same, for blocking ZooKeeper calls in worker threads."""
        self.zk_threads = BlockingExecutor("zookeeper", ZOOKEEPER_THREADS)
        """Where the blocking ZooKeeper calls run (not asyncio's shared default executor);
        stopped when run() ends."""
        self.build_threads = BlockingExecutor("controller-build", 1)
        """Where a decision's requests are built, off the event loop (stopped when run() ends)."""
        self._events: asyncio.Queue[Event] = asyncio.Queue()
        self._modified_topics: set[str] = set()
        self._connected = asyncio.Event()
        self._generation = 0
        self._acting: asyncio.Task[None] | None = None
        self._deposed_reason: str | None = None
        self._suspended_timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.listener: SocketServer | None = None
        self.cert_watcher = CertificateWatcher()
        """Reloads the TLS certificates of the listener and of the channels to brokers."""
        self._broker_security: dict[str, ClientSecurity] = {}
        self._listener_endpoint: EndPoint | None = None
        """Published in /controller: where brokers find the active controller's listener."""
        self._inflight: set[asyncio.Future[Any]] = set()
        """The futures of the requests submitted and not answered (each API its answer type)."""
        self.stats = ControllerStats()

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        """The loop run() runs on: ZooKeeper's threads post to it."""
        if self._loop is None:
            raise RuntimeError("KafkaController.run() has not started")
        return self._loop

    def _active_context(self) -> ControllerContext:
        """The context while active (set by _act before any event is handled)."""
        if self.context is None:
            raise Deposed("not the active controller")
        return self.context

    def _active_channels(self) -> ControllerChannelManager:
        if self.channels is None:
            raise Deposed("not the active controller")
        return self.channels

    def readiness(self) -> tuple[bool, dict[str, object]]:
        """GET /readyz (the pod's readiness probe): ready while its ZooKeeper session is connected,
        as the active controller or as a standby ready to take over."""
        connected = self._connected.is_set()
        role = "active" if self.active.is_set() else "standby" if connected else "disconnected"
        return connected, {"controllerId": self.controller_id, "role": role}

    # --- lifecycle -----------------------------------------------------------------------------

    def stop(self) -> None:
        """Ask run() to resign and return (safe from a signal handler)."""
        self._stopping.set()
        self._stopping_threads.set()
        self._post(self._generation, Stop())

    async def start_listener(self) -> EndPoint | None:
        """Bind the first listener (port 0 → any free port); standbys answer NOT_CONTROLLER."""
        ep = controller_endpoint(self.config)
        if ep is None or self.listener is not None:
            return self._listener_endpoint
        security = listener_security(self.config, ep.listener, self.cert_watcher)
        self.listener = SocketServer(ep.host, ep.port, ControllerApis(self).handle, MAX_REQUEST_BYTES,
                                     listener=ep.listener, security=security)
        port = await self.listener.start()
        self.cert_watcher.start()
        self._listener_endpoint = EndPoint(ep.host, port, ep.listener, security.security_protocol)
        log.info("controller %d: listening on %s", self.controller_id, self._listener_endpoint.url())
        return self._listener_endpoint

    def _security_to_brokers(self, security_protocol: str) -> ClientSecurity:
        """How to reach a broker's control-plane listener (its protocol from the broker's
        registration), with this controller's settings for that listener name."""
        security = self._broker_security.get(security_protocol)
        if security is None:
            security = self._broker_security[security_protocol] = outgoing_security(
                self.config, self.config.control_plane_listener_name, security_protocol, self.cert_watcher)
        return security

    # --- the broker requests the listener hands over (controller_apis.Submitter) ------------------

    async def alter_partition(self, request: m.AlterPartitionRequest) -> sm.AlterPartitionAnswer | None:
        async def decide(zk: ControllerZkClient) -> sm.AlterPartitionAnswer | None:
            changes = isr_changes(request)
            d = await self._execute(zk, lambda ctx: sm.on_alter_partition(
                ctx, request.broker_id, request.broker_epoch, changes))
            await self._reassignment_progress(zk, [c.tp for c in changes])
            return d.answer

        return await self._submit(ApiKey.ALTER_PARTITION, decide)

    async def controlled_shutdown(self, request: m.ControlledShutdownRequest) -> sm.ControlledShutdownAnswer | None:
        async def decide(zk: ControllerZkClient) -> sm.ControlledShutdownAnswer | None:
            log.info("controlled shutdown of broker %d", request.broker_id)
            d = await self._execute(zk, lambda ctx: sm.on_controlled_shutdown(
                ctx, request.broker_id, request.broker_epoch), answer_when_written=True)
            if d.answer is not None and d.answer.remaining:
                log.info("broker %d still leads %s", request.broker_id, [str(tp) for tp in d.answer.remaining])
            return d.answer

        return await self._submit(ApiKey.CONTROLLED_SHUTDOWN, decide)

    async def alter_reassignments(self, targets: Mapping[TopicPartition, tuple[int, ...] | None]) -> ra.Results | None:
        async def decide(zk: ControllerZkClient) -> ra.Results | None:
            d = await self._execute(zk, lambda ctx: ra.on_reassign(ctx, targets))
            for tp, result in sorted((d.answer or {}).items()):
                log.info("reassignment of %s to %s: %s", tp, targets[tp], result.message or "started")
            await self._reassignment_progress(zk, list(targets))
            return d.answer

        return await self._submit(ApiKey.ALTER_PARTITION_REASSIGNMENTS, decide)

    async def elect_leaders(self, election_type: int, tps: list[TopicPartition] | None) -> ra.Results | None:
        async def decide(zk: ControllerZkClient) -> ra.Results | None:
            d = await self._execute(zk, lambda ctx: el.on_elect_leaders(ctx, election_type, tps))
            if d.state_writes:
                log.info("%s leader election: moved %s", "unclean" if election_type == el.UNCLEAN else "preferred",
                         [str(w.tp) for w in d.state_writes])
            return d.answer

        return await self._submit(ApiKey.ELECT_LEADERS, decide)

    async def list_reassignments(self, tps: list[TopicPartition] | None
                                 ) -> dict[TopicPartition, ReplicaAssignment] | None:
        async def decide(zk: ControllerZkClient) -> dict[TopicPartition, ReplicaAssignment] | None:
            return ra.list_reassignments(self._active_context(), tps)

        return await self._submit(ApiKey.LIST_PARTITION_REASSIGNMENTS, decide)

    async def _submit(self, api_key: int, decide: Callable[[ControllerZkClient], Awaitable[A | None]]) -> A | None:
        """A broker's request, decided by the active controller's event loop; None when this
        controller is not active or was deposed before deciding (the broker hears NOT_CONTROLLER)."""
        if not self.active.is_set():
            return None
        future: asyncio.Future[A | None] = asyncio.get_running_loop().create_future()
        self._inflight.add(future)
        self._events.put_nowait(BrokerRequest(api_key, decide, future))
        try:
            return await asyncio.wait_for(asyncio.shield(future), self.request_timeout)
        except TimeoutError:
            return None
        finally:
            self._inflight.discard(future)

    def _fail_inflight(self) -> None:
        for future in list(self._inflight):
            if not future.done():
                future.set_result(None)

    async def run(self) -> None:
        self._loop = asyncio.get_running_loop()
        try:
            await self.start_listener()
            await self._run_sessions()
        finally:
            await self.cert_watcher.stop()
            if self.listener is not None:
                await self.listener.stop()
                self.listener = None
            if not await self.zk_threads.aclose(THREADS_STOP_S):
                log.warning("controller %d: %d ZooKeeper worker threads still running after %.0fs",
                            self.controller_id, self.zk_threads.alive(), THREADS_STOP_S)
            await self.build_threads.aclose(THREADS_STOP_S)

    async def _run_sessions(self) -> None:
        backoff = 0.1
        while not self._stopping.is_set():
            try:
                await self._session_until_stopped()
                backoff = 0.1
            except Exception:
                log.exception("controller %d: session failed; starting over in %.1fs", self.controller_id, backoff)
                try:
                    await asyncio.wait_for(self._stopping.wait(), backoff)
                except TimeoutError:
                    pass
                backoff = min(backoff * 2, 5.0)
        log.info("controller %d stopped", self.controller_id)

    async def _session_until_stopped(self) -> None:
        """A session, cut short `stop_grace` seconds after stop() if it is stuck (ZooKeeper down)."""
        grace = self.stop_grace
        session = asyncio.create_task(self._session(), name="controller-session")
        stopping = asyncio.create_task(self._stopping.wait())
        try:
            await asyncio.wait({session, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if not session.done():
                done, _ = await asyncio.wait({session}, timeout=grace)
                if not done:
                    log.warning("controller %d: session did not end %.0fs after stop; abandoning it",
                                self.controller_id, grace)
                    session.cancel()
                    await asyncio.wait({session}, timeout=grace)
                    return
            session.result()
        finally:
            stopping.cancel()
            if not session.done():
                session.cancel()

    async def _session(self) -> None:
        """One ZooKeeper session: candidate, standby or active, until it ends."""
        self._generation += 1
        gen = self._generation
        self._events = asyncio.Queue()
        self._modified_topics = set()
        self._connected.clear()
        self._deposed_reason = None
        zk = ControllerZkClient(
            self.config.zookeeper_connect, self.config.zookeeper_session_timeout_ms,
            self.config.zookeeper_connection_timeout_ms, abort=self._stopping_threads,
            security=self._zk_security,
        )
        try:
            await self.zk_threads.run(zk.start, self._stopping_threads)
            self._connected.set()
            loop = self._running_loop()

            def on_state(state: str) -> None:
                loop.call_soon_threadsafe(self._on_zk_state, gen, state)

            zk.add_listener(on_state)
            while not self._stopping.is_set() and self._deposed_reason is None:
                won = await self.zk_threads.run(zk.elect, ControllerInfo(self.controller_id, self._listener_endpoint))
                if won is not None:
                    await self._run_active(zk, gen, *won)
                    return  # deposed or stopping: a fresh session either way
                holder = await self.zk_threads.run(zk.controller, self._watch(gen, ControllerChange()))
                if holder is None:
                    continue
                log.info("controller %d: standby (active: %d)", self.controller_id, holder[0].controller_id)
                if isinstance(await self._events.get(), SessionLost):
                    return
        finally:
            self._cancel_suspended_timer()
            self._generation += 1  # stale watches and listeners of this session are ignored
            await self.zk_threads.run(zk.close)

    # --- ZooKeeper callbacks (kazoo thread → loop) ------------------------------------------------

    def _watch(self, gen: int, event: WatchEvent) -> Callable[[object], None]:
        loop = self._running_loop()

        def watcher(_event: object) -> None:
            loop.call_soon_threadsafe(self._post, gen, event)

        return watcher

    def _topic_watch(self, gen: int) -> Callable[[str], Callable[[object], None]]:
        """topic → the data watch of its assignment znode (one per read; ZooKeeper fires it once)."""
        loop = self._running_loop()

        def watch_of(topic: str) -> Callable[[object], None]:
            def watcher(_event: object) -> None:
                loop.call_soon_threadsafe(self._post_modified, gen, topic)

            return watcher

        return watch_of

    def _post_modified(self, gen: int, topic: str) -> None:
        if gen == self._generation:
            self._modified_topics.add(topic)
            self._events.put_nowait(PartitionModification())

    def _post(self, gen: int, event: WatchEvent | Stop | BrokerResponse) -> None:
        if gen == self._generation or isinstance(event, Stop):
            self._events.put_nowait(event)

    def _on_zk_state(self, gen: int, state: str) -> None:
        if gen != self._generation:
            return
        if state == KazooState.SUSPENDED:
            log.warning("controller %d: ZooKeeper connection suspended; pausing", self.controller_id)
            self._connected.clear()
            if self._suspended_timer is None:
                # the server expires the session after its timeout: by then someone else may act
                self._suspended_timer = self._running_loop().call_later(
                    self.config.zookeeper_session_timeout_ms / 1000 * 0.8, self._depose, gen, "session presumed expired"
                )
        elif state == KazooState.CONNECTED:
            self._cancel_suspended_timer()
            self._connected.set()
        elif state == KazooState.LOST:
            self._depose(gen, "ZooKeeper session lost")

    def _on_channel_response(self, gen: int, broker_id: int, request: Any, response: object) -> None:
        """Every broker answer: to the test hook, and LeaderAndIsr answers that speak of failed
        log directories (KAFKA_STORAGE_ERROR, or a broker with replicas known offline) to the
        event queue."""
        if self.on_response is not None:
            self.on_response(broker_id, request, response)
        if (not isinstance(request, m.LeaderAndIsrRequest) or not isinstance(response, LeaderAndIsrResponse)
                or response.error_code != ErrorCode.none):
            return
        ctx = self.context
        if any(e.error_code == ErrorCode.kafka_storage_error for e in response.partition_errors) or (
                ctx is not None and broker_id in ctx.replicas_on_offline_dirs):
            self._post(gen, BrokerResponse(broker_id, request, response))

    def _cancel_suspended_timer(self) -> None:
        if self._suspended_timer is not None:
            self._suspended_timer.cancel()
            self._suspended_timer = None

    def _depose(self, gen: int, reason: str, *, cancel: bool = True) -> None:
        """Stop acting at once: no request leaves after this returns."""
        if gen != self._generation or self._deposed_reason is not None:
            return
        self._deposed_reason = reason
        self._suspended_timer = None
        if self.active.is_set():
            log.warning("controller %d: deposed (%s); stopping at once", self.controller_id, reason)
        self.active.clear()
        if self.channels is not None:
            self.channels.abort()
        if cancel and self._acting is not None:
            self._acting.cancel()
        self._events.put_nowait(SessionLost())

    # --- active ---------------------------------------------------------------------------------

    async def _run_active(self, zk: ControllerZkClient, gen: int, epoch: int, epoch_zk_version: int) -> None:
        log.info("controller %d: elected, epoch %d", self.controller_id, epoch)
        self.stats.controller_elections += 1
        self.channels = ControllerChannelManager(
            self.controller_id, listener=self.config.control_plane_listener_name, request_timeout=self.request_timeout,
            security_for=self._security_to_brokers,
            gate=self._connected,
            on_response=lambda b, request, response: self._on_channel_response(gen, b, request, response),
        )
        self._acting = asyncio.create_task(self._act(zk, gen, epoch, epoch_zk_version), name="controller-active")
        try:
            await self._acting
        except asyncio.CancelledError:
            if self._deposed_reason is None:  # our own caller is being cancelled
                self._acting.cancel()
                raise
        except (Deposed, ControllerMovedError) as e:
            self._depose(gen, str(e), cancel=False)
        finally:
            self._acting = None
            self.active.clear()
            self._fail_inflight()
            channels, self.channels = self.channels, None
            if channels is not None:
                await channels.close()
            self.context = None
            if self._stopping.is_set() and self._deposed_reason is None:
                try:
                    await self.zk_threads.run(zk.resign)
                    log.info("controller %d: resigned", self.controller_id)
                except (TimeoutError, ConnectionError) as e:
                    log.warning("controller %d: could not resign (%r); /controller goes when the session "
                                "expires", self.controller_id, e)

    async def _act(self, zk: ControllerZkClient, gen: int, epoch: int, epoch_zk_version: int) -> None:
        ctx = await self.zk_threads.run(
            zk.load_context, self.controller_id, epoch, epoch_zk_version,
            brokers_watch=self._watch(gen, BrokerChange()), topics_watch=self._watch(gen, TopicChange()),
            deletions_watch=self._watch(gen, TopicDeletion()), topic_watch=self._topic_watch(gen),
        )
        ctx.unclean_leader_election = self.config.unclean_leader_election_enable
        ctx.inter_broker_listener = self.config.inter_broker_listener_name
        self.context = ctx
        self._active_channels().update_brokers(ctx.live_brokers)
        await self._execute(zk, sm.on_controller_failover)
        if await self.zk_threads.run(zk.controller, self._watch(gen, ControllerChange())) is None:
            raise Deposed("/controller vanished")
        self.active.set()
        log.info("controller %d: active with %d brokers, %d topics", self.controller_id,
                 len(ctx.live_brokers), len(ctx.assignments))
        await self._handle(zk, gen, LogDirEvent())  # notifications left from before; sets the watch
        await self._handle(zk, gen, ZkReassignment())  # likewise
        await self._reassignment_progress(zk)  # reassignments the previous controller left
        rebalance = None
        if self.config.auto_leader_rebalance_enable:
            rebalance = asyncio.create_task(self._rebalance_timer(gen), name="controller-rebalance-timer")
        try:
            while True:
                items = [await self._events.get()]
                while not self._events.empty():
                    items.append(self._events.get_nowait())
                pending = {e for e in items if not isinstance(e, BrokerRequest | BrokerResponse)}
                requests = [e for e in items if isinstance(e, BrokerRequest)]
                responses = [e for e in items if isinstance(e, BrokerResponse)]
                if Stop() in pending:
                    return
                if SessionLost() in pending:
                    raise Deposed(self._deposed_reason or "session lost")
                if not await self._until_connected():
                    return  # stopping while ZooKeeper is unreachable
                for event in EVENT_ORDER:
                    if event in pending:
                        await self._handle(zk, gen, event)
                for response in responses:
                    await self._handle_response(zk, response)
                for request in requests:
                    await self._handle_request(zk, request)
        finally:
            if rebalance is not None:
                rebalance.cancel()

    async def _until_connected(self) -> bool:
        """Wait for the ZooKeeper connection; False when stop() comes first (a controller asked to
        stop during an outage must not wait for ZooKeeper to return)."""
        if self._connected.is_set():
            return True
        waiters = {asyncio.create_task(self._connected.wait()), asyncio.create_task(self._stopping.wait())}
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waiters:
                w.cancel()
        return not self._stopping.is_set()

    async def _rebalance_timer(self, gen: int) -> None:
        """Kafka's auto leader rebalance task: every leader.imbalance.check.interval.seconds."""
        while True:
            await asyncio.sleep(self.config.leader_imbalance_check_interval_seconds)
            self._post(gen, AutoRebalance())

    async def _handle_request(self, zk: ControllerZkClient, request: BrokerRequest[A]) -> None:
        if request.future.done():  # the broker gave up waiting
            return
        self.stats.event(request_event_name(request.api_key))

        def answer_now(answer: A | None) -> None:
            if not request.future.done():
                request.future.set_result(answer)

        token = _answer_now.set(answer_now)
        try:
            answer_now(await request.decide(zk))
        finally:
            _answer_now.reset(token)

    async def _reassignment_progress(self, zk: ControllerZkClient, tps: list[TopicPartition] | None = None) -> None:
        """Complete the reassignments (of `tps`, default all) whose targets are all in sync."""
        if ra.ongoing(self._active_context()):
            d = await self._execute(zk, lambda ctx: ra.on_reassignment_progress(ctx, tps))
            for w in d.final_assignment_writes:
                log.info("reassignment of %s completed", w)

    async def _handle_response(self, zk: ControllerZkClient, r: BrokerResponse) -> None:
        errors = [(TopicPartition(e.topic_name, int(e.partition_index)), e.error_code)
                  for e in r.response.partition_errors]
        d = await self._execute(zk, lambda ctx: sm.on_leader_and_isr_response(
            ctx, r.broker_id, int(r.request.broker_epoch), errors))
        if d.replicas_on_offline_dirs is not None:
            log.warning("broker %d: replicas on failed log directories: %s", r.broker_id,
                        sorted(str(tp) for tp in d.replicas_on_offline_dirs.get(r.broker_id, ())))

    async def _handle(self, zk: ControllerZkClient, gen: int, event: WatchEvent) -> None:
        self.stats.event(type(event).__name__)
        match event:
            case ControllerChange():
                holder = await self.zk_threads.run(zk.controller, self._watch(gen, event))
                if holder is None or holder[1] != zk.session_id:
                    raise Deposed("/controller is " + ("gone" if holder is None else f"held by {holder[0].controller_id}"))
            case BrokerChange():
                live = await self.zk_threads.run(zk.live_brokers, self._watch(gen, event))
                log.info("broker change: live brokers %s", sorted(live))
                await self._execute(zk, lambda ctx: sm.on_broker_change(ctx, live))
                await self._reassignment_progress(zk)
            case TopicChange():
                assignments = await self.zk_threads.run(zk.topic_assignments, self._watch(gen, event),
                                                      dict(self._active_context().assignments), self._topic_watch(gen))
                await self._execute(zk, lambda ctx: sm.on_topic_change(ctx, assignments))
            case PartitionModification():
                topics, self._modified_topics = self._modified_topics, set()
                changed = await self.zk_threads.run(zk.assignments_of, sorted(topics), self._topic_watch(gen))
                d = await self._execute(zk, lambda ctx: sm.on_partition_modification(ctx, changed))
                for topic, assignment in d.updated_assignments.items():
                    log.info("topic %s: now %d partitions", topic, len(assignment.partitions))
            case TopicDeletion():
                marked = await self.zk_threads.run(zk.delete_markers, self._watch(gen, event))
                if marked - set(self._active_context().assignments):
                    # a topic created and marked at once: learn of it first, or its marker looks stray
                    await self._handle(zk, gen, TopicChange())
                await self._execute(zk, lambda ctx: sm.on_topic_deletion(ctx, marked))
            case LogDirEvent():
                children, brokers = await self.zk_threads.run(zk.log_dir_events, self._watch(gen, event))
                if children:
                    log.warning("log directory failures announced by brokers %s", sorted(brokers))
                    await self._execute(zk, lambda ctx: sm.on_log_dir_event(ctx, brokers))
                    await self.zk_threads.run(zk.delete_log_dir_events, children, self._active_context().epoch_zk_version)
            case ZkReassignment():
                data = await self.zk_threads.run(zk.reassign_partitions, self._watch(gen, event))
                try:
                    wanted = {} if data is None else ra.decode_reassign_partitions(data)
                except ValueError as e:
                    log.error("ignoring %s: unreadable (%s): %r", z.REASSIGN_PARTITIONS, e, (data or b"")[:200])
                    return
                self._active_context().zk_reassignment = wanted
                if wanted:
                    started = await self._execute(zk, ra.on_zk_reassignment)
                    for tp, result in sorted((started.answer or {}).items()):
                        log.info("reassignment of %s (from %s): %s", tp, z.REASSIGN_PARTITIONS, result.message or "started")
                    await self._reassignment_progress(zk, list(wanted))
            case AutoRebalance():
                pct = self.config.leader_imbalance_per_broker_percentage
                d = await self._execute(zk, lambda ctx: sm.on_auto_leader_rebalance(ctx, pct))
                if d.state_writes:
                    log.info("preferred leader election: moved %s", [str(w.tp) for w in d.state_writes])

    async def _execute(self, zk: ControllerZkClient, decide: Callable[[ControllerContext], D],
                       answer_when_written: bool = False) -> D:
        """Decide, write with compare-and-set, re-read and re-decide on conflicts, then apply the
        decisions to the context and queue the requests (the order the Decisions define). The
        requests are built on a thread of their own (0.56 s at 18,000 partitions, quiet), the loop
        meanwhile free; with `answer_when_written` the broker that asked is answered before that
        (the controlled shutdown: it waits for nothing the requests carry)."""
        ctx = self._active_context()
        loop = asyncio.get_running_loop()
        for _ in range(MAX_DECISION_ATTEMPTS):
            started = loop.time()
            d = decide(ctx)
            decided = loop.time()
            if d.deposed:
                raise Deposed("a partition state was written by a newer controller")
            if d.assignment_writes:  # a started reassignment is recorded before anything else
                await self.zk_threads.run(zk.write_assignments, d.assignment_writes, ctx.epoch_zk_version)
            if d.state_writes:
                result = await self.zk_threads.run(zk.write_states, d.state_writes, ctx.epoch_zk_version)
                if loop.time() - started >= SLOW_DECISION_S:
                    log.info("a decision took %.2fs to make and %.2fs to write %d partition states",
                             decided - started, loop.time() - decided, len(d.state_writes))
                for w in result.applied:
                    old = ctx.partition_states.get(w.tp)
                    if w.state.leader >= 0 and (old is None or old.leader != w.state.leader):
                        self.stats.leader_elections += 1
                        if w.state.leader not in (old.isr if old is not None else (w.state.leader,)):
                            self.stats.unclean_leader_elections += 1
                    ctx.partition_states[w.tp] = w.state
                if result.conflicts:
                    log.info("partition state conflicts on %s; re-reading", [str(tp) for tp in result.conflicts])
                    fresh = await self.zk_threads.run(zk.partition_states, result.conflicts)
                    for tp in result.conflicts:
                        if tp in fresh:
                            ctx.partition_states[tp] = fresh[tp]
                        else:
                            ctx.partition_states.pop(tp, None)
                    continue
            answer = _answer_now.get()
            if answer_when_written and answer is not None and isinstance(d, sm.Answering):
                answer(d.answer)
            if d.batch is not None:
                # the context stays as decided meanwhile: only this task changes it
                await self.build_threads.run(d.build_requests)
            if d.live_brokers is not None:
                self._active_channels().update_brokers(d.live_brokers)
            self._send(d.requests)
            if d.final_assignment_writes:
                await self.zk_threads.run(zk.write_assignments, d.final_assignment_writes, ctx.epoch_zk_version)
            for path in d.zk_deletes:
                await self.zk_threads.run(zk.delete_recursive, path, ctx.epoch_zk_version)
            if d.reassign_znode is not None and d.reassign_znode != ctx.zk_reassignment:
                await self.zk_threads.run(zk.write_reassign_partitions, ra.encode_reassign_partitions(d.reassign_znode)
                                        if d.reassign_znode else None, ctx.epoch_zk_version)
            self._send(d.final_requests)
            sm.apply_decisions(ctx, d)
            for t in d.added_topics:
                log.info("topic %s: %d partitions online", t, len(d.added_topics[t].partitions))
            for t in d.removed_topics:
                log.info("topic %s deleted", t)
            return d
        raise Deposed(f"gave up after {MAX_DECISION_ATTEMPTS} compare-and-set conflicts; reloading")

    def _send(self, requests: list[sm.Request]) -> None:
        if not requests:
            return
        channels = self._active_channels()
        for broker_id, payload in requests:
            channels.send(broker_id, payload)


def controller_endpoint(config: ControllerConfig) -> EndPoint | None:
    """The first listener of the controller's config, for when it serves broker requests."""
    listeners = parse_listeners(config.listeners)
    if not listeners:
        return None
    name, host, port = listeners[0]
    return EndPoint(host, port, name)

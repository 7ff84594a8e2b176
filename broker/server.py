"""KafkaServer: wires the broker's parts together, and `odradek broker` (main).

Start-up order follows Kafka's: ZooKeeper → logs (recovery, each with its topic's config from
ZooKeeper) → metadata cache → replica manager → APIs → listeners bound → the control-plane
listener serves → registration in `/brokers/ids/<id>` (so the controller never sends requests to a
broker that cannot answer them) → the client listeners serve once the controller's first
UpdateMetadata arrived (Kafka starts its data plane only after registering; until then a client
would get an empty cluster, and a Metadata naming a topic would "auto-create" it: its connection
is refused instead, and it asks another broker). SIGTERM/SIGINT first run the
controlled shutdown (the controller moves our leaderships away while we keep serving), then stop
accepting, close the ZooKeeper session (the registration goes at once), and shut the logs down.
"""

import argparse
import asyncio
import faulthandler
import gc
import logging
import signal
import sys
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i32, i64

from odradek.broker import components
from odradek.broker.components import BrokerComponents
from odradek.broker.dynamic_config import DynamicBrokerConfig
from odradek.broker.error_response import error_response
from odradek.broker.group import txn_offsets
from odradek.broker.group.group_coordinator import GroupCoordinator
from odradek.broker.group.offsets_topic import GROUP_METADATA_TOPIC_NAME
from odradek.broker.log import LogManager
from odradek.broker.metadata_cache import MetadataCache
from odradek.broker.metrics import RequestStats, metered, state_families
from odradek.broker.quota.quota_managers import QuotaManagers
from odradek.broker.replica_manager import ReplicaManager
from odradek.broker.security.credential_cache import CredentialCache
from odradek.broker.security.listeners import check_sasl_listeners, sasl_listener_handler
from odradek.broker.transaction.marker_writer import TxnMarker
from odradek.broker.transaction.transaction_coordinator import TransactionCoordinator
from odradek.broker.transaction.transaction_state_manager import TRANSACTION_STATE_TOPIC_NAME
from odradek.broker.zk_client import BrokerZkClient
from odradek.common import messages, open_files, process_logging, zk_security
from odradek.common.bounded_exit import end_leftover_tasks, exit_after_clean_shutdown, within
from odradek.common.clock import Clock, now_ms
from odradek.common.config import BrokerConfig, load_properties, parse_listeners, parse_protocol_map
from odradek.common.config_def import ConfigException
from odradek.common.metrics import MetricsServer, Registry
from odradek.common.network.socket_server import ConnectionLimits, SocketServer
from odradek.common.security.channel import ClientSecurity
from odradek.common.security.listeners import (
    check_listener_security,
    listener_security,
    outgoing_security,
    reconfigure_listener_ssl,
)
from odradek.common.security.reload import CertificateWatcher, ReloadingSslContext
from odradek.common.security.sasl_client import sasl_properties
from odradek.common.security.ssl_factory import SECURITY_PROTOCOLS
from odradek.common.zk_data import DEFAULT_ENTITY, BrokerInfo, EndPoint

log = logging.getLogger(__name__)

CONTROLLED_SHUTDOWN_MAX_S = 25.0
"""However the retries are configured, SIGTERM never waits longer than this for the controller."""
NO_CONTROLLER_WAIT_S = 2.0
"""With no controller registered at all, how long a controlled shutdown waits for one."""
SHUTDOWN_STACKS_AFTER_S = 10.0
"""A shutdown still running after this dumps every thread's stack to stderr (the broker's log):
a stop slower than test harnesses wait (15 s) then shows where it waits, even on a blocked loop."""
LOG_IO_STOP_S = 5.0
"""After the logs are closed, how long the stop waits for log disk jobs still running (a stuck
fsync on a failing disk is left behind, said in the log, rather than holding the stop)."""
DATA_PLANE_WAIT_LOG_S = 30.0
"""While the client listeners wait for the controller's first UpdateMetadata, a line this often."""


def connection_limits(config: BrokerConfig) -> ConnectionLimits:
    return ConnectionLimits(config.max_connections, config.max_connections_per_ip,
                            config.connections_max_idle_ms, config.queued_max_request_bytes)


class KafkaServer:
    """One broker process: start-up order, the listeners, controlled shutdown, shutdown. The
    object graph itself is built in one place, broker/components.build."""

    def __init__(self, config: BrokerConfig, *, clock: Clock = now_ms):
        self.config = config
        self.clock = clock
        """The broker's one clock (Kafka's Time), handed to every component that reads the time."""
        self.credentials = CredentialCache()
        self.zk: BrokerZkClient | None = None
        self.components: BrokerComponents | None = None
        """The broker's parts, once start-up built them (broker/components)."""
        self.socket_servers: list[SocketServer] = []
        self.endpoints: list[EndPoint] = []
        self._stop_background = asyncio.Event()
        self._background: asyncio.Task[None] | None = None
        self._replica_background: asyncio.Task[None] | None = None
        self.dynamic_config = DynamicBrokerConfig.from_config(config)
        self._announcements: set[asyncio.Task[None]] = set()
        """Log directory failure notifications being written (retried while ZooKeeper is down)."""
        self.request_stats = RequestStats()
        self.cert_watcher = CertificateWatcher()
        """Reloads the certificates of TLS listeners and outgoing TLS connections when their files change."""
        self.listener_contexts: dict[str, ReloadingSslContext] = {}
        """Each TLS listener's context, rebuilt when its key store settings change dynamically."""
        self._controller_security: dict[str, ClientSecurity] = {}
        self.metrics = Registry()
        self.metrics_server: MetricsServer | None = None
        self._data_plane: asyncio.Task[None] | None = None

    # What the metrics and tests read of a running broker (None before start-up built it).

    @property
    def replica_manager(self) -> ReplicaManager | None:
        return self.components.replica_manager if self.components is not None else None

    @property
    def log_manager(self) -> LogManager | None:
        return self.components.log_manager if self.components is not None else None

    @property
    def group_coordinator(self) -> GroupCoordinator | None:
        return self.components.group_coordinator if self.components is not None else None

    @property
    def quotas(self) -> QuotaManagers | None:
        return self.components.quotas if self.components is not None else None

    @property
    def data_plane_servers(self) -> list[SocketServer]:
        """The client listeners: every listener but the control plane's."""
        return [s for s in self.socket_servers if s.listener != self.config.control_plane_listener_name]

    async def startup(self) -> None:
        config = self.config
        listeners = parse_listeners(config.listeners)
        check_listeners(config)
        inter_broker = outgoing_security(config, config.inter_broker_listener,
                                         config.security_protocol(config.inter_broker_listener), self.cert_watcher)
        listener_securities = {name: listener_security(config, name, self.cert_watcher, self.listener_contexts)
                               for name, _, _ in listeners}
        zk = self.zk = BrokerZkClient(config)
        await zk.start()
        await self._load_dynamic_configs(zk)
        parts = self.components = components.build(
            config, zk, self.dynamic_config, self.credentials, self.clock, inter_broker,
            self._security_to_controller, self._drop_connections_on_fencing)
        if parts.acl_authorizer is not None:
            await parts.acl_authorizer.start()
            own = {name: config.security_protocol(name)
                   for name in (config.control_plane_listener_name, config.inter_broker_listener)}
            for name in parts.acl_authorizer.unauthenticated_peers_refused(own):
                log.warning("listener %s is PLAINTEXT: the controller's and the brokers' requests there come as "
                            "User:ANONYMOUS, which has no CLUSTER_ACTION on the Cluster; they will be refused "
                            "(grant it, or authenticate those listeners and list their users in super.users)", name)
        await self._load_logs(zk, parts.log_manager)
        parts.replica_manager.load_high_watermarks()
        parts.replica_manager.log_dir_failure_listeners.append(self._on_log_dir_failure)
        parts.alter_partition_manager.start()
        await parts.config_manager.start()
        await parts.credential_loader.load_all()
        await parts.quotas.load_all()
        parts.marker_writer.listeners.append(self._on_txn_marker)
        parts.apis.leader_and_isr_listeners.append(self._on_leader_and_isr)
        parts.apis.stop_replica_listeners.append(self._on_stop_replica)
        parts.group_coordinator.startup()
        parts.transaction_coordinator.startup()

        bound: dict[str, tuple[str, int]] = {}
        protocols = parse_protocol_map(config.listener_security_protocol_map)
        limits = connection_limits(self.dynamic_config.current)
        for name, host, port in listeners:
            security = listener_securities[name]
            handler = sasl_listener_handler(metered(parts.apis.handle, self.request_stats), name, protocols,
                                            sasl_properties(config), self.credentials, error_response, self.clock)
            server = SocketServer(host, port, handler, config.socket_request_max_bytes, listener=name,
                                  limits=limits, security=security, writable_frames=True)
            server.connection_rate = parts.quotas.connection_throttle_ms  # every listener, as Kafka's
            control_plane = name == config.control_plane_listener_name
            bound_port = await server.start(serving=control_plane)
            bound[name] = (host, bound_port)
            self.socket_servers.append(server)
            if control_plane:
                log.info("listening on %s://%s:%d (%s)", name, host, bound_port, security.security_protocol)
            else:
                log.info("bound %s://%s:%d (%s); clients are served once registered with the controller's metadata",
                         name, host, bound_port, security.security_protocol)
        self.cert_watcher.start()
        parts.config_manager.reconfigure_listeners.append(self._reconfigure_listeners)

        self.endpoints = self._advertised_endpoints(bound)
        await self._start_metrics(parts)
        epoch = await zk.register_broker(BrokerInfo(config.broker_id, tuple(self.endpoints), config.broker_rack))
        if parts.log_manager.offline_dirs:  # failed to load: the controller must not lead from them
            self._announce_log_dir_failure()
        self._background = asyncio.get_running_loop().create_task(
            parts.log_manager.run_background(self._stop_background)
        )
        self._replica_background = asyncio.get_running_loop().create_task(
            parts.replica_manager.run_background(self._stop_background)
        )
        self._data_plane = asyncio.get_running_loop().create_task(self._serve_clients_when_ready(parts.metadata_cache),
                                                                  name="data-plane-start")
        log.info("broker %d started (epoch %d)", config.broker_id, epoch)

    async def _serve_clients_when_ready(self, cache: MetadataCache) -> None:
        """Kafka's startProcessingRequests for the data plane, once this broker is registered (it
        is: called after registering) and knows the cluster (the controller's first UpdateMetadata,
        sent to a broker as soon as it sees it registered). Waits as long as no controller
        answers: clients use the other brokers meanwhile. Cancelled by shutdown."""
        waited = 0.0
        while not await cache.wait_for(lambda: cache.initialized, DATA_PLANE_WAIT_LOG_S):
            waited += DATA_PLANE_WAIT_LOG_S
            log.info("broker %d: no UpdateMetadata from a controller after %.0fs; client listeners stay closed",
                     self.config.broker_id, waited)
        for server in self.data_plane_servers:
            await server.start_serving()
            log.info("listening on %s://%s:%d (clients)", server.listener, server.host, server.port)

    async def _start_metrics(self, parts: BrokerComponents) -> None:
        """The Prometheus endpoint (metrics.port), before registration: scraped from the start."""
        self.metrics.register(parts.replica_manager.stats.families)
        self.metrics.register(self.request_stats.families)
        self.metrics.register(lambda: state_families(self))
        self.metrics.register(parts.quotas.families)
        if self.config.metrics_port >= 0:
            self.metrics_server = MetricsServer(self.metrics, self.config.metrics_host, self.config.metrics_port,
                                                readiness=self.readiness)
            await self.metrics_server.start()
            log.info("metrics on %s", self.metrics_server.url)

    def readiness(self) -> tuple[bool, dict[str, object]]:
        """GET /readyz (the pod's readiness probe): ready means what opening the client listeners
        means: registered in ZooKeeper (not fenced) and caught up with the cluster (the
        controller's first UpdateMetadata arrived), the client listeners serving."""
        registered = self.zk is not None and self.zk.registered
        caught_up = self.components is not None and self.components.metadata_cache.initialized
        serving = bool(self.data_plane_servers) and all(s.serving for s in self.data_plane_servers)
        return registered and caught_up and serving, {
            "brokerId": self.config.broker_id, "registered": registered, "caughtUp": caught_up, "serving": serving}

    def _reconfigure_listeners(self, config: BrokerConfig) -> None:
        """Dynamic max.connections and max.connections.per.ip: new connections are checked
        against the new limits, open ones stay (Kafka's DynamicConnectionQuota). A listener's
        dynamic key store settings: new connections get the new certificates."""
        limits = connection_limits(config)
        for server in self.socket_servers:
            server.limits = limits
        reconfigure_listener_ssl(config, self.listener_contexts)

    async def _load_dynamic_configs(self, zk: BrokerZkClient) -> None:
        """The cluster's and this broker's dynamic configs, before anything uses the config."""
        default = await zk.get_entity_config(f"brokers/{DEFAULT_ENTITY}")
        own = await zk.get_entity_config(f"brokers/{self.config.broker_id}")
        self.dynamic_config.update(default=default.config, broker=own.config)

    async def _load_logs(self, zk: BrokerZkClient, log_manager: LogManager) -> None:
        """Load the logs with their topics' configs from ZooKeeper (Kafka's LogManager does the
        same at start-up): a log loaded on the broker defaults would drop every topic override."""
        topics = await log_manager.io_threads.run(log_manager.topics_on_disk)
        reads = await zk.get_topic_configs(topics)
        overrides = {t: (read.mzxid, read.config) for t, read in reads.items()}
        await log_manager.io_threads.run(log_manager.startup, overrides)

    def _parts(self) -> BrokerComponents:
        """The broker's parts; the hooks below run only once start-up built them."""
        if self.components is None:
            raise RuntimeError("the broker is not started")
        return self.components

    def _on_txn_marker(self, marker: TxnMarker, written: list[tuple[str, int]]) -> None:
        """Markers on `__consumer_offsets` partitions complete transactional offset commits."""
        offsets_partitions = {p for t, p in written if t == GROUP_METADATA_TOPIC_NAME}
        if offsets_partitions:
            txn_offsets.complete_txn(self._parts().group_coordinator.manager, marker.producer_id, marker.commit,
                                     offsets_partitions)

    def _on_leader_and_isr(self, request: Any, response: Any) -> None:
        """Kafka's onLeadershipChange: elect or resign the coordinator of offsets partitions."""
        if response.error_code != 0:
            return
        failed = {(e.topic_name, int(e.partition_index)) for e in response.partition_errors if e.error_code != 0}
        parts = self._parts()
        rm = parts.replica_manager
        coordinators: dict[str, GroupCoordinator | TransactionCoordinator] = {
            GROUP_METADATA_TOPIC_NAME: parts.group_coordinator,
            TRANSACTION_STATE_TOPIC_NAME: parts.transaction_coordinator}
        for ts in request.topic_states:
            coordinator = coordinators.get(ts.topic_name)
            if coordinator is None:
                continue
            for ps in ts.partition_states:
                key = (ts.topic_name, int(ps.partition_index))
                if key in failed or rm.get_partition(key) is None:
                    continue
                if int(ps.leader) == self.config.broker_id:
                    coordinator.on_election(key[1], int(ps.leader_epoch))
                else:
                    coordinator.on_resignation(key[1])

    def _drop_connections_on_fencing(self, fenced: bool) -> None:
        """Fenced or unfenced, the same broker turns from leader to refusing writes, or back, in the
        same leader epoch, which Kafka's leaders never do. A produce in flight across that turn
        could be refused while a later one of the same producer is accepted: a sequence gap, after
        which an idempotent client (librdkafka) bumps its epoch and resends, under new sequence
        numbers, records it believes were refused but that the log already holds (duplicates). So
        every client connection is dropped at each turn: what was in flight is retried, in order,
        on a new connection, and a response computed across the turn is never sent. The controller's
        connection stays: a request of its may be waiting for this very registration (control_plane).
        The first registration drops nothing: the client listeners do not serve yet."""
        closed = sum(server.close_connections() for server in self.data_plane_servers)
        if closed or fenced:
            log.info("broker %d %s: dropped %d client connections", self.config.broker_id,
                     "fenced" if fenced else "unfenced", closed)

    def _on_log_dir_failure(self, log_dir: object, keys: list[tuple[str, int]]) -> None:
        """A log directory failed: resign the coordinators of its offsets partitions and tell the
        controller (through ZooKeeper, as Kafka does), which moves the leaderships away."""
        for topic, partition in keys:
            if topic == GROUP_METADATA_TOPIC_NAME:
                self._parts().group_coordinator.on_resignation(partition)
        self._announce_log_dir_failure()

    def _announce_log_dir_failure(self) -> None:
        if self.zk is None:
            return
        task = asyncio.get_running_loop().create_task(self.zk.propagate_log_dir_event(self.config.broker_id))
        self._announcements.add(task)
        task.add_done_callback(self._announcements.discard)

    def _on_stop_replica(self, request: Any, response: Any) -> None:
        parts = self._parts()
        for t in request.topics:
            if t.name == GROUP_METADATA_TOPIC_NAME:
                for p in t.partition_indexes:
                    parts.group_coordinator.on_resignation(int(p))
            elif t.name == TRANSACTION_STATE_TOPIC_NAME:
                for p in t.partition_indexes:
                    parts.transaction_coordinator.on_resignation(int(p))

    def _security_to_controller(self, security_protocol: str) -> ClientSecurity:
        """How to reach the controller's listener (its protocol is in `/controller`): with this
        broker's settings of its control-plane listener (the credentials of controller traffic)."""
        security = self._controller_security.get(security_protocol)
        if security is None:
            security = self._controller_security[security_protocol] = outgoing_security(
                self.config, self.config.control_plane_listener_name, security_protocol, self.cert_watcher)
        return security

    def _advertised_endpoints(self, bound: dict[str, tuple[str, int]]) -> list[EndPoint]:
        """advertised.listeners, else listeners; port 0 means the port actually bound."""
        source = self.config.advertised_listeners or self.config.listeners
        protocols = parse_protocol_map(self.config.listener_security_protocol_map)
        out = []
        for name, host, port in parse_listeners(source):
            if port == 0 and name in bound:
                port = bound[name][1]
            if host in ("", "0.0.0.0", "::") and name in bound:
                host = bound[name][0] if bound[name][0] not in ("", "0.0.0.0", "::") else "127.0.0.1"
            out.append(EndPoint(host=host, port=port, listener=name, security_protocol=protocols.get(name, "PLAINTEXT")))
        return out

    @property
    def port(self) -> int:
        return self.socket_servers[0].port

    @property
    def control_plane_port(self) -> int:
        return next(s.port for s in self.socket_servers if s.listener == self.config.control_plane_listener_name)

    async def controlled_shutdown(self) -> bool:
        """Kafka's controlled shutdown: ask the controller to move our leaderships away (and take us
        out of ISRs) while we still serve, so clients and followers switch before we go. Retries
        while partitions remain (controlled.shutdown.max.retries, .retry.backoff.ms), all within
        CONTROLLED_SHUTDOWN_MAX_S. True when the controller had nothing left for us."""
        config, parts = self.config, self.components
        if not config.controlled_shutdown_enable or parts is None or parts.replica_manager.broker_epoch < 0:
            return False
        rm, channel = parts.replica_manager, parts.shutdown_channel
        loop = asyncio.get_running_loop()
        deadline = loop.time() + CONTROLLED_SHUTDOWN_MAX_S
        request = messages.ControlledShutdownRequest(broker_id=i32(config.broker_id), broker_epoch=i64(rm.broker_epoch))
        attempts = 1 + max(0, config.controlled_shutdown_max_retries)
        for attempt in range(1, attempts + 1):
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            if not await self._controller_registered(min(NO_CONTROLLER_WAIT_S, remaining)):
                log.warning("controlled shutdown: no controller registered; shutting down without it")
                return False
            try:
                response = await channel.send(
                    request, min(remaining, config.controller_socket_timeout_ms / 1000))
            except (ConnectionError, TimeoutError, OSError) as e:
                log.warning("controlled shutdown attempt %d/%d: %s", attempt, attempts, e)
            else:
                if response.error_code == ErrorCode.none and not response.remaining_partitions:
                    log.info("controlled shutdown succeeded (attempt %d)", attempt)
                    return True
                log.info("controlled shutdown attempt %d/%d: %s, %d partitions remaining", attempt, attempts,
                         response.error_code.name, len(response.remaining_partitions))
                if response.error_code == ErrorCode.stale_broker_epoch:
                    break
                if response.error_code == ErrorCode.none and attempt < attempts:
                    keys = [(r.topic_name, int(r.partition_index)) for r in response.remaining_partitions]
                    backoff = min(config.controlled_shutdown_retry_backoff_ms / 1000, deadline - loop.time())
                    if await self._wait_unmovable(keys, backoff):
                        # no other ISR member: the other replicas are down or stopping too (a
                        # whole cluster stopping), the ordinary way for these to go offline
                        log.info("controlled shutdown: %d partitions have no other ISR member to move to; "
                                 "they go offline with this broker", len(keys))
                        return False
                    continue
            if attempt < attempts:
                await asyncio.sleep(max(0.0, min(config.controlled_shutdown_retry_backoff_ms / 1000,
                                                 deadline - loop.time())))
        log.warning("controlled shutdown did not complete; shutting down anyway")
        return False

    async def _controller_registered(self, timeout_s: float) -> bool:
        """Whether `/controller` names a controller, waiting at most `timeout_s` for one to
        appear. ZooKeeper not answering in that time counts as no: a controller could not move
        our leaderships without it either, so the shutdown goes on without one."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            try:
                if self.zk is not None and await self.zk.get_controller(
                        timeout_s=max(0.1, deadline - loop.time())) is not None:
                    return True
            except (TimeoutError, ConnectionError) as e:
                log.warning("controlled shutdown: ZooKeeper did not answer (%r)", e)
                return False
            except Exception:
                log.exception("controlled shutdown: cannot read /controller")
                return False
            if loop.time() >= deadline:
                return False
            await asyncio.sleep(0.1)

    async def _wait_unmovable(self, keys: list[tuple[str, int]], timeout_s: float) -> bool:
        """Wait out the retry backoff, but return True early once every remaining partition is led
        by us with an ISR of only us (after the controller's LeaderAndIsr landed): no replica
        could take over, so retrying cannot help (e.g. the whole cluster stopping at once)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0.0, timeout_s)
        me = self.config.broker_id
        rm = self._parts().replica_manager

        def unmovable(key: tuple[str, int]) -> bool:
            p = rm.get_partition(key)
            return p is not None and p.is_leader and set(p.isr) <= {me}

        while True:
            if keys and all(unmovable(k) for k in keys):
                return True
            if loop.time() >= deadline:
                return False
            await asyncio.sleep(0.05)

    async def shutdown(self) -> None:
        log.info("broker %d shutting down", self.config.broker_id)
        if self._data_plane is not None:
            self._data_plane.cancel()
        write_back = None
        if self.components is not None:
            self.components.replica_manager.stopping = True
            log_manager = self.components.log_manager
            write_back = asyncio.ensure_future(log_manager.io_threads.run(log_manager.write_back))
        handed_over = False
        if self.socket_servers:
            try:
                handed_over = await self.controlled_shutdown()
            except Exception:
                log.exception("controlled shutdown failed")
        # Nothing is served after the handover (Kafka's stopProcessingRequests): clients go to the
        # new leaders, and the controller's requests for us (LeaderAndIsr and UpdateMetadata of
        # every partition here, 2 s of the loop at 18,000) would only delay the stop.
        for server in self.socket_servers:
            await within(server.stop(), 5, f"closing the connections of port {server.port}", log)
        parts = self.components
        if parts is not None and handed_over:
            given_up = await parts.replica_manager.finish_handover()
            log.info("controlled shutdown: gave up leading %d partitions, stopped fetching", given_up)
        if parts is not None:
            await within(parts.alter_partition_manager.shutdown(), 5, "stopping the AlterPartition sender", log)
            await within(parts.config_manager.stop(), 5, "stopping the config change listener", log)
            if parts.acl_authorizer is not None:
                await within(parts.acl_authorizer.stop(), 5, "stopping the ACL change listener", log)
        await self.cert_watcher.stop()
        if parts is not None:
            parts.group_coordinator.shutdown()  # waiting joins/syncs end (their clients are gone already)
            await within(parts.transaction_coordinator.shutdown(), 5, "stopping the transaction coordinator", log)
            if parts.transaction_verifier is not None:
                await within(parts.transaction_verifier.close(), 5, "closing the transaction verifier", log)
        self._stop_background.set()
        if parts is not None:
            await within(parts.replica_manager.shutdown_async(), 20, "stopping the replica manager", log)
        log.info("broker %d: replica manager stopped", self.config.broker_id)
        if parts is not None:
            for channel in (parts.controller_channel, parts.forwarding_channel, parts.shutdown_channel):
                await within(channel.close(), 5, f"closing the {channel.purpose} channel", log)
        for task in list(self._announcements):
            task.cancel()
        if self.zk is not None:
            log.info("broker %d: closing the ZooKeeper session", self.config.broker_id)
            try:
                await self.zk.stop()
            except Exception:
                log.exception("closing the ZooKeeper session failed")
        for task in [t for t in (self._replica_background, self._background) if t is not None]:
            await within(task, 10, f"background task {task.get_name()}", log)
        if self.metrics_server is not None:
            await within(self.metrics_server.stop(), 5, "closing the metrics endpoint", log)
        if parts is not None:
            if write_back is not None:
                await within(write_back, 30, "the early write-back of the log directories", log)
            log.info("broker %d: closing %d logs", self.config.broker_id, len(parts.log_manager.all_logs()))
            await parts.log_manager.io_threads.run(parts.log_manager.shutdown)
            if not await parts.log_manager.io_threads.aclose(LOG_IO_STOP_S):
                log.warning("broker %d: %d log I/O threads still running after %.0fs", self.config.broker_id,
                            parts.log_manager.io_threads.alive(), LOG_IO_STOP_S)
        log.info("broker %d stopped", self.config.broker_id)


def check_listeners(config: BrokerConfig) -> None:
    """Kafka's listener rules, and the control plane's: every listener named in
    listener.security.protocol.map, control.plane.listener.name among the listeners and the
    advertised listeners, and it alone for controller requests (so not the only listener)."""
    listeners = parse_listeners(config.listeners)
    if not listeners:
        raise ValueError("listeners is empty")
    protocols = parse_protocol_map(config.listener_security_protocol_map)
    names = [name for name, _, _ in listeners]
    for name in names:
        if name not in protocols:
            raise ValueError(f"listener {name} is not in listener.security.protocol.map "
                             f"({config.listener_security_protocol_map})")
    plane = config.control_plane_listener_name
    if plane not in names:
        raise ValueError(f"control.plane.listener.name {plane} is not among listeners ({config.listeners}): "
                         "controller requests are accepted on that listener only")
    if len(set(names)) < 2:
        raise ValueError(f"listeners ({config.listeners}) need a client listener besides {plane}")
    inter_broker = config.inter_broker_listener
    advertised_names = ([name for name, _, _ in parse_listeners(config.advertised_listeners)]
                        if config.advertised_listeners else names)
    if inter_broker not in advertised_names:
        key = "inter.broker.listener.name" if config.inter_broker_listener_name else "security.inter.broker.protocol"
        raise ValueError(f"{key}: inter.broker.listener.name must be a listener name defined in advertised.listeners "
                         f"(the inter-broker listener {inter_broker} is not among {','.join(advertised_names)})")
    for name in names:
        if protocols[name] not in SECURITY_PROTOCOLS:
            raise ValueError(f"listener {name}: unknown security protocol {protocols[name]} "
                             "(PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL)")
    if config.advertised_listeners:
        advertised = [name for name, _, _ in parse_listeners(config.advertised_listeners)]
        if plane not in advertised:
            raise ValueError(f"advertised.listeners ({config.advertised_listeners}) must include {plane}: "
                             "the controller connects to it as advertised")


def freeze_startup_heap() -> None:
    """Takes what start-up built (modules, classes, the loaded logs and their state: objects that
    live as long as the process) out of the cyclic collector's reach (gc.freeze, as CPython
    advises for long-running servers). A full collection walked all of it on the event loop
    every few seconds under request load, 25-50 ms of CPU each time, a stall every answer waited
    for; it now walks what came later."""
    gc.collect()
    gc.freeze()


async def run(config: BrokerConfig) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    server = KafkaServer(config)
    startup = loop.create_task(server.startup())
    stopper = loop.create_task(stop.wait())
    await asyncio.wait({startup, stopper}, return_when=asyncio.FIRST_COMPLETED)
    code = 0
    if startup.done() and startup.exception() is not None:
        log.error("broker start-up failed", exc_info=startup.exception())
        code = 1
    elif not startup.done():
        startup.cancel()
        try:
            await startup
        except (asyncio.CancelledError, Exception):
            pass
    else:
        freeze_startup_heap()
        await stopper
    stopper.cancel()
    faulthandler.dump_traceback_later(SHUTDOWN_STACKS_AFTER_S)
    try:
        await server.shutdown()
        await end_leftover_tasks(5, log)
    finally:
        faulthandler.cancel_dump_traceback_later()
    return code


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="odradek broker", description="Run an Odradek broker.")
    parser.add_argument("--config", help="Kafka-style server.properties file")
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE", help="overrides a property")
    process_logging.add_arguments(parser)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    process_logging.configure(args, "broker")
    try:
        config = BrokerConfig.from_properties(load_properties(args.config, args.override))
        check_listener_security(config)
        check_sasl_listeners(config)
        zk_security.from_config(config)  # ZooKeeper identity and TLS: a bad one fails here, in one line
    except (ConfigException, OSError, ValueError) as e:  # one clear line, no traceback
        log.error("invalid configuration: %s", e)
        return 1
    soft, _hard = open_files.raise_soft_limit()
    log.info("open files limit %d (one per hosted replica, plus connections)", soft)
    code = asyncio.run(run(config))
    log.info("broker %d exiting (code %d)", config.broker_id, code)
    if code == 0:
        exit_after_clean_shutdown(code)
    return code


if __name__ == "__main__":
    sys.exit(main())

"""The cluster under attack: LocalCluster with ZooKeeper, each broker and each controller on a
network namespace of its own (when the machine allows: root and iproute2), and on every broker a
second log directory on a small tmpfs (when mounting is allowed) for the full-disk fault.

`NemesisCluster.open()` builds it all and `close()` removes it all, whatever state a run left.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from odradek.common import zk_data
from odradek.common.config import CONTROLLER_ID_BASE
from odradek.common.zk_connect import close_client, new_client
from odradek.dev.cluster import LocalCluster, ManagedProcess
from odradek.dev.netns import NetworkLab, unavailable_reason
from odradek.dev.security import ClusterSecurity
from odradek.dev.small_disk import FILLER, SmallDisk, can_mount
from odradek.dev.zookeeper import free_port, free_ports

SESSION_TIMEOUT_MS = 6000
SMALL_DISK_BYTES = 64 << 20
BROKER_OVERRIDES = {
    "zookeeper.session.timeout.ms": SESSION_TIMEOUT_MS,
    "min.insync.replicas": 2,
    "default.replication.factor": 3,
    "offsets.topic.replication.factor": 3,
    "replica.lag.time.max.ms": 5000,
    "controlled.shutdown.max.retries": 1,
    "controlled.shutdown.retry.backoff.ms": 1000,
}
CONTROLLER_OVERRIDES = {"zookeeper.session.timeout.ms": SESSION_TIMEOUT_MS}


class NemesisCluster:
    def __init__(self, data_dir: Path, brokers: int = 3, controllers: int = 2, use_netns: bool = True,
                 use_disks: bool = True, session_timeout_ms: int = SESSION_TIMEOUT_MS, tls: bool = False):
        self.data_dir = Path(data_dir)
        self.tls = tls
        """TLS on every path (`odradek dev --security`'s listeners, mTLS between the processes)."""
        self.session_timeout_ms = session_timeout_ms
        self.n_brokers = brokers
        self.n_controllers = controllers
        self.netns_reason = unavailable_reason() if use_netns else "namespaces not asked for"
        self.disk_reason = None if can_mount() else "mounting a tmpfs needs root"
        if not use_disks:
            self.disk_reason = "small disks not asked for"
        self.lab: NetworkLab | None = None
        self.disks: dict[int, SmallDisk] = {}
        self.cluster: LocalCluster | None = None
        self._zk: KazooClient | None = None
        self.dead_sessions: set[int] = set()
        """ZooKeeper sessions of SIGKILLed processes: their ephemeral znodes (a registration,
        `/controller`) outlive them until the session times out, and do not mean healed."""

    # --- life cycle ----------------------------------------------------------------------------

    def open(self, timeout: float = 120.0) -> NemesisCluster:
        try:
            hosts = {}
            if self.netns_reason is None:
                self.lab = NetworkLab()
                names = ["zookeeper", *(f"broker-{i}" for i in range(self.n_brokers)),
                         *(f"controller-{j}" for j in range(self.n_controllers))]
                for name in names:
                    host = self.lab.add_host(name)
                    hosts[name] = (host.netns, host.ip)
            security = None
            if self.tls:  # certificates valid for every host's address, as clients verify them
                addresses = ("127.0.0.1", "localhost", *sorted({ip for _, ip in hosts.values()}))
                security = ClusterSecurity(self.data_dir / "security", hosts=addresses)
            self.cluster = LocalCluster(
                self.data_dir / "cluster", brokers=self.n_brokers, controllers=self.n_controllers,
                broker_ports=free_ports(self.n_brokers), zookeeper_port=free_port(),
                broker_overrides={**BROKER_OVERRIDES, "zookeeper.session.timeout.ms": self.session_timeout_ms},
                controller_overrides={**CONTROLLER_OVERRIDES, "zookeeper.session.timeout.ms": self.session_timeout_ms},
                hosts=hosts,
                security=security,
            )
            if self.disk_reason is None:
                for i, b in enumerate(self.cluster.brokers):
                    disk = SmallDisk(self.data_dir / f"small-disk-{i}", SMALL_DISK_BYTES).mount()
                    self.disks[i] = disk
                    b.overrides["log.dirs"] = f"{b.overrides['log.dirs']},{disk.path}"
            self.cluster.start(timeout=timeout)
            self.zk()
            return self
        except BaseException:
            self.close()
            raise

    def close(self, save_disks: bool = False) -> None:
        """Stop every process (SIGTERM, then SIGKILL), unmount the disks (their files copied to
        `<disk>.saved` first if `save_disks`: a failed run's evidence), remove the namespaces."""
        try:
            if self._zk is not None:
                close_client(self._zk)
                self._zk = None
            if self.cluster is not None:
                self.cluster.stop(timeout=20)  # resumes paused processes (ZooKeeper too) first
        finally:
            for disk in self.disks.values():
                if save_disks and disk.mounted:
                    shutil.copytree(disk.path, disk.path.with_name(disk.path.name + ".saved"), dirs_exist_ok=True,
                                    ignore=shutil.ignore_patterns(FILLER))
                disk.unmount()
            if self.lab is not None:
                self.lab.close()

    # --- views ---------------------------------------------------------------------------------

    @property
    def bootstrap(self) -> str:
        return self.cluster.bootstrap

    @property
    def client_properties(self) -> dict[str, str]:
        """The clients' security keys (empty without TLS)."""
        return self.cluster.client_properties

    def zk(self) -> KazooClient:
        """A client of the cluster's ZooKeeper, kept for the run (reconnects by itself)."""
        if self._zk is None:
            self._zk = new_client(self.cluster.zookeeper_connect, 10.0)
            self._zk.start(timeout=10)
        return self._zk

    def zk_get(self, path: str, timeout: float = 3.0):
        """(data, stat) of `path`, None when absent; TimeoutError while ZooKeeper is unreachable."""
        try:
            return self.zk().get_async(path).get(timeout=timeout)
        except NoNodeError:
            return None
        except Exception as e:  # kazoo's timeout and connection errors alike
            raise TimeoutError(f"ZooKeeper: {path}: {e!r}") from e

    def partition_state(self, topic: str, partition: int) -> zk_data.LeaderIsrAndControllerEpoch | None:
        got = self.zk_get(zk_data.partition_state_path(topic, partition))
        return None if got is None else zk_data.decode_partition_state(got[0], got[1].version)

    def active_controller(self) -> int | None:
        """Index of the active controller process, None when there is none."""
        got = self.zk_get(zk_data.CONTROLLER)
        return None if got is None else json.loads(got[0])["brokerid"] - CONTROLLER_ID_BASE

    def owned_by(self, name: str) -> set[int]:
        """The sessions holding `name`'s ephemeral znodes now (its registration, or `/controller`
        if it is the active controller), to mark dead before killing it."""
        role, index = name.rsplit("-", 1)
        path = zk_data.broker_path(int(index)) if role == "broker" else zk_data.CONTROLLER
        try:
            got = self.zk_get(path)
        except TimeoutError:
            return set()
        if got is None:
            return set()
        if role == "controller" and json.loads(got[0])["brokerid"] - CONTROLLER_ID_BASE != int(index):
            return set()
        return {got[1].ephemeralOwner}

    def registered_brokers(self) -> set[int]:
        try:
            return {int(c) for c in self.zk().get_children_async(zk_data.BROKER_IDS).get(timeout=3)}
        except Exception as e:
            raise TimeoutError(f"ZooKeeper: {zk_data.BROKER_IDS}: {e!r}") from e

    def process(self, name: str) -> ManagedProcess:
        role, index = name.rsplit("-", 1)
        return (self.cluster.brokers if role == "broker" else self.cluster.controllers)[int(index)]

    def managed(self) -> list[ManagedProcess]:
        return self.cluster.processes()

    def wait_healed(self, topics: dict[str, int], timeout: float) -> float:
        """Wait until ZooKeeper serves, a controller is active, every broker is registered and every
        partition of `topics` has a leader and its whole replica set in the ISR; the seconds it
        took. TimeoutError naming what is missing otherwise."""
        started = time.monotonic()
        deadline = started + timeout
        last = "nothing checked yet"
        while True:
            try:
                missing = self._unhealed(topics)
            except TimeoutError as e:
                missing = str(e)
            if missing is None:
                return time.monotonic() - started
            last = missing
            if time.monotonic() > deadline:
                raise TimeoutError(f"not healed within {timeout:.0f}s: {last}")
            time.sleep(0.25)

    def _unhealed(self, topics: dict[str, int]) -> str | None:
        if self.active_controller() is None:
            return "no active controller"
        registered = self.registered_brokers()
        if registered != set(range(self.n_brokers)):
            return f"registered brokers {sorted(registered)}"
        stale = [path for path in [zk_data.CONTROLLER, *(zk_data.broker_path(b) for b in registered)]
                 if (got := self.zk_get(path)) is not None and got[1].ephemeralOwner in self.dead_sessions]
        if stale:
            return f"{stale} still held by killed processes' sessions"
        for topic, partitions in topics.items():
            for p in range(partitions):
                state = self.partition_state(topic, p)
                if state is None or state.leader < 0 or len(state.isr) < self.n_brokers:
                    return f"{topic}-{p}: {state}"
        return None

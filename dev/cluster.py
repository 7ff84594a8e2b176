"""A local cluster on 127.0.0.1: ZooKeeper, controller processes and broker processes.

`LocalCluster` is the one way this project starts a whole cluster: `odradek dev` runs it in the
foreground and the integration tests and the benchmark drive it directly (kill, restart), so what
the tests exercise is what a developer runs.
"""

import argparse
import asyncio
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from odradek.common import process_logging, zk_data
from odradek.common.config import CONTROLLER_ID_BASE, load_properties
from odradek.common.network.client import NetworkClient
from odradek.common.security.channel import PLAINTEXT, ClientSecurity, client_security_from_properties
from odradek.common.zk_connect import ensure_chroot, new_client
from odradek.common.zk_security import NO_SECURITY, ZkSecurity
from odradek.dev.processes import stop_process
from odradek.dev.security import ClusterSecurity, write_private
from odradek.dev.zookeeper import ZooKeeperServer, die_with_parent, free_port

DEFAULT_CHROOT = "/odradek"

class ClusterError(RuntimeError):
    """The cluster did not come up (or a process died); the message names the log to read."""


@dataclass
class LogSettings:
    """How child processes log: `--log-level`, and their size-rotated log files."""

    level: str = "INFO"
    max_bytes: int = process_logging.DEFAULT_MAX_BYTES
    backups: int = process_logging.DEFAULT_BACKUP_COUNT


SECRET_KEY_ENDINGS = ("password", "jaas.config", "keystore.key", "keystore.certificate.chain",
                      "truststore.certificates")


def is_secret_key(key: str) -> bool:
    """Whether a config key holds a secret (Kafka's PASSWORD type keys, and their listener copies):
    its value never reaches a log line."""
    return key.lower().endswith(SECRET_KEY_ENDINGS)


@dataclass
class ManagedProcess:
    """One `odradek broker|controller` child process, its overrides and its log files: the process
    writes its log to `log_path` itself (rotated by size); whatever reaches its stdout or stderr
    outside logging (a crash before logging is set up) goes to `out_path`, as Kafka's
    kafkaServer.out sits beside server.log."""

    name: str
    role: str
    overrides: dict[str, str]
    log_path: Path
    log_settings: LogSettings = field(default_factory=LogSettings)
    popen: "subprocess.Popen[bytes] | None" = field(default=None, repr=False)
    paused: bool = False
    netns: str | None = None
    """The network namespace it runs in (`ip netns exec`, which execs: the pid is the process's)."""
    secrets_dir: Path | None = None
    """Where `secrets_path` lives; the log's directory when None."""

    @property
    def out_path(self) -> Path:
        return self.log_path.with_suffix(".out")

    @property
    def secrets_path(self) -> Path:
        """The 0600 properties file the process reads its secret keys from: argv is world-readable
        (`ps`, /proc/<pid>/cmdline), a file in the cluster's own directory is not."""
        return (self.secrets_dir or self.log_path.parent) / f"{self.name}.secrets.properties"

    def secrets(self) -> dict[str, str]:
        return {key: value for key, value in self.overrides.items() if is_secret_key(key)}

    def argv(self) -> list[str]:
        """The command line: every override but the secrets, which go in `secrets_path` (`start`)."""
        prefix = ["ip", "netns", "exec", self.netns] if self.netns else []
        args = [*prefix, sys.executable, "-m", "odradek.cli", self.role, "--log-level", self.log_settings.level,
                "--log-file", str(self.log_path), "--log-file-max-bytes", str(self.log_settings.max_bytes),
                "--log-file-backups", str(self.log_settings.backups)]
        if self.secrets():
            args += ["--config", str(self.secrets_path)]
        for key, value in self.overrides.items():
            if not is_secret_key(key):
                args += ["--override", f"{key}={value}"]
        return args

    def write_secrets(self) -> None:
        """The secret overrides as a properties file only this user reads (one `key=value` a line:
        a value with a line break has no place in it)."""
        secrets = self.secrets()
        if not secrets:
            return
        if any("\n" in value or "\r" in value for value in secrets.values()):
            raise ClusterError(f"{self.name}: a secret override holds a line break")
        self.secrets_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_private(self.secrets_path, "".join(f"{k}={v}\n" for k, v in secrets.items()).encode())

    def start(self) -> "ManagedProcess":
        if self.alive:
            raise ClusterError(f"{self.name} is already running (pid {self.pid})")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.write_secrets()
        started = f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} starting: {' '.join(self.argv())}\n".encode()
        with open(self.log_path, "ab") as log:
            log.write(started)
        with open(self.out_path, "ab") as out:
            out.write(started)
            out.flush()
            self.popen = subprocess.Popen(
                self.argv(), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True, preexec_fn=die_with_parent,
            )
        return self

    @property
    def pid(self) -> int | None:
        return self.popen.pid if self.popen else None

    @property
    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    @property
    def returncode(self) -> int | None:
        return self.popen.poll() if self.popen else None

    def _running(self) -> "subprocess.Popen[bytes] | None":
        """The process while it runs, else None."""
        popen = self.popen
        return popen if popen is not None and popen.poll() is None else None

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Send `sig` (SIGKILL by default, for crash tests); reaps the process if it is fatal."""
        popen = self._running()
        if popen is None:
            return
        popen.send_signal(sig)
        if sig == signal.SIGKILL:
            popen.wait(10)
            self.paused = False

    def pause(self) -> None:
        """SIGSTOP: the process stays registered but stops answering (a hung or partitioned
        replica, as far as its peers can tell) until `resume`."""
        popen = self._running()
        if popen is None:
            raise ClusterError(f"{self.name} is not running")
        popen.send_signal(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        """SIGCONT after `pause`."""
        popen = self._running()
        if popen is not None:
            popen.send_signal(signal.SIGCONT)
        self.paused = False

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM, wait up to `timeout`, then SIGKILL. Returns the exit code."""
        if self.popen is None:
            return None
        self.paused = False
        return stop_process(self.popen, timeout, self.name)

    def restart(self, timeout: float = 15.0) -> "ManagedProcess":
        self.stop(timeout)
        return self.start()

    def log_tail(self, lines: int = 20) -> str:
        """The last lines of the log, and of the stdout/stderr file when it has more than the
        start-up marker (a traceback from before logging was set up)."""
        out = []
        for path in (self.log_path, self.out_path):
            try:
                tail = path.read_text(errors="replace").splitlines()[-lines:]
            except OSError:
                continue
            if any(not line.startswith("--- ") for line in tail):
                out.append("\n".join(tail))
        return "\n".join(out)


def metadata_brokers(port: int, timeout: float = 2.0, host: str = "127.0.0.1",
                     security: ClientSecurity = PLAINTEXT) -> set[int]:
    """The broker ids that the broker on `port` lists in its Metadata answer (none while it
    refuses connections). Registration alone is not readiness: until the controller's first
    UpdateMetadata reaches it, a broker refuses client connections (broker/server.py)."""
    from kio.schema.metadata.v12.request import MetadataRequest

    async def ask() -> set[int]:
        client = NetworkClient(host, port, client_id="odradek-dev", connect_attempts=1,
                               connect_timeout=timeout, security=security)
        try:
            response = await client.send(MetadataRequest(topics=(), allow_auto_topic_creation=False,
                                                         include_topic_authorized_operations=False),
                                         timeout=timeout)
            return {int(b.node_id) for b in response.brokers}
        finally:
            await client.close()

    try:
        return asyncio.run(ask())
    except (OSError, ConnectionError, TimeoutError):
        return set()


class LocalCluster:
    """ZooKeeper + `controllers` controller candidates + `brokers` brokers, all on 127.0.0.1.

    ZooKeeper is either started here (data under `data_dir/zookeeper`, reused on restart) or an
    existing one given as `zookeeper_connect` (`host:port/chroot`, e.g. a test's own chroot).
    Broker i has `broker.id` i, listens on `broker_ports[i]` (default `port + i`) and keeps its log
    in `data_dir/broker-i`; controller j has `controller.id` 1000+j. Logs go to `data_dir/logs`
    (`<name>.log`, rotated by size; `<name>.out` for stray output).

    `hosts` places processes in network namespaces (fault tests, dev/netns.py): process name
    ("zookeeper", "broker-0", "controller-1") → (netns, address it listens on); the others run
    on 127.0.0.1 in the caller's namespace.

    `security` (dev/security.ClusterSecurity) puts every path on TLS: brokers listen on CLIENT
    (`broker_ports`), INTERNAL (replication) and CONTROLLER, the controllers on CONTROLLER, each
    with its own certificate from the cluster's CA; there is no plaintext listener. `client_security`
    is how this class's own requests (readiness) and tests reach the CLIENT listener.
    `advertised_host` is the host brokers advertise for their client listener (`localhost` for
    client test suites).
    """

    def __init__(
        self,
        data_dir: str | Path,
        brokers: int = 3,
        port: int = 9092,
        controllers: int = 1,
        *,
        broker_ports: list[int] | None = None,
        zookeeper_connect: str | None = None,
        zookeeper_port: int | None = None,
        broker_overrides: Mapping[str, object] | None = None,
        controller_overrides: Mapping[str, object] | None = None,
        log_settings: LogSettings | None = None,
        hosts: dict[str, tuple[str, str]] | None = None,
        metrics: bool = False,
        security: ClusterSecurity | None = None,
        advertised_host: str | None = None,
    ):
        self.hosts = dict(hosts or {})
        self.advertised_host = advertised_host
        self.security = security
        if security is not None:
            if advertised_host and advertised_host not in security.hosts:
                security.hosts = (*security.hosts, advertised_host)
            security.prepare(brokers, controllers)
        self.metrics = metrics
        self.metrics_urls: dict[str, str] = {}
        """Process name → its Prometheus endpoint (with `metrics`: each process on a free port)."""
        self.data_dir = Path(data_dir).absolute()
        self.log_dir = self.data_dir / "logs"
        self.secrets_dir = self.data_dir / "secrets"
        self.broker_ports = list(broker_ports) if broker_ports else [port + i for i in range(brokers)]
        if len(self.broker_ports) != brokers:
            raise ValueError(f"{brokers} brokers need {brokers} ports, got {self.broker_ports}")
        self._external_zk = zookeeper_connect
        self.zookeeper: ZooKeeperServer | None = None
        if zookeeper_connect is None:
            netns, host = self.hosts.get("zookeeper", (None, "127.0.0.1"))
            tls = None
            if security is not None and security.zookeeper_tls:
                tls = security.zookeeper_tls_files()
            self.zookeeper = ZooKeeperServer(self.data_dir / "zookeeper", port=zookeeper_port or None, host=host,
                                             netns=netns, tls=tls)
        self._broker_overrides = {k: str(v) for k, v in (broker_overrides or {}).items()}
        self._controller_overrides = {k: str(v) for k, v in (controller_overrides or {}).items()}
        self.log_settings = log_settings or LogSettings()
        self.brokers = [self._broker_process(i) for i in range(brokers)]
        self.controllers = [self._controller_process(j) for j in range(controllers)]

    # --- wiring -------------------------------------------------------------------------------

    @property
    def zookeeper_connect(self) -> str:
        """`host:port/chroot` as brokers and controllers get it."""
        if self._external_zk is not None:
            return self._external_zk if "/" in self._external_zk else self._external_zk + DEFAULT_CHROOT
        if self.zookeeper is None:  # never: __init__ makes one when no external ZooKeeper is given
            raise ClusterError("no ZooKeeper to connect to")
        return self.zookeeper.connect + DEFAULT_CHROOT

    @property
    def zk_security(self) -> ZkSecurity:
        """How this class's own ZooKeeper clients (and tests) reach the cluster's ZooKeeper."""
        return self.security.zk_security() if self.security is not None else NO_SECURITY

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{self.advertised_host or self.broker_host(i)}:{p}" for i, p in enumerate(self.broker_ports))

    @property
    def client_listener(self) -> str:
        return "CLIENT" if self.security is not None else "PLAINTEXT"

    @property
    def client_properties(self) -> dict[str, str]:
        """Kafka client properties for the client listener (security.protocol, ssl.ca.location, ...)."""
        return self.security.client_properties() if self.security is not None else {}

    @property
    def client_security(self) -> ClientSecurity:
        """How a NetworkClient reaches the client listener."""
        if self.security is None:
            return PLAINTEXT
        if getattr(self, "_client_security", None) is None:
            self._client_security = client_security_from_properties(self.client_properties, "odradek dev")
        return self._client_security

    def broker_host(self, i: int) -> str:
        """The address broker `i` listens on."""
        return self.hosts.get(f"broker-{i}", (None, "127.0.0.1"))[1]

    def _broker_process(self, i: int) -> ManagedProcess:
        netns, host = self.hosts.get(f"broker-{i}", (None, "127.0.0.1"))
        # the control plane (and, secure, replication) on ports of their own, fixed for the
        # process's life: a restart that registered other endpoints would not be recognised as
        # this broker's leftover
        client = self.client_listener
        others = ("INTERNAL", "CONTROLLER") if self.security is not None else ("CONTROLLER",)
        ports = {client: self.broker_ports[i], **{name: free_port() for name in others}}
        overrides = {
            "broker.id": str(i),
            "zookeeper.connect": self.zookeeper_connect,
            "listeners": ",".join(f"{name}://{host}:{port}" for name, port in ports.items()),
            "log.dirs": str(self.data_dir / f"broker-{i}"),
        }
        if self.advertised_host:
            overrides["advertised.listeners"] = ",".join(
                f"{name}://{self.advertised_host if name == client else host}:{port}" for name, port in ports.items())
        if self.security is not None:
            overrides.update(self.security.broker_overrides(i))
        self._metrics_port(f"broker-{i}", host, overrides)
        overrides.update(self._broker_overrides)
        return ManagedProcess(f"broker-{i}", "broker", overrides, self.log_dir / f"broker-{i}.log", self.log_settings,
                              netns=netns, secrets_dir=self.secrets_dir)

    def _controller_process(self, j: int) -> ManagedProcess:
        # A free port per controller: two candidates on one host cannot share ControllerConfig's
        # default listener (9190).
        netns, host = self.hosts.get(f"controller-{j}", (None, "127.0.0.1"))
        overrides = {
            "controller.id": str(CONTROLLER_ID_BASE + j),
            "zookeeper.connect": self.zookeeper_connect,
            "listeners": f"{'CONTROLLER' if self.security is not None else 'PLAINTEXT'}://{host}:{free_port()}",
        }
        if self.security is not None:
            overrides.update(self.security.controller_overrides(j))
        self._metrics_port(f"controller-{j}", host, overrides)
        overrides.update(self._controller_overrides)
        return ManagedProcess(f"controller-{j}", "controller", overrides, self.log_dir / f"controller-{j}.log",
                              self.log_settings, netns=netns, secrets_dir=self.secrets_dir)

    def _metrics_port(self, name: str, host: str, overrides: dict[str, str]) -> None:
        if self.metrics:
            port = free_port()
            overrides.update({"metrics.port": str(port), "metrics.host": host})
            self.metrics_urls[name] = f"http://{host}:{port}/metrics"

    def broker(self, i: int) -> ManagedProcess:
        return self.brokers[i]

    def controller(self, j: int) -> ManagedProcess:
        return self.controllers[j]

    def controller_by_id(self, controller_id: int) -> ManagedProcess:
        return self.controllers[controller_id - CONTROLLER_ID_BASE]

    def processes(self) -> list[ManagedProcess]:
        return self.controllers + self.brokers

    def add_broker(self, port: int | None = None) -> ManagedProcess:
        """Append broker `len(brokers)` on `port` (default a free one), not started: scaling up,
        as the operator's orchestration tests do with local processes."""
        self.broker_ports.append(port or free_port())
        process = self._broker_process(len(self.brokers))
        self.brokers.append(process)
        return process

    def remove_broker(self, timeout: float = 15.0) -> ManagedProcess:
        """Stop (SIGTERM) and forget the highest-id broker; its log directory stays on disk."""
        if len(self.brokers) <= 1:
            raise ClusterError("a cluster keeps at least one broker")
        process = self.brokers[-1]
        process.stop(timeout)
        self.brokers.pop()
        self.broker_ports.pop()
        return process

    # --- life cycle -----------------------------------------------------------------------------

    def start(self, timeout: float = 60.0) -> "LocalCluster":
        """Start everything and return once the controller is elected and every broker registered."""
        try:
            if self.zookeeper is not None:
                self.zookeeper.start()
            ensure_chroot(self.zookeeper_connect, timeout=15, security=self.zk_security)
            if self.security is not None:
                self.security.bootstrap(self.zookeeper_connect)
            for c in self.controllers:
                c.start()
            for b in self.brokers:
                b.start()
            self.wait_ready(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self, timeout: float = 15.0) -> None:
        """Brokers first (so they can shut down while a controller still runs), then controllers,
        then ZooKeeper. Each gets SIGTERM and `timeout` seconds before SIGKILL."""
        for group in (self.brokers, self.controllers):
            for p in group:
                popen = p._running()
                if popen is not None:
                    popen.send_signal(signal.SIGTERM)
            for p in group:
                p.stop(timeout)
        if self.zookeeper is not None:
            self.zookeeper.stop()

    def __enter__(self) -> "LocalCluster":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- ZooKeeper views ------------------------------------------------------------------------

    def zk_client(self, timeout: float = 10.0) -> KazooClient:
        """A started kazoo client inside the cluster's chroot; the caller stops it."""
        zk = new_client(self.zookeeper_connect, timeout, self.zk_security)
        zk.start(timeout=timeout)
        return zk

    def active_controller(self, zk: KazooClient) -> int | None:
        """`controller.id` of the active controller, or None while there is none."""
        try:
            data, _ = zk.get(zk_data.CONTROLLER)
        except NoNodeError:
            return None
        return zk_data.decode_controller(data).controller_id

    def registered_brokers(self, zk: KazooClient) -> set[int]:
        try:
            return {int(c) for c in zk.get_children(zk_data.BROKER_IDS)}
        except NoNodeError:
            return set()

    def wait_ready(self, timeout: float = 60.0, brokers: list[int] | None = None) -> None:
        """Wait until `/controller` exists and every (given) running broker is registered and
        lists all of them in its Metadata (it has had the controller's UpdateMetadata).

        Raises ClusterError naming the log to read if a process exits or the time runs out."""
        wanted = set(range(len(self.brokers)) if brokers is None else brokers)
        zk = self.zk_client()
        try:
            deadline = time.monotonic() + timeout
            while True:
                for p in self.processes():
                    if p.popen is not None and not p.alive:
                        raise ClusterError(
                            f"{p.name} exited with code {p.returncode}; read {p.log_path}\n{p.log_tail()}"
                        )
                controller = self.active_controller(zk)
                missing = wanted - self.registered_brokers(zk)
                unaware = [] if controller is None or missing else [
                    i for i in sorted(wanted)
                    if not metadata_brokers(self.broker_ports[i], host=self.broker_host(i),
                                            security=self.client_security) >= wanted]
                if controller is not None and not missing and not unaware:
                    return
                if time.monotonic() > deadline:
                    if unaware:
                        raise ClusterError(f"brokers {unaware} registered, but their Metadata does not list "
                                           f"brokers {sorted(wanted)} within {timeout}s (no UpdateMetadata?); "
                                           f"read {self.controllers[0].log_path if self.controllers else ''}")
                    if controller is None:
                        logs = ", ".join(str(c.log_path) for c in self.controllers)
                        raise ClusterError(f"no controller elected within {timeout}s; read {logs}")
                    late = [self.brokers[i] for i in sorted(missing)]
                    raise ClusterError(
                        f"brokers {sorted(missing)} not registered within {timeout}s; read "
                        + ", ".join(str(b.log_path) for b in late)
                        + "\n" + late[0].log_tail()
                    )
                time.sleep(0.1)
        finally:
            zk.stop()
            zk.close()

    def wait_broker_gone(self, broker_id: int, timeout: float = 30.0) -> None:
        """Wait until `/brokers/ids/<id>` is gone (after a kill: until the session expires)."""
        zk = self.zk_client()
        try:
            deadline = time.monotonic() + timeout
            while broker_id in self.registered_brokers(zk):
                if time.monotonic() > deadline:
                    raise ClusterError(f"broker {broker_id} still registered after {timeout}s")
                time.sleep(0.1)
        finally:
            zk.stop()
            zk.close()

    def partition_state(self, topic: str, partition: int) -> zk_data.LeaderIsrAndControllerEpoch | None:
        """The controller's view of a partition (its state znode), or None if it has none."""
        zk = self.zk_client()
        try:
            data, stat = zk.get(zk_data.partition_state_path(topic, partition))
            return zk_data.decode_partition_state(data, stat.version)
        except NoNodeError:
            return None
        finally:
            zk.stop()
            zk.close()

    # --- broker logs on disk --------------------------------------------------------------------

    def partition_dir(self, broker: int, topic: str, partition: int) -> Path:
        """Where broker `broker` keeps `topic`-`partition`: in whichever of its `log.dirs` holds it
        (the first when none does yet)."""
        dirs = [Path(d.strip()) for d in self.brokers[broker].overrides["log.dirs"].split(",") if d.strip()]
        for d in dirs:
            if (d / f"{topic}-{partition}").is_dir():
                return d / f"{topic}-{partition}"
        return dirs[0] / f"{topic}-{partition}"

    def log_bytes(self, broker: int, topic: str, partition: int) -> bytes:
        """The partition's record batches as stored: every segment's .log file in offset order.

        Replicas append the leader's batches byte for byte, so in-sync replicas agree on this
        whatever their segment boundaries."""
        files = sorted(self.partition_dir(broker, topic, partition).glob("*.log"), key=lambda f: int(f.stem))
        return b"".join(f.read_bytes() for f in files)

    def wait_logs_identical(self, topic: str, partition: int, brokers: list[int] | None = None,
                            timeout: float = 30.0) -> bytes:
        """Wait until the given brokers (default all) hold byte-identical logs for the partition;
        returns those bytes. Raises ClusterError describing the difference on timeout."""
        wanted = list(range(len(self.brokers)) if brokers is None else brokers)
        deadline = time.monotonic() + timeout
        while True:
            logs = {b: self.log_bytes(b, topic, partition) for b in wanted}
            if len(set(logs.values())) == 1:
                return logs[wanted[0]]
            if time.monotonic() > deadline:
                sizes = {b: len(v) for b, v in logs.items()}
                raise ClusterError(f"{topic}-{partition}: logs differ after {timeout}s (bytes per broker {sizes})")
            time.sleep(0.2)

    def dead_processes(self) -> list[ManagedProcess]:
        return [p for p in self.processes() if p.popen is not None and not p.alive]


# --- `odradek dev` ------------------------------------------------------------------------------


def secure_cluster(directory: Path, brokers: int, controllers: int, zookeeper_tls: bool = False) -> ClusterSecurity:
    """`--security`: TLS on every path, clients on SASL_SSL with SCRAM-SHA-512 as a super user,
    znodes under ZooKeeper ACLs (zookeeper.set.acl) and, with `zookeeper_tls` (only for a
    ZooKeeper LocalCluster runs itself), ZooKeeper on TLS only."""
    security = ClusterSecurity(directory, zookeeper_acl=True, zookeeper_tls=zookeeper_tls)
    security.use_scram_client_listener(brokers, controllers)
    return security


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="odradek dev",
        description="Run ZooKeeper, controllers and brokers on 127.0.0.1 until Ctrl-C or SIGTERM.",
    )
    parser.add_argument("--brokers", type=int, default=3, help="number of brokers (ids 0..N-1)")
    parser.add_argument("--controllers", type=int, default=1, help="controller candidates (1 active, rest standby)")
    parser.add_argument("--data-dir", default="./data", help="ZooKeeper data, broker logs and process logs")
    parser.add_argument("--port", type=int, default=9092, help="broker i listens on PORT+i")
    parser.add_argument("--zookeeper-port", type=int, default=0, help="ZooKeeper client port (0: a free one)")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the cluster to come up")
    parser.add_argument("--security", action="store_true",
                        help="TLS on every path (a generated CA in DATA_DIR/security), clients on SASL_SSL with "
                        "SCRAM-SHA-512 as a generated super user, ZooKeeper on TLS only with zookeeper.set.acl; "
                        "prints client.config=PATH")
    parser.add_argument("--advertised-host", default=None, metavar="HOST",
                        help="the host brokers advertise to clients (e.g. localhost); they still listen on 127.0.0.1")
    parser.add_argument("--broker-override", action="append", default=[], metavar="KEY=VALUE",
                        help="extra broker configuration (repeatable)")
    parser.add_argument("--controller-override", action="append", default=[], metavar="KEY=VALUE",
                        help="extra controller configuration (repeatable)")
    parser.add_argument("--log-level", default="INFO", type=str.upper, choices=process_logging.LEVELS,
                        help="the brokers' and controllers' log level (INFO)")
    parser.add_argument("--log-file-max-bytes", type=int, default=process_logging.DEFAULT_MAX_BYTES,
                        help=f"rotate each process log at this size ({process_logging.DEFAULT_MAX_BYTES})")
    parser.add_argument("--log-file-backups", type=int, default=process_logging.DEFAULT_BACKUP_COUNT,
                        help=f"rotated files kept per process log ({process_logging.DEFAULT_BACKUP_COUNT})")
    args = parser.parse_args(argv)
    if args.brokers < 1 or args.controllers < 1:
        parser.error("--brokers and --controllers must be at least 1")
    if args.log_file_max_bytes <= 0 or args.log_file_backups < 1:
        parser.error("--log-file-max-bytes must be positive and --log-file-backups at least 1")
    return args


def _pairs(items: list[str]) -> dict[str, str]:
    try:
        return load_properties(None, items)
    except ValueError as e:
        raise SystemExit(str(e)) from None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    stopping = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        if stopping.is_set():
            return
        stopping.set()
        raise KeyboardInterrupt  # interrupts start-up as well as the supervise loop

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    cluster = LocalCluster(
        args.data_dir, brokers=args.brokers, port=args.port, controllers=args.controllers,
        zookeeper_port=args.zookeeper_port or None,
        broker_overrides=_pairs(args.broker_override),
        controller_overrides=_pairs(args.controller_override),
        log_settings=LogSettings(args.log_level, args.log_file_max_bytes, args.log_file_backups),
        metrics=True,
        security=secure_cluster(Path(args.data_dir).absolute() / "security", args.brokers, args.controllers,
                                zookeeper_tls=True) if args.security else None,
        advertised_host=args.advertised_host,
    )

    def log(msg: str) -> None:
        print(f"odradek dev: {msg}", file=sys.stderr, flush=True)

    try:
        try:
            cluster.start(timeout=args.timeout)
        except ClusterError as e:
            log(f"cluster did not start: {e}")
            return 1
        log(f"ZooKeeper {cluster.zookeeper_connect}; logs in {cluster.log_dir}; Ctrl-C stops")
        print(f"bootstrap.servers={cluster.bootstrap}", flush=True)
        if cluster.security is not None:
            print(f"client.config={cluster.security.client_config_path}", flush=True)
        for name, url in cluster.metrics_urls.items():
            print(f"metrics {name} {url}", flush=True)
        reported: set[str] = set()
        while not stopping.is_set():
            for p in cluster.dead_processes():
                if p.name not in reported:
                    reported.add(p.name)
                    log(f"{p.name} exited with code {p.returncode}; read {p.log_path}")
            stopping.wait(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        log("stopping brokers, controllers, ZooKeeper")
        cluster.stop()
        log("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())

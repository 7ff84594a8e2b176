"""A ZooKeeper server as a plain child process, from Debian's `zookeeper` package.

Used by `odradek dev` and by the test fixtures, so there is one way to start one. It binds
127.0.0.1 only and is ready when the `srvr` four-letter command answers (connecting earlier can
stall kazoo for seconds).

With `tls` it serves TLS only (Kafka's `zookeeper.ssl.client.enable` clients): Netty's
connection factory, a `secureClientPort` and no plaintext `clientPort` at all. Key and trust
stores are PEM files (ZooKeeper 3.8 reads `ssl.keyStore.type=PEM`); client certificates are
asked for but not required, so a certificate is an extra (x509) identity, not the only one.
"""

import ctypes
import random
import shutil
import signal
import socket
import ssl
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from odradek.dev.processes import stop_process

_PR_SET_PDEATHSIG = 1
_prctl: Callable[..., int] | None
try:  # looked up once here: the child between fork and exec should only make the call
    _prctl = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):
    _prctl = None


def die_with_parent() -> None:
    """Runs in a child before exec: SIGKILL it when its parent dies, so nothing outlives a crash."""
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL))


CLASSPATH_JARS = (
    "/usr/share/java/zookeeper.jar",
    "/usr/share/java/zookeeper-jute.jar",
    "/usr/share/java/slf4j-api.jar",
    "/usr/share/java/slf4j-simple.jar",
)
NETTY_JARS = tuple(f"/usr/share/java/netty-{name}.jar" for name in (
    "buffer", "codec", "common", "handler", "resolver", "transport", "transport-native-epoll",
    "transport-native-unix-common"))
"""What ZooKeeper's NettyServerCnxnFactory (the only one that speaks TLS) needs, from Debian's package."""


@dataclass(frozen=True)
class ZooKeeperTls:
    keystore: Path
    """PEM: the server's private key and certificate chain."""
    truststore: Path
    """PEM: the CA certificates client certificates must chain to."""


_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_LOWEST_PORT = 10000
_handed_out: set[int] = set()


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (where connect() draws local ports)."""
    try:
        return int(_EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port(host: str = "127.0.0.1") -> int:
    """A port nobody listens on, for a child process to bind later.

    Taken below the ephemeral range: a port from bind(0) lies inside it, where every outgoing
    connection of a busy test run also draws its local port, so one could take it before the
    child binds (seen in CI as EADDRINUSE). Ports handed out once by this process are not handed
    out again, so two children never get the same one."""
    high = _ephemeral_low()
    low = _LOWEST_PORT if high > _LOWEST_PORT + 1000 else 1024
    rng = random.Random()
    for _ in range(1000):
        port = rng.randrange(low, high)
        if port in _handed_out:
            continue
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    raise RuntimeError(f"no free port in {low}-{high - 1} on {host}")


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """`n` distinct free ports."""
    return [free_port(host) for _ in range(n)]


def four_letter(host: str, port: int, word: bytes = b"srvr", timeout: float = 1.0,
                tls: ZooKeeperTls | None = None) -> bytes:
    with socket.create_connection((host, port), timeout=timeout) as raw:
        s = raw
        if tls is not None:
            context = ssl.create_default_context(cafile=str(tls.truststore))
            context.check_hostname = False  # readiness of our own child, reached by address
            s = context.wrap_socket(raw)
        s.sendall(word)
        chunks = []
        while chunk := s.recv(4096):
            chunks.append(chunk)
        return b"".join(chunks)


class ZooKeeperServer:
    """One standalone server. `start()` returns when it serves; `stop()` always reaps it."""

    def __init__(self, data_dir: Path, port: int | None = None, tick_ms: int = 500, host: str = "127.0.0.1",
                 netns: str | None = None, tls: ZooKeeperTls | None = None):
        self.tls = tls
        self.data_dir = Path(data_dir)
        self.host = host
        self.netns = netns
        """A network namespace to run in (fault tests); its `host` address must be reachable."""
        self.port = port or free_port(host if netns is None else "127.0.0.1")
        self.tick_ms = tick_ms
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def connect(self) -> str:
        return f"{self.host}:{self.port}"

    def _java(self) -> str:
        java = shutil.which("java")
        if java is None:
            raise RuntimeError("java not found: install Debian's zookeeper package (make dev does)")
        for jar in CLASSPATH_JARS[:1]:
            if not Path(jar).exists():
                raise RuntimeError(f"{jar} missing: install Debian's zookeeper package (make dev does)")
        return java

    def start(self, timeout: float = 30.0) -> "ZooKeeperServer":
        java = self._java()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        cfg = self.data_dir / "zoo.cfg"
        if self.tls is None:
            ports = f"clientPort={self.port}\nclientPortAddress={self.host}\n"
        else:
            ports = (f"secureClientPort={self.port}\nsecureClientPortAddress={self.host}\n"
                     f"ssl.keyStore.location={self.tls.keystore}\nssl.keyStore.type=PEM\n"
                     f"ssl.trustStore.location={self.tls.truststore}\nssl.trustStore.type=PEM\n"
                     "ssl.clientAuth=want\n")
        cfg.write_text(
            f"tickTime={self.tick_ms}\n"
            f"dataDir={self.data_dir / 'data'}\n"
            f"{ports}"
            "maxClientCnxns=0\n"
            "admin.enableServer=false\n"
            "4lw.commands.whitelist=srvr,ruok,stat,mntr\n"
            f"minSessionTimeout={2 * self.tick_ms}\n"
            "maxSessionTimeout=60000\n"
        )
        log = open(self.data_dir / "zookeeper.log", "ab")
        jars = CLASSPATH_JARS + (NETTY_JARS if self.tls is not None else ())
        classpath = ":".join(j for j in jars if Path(j).exists())
        netty = (["-Dzookeeper.serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory"]
                 if self.tls is not None else [])
        self.process = subprocess.Popen(
            [
                *(["ip", "netns", "exec", self.netns] if self.netns else []),
                java, "-Xms32m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                "-Dzookeeper.admin.enableServer=false",
                "-Dzookeeper.4lw.commands.whitelist=*", *netty,
                "-cp", classpath,
                "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(cfg),
            ],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, preexec_fn=die_with_parent,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"ZooKeeper exited with {self.process.returncode}; see {self.data_dir}/zookeeper.log")
            try:
                if b"Mode:" in four_letter(self.host, self.port, tls=self.tls):
                    return self
            except OSError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"ZooKeeper did not serve on {self.connect} within {timeout}s")

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Send `sig`: SIGKILL is a crash (`start()` again recovers the data and the sessions from
        dataDir), SIGSTOP a server that hangs with its connections open (SIGCONT resumes it)."""
        p = self.process
        if p is None or p.poll() is not None:
            return
        p.send_signal(sig)
        if sig == signal.SIGKILL:
            p.wait(10)
            self.process = None

    def stop(self, timeout: float = 10.0) -> None:
        p, self.process = self.process, None
        if p is not None:
            stop_process(p, timeout)

    def __enter__(self) -> "ZooKeeperServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

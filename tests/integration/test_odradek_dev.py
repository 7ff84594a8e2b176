"""Acceptance: `odradek dev` prints one bootstrap line once the cluster is up, serves kcat (topic
auto-creation included), stops every process on SIGTERM, and keeps its data across a restart."""

import os
import re
import selectors
import signal
import socket
import subprocess
import sys
import time

import pytest

from odradek.dev.cluster import ClusterError, LocalCluster
from odradek.dev.zookeeper import free_port

from .metrics_scrape import scrape, value

pytestmark = pytest.mark.integration  # runs `odradek dev`, which starts its own ZooKeeper


def two_free_consecutive_ports() -> int:
    for _ in range(200):
        port = free_port()
        if port >= 65535:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        return port
    raise RuntimeError("no two consecutive free ports")


def children_of(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            if ppid == pid:
                out.append(int(entry))
    return out


def cmdline(pid: int) -> bytes | None:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return None


class Dev:
    """`odradek dev` as a child process, with its stdout read line by line under a deadline."""

    def __init__(self, data_dir, port: int, brokers: int = 2):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "odradek.cli", "dev", "--brokers", str(brokers),
             "--data-dir", str(data_dir), "--port", str(port), "--timeout", "90"],
            stdout=subprocess.PIPE, stderr=open(data_dir.parent / "dev-stderr.log", "ab"),
        )
        self.stderr_path = data_dir.parent / "dev-stderr.log"

    def read_line(self, timeout: float) -> str:
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        buf = b""
        deadline = time.monotonic() + timeout
        try:
            while not buf.endswith(b"\n"):
                left = deadline - time.monotonic()
                assert left > 0, f"no line from odradek dev in {timeout}s; stderr: {self.stderr_path.read_text()[-2000:]}"
                if sel.select(left):
                    chunk = os.read(self.proc.stdout.fileno(), 1)
                    assert chunk, f"odradek dev exited ({self.proc.poll()}); stderr: {self.stderr_path.read_text()[-2000:]}"
                    buf += chunk
        finally:
            sel.close()
        return buf.decode().rstrip("\n")

    def terminate(self, timeout: float = 60.0) -> int:
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(10)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


def kcat(*args: str, input: bytes | None = None) -> bytes:
    return subprocess.run(["kcat", *args], input=input, capture_output=True, timeout=60, check=True).stdout


def test_odradek_dev_serves_stops_and_keeps_data(tmp_path):
    port = two_free_consecutive_ports()
    data_dir = tmp_path / "data"
    lines = [b"line-%d" % i for i in range(200)]

    dev = Dev(data_dir, port)
    try:
        line = dev.read_line(timeout=120)
        assert line == f"bootstrap.servers=127.0.0.1:{port},127.0.0.1:{port + 1}"
        bootstrap = line.split("=", 1)[1]
        # kcat as the README says; the topic is auto-created by the producer's Metadata request.
        kcat("-b", bootstrap, "-P", "-t", "dev-topic", "-K", ":", input=b"\n".join(b"k:" + rec for rec in lines) + b"\n")
        out = kcat("-b", bootstrap, "-C", "-t", "dev-topic", "-o", "beginning", "-e", "-f", "%k:%s\n")
        assert sorted(out.splitlines()) == sorted(b"k:" + rec for rec in lines)
        # one line per process with its Prometheus endpoint; the brokers counted what kcat sent
        metrics = dict(dev.read_line(timeout=10).split(" ", 2)[1:] for _ in range(3))
        assert set(metrics) == {"broker-0", "broker-1", "controller-0"}
        assert all(url.startswith("http://127.0.0.1:") and url.endswith("/metrics") for url in metrics.values())
        assert sum(value(scrape(metrics[b]), "kafka_server_brokertopicmetrics_messagesin_total", topic="dev-topic")
                   for b in ("broker-0", "broker-1")) == len(lines)
        assert value(scrape(metrics["controller-0"]), "kafka_controller_kafkacontroller_activecontrollercount") == 1

        children = children_of(dev.proc.pid)
        assert len(children) >= 4, f"expected ZooKeeper, a controller and 2 brokers, got {children}"
        before = {pid: cmdline(pid) for pid in children}
        assert dev.terminate() == 0
        # Every child is gone (or its pid now belongs to something else).
        for pid, cmd in before.items():
            assert cmdline(pid) != cmd, f"process {pid} ({cmd[:80]!r}) outlived odradek dev"
    finally:
        dev.kill()

    dev = Dev(data_dir, port)
    try:
        line = dev.read_line(timeout=120)
        bootstrap = line.split("=", 1)[1]
        out = kcat("-b", bootstrap, "-C", "-t", "dev-topic", "-o", "beginning", "-e", "-f", "%k:%s\n")
        assert sorted(out.splitlines()) == sorted(b"k:" + rec for rec in lines), "data lost across a restart"
        assert dev.terminate() == 0
    finally:
        dev.kill()


def test_cluster_start_failure_names_the_log_to_read(zookeeper, tmp_path):
    """A broker that cannot serve (its port is taken) makes start() fail with its log's path."""
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        cluster = LocalCluster(
            tmp_path / "c", brokers=1, broker_ports=[port],
            zookeeper_connect=f"{zookeeper.connect}/odradek-squat",
            broker_overrides={"zookeeper.session.timeout.ms": 6000},
        )
        with pytest.raises(ClusterError, match=re.escape(str(tmp_path / "c" / "logs" / "broker-0.log"))):
            cluster.start(timeout=20)
    assert not any(p.alive for p in cluster.processes()), "a failed start must stop what it started"

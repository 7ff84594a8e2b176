"""A kubelet for the ZooKeeper StatefulSet that runs real ZooKeeper servers (Debian's package):
one process per pod, started from the rendered pod template's own start script and environment,
its volumes local directories, its member addresses 127.0.0.1 ports.

What differs from a pod, and why: the mounts are directories (the mount paths in the command and
in environment values are replaced by them); the member ConfigMap's pod names become the local
member of the same id; `zkServer.sh` is a shim running Debian's jars with a small heap (the
Prometheus provider is not in Debian's package, so its lines are left out); tickTime is 500 ms
(the image's environment), for quicker elections. A pod past the StatefulSet's size is stopped
and its data deleted (the rendered `whenScaled: Delete`)."""

from __future__ import annotations

import asyncio
import base64
import copy
import os
import shutil
import signal
import subprocess
from pathlib import Path

from odradek.dev.processes import stop_process
from odradek.dev.zookeeper import CLASSPATH_JARS, die_with_parent, four_letter, free_ports
from odradek.operator import builders
from odradek.operator.zookeeper_reconfig import Member, parse_conf, parse_config, voters

JAVA = ["java", "-Xms32m", "-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"]
SHIM = """#!/bin/bash
# stands in for the image's `zkServer.sh start-foreground`
[[ $1 == start-foreground ]] || exit 2
cfg="$ZOO_CONF_DIR/zoo.cfg"
grep -v '^metricsProvider' "$cfg" > "$cfg.local"
exec java $SERVER_JVMFLAGS -Xms32m -Xmx128m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \\
  -cp "{classpath}" org.apache.zookeeper.server.quorum.QuorumPeerMain "$cfg.local"
"""


def local_members(count: int) -> dict[int, Member]:
    ports = free_ports(3 * count)
    return {i: Member(i, "127.0.0.1", ports[3 * i - 3], ports[3 * i - 2], ports[3 * i - 1], client_host="127.0.0.1")
            for i in range(1, count + 1)}


class ZooKeeperKubelet:
    def __init__(self, server, namespace: str, cluster: str, root: Path, members: dict[int, Member], kubelet=None):
        """`kubelet` (operator_harness.Kubelet) reports the StatefulSet's ready count: set here."""
        self.server, self.ns, self.cluster, self.root, self.members = server, namespace, cluster, root, members
        self.kubelet = kubelet
        self.names = builders.names(cluster)
        self.processes: dict[int, subprocess.Popen[bytes]] = {}
        self.started: list[int] = []  # member ids, in start order (restarts included)
        self.task: asyncio.Task | None = None
        self.serving: frozenset[int] = frozenset()
        bin_dir = root / "bin"
        bin_dir.mkdir(parents=True, exist_ok=True)
        shim = bin_dir / "zkServer.sh"
        shim.write_text(SHIM.replace("{classpath}", ":".join(j for j in CLASSPATH_JARS if Path(j).exists())))
        shim.chmod(0o755)
        self.bin = bin_dir

    def member_source(self, body, count: int) -> dict[int, Member]:
        """For the operator: where member i is reached (here)."""
        return {i: self.members[i] for i in range(1, count + 1)}

    def _live(self, resource: str, name: str) -> dict | None:
        return self.server.live(resource, self.ns, name)

    def _snapshot(self) -> dict:
        """What the kubelet reads from the API (on the event loop: the emulator is not thread-safe)."""
        return {"sts": copy.deepcopy(self._live("apps/v1/statefulsets", self.names["zookeeper"])),
                "members": copy.deepcopy(self._live("v1/configmaps", self.names["zookeeper_members"])),
                "env": copy.deepcopy(self._live("v1/configmaps", self.names["zookeeper"])),
                "admin": copy.deepcopy(self._live("v1/secrets", self.names["zookeeper_admin"]))}

    def start_pod(self, index: int, found: dict) -> bool:
        """Pod `index` from `found` (the StatefulSet, both ConfigMaps, the admin Secret); False
        while one of them is missing (a real pod waits for its volumes and Secret too)."""
        member = index + 1
        sts, members_cm, env_cm, admin = found["sts"], found["members"], found["env"], found["admin"]
        if members_cm is None or env_cm is None or admin is None:
            return False  # a pod whose volumes or secret are missing does not start
        pod_dir = self.root / f"pod-{index}"
        mounts = {builders.ZK_DATA: pod_dir / "data", builders.ZK_MEMBERS_DIR: pod_dir / "members"}
        for d in (*mounts.values(), pod_dir / "conf"):
            d.mkdir(parents=True, exist_ok=True)
        seed = members_cm["data"][builders.ZK_DYNAMIC_FILE]
        ids = sorted(parse_config(seed)[0])
        rendered = builders.zookeeper_members({"metadata": {"name": self.cluster, "namespace": self.ns}}, max(ids))
        assert seed == "".join(rendered[i].line() + "\n" for i in ids), seed
        (mounts[builders.ZK_MEMBERS_DIR] / builders.ZK_DYNAMIC_FILE).write_text(
            "".join(self.members[i].line() + "\n" for i in ids))
        container = sts["spec"]["template"]["spec"]["containers"][0]

        def local(value: str) -> str:
            for path, d in mounts.items():
                if value == path or value.startswith(path + "/"):
                    return str(d) + value[len(path):]
            return value

        env = {k: local(v) for k, v in env_cm["data"].items()}
        for e in container.get("env", []):
            ref = e["valueFrom"]["secretKeyRef"]
            assert ref["name"] == self.names["zookeeper_admin"]
            env[e["name"]] = base64.b64decode(admin["data"][ref["key"]]).decode()
        env.update(HOSTNAME=f"{self.names['zookeeper']}-{index}", ZOO_CONF_DIR=str(pod_dir / "conf"),
                   ZOO_TICK_TIME="500", PATH=f"{self.bin}:{os.environ['PATH']}", HOME=str(pod_dir))
        command = [c.replace(builders.ZK_MEMBERS_DIR, str(mounts[builders.ZK_MEMBERS_DIR]))
                   for c in container["command"]]
        log = open(pod_dir / "zookeeper.log", "ab")
        self.processes[member] = subprocess.Popen(
            command, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, preexec_fn=die_with_parent)
        log.close()
        self.started.append(member)
        return True

    def _stop(self, member: int) -> None:
        p = self.processes.pop(member, None)
        if p is not None:
            stop_process(p)

    def pause(self, member: int, paused: bool = True) -> None:
        """SIGSTOP (or SIGCONT) a member: alive to the kubelet, serving nobody."""
        self.processes[member].send_signal(signal.SIGSTOP if paused else signal.SIGCONT)

    def stop_all(self) -> None:
        for member in list(self.processes):
            self._stop(member)

    def run_java(self, config: Path, log_path: Path) -> subprocess.Popen[bytes]:
        """A ZooKeeper server from a config file written by hand (not from the start script)."""
        with open(log_path, "ab") as log:
            return subprocess.Popen(
                [*JAVA, "-cp", ":".join(j for j in CLASSPATH_JARS if Path(j).exists()),
                 "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(config)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                preexec_fn=die_with_parent)

    def mode(self, member: int) -> str | None:
        try:
            out = four_letter("127.0.0.1", self.members[member].client_port, b"srvr", timeout=1.0)
        except OSError:
            return None
        for line in out.decode(errors="replace").splitlines():
            if line.startswith("Mode: "):
                return line.removeprefix("Mode: ")
        return None

    def state(self) -> tuple[list[int] | None, frozenset[int]]:
        """(the leader's committed voting members, None without a serving leader; the members
        whose `srvr` names a mode), asked together."""
        modes = {m: self.mode(m) for m in list(self.processes)}
        serving = frozenset(m for m, found in modes.items() if found is not None)
        leader = next((m for m, found in modes.items() if found == "leader"), None)
        if leader is None:
            return None, serving
        try:
            conf = parse_conf(four_letter("127.0.0.1", self.members[leader].client_port, b"conf", timeout=1.0))
        except OSError:
            return None, serving
        return (None if conf is None else voters(conf)), serving

    def _work(self, found: dict) -> int:
        """Start, restart and stop processes (blocking, off the event loop); the serving count."""
        sts = found["sts"]
        if sts is None:
            return 0
        n = sts["spec"]["replicas"]
        for index in range(n):
            p = self.processes.get(index + 1)
            if p is None or p.poll() is not None:  # not started yet, or exited: (re)start it
                self.start_pod(index, found)
        for member in [m for m in self.processes if m > n]:  # scaled down: the pod and its claim go
            self._stop(member)
            shutil.rmtree(self.root / f"pod-{member - 1}", ignore_errors=True)
        self.serving = frozenset(m for m in self.processes if self.mode(m) is not None)
        return len(self.serving)

    async def run(self) -> None:
        while True:
            ready = await asyncio.get_running_loop().run_in_executor(None, self._work, self._snapshot())
            if self.kubelet is not None:
                self.kubelet.ready_zookeeper = ready
            await asyncio.sleep(0.2)

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self.run())

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            try:
                await self.task
            except asyncio.CancelledError:
                pass
        self.stop_all()

"""A real ZooKeeper 3.8 ensemble (Debian's package) scaled 3 -> 5 -> 3 one member at a time by
dynamic reconfiguration (operator/zookeeper_reconfig), writing through it at every step: a
quorum stands throughout, and after the shrink the ensemble is really three (one more member
down still leaves a quorum, which five members with two gone would not)."""

import base64
import hashlib
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from odradek.dev.processes import stop_process
from odradek.dev.waiting import wait_until
from odradek.dev.zookeeper import CLASSPATH_JARS, die_with_parent, four_letter, free_ports
from odradek.operator.zookeeper_reconfig import Member, next_step, parse_config, voters

pytestmark = pytest.mark.skipif(shutil.which("java") is None or not Path(CLASSPATH_JARS[0]).exists(),
                                reason="needs Debian's zookeeper package")

SUPER_PASSWORD = "reconfig-test-secret"
SUPER_DIGEST = "super:" + base64.b64encode(hashlib.sha1(f"super:{SUPER_PASSWORD}".encode()).digest()).decode()


class Node:
    def __init__(self, root: Path, member: Member):
        self.member, self.dir = member, root / f"zk{member.id}"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, initial: list[Member]) -> None:
        data = self.dir / "data"
        data.mkdir(parents=True, exist_ok=True)
        (data / "myid").write_text(f"{self.member.id}\n")
        (self.dir / "zoo.cfg.dynamic").write_text("".join(m.line() + "\n" for m in initial))
        (self.dir / "zoo.cfg").write_text(
            "tickTime=500\ninitLimit=10\nsyncLimit=5\n"
            f"dataDir={data}\nreconfigEnabled=true\nstandaloneEnabled=false\n"
            f"dynamicConfigFile={self.dir / 'zoo.cfg.dynamic'}\nadmin.enableServer=false\n"
            "4lw.commands.whitelist=srvr,ruok,conf\n")
        log = open(self.dir / "zookeeper.log", "ab")
        self.process = subprocess.Popen(
            ["java", "-Xms32m", "-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
             f"-Dzookeeper.DigestAuthenticationProvider.superDigest={SUPER_DIGEST}",
             "-cp", ":".join(j for j in CLASSPATH_JARS if Path(j).exists()),
             "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(self.dir / "zoo.cfg")],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
            preexec_fn=die_with_parent)
        log.close()

    def mode(self) -> str | None:
        try:
            out = four_letter("127.0.0.1", self.member.client_port, b"srvr", timeout=1.0)
        except OSError:
            return None
        for line in out.decode(errors="replace").splitlines():
            if line.startswith("Mode: "):
                return line.removeprefix("Mode: ")
        return None

    def stop(self) -> None:
        p, self.process = self.process, None
        if p is not None:
            stop_process(p)


def test_ensemble_scales_3_to_5_to_3_with_a_quorum_at_every_step(tmp_path):
    ports = free_ports(15)
    members = {i: Member(i, "127.0.0.1", ports[3 * (i - 1)], ports[3 * (i - 1) + 1], ports[3 * (i - 1) + 2],
                         client_host="127.0.0.1") for i in range(1, 6)}
    nodes = {i: Node(tmp_path, m) for i, m in members.items()}
    client = None
    writes = 0
    try:
        for i in (1, 2, 3):
            nodes[i].start([members[j] for j in (1, 2, 3)])
        wait_until(lambda: sum(nodes[i].mode() in ("leader", "follower") for i in (1, 2, 3)) == 3,
                   "a leader among 1-3", 60, interval=0.2)
        client = KazooClient(hosts=",".join(f"127.0.0.1:{members[i].client_port}" for i in (1, 2, 3)),
                             timeout=10, auth_data=[("digest", f"super:{SUPER_PASSWORD}")])
        client.start(timeout=30)
        client.ensure_path("/data")

        def write() -> None:
            nonlocal writes
            client.create(f"/data/w{writes + 1:04d}", b"x", makepath=True)
            writes += 1

        def config() -> dict[int, str]:
            client.sync("/zookeeper/config")
            return parse_config(client.get("/zookeeper/config")[0])[0]

        write()
        timings = []
        for desired in (5, 3):
            for _ in range(5):
                step = next_step(config(), desired)
                if step is None:
                    break
                started = time.monotonic()
                if step.add is not None:
                    # start it with the current members plus itself; it syncs as a learner first
                    current = [members[i] for i in voters(config())]
                    nodes[step.add].start([*current, members[step.add]])
                    wait_until(lambda n=nodes[step.add]: n.mode() is not None, f"member {step.add} serving", 60, interval=0.2)
                    client.reconfig(joining=members[step.add].line(), leaving=None, new_members=None)
                    wait_until(lambda n=nodes[step.add]: n.mode() in ("leader", "follower"),
                               f"member {step.add} voting", 60, interval=0.2)
                else:
                    client.reconfig(joining=None, leaving=str(step.remove), new_members=None)
                    nodes[step.remove].stop()
                timings.append(time.monotonic() - started)
                write()  # a quorum after every step
                assert len(client.get_children("/data")) == writes
            assert voters(config()) == list(range(1, desired + 1))
            if desired == 5:
                # every member, the new ones included, serves the same data
                for i in (4, 5):
                    other = KazooClient(hosts=f"127.0.0.1:{members[i].client_port}", timeout=10)
                    other.start(timeout=30)
                    try:
                        other.sync("/data")
                        assert len(other.get_children("/data")) == writes
                    finally:
                        other.stop()
                        other.close()
        # really three now: with one more member down, two of three still make a quorum
        follower = next(i for i in (1, 2, 3) if nodes[i].mode() == "follower")
        nodes[follower].stop()
        wait_until(lambda: _try(write), "writes with one of three down", 60, interval=0.2)
        assert len(client.get_children("/data")) == writes
        print(f"reconfig steps (s): {[round(t, 1) for t in timings]}; {writes} writes, none lost")
    finally:
        if client is not None:
            client.stop()
            client.close()
        for n in nodes.values():
            n.stop()


def _try(fn) -> bool:
    try:
        fn()
        return True
    except Exception:  # the session may be moving to another member
        return False

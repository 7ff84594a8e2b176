"""The faults, each a `begin` that returns how to `end` it.

Process faults: SIGKILL (restarted at the end), SIGSTOP (SIGCONT at the end) and SIGTERM (it must
exit by itself with code 0; restarted at the end) of a broker (the leader of some partition), the
active controller, or ZooKeeper (an outage); and the combined crash of issue 32: every controller
SIGKILLed, one second later the leader of a partition, all restarted at the end (with a short
fault, while the killed processes' ZooKeeper sessions, and so their registrations, still live).
Network faults (namespaces): a partition leader cut
from ZooKeeper, or from everything but the clients; a follower cut from its leader; the active
controller cut from ZooKeeper, or from every broker. A full disk: a broker's tmpfs log directory
filled; at the end freed and the broker restarted (as Kafka, a broker brings a failed directory
back only by a restart). Bad input: the hostile frames of tests/safety (every array of every
request schema claiming a huge count) and a seeded fuzzer over every API key and version, sent to
brokers and the active controller; instantaneous.

Targets are picked when a fault begins, from the fault's `choice` (drawn from the run's seed),
among what the cluster looks like then; a fault whose target is busy with another fault, or that
needs what the machine lacks, is skipped with a reason.
"""

from __future__ import annotations

import random
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from odradek.dev.cluster import ManagedProcess

from .cluster import NemesisCluster

NETWORK_KINDS = ("partition-leader-zookeeper", "partition-leader-all-but-clients", "partition-follower-leader",
                 "partition-controller-zookeeper", "partition-controller-brokers")
PROCESS_KINDS = tuple(f"{sig}-{role}" for role in ("broker", "controller", "zookeeper")
                      for sig in ("kill", "stop", "term"))
COMBINED_KINDS = ("kill-controllers-leader",)
DISK_KINDS = ("disk-full",)
INPUT_KINDS = ("bad-input", "fuzz")
ALL_KINDS = PROCESS_KINDS + COMBINED_KINDS + NETWORK_KINDS + DISK_KINDS + INPUT_KINDS
TERM_EXIT_S = 30.0
"""How long a SIGTERMed process may take to exit by itself."""
LEADER_KILL_DELAY_S = 1.0
"""kill-controllers-leader: the pause between killing the controllers and the leader broker."""
FUZZ_FRAMES = 40
"""Fuzzed frames per fuzz fault and target (each run draws another window of every key and
version; tests/safety fuzzes them all)."""


class Skip(Exception):
    """The fault cannot begin now (target busy or missing, ZooKeeper unreachable, no netns)."""


@dataclass
class Active:
    kind: str
    description: str
    end: Callable[[], None]
    busy: set[str] = field(default_factory=set)


class Nemesis:
    """What the faults act on, and the bookkeeping they share."""

    def __init__(self, nc: NemesisCluster, topic: str, partitions: int, problems: list[str]):
        self.nc = nc
        self.topic = topic
        self.partitions = partitions
        self.problems = problems
        self.busy: set[str] = set()
        self.expected_down: set[str] = set()
        """Processes a fault stopped on purpose (not crashes)."""
        self._blocked: dict[frozenset[str], int] = {}

    # --- helpers ---------------------------------------------------------------------------------

    def missing(self, kind: str) -> str | None:
        """Why `kind` cannot run on this machine, or None."""
        if kind in NETWORK_KINDS and self.nc.lab is None:
            return f"namespace faults skipped: {self.nc.netns_reason}"
        if kind in DISK_KINDS and not self.nc.disks:
            return f"full-disk faults skipped: {self.nc.disk_reason}"
        return None

    def claim(self, *names: str) -> set[str]:
        taken = set(names) & self.busy
        if taken:
            raise Skip(f"{sorted(taken)} busy with another fault")
        self.busy |= set(names)
        return set(names)

    def leader(self, choice: int) -> tuple[int, int]:
        """(partition, leader broker) of partition `choice % partitions` (ZooKeeper's view; while
        ZooKeeper is unreachable, a broker drawn from `choice` instead)."""
        p = choice % self.partitions
        try:
            state = self.nc.partition_state(self.topic, p)
        except TimeoutError:
            return p, (choice // self.partitions) % self.nc.n_brokers
        if state is None or state.leader < 0:
            raise Skip(f"{self.topic}-{p} has no leader")
        return p, state.leader

    def active_controller(self, choice: int = 0) -> int:
        """The active controller (a controller drawn from `choice` while ZooKeeper is unreachable)."""
        try:
            found = self.nc.active_controller()
        except TimeoutError:
            return choice % self.nc.n_controllers
        if found is None:
            raise Skip("no active controller")
        return found

    def block(self, a: str, b: str) -> None:
        pair = frozenset((a, b))
        self._blocked[pair] = self._blocked.get(pair, 0) + 1
        if self._blocked[pair] == 1:
            self.nc.lab.block(a, b)

    def unblock(self, a: str, b: str) -> None:
        pair = frozenset((a, b))
        self._blocked[pair] -= 1
        if self._blocked[pair] == 0:
            del self._blocked[pair]
            self.nc.lab.unblock(a, b)

    # --- process faults -------------------------------------------------------------------------

    def _process_target(self, role: str, choice: int) -> tuple[str, ManagedProcess | None]:
        if role == "broker":
            _, leader = self.leader(choice)
            return f"broker-{leader}", self.nc.process(f"broker-{leader}")
        if role == "controller":
            j = self.active_controller(choice)
            return f"controller-{j}", self.nc.process(f"controller-{j}")
        return "zookeeper", None

    def signal_fault(self, kind: str, choice: int) -> Active:
        sig_name, role = kind.split("-", 1)
        name, process = self._process_target(role, choice)
        busy = self.claim(name)
        zk = self.nc.cluster.zookeeper
        try:
            if sig_name == "stop":
                if process is None:
                    zk.kill(signal.SIGSTOP)
                    return Active(kind, "ZooKeeper hangs (SIGSTOP)", lambda: zk.kill(signal.SIGCONT), busy)
                process.pause()
                return Active(kind, f"{name} hangs (SIGSTOP)", process.resume, busy)
            self.expected_down.add(name)
            if process is None:
                if sig_name == "kill":
                    zk.kill(signal.SIGKILL)
                else:
                    zk.stop(timeout=TERM_EXIT_S)
                return Active(kind, f"ZooKeeper {'killed' if sig_name == 'kill' else 'stopped'}",
                              lambda: self._restart_zookeeper(), busy)
            if sig_name == "kill":
                self.nc.dead_sessions |= self.nc.owned_by(name)
                process.kill(signal.SIGKILL)
            else:
                self._terminate(name, process)
            return Active(kind, f"{name} {'killed' if sig_name == 'kill' else 'terminated'}",
                          lambda: self._restart(name, process), busy)
        except BaseException:
            self.busy -= busy
            raise

    def controllers_and_leader_fault(self, kind: str, choice: int) -> Active:
        """Every controller SIGKILLed, LEADER_KILL_DELAY_S later the leader of partition `choice`;
        all restarted at the end. Nothing is left to elect a new leader meanwhile, and if the fault
        is shorter than the session timeout, the restarted broker finds its own registration (and
        the controllers theirs) still in ZooKeeper and must outwait it before serving."""
        _, leader = self.leader(choice)
        controllers = [f"controller-{j}" for j in range(self.nc.n_controllers)]
        broker = f"broker-{leader}"
        busy = self.claim(*controllers, broker)
        try:
            for name in controllers:
                self.expected_down.add(name)
                self.nc.dead_sessions |= self.nc.owned_by(name)
                self.nc.process(name).kill(signal.SIGKILL)
            time.sleep(LEADER_KILL_DELAY_S)
            self.expected_down.add(broker)
            self.nc.dead_sessions |= self.nc.owned_by(broker)
            self.nc.process(broker).kill(signal.SIGKILL)
        except BaseException:
            self.busy -= busy
            raise

        def end() -> None:
            for name in [*controllers, broker]:
                self._restart(name, self.nc.process(name))

        return Active(kind, f"{', '.join(controllers)} killed, then {broker} (leader of {self.topic}-{choice % self.partitions})",
                      end, busy)

    def _terminate(self, name: str, process: ManagedProcess) -> None:
        """SIGTERM: the process must exit by itself, with code 0, within TERM_EXIT_S."""
        process.popen.send_signal(signal.SIGTERM)
        try:
            code = process.popen.wait(TERM_EXIT_S)
        except subprocess.TimeoutExpired:
            self.problems.append(f"{name} still running {TERM_EXIT_S:.0f}s after SIGTERM (stacks in its log)")
            process.popen.send_signal(signal.SIGABRT)  # PYTHONFAULTHANDLER (runner): every thread's stack
            try:
                process.popen.wait(5)
            except subprocess.TimeoutExpired:
                process.kill(signal.SIGKILL)
            return
        if code != 0:
            self.problems.append(f"{name} exited with {code} after SIGTERM")

    def _restart(self, name: str, process: ManagedProcess) -> None:
        process.start()
        self.expected_down.discard(name)

    def _restart_zookeeper(self) -> None:
        self.nc.cluster.zookeeper.start()
        self.expected_down.discard("zookeeper")

    # --- network faults -------------------------------------------------------------------------

    def network_fault(self, kind: str, choice: int) -> Active:
        pairs: list[tuple[str, str]] = []
        if kind == "partition-leader-zookeeper":
            p, leader = self.leader(choice)
            what = f"broker-{leader} (leader of {self.topic}-{p}) cut from ZooKeeper"
            pairs = [(f"broker-{leader}", "zookeeper")]
        elif kind == "partition-leader-all-but-clients":
            p, leader = self.leader(choice)
            me = f"broker-{leader}"
            what = f"{me} (leader of {self.topic}-{p}) cut from all but the clients"
            pairs = [(me, other) for other in self.nc.lab.hosts if other != me]
        elif kind == "partition-follower-leader":
            p, leader = self.leader(choice)
            followers = [b for b in range(self.nc.n_brokers) if b != leader]
            follower = followers[(choice // self.partitions) % len(followers)]
            what = f"broker-{follower} (follower of {self.topic}-{p}) cut from its leader broker-{leader}"
            pairs = [(f"broker-{follower}", f"broker-{leader}")]
        elif kind == "partition-controller-zookeeper":
            j = self.active_controller(choice)
            what = f"controller-{j} (active) cut from ZooKeeper"
            pairs = [(f"controller-{j}", "zookeeper")]
        else:
            j = self.active_controller(choice)
            what = f"controller-{j} (active) cut from every broker"
            pairs = [(f"controller-{j}", f"broker-{b}") for b in range(self.nc.n_brokers)]
        for a, b in pairs:
            self.block(a, b)

        def end() -> None:
            for a, b in pairs:
                self.unblock(a, b)

        return Active(kind, what, end)

    # --- full disk ------------------------------------------------------------------------------

    def disk_fault(self, kind: str, choice: int) -> Active:
        b = choice % self.nc.n_brokers
        name = f"broker-{b}"
        busy = self.claim(name)
        disk = self.nc.disks[b]
        taken = disk.fill()
        process = self.nc.process(name)

        def end() -> None:
            disk.free()
            self.expected_down.add(name)
            self._terminate(name, process)
            self._restart(name, process)

        return Active(kind, f"{name}'s small log directory full ({taken} bytes written to fill it)", end, busy)

    # --- bad input --------------------------------------------------------------------------------

    def input_fault(self, kind: str, choice: int) -> Active:
        from safety.hostile import (
            METADATA_V12_HUGE_TOPICS,
            fuzz_frames,
            huge_count_frames,
            request_schemas,
            send_frames,
        )

        rng = random.Random(choice)
        schemas = request_schemas()
        if kind == "bad-input":
            frames = [METADATA_V12_HUGE_TOPICS] + [f for _, _, cls in schemas for f in huge_count_frames(cls)[:1]]
            frames = rng.sample(frames, min(len(frames), FUZZ_FRAMES)) + [METADATA_V12_HUGE_TOPICS]
        else:
            offset = rng.randrange(len(schemas))
            window = (schemas[offset:] + schemas[:offset])[:FUZZ_FRAMES]
            frames = [frame for _, _, frame in fuzz_frames(rng, per_schema=1, schemas=window)]
        targets = [f"broker-{choice % self.nc.n_brokers}"]
        try:
            targets.append(f"controller-{self.active_controller()}")
        except Skip:
            pass
        sent = []
        for name in targets:
            if name in self.busy:
                continue
            process = self.nc.process(name)
            host, port = _listener(process)
            try:
                closed = send_frames(port, frames, host=host, answer_timeout=0.3)
            except OSError as e:
                self.problems.append(f"{kind}: {name} stopped listening ({e!r})")
                continue
            sent.append(f"{len(frames)} frames to {name} ({closed} closed)")
        return Active(kind, f"{kind}: " + ", ".join(sent or ["no target free"]), lambda: None)

    # --- dispatch ---------------------------------------------------------------------------------

    def begin(self, kind: str, choice: int) -> Active:
        reason = self.missing(kind)
        if reason is not None:
            raise Skip(reason)
        if kind in PROCESS_KINDS:
            return self.signal_fault(kind, choice)
        if kind in COMBINED_KINDS:
            return self.controllers_and_leader_fault(kind, choice)
        if kind in NETWORK_KINDS:
            return self.network_fault(kind, choice)
        if kind in DISK_KINDS:
            return self.disk_fault(kind, choice)
        return self.input_fault(kind, choice)

    def end(self, active: Active) -> None:
        try:
            active.end()
        finally:
            self.busy -= active.busy


def _listener(process: ManagedProcess) -> tuple[str, int]:
    """(host, port) of a broker's or controller's first listener."""
    url = process.overrides["listeners"].split(",")[0]
    host, port = url.split("://", 1)[1].rsplit(":", 1)
    return host, int(port)


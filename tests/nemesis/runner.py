"""One nemesis run: a fresh cluster, the workload, a fault schedule, healing, then the checks.

A run is reproducible from its seed: the schedule (which faults, when, for how long, and the
`choice` each picks its target with) comes from it, and a failing run prints both.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from .checker import StreamVerdict, changed_reads, check_stream
from .cluster import NemesisCluster
from .faults import ALL_KINDS, Active, Nemesis, Skip
from .workload import Reader, Stream, StreamProducer, read_all

PARTITIONS = 6
STREAMS = (Stream("nemesis-idempotent", PARTITIONS, True), Stream("nemesis-plain", PARTITIONS, False))
HEAL_BOUND_S = 90.0
"""After the last fault ends, every ISR must be full again within this."""
LIVENESS_S = 15.0
"""With the liveness check: once the faults of an episode ended and every ISR is whole, every
record the producers still hold is acknowledged within this (request.timeout.ms plus a metadata
refresh: nothing may wait for message.timeout.ms)."""
TICK_S = 0.2


@dataclass(frozen=True)
class Scheduled:
    at_s: float
    kind: str
    duration_s: float
    choice: int

    def __str__(self) -> str:
        return f"{self.at_s:.0f}s {self.kind} {self.duration_s:.0f}s #{self.choice}"


@dataclass
class RunResult:
    run: int
    seed: int
    schedule: list[Scheduled]
    applied: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    verdicts: list[StreamVerdict] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    crashes: list[str] = field(default_factory=list)
    refused_starts: list[str] = field(default_factory=list)
    """Brokers that exited at start-up because ZooKeeper was unreachable (by design, as Kafka's)."""
    replica_mismatches: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    heal_s: float | None = None
    elapsed_s: float = 0.0
    expired: int = 0
    """Records whose delivery report was an error (message.timeout.ms ran out, or a fatal error)."""
    liveness: bool = False
    """Whether this run checks liveness: then an expired record fails it, and so does a record
    still held LIVENESS_S after an episode healed (`problems`)."""

    @property
    def acknowledged(self) -> int:
        return sum(v.acknowledged for v in self.verdicts)

    @property
    def lost(self) -> int:
        return sum(len(v.lost) for v in self.verdicts)

    @property
    def duplicates(self) -> int:
        """Duplicated acknowledged records of the idempotent producer (a failure)."""
        return sum(len(v.duplicates) for v in self.verdicts if v.idempotent)

    @property
    def duplicates_plain(self) -> int:
        """Duplicated acknowledged records of the producer without idempotence (allowed)."""
        return sum(len(v.duplicates) for v in self.verdicts if not v.idempotent)

    @property
    def reordered_plain(self) -> int:
        """Partitions where the producer without idempotence had records out of send order (allowed)."""
        return sum(len(v.out_of_order) for v in self.verdicts if not v.idempotent)

    @property
    def ok(self) -> bool:
        return (all(v.ok for v in self.verdicts) and len(self.verdicts) == len(STREAMS) and not self.changed
                and not self.crashes and not self.replica_mismatches and not self.problems
                and self.heal_s is not None and not (self.liveness and self.expired))

    def report(self) -> str:
        """What a failing run needs to be understood and replayed."""
        lines = [f"run {self.run} seed {self.seed}: {'ok' if self.ok else 'FAILED'}",
                 "schedule: " + "; ".join(map(str, self.schedule))]
        lines += [f"  applied: {a}" for a in self.applied]
        lines += [f"  skipped: {s}" for s in self.skipped]
        if self.expired:
            lines.append(f"  expired (delivery failed): {self.expired}")
        for v in self.verdicts:
            lines.append(f"  {v.topic}: acknowledged {v.acknowledged}, lost {len(v.lost)} {v.lost_detail[:10]}, "
                         f"duplicates {len(v.duplicates)} {v.duplicates[:10]}, order {v.out_of_order[:3]}")
        for label, items in (("changed reads", self.changed), ("crashes", self.crashes),
                             ("start-ups refused while ZooKeeper was away", self.refused_starts),
                             ("replicas differ", self.replica_mismatches), ("problems", self.problems)):
            if items:
                lines.append(f"  {label}: {items[:10]}")
        return "\n".join(lines)


def random_schedule(rng: random.Random, kinds: tuple[str, ...] = ALL_KINDS, faults: int = 4,
                    span_s: float = 60.0) -> list[Scheduled]:
    """`faults` faults spread over `span_s` seconds, some overlapping (combined faults)."""
    out = []
    for _ in range(faults):
        kind = rng.choice(kinds)
        if kind.endswith("-zookeeper") and not kind.startswith("partition"):
            duration = rng.uniform(5, 40)
        elif kind == "kill-controllers-leader":  # restarted while the killed sessions still live
            duration = rng.uniform(1, 3)
        elif kind in ("bad-input", "fuzz"):
            duration = 0.0
        else:
            duration = rng.uniform(3, 20)
        out.append(Scheduled(round(rng.uniform(0, span_s), 1), kind, round(duration, 1), rng.randrange(1 << 30)))
    return sorted(out, key=lambda s: s.at_s)


RESTART_REGISTERED = "restart-registered"
"""Issue 32's scenario: every controller and a partition leader SIGKILLed, restarted while their
ZooKeeper sessions still live; played with the liveness check, a 10 s session timeout and
message.timeout.ms 60 s (SCENARIOS)."""
SCENARIOS = {RESTART_REGISTERED: {"liveness": True, "session_timeout_ms": 10_000, "message_timeout_ms": 60_000}}
"""Fixed scenarios (`soak.py --scenario`): run_once's keyword arguments for each."""


def restart_registered_schedule(rng: random.Random, rounds: int = 3) -> list[Scheduled]:
    """`rounds` times kill-controllers-leader, each restarted 1-3 s after the leader died (well
    inside the 10 s session timeout), on a partition drawn from the seed."""
    return [Scheduled(30.0 * i, "kill-controllers-leader", round(rng.uniform(1.0, 3.0), 1), rng.randrange(1 << 30))
            for i in range(rounds)]


def _create_topics(bootstrap: str, client_properties: dict[str, str] | None = None) -> None:
    client = AdminClient({**(client_properties or {}), "bootstrap.servers": bootstrap})
    futures = client.create_topics(
        [NewTopic(s.topic, num_partitions=s.partitions, replication_factor=3, config={"min.insync.replicas": "2"})
         for s in STREAMS], operation_timeout=60, request_timeout=60)
    for f in futures.values():
        f.result(timeout=65)


def _wait_acked(producers: list[StreamProducer], more: int, timeout: float, what: str, problems: list[str]) -> bool:
    """Wait until each producer has `more` acknowledgements than now; False (a problem) if not."""
    targets = [p.acked_count() + more for p in producers]
    deadline = time.monotonic() + timeout
    while any(p.acked_count() < t for p, t in zip(producers, targets)):
        if time.monotonic() > deadline:
            problems.append(f"{what}: fewer than {more} records acknowledged per producer in {timeout:.0f}s "
                            f"({[p.acked_count() for p in producers]} of {targets})")
            return False
        time.sleep(0.1)
    return True


def episodes(schedule: list[Scheduled]) -> list[list[Scheduled]]:
    """The schedule cut where no fault is active: each episode's faults overlap (or touch)."""
    out: list[list[Scheduled]] = []
    end = float("-inf")
    for s in sorted(schedule, key=lambda s: s.at_s):
        if not out or s.at_s > end:
            out.append([])
        out[-1].append(s)
        end = max(end, s.at_s + s.duration_s)
    return out


def check_liveness(producers: list[StreamProducer], bound_s: float, what: str, problems: list[str]) -> None:
    """Every record the producers hold now has its delivery report within `bound_s` (a failed
    one is counted apart, as expired)."""
    held = [p.held() for p in producers]
    deadline = time.monotonic() + bound_s
    while True:
        left = []
        for p, ids in zip(producers, held, strict=True):
            acked, failed = p.reported(ids)
            left.append(ids - acked - failed)
        if not any(left) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    for p, ids, waiting in zip(producers, held, left, strict=True):
        if waiting:
            problems.append(f"{what}: {p.stream.topic}: {len(waiting)} of the {len(ids)} records held at healing "
                            f"not acknowledged within {bound_s:.0f}s (ids {sorted(waiting)[:5]}...)")


def auto_creations(nc: NemesisCluster) -> list[str]:
    """Brokers that tried to auto-create a stream topic: it existed all along, so such an attempt
    came from a view the broker did not have (issue 32: an empty cache before registering)."""
    out = []
    for b in nc.cluster.brokers:
        try:
            text = b.log_path.read_text(errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            if "auto-creation of topic" in line and any(f"'{s.topic}'" in line for s in STREAMS):
                out.append(f"{b.name}: {line[-160:]}")
                break
    return out


def run_once(run: int, seed: int, schedule: list[Scheduled], workdir: Path, *, rate: float = 100.0,
             use_netns: bool = True, use_disks: bool = True, liveness: bool = False,
             session_timeout_ms: int | None = None, message_timeout_ms: int = 120_000,
             client_debug: bool = False, tls: bool = False) -> RunResult:
    """One run. With `liveness`, the schedule is played episode by episode (faults that overlap go
    together); after each, every ISR must be whole within HEAL_BOUND_S and then every record the
    producers hold acknowledged within LIVENESS_S; a failed delivery fails the run."""
    result = RunResult(run, seed, schedule, liveness=liveness)
    started = time.monotonic()
    os.environ["PYTHONFAULTHANDLER"] = "1"  # processes stuck past a bound are aborted: their stacks land in the log
    extra = {} if session_timeout_ms is None else {"session_timeout_ms": session_timeout_ms}
    nc = NemesisCluster(workdir, use_netns=use_netns, use_disks=use_disks, tls=tls, **extra)
    producers: list[StreamProducer] = []
    reader: Reader | None = None
    try:
        nc.open()
        props = nc.client_properties
        _create_topics(nc.bootstrap, props)
        topics = {s.topic: s.partitions for s in STREAMS}
        nc.wait_healed(topics, 60)
        producers = [StreamProducer(nc.bootstrap, s, rate, message_timeout_ms=message_timeout_ms,
                                    debug_log=workdir / f"librdkafka-{s.topic}.log" if client_debug else None,
                                    client_properties=props).start()
                     for s in STREAMS]
        reader = Reader(nc.bootstrap, list(STREAMS), props).start()
        _wait_acked(producers, 100, 60, "warm-up", result.problems)
        nemesis = Nemesis(nc, STREAMS[0].topic, PARTITIONS, result.problems)
        if liveness:
            for i, episode in enumerate(episodes(schedule)):
                first = episode[0].at_s
                _play(nemesis, [replace(s, at_s=s.at_s - first) for s in episode], result)
                try:
                    nc.wait_healed(topics, HEAL_BOUND_S)
                except TimeoutError as e:
                    result.problems.append(f"episode {i}: {e}")
                    break
                check_liveness(producers, LIVENESS_S, f"episode {i}", result.problems)
        else:
            _play(nemesis, schedule, result)
        healing = time.monotonic()
        try:
            nc.wait_healed(topics, HEAL_BOUND_S)
            # ZooKeeper's view can look healed before the cluster is (a restarted server restores
            # the sessions and znodes of processes that are still reconnecting): healed means
            # writable too, every partition taking acks=all records again.
            if _wait_acked(producers, 100, HEAL_BOUND_S, "after healing", result.problems):
                result.heal_s = time.monotonic() - healing
        except TimeoutError as e:
            result.problems.append(str(e))
        for p in producers:
            left = p.stop()
            if left:
                result.problems.append(f"{p.stream.topic}: {left} records without a delivery report")
        result.expired = sum(len(p.stats.failed) for p in producers)
        if liveness:
            result.problems += auto_creations(nc)
        reader.stop()
        log = read_all(nc.bootstrap, list(STREAMS), client_properties=props)
        result.verdicts = [check_stream(p.stream, dict(p.stats.acked), log) for p in producers]
        result.changed = changed_reads(dict(reader.seen), log)
        _check_replicas(nc, result)
    except Exception as e:
        result.problems.append(f"run aborted: {e!r}")
    finally:
        for p in producers:
            p.close(flush_timeout=1)
        if reader is not None:
            reader.stop()
        nc.close(save_disks=not result.ok)
        result.elapsed_s = time.monotonic() - started
    return result


def _play(nemesis: Nemesis, schedule: list[Scheduled], result: RunResult) -> None:
    """Begin and end the scheduled faults on time, watching for processes that die on their own."""
    t0 = time.monotonic()
    pending = list(schedule)
    active: list[tuple[float, Active]] = []
    horizon = max((s.at_s + s.duration_s for s in schedule), default=0.0) + 1.0
    while pending or active:
        now = time.monotonic() - t0
        if now > horizon + 120:
            result.problems.append("fault schedule overran its horizon by 120s")
            break
        for due, a in [x for x in active if x[0] <= now]:
            active.remove((due, a))
            try:
                nemesis.end(a)
            except Exception as e:
                result.problems.append(f"ending {a.description}: {e!r}")
        for s in [s for s in pending if s.at_s <= now]:
            pending.remove(s)
            try:
                a = nemesis.begin(s.kind, s.choice)
            except Skip as e:
                result.skipped.append(f"{s}: {e}")
                continue
            result.applied.append(f"{now:.0f}s +{s.duration_s:.0f}s {a.description}")
            active.append((now + s.duration_s, a))
        _watch(nemesis, result)
        time.sleep(TICK_S)


def _watch(nemesis: Nemesis, result: RunResult) -> None:
    """A process no fault stopped that is not running crashed: record it and start it again, as
    its supervisor (Kubernetes) would. Not a crash: a broker started while a fault keeps ZooKeeper
    away exits after zookeeper.connection.timeout.ms, as Kafka's does (its designed start-up
    failure, with code 1 and the reason in its log)."""
    for p in nemesis.nc.managed():
        if p.popen is not None and not p.alive and p.name not in nemesis.expected_down:
            if refused_start(p.name, p.returncode, p.log_tail(40), zookeeper_away="zookeeper" in nemesis.busy):
                result.refused_starts.append(f"{p.name} exited with {p.returncode}: ZooKeeper unreachable at start-up")
            else:
                result.crashes.append(f"{p.name} exited with {p.returncode}: {p.log_tail(5)}")
            p.start()


def refused_start(name: str, returncode: int | None, log_tail: str, zookeeper_away: bool) -> bool:
    """Whether a broker's exit is its designed refusal to start without ZooKeeper."""
    return (zookeeper_away and name.startswith("broker-") and returncode == 1
            and "broker start-up failed" in log_tail and "unreachable" in log_tail)


def _check_replicas(nc: NemesisCluster, result: RunResult) -> None:
    """Replicas converge while running; after a clean stop (every process exits by itself with
    code 0) every replica of a partition holds the same bytes."""
    cluster = nc.cluster
    for s in STREAMS:
        for p in range(s.partitions):
            try:
                cluster.wait_logs_identical(s.topic, p, timeout=60)
            except Exception as e:
                result.replica_mismatches.append(f"running: {e}")
    for group in (cluster.brokers, cluster.controllers):
        for proc in group:
            if proc.alive:
                proc.popen.send_signal(signal.SIGTERM)
        for proc in group:
            if proc.popen is None:
                continue
            try:
                code = proc.popen.wait(60)
            except subprocess.TimeoutExpired:
                result.problems.append(f"{proc.name} did not stop within 60s of SIGTERM (stacks in its log)")
                proc.popen.send_signal(signal.SIGABRT)
                try:
                    proc.popen.wait(5)
                except subprocess.TimeoutExpired:
                    proc.kill(signal.SIGKILL)
                continue
            if code != 0:
                result.problems.append(f"{proc.name} stopped with exit code {code}")
    for s in STREAMS:
        for p in range(s.partitions):
            logs = {b: cluster.log_bytes(b, s.topic, p) for b in range(nc.n_brokers)}
            if len(set(logs.values())) != 1:
                sizes = {b: len(v) for b, v in logs.items()}
                result.replica_mismatches.append(f"{s.topic}-{p} after a clean stop: bytes per broker {sizes}")

"""Partitions at scale (issue 31): Kafka 1.1's figures on a 3-broker local cluster.

One `LocalCluster` (ZooKeeper, an active controller and a standby, 3 brokers, default settings)
gets `--partitions` partitions at RF 3 in topics of `--per-topic` partitions, created through the
admin API (CreateTopics of `--batch` topics). Then, in this order, it measures:

- creation: wall time until every partition has a leader and a full ISR in every broker's Metadata,
  and the CPU-seconds the controllers and the brokers spent on it;
- footprint: each broker's RSS per hosted replica and open file descriptors, ZooKeeper's data size
  (`mntr`) and newest snapshot, and a Metadata answer for all topics (bytes, ms);
- controlled shutdown: an acks=all producer writes to every partition at `--rate` records/s (it
  sleeps until each send is due); the broker leading the most partitions gets SIGTERM (broker 0
  with `--stopped-leads N`, whose replica assignments make it lead N partitions); the cores each
  kind of process used under that load before the signal (`steady_cores`), the time to its exit
  (and each phase of it, from the broker's own log lines: `phases_s`) and the delivery errors
  the producer saw; then its restart back to a full ISR;
- a broker's crash and restart: SIGKILL, start, time until registered and until every partition
  is back in a full ISR;
- controller failover: SIGKILL the active controller; time until the standby is elected (the dead
  one's ZooKeeper session must expire first: `zookeeper.session.timeout.ms`), until it logs that it
  is active (it has loaded every partition from ZooKeeper and sent LeaderAndIsr/UpdateMetadata),
  and until every broker has applied the new controller's UpdateMetadata (each broker logs the
  first update of a new controller epoch).

One descriptor per hosted replica stays open (its active segment, as in Kafka), so a broker needs
an open-file limit above its replica count; the broker raises its soft limit to the hard one. A
hard limit below `--partitions` x 3 / `--brokers` (20,000 in this machine's containers) is
reported before the cluster starts.

`--profile DIR` runs py-spy on the stopping broker and the active controller during the shutdown,
on the restarted broker from its start until it is back in full ISR, and on the crashed
broker's peers from before the SIGKILL until it is back (collapsed stacks, one file each:
summarize with `bench/profile_replication.py`'s `summarize`, or read the heaviest stacks with
sort).

Run: .venv/bin/python bench/scale.py [--partitions 30000] (--partitions 3000 for a quick run).
The integration test tests/integration/test_scale.py runs the controlled-shutdown part scaled down.
"""

import argparse
import json
import os
import re
import resource
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from itertools import pairwise
from pathlib import Path

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from procfs import cpu_seconds, open_fds, rss_mb  # bench/procfs.py, beside this file

from odradek.dev.cluster import LocalCluster
from odradek.dev.zookeeper import four_letter, free_port, free_ports

REPLICAS = 3


# --- logs --------------------------------------------------------------------------------------

_STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")


def log_time(path: Path, pattern: str, after: float) -> float | None:
    """Epoch seconds of the first line of the process log `path` matching `pattern` stamped at or
    after `after`; None while there is none."""
    if not path.exists():
        return None
    wanted = re.compile(pattern)
    with open(path, errors="replace") as f:
        for line in f:
            m = _STAMP.match(line)
            if m is None or not wanted.search(line):
                continue
            t = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
            if t >= after - 0.001:
                return t
    return None


def wait_for(what: str, check, timeout: float, interval: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError(f"{what}: not within {timeout:.0f} s")


# --- Kafka views -------------------------------------------------------------------------------

def metadata_request(port: int, timeout: float = 60.0) -> tuple[int, float]:
    """(bytes, seconds) of one Metadata v1 answer for all topics on a fresh connection."""
    client_id = b"scale-bench"
    body = struct.pack(">hhih", 3, 1, 1, len(client_id)) + client_id + struct.pack(">i", -1)
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        start = time.perf_counter()
        s.sendall(struct.pack(">i", len(body)) + body)
        head = b""
        while len(head) < 4:
            chunk = s.recv(4 - len(head))
            if not chunk:
                raise ConnectionError("closed")
            head += chunk
        size = struct.unpack(">i", head)[0]
        left = size
        while left:
            chunk = s.recv(min(left, 1 << 20))
            if not chunk:
                raise ConnectionError("closed")
            left -= len(chunk)
        return size, time.perf_counter() - start


@dataclass
class View:
    leaders: Counter = field(default_factory=Counter)
    partitions: int = 0
    leaderless: int = 0
    under_replicated: int = 0


def cluster_view(admin: AdminClient, topics: set[str]) -> View:
    view = View()
    md = admin.list_topics(timeout=60)
    for name in topics:
        t = md.topics.get(name)
        if t is None or t.error is not None:
            view.leaderless += 1
            continue
        for p in t.partitions.values():
            view.partitions += 1
            if p.leader < 0:
                view.leaderless += 1
            else:
                view.leaders[p.leader] += 1
            if len(p.isrs) < len(p.replicas):
                view.under_replicated += 1
    return view


def full(admin: AdminClient, topics: set[str], partitions: int):
    try:
        v = cluster_view(admin, topics)
    except KafkaException:
        return None
    return v if v.partitions == partitions and v.leaderless == 0 and v.under_replicated == 0 else None


# --- load ----------------------------------------------------------------------------------------

class Load(threading.Thread):
    """An acks=all producer writing to every partition in turn at `rate` records/s."""

    def __init__(self, bootstrap: str, targets: list[tuple[str, int]], rate: float):
        super().__init__(daemon=True)
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                                  "enable.idempotence": True, "delivery.timeout.ms": 120_000})
        self.targets, self.rate = targets, rate
        self.stopping = threading.Event()
        self.sent = self.delivered = 0
        self.errors: Counter = Counter()
        self.phase = "before"
        """Set by the driver; every record's outcome is counted under the phase it was sent in."""
        self.outcomes: Counter = Counter()

    def _report(self, phase: str):
        def report(err, _msg) -> None:
            if err is None:
                self.delivered += 1
                self.outcomes[f"{phase} delivered"] += 1
            else:
                self.errors[err.name()] += 1
                self.outcomes[f"{phase} {err.name()}"] += 1
        return report

    def run(self) -> None:
        start, i = time.perf_counter(), 0
        while not self.stopping.is_set():
            due = start + i / self.rate
            now = time.perf_counter()
            if now < due:
                self.producer.poll(min(0.05, due - now))
                continue
            topic, partition = self.targets[i % len(self.targets)]
            try:
                self.producer.produce(topic, value=b"x" * 100, partition=partition,
                                      on_delivery=self._report(self.phase))
                self.sent += 1
            except BufferError:
                self.producer.poll(0.05)
                continue
            i += 1
            self.producer.poll(0)

    def finish(self, timeout: float = 120.0) -> None:
        self.stopping.set()
        self.join(10)
        left = self.producer.flush(timeout)
        if left:
            self.errors["undelivered at flush"] += left


# --- phases ---------------------------------------------------------------------------------------

def assignment(partition: int, brokers: int, stopped_leads: int) -> list[int]:
    """The replicas, preferred leader first, of the `partition`-th partition of the whole run: broker
    0 first in the first `stopped_leads` of them (followed by the others in turn, so that their
    leadership falls evenly on the rest when 0 stops), the other brokers first in turn after that."""
    others = list(range(1, brokers))
    if partition < stopped_leads:
        turn = partition % len(others)
        return [0, *(others[turn:] + others[:turn])][:REPLICAS]
    lead = others[partition % len(others)]
    return [lead, *[b for b in range(brokers) if b != lead]][:REPLICAS]


def new_topic(name: str, index: int, args) -> NewTopic:
    """`--stopped-leads N`: explicit assignments that make broker 0 the leader of N partitions (the
    broker the shutdown phase stops); otherwise the controller's own assignment."""
    if args.stopped_leads is None:
        return NewTopic(name, args.per_topic, REPLICAS)
    first = index * args.per_topic
    return NewTopic(name, args.per_topic,  # confluent-kafka 2.16 wants the count beside an assignment
                    replica_assignment=[assignment(first + p, args.brokers, args.stopped_leads)
                                        for p in range(args.per_topic)])


def create(cluster: LocalCluster, admin: AdminClient, args) -> tuple[set[str], dict]:
    names = [f"scale-{i:05d}" for i in range(args.partitions // args.per_topic)]
    pids = [p.pid for p in cluster.controllers + cluster.brokers]
    cpu0 = [cpu_seconds(pid) for pid in pids]
    start = time.monotonic()
    for i in range(0, len(names), args.batch):
        futures = admin.create_topics([new_topic(n, t, args) for t, n in enumerate(names[i:i + args.batch], i)],
                                      request_timeout=300)
        for f in futures.values():
            f.result(timeout=300)
    acked = time.monotonic() - start
    topics = set(names)
    wait_for("every partition led, in full ISR", lambda: full(admin, topics, len(names) * args.per_topic),
             timeout=args.timeout, interval=1.0)
    took = time.monotonic() - start
    cpu = [cpu_seconds(pid) - c for pid, c in zip(pids, cpu0)]
    n = len(cluster.controllers)
    return topics, {"partitions": len(names) * args.per_topic, "topics": len(names),
                    "create_acked_s": round(acked, 1), "all_in_sync_s": round(took, 1),
                    "controllers_cpu_s": round(sum(cpu[:n]), 1), "brokers_cpu_s": round(sum(cpu[n:]), 1)}


def footprint(cluster: LocalCluster, partitions: int) -> dict:
    hosted = partitions * REPLICAS / len(cluster.brokers)
    brokers = {}
    for i, b in enumerate(cluster.brokers):
        pid = b.pid
        assert pid is not None
        brokers[i] = {"rss_mb": round(rss_mb(pid)), "kb_per_replica": round(rss_mb(pid) * 1024 / hosted, 1),
                      "fds": open_fds(pid)}
    zk = cluster.zookeeper
    assert zk is not None
    mntr = four_letter("127.0.0.1", zk.port, b"mntr").decode(errors="replace")
    data = dict(line.split("\t", 1) for line in mntr.splitlines() if "\t" in line)
    snaps = sorted((zk.data_dir).rglob("snapshot.*"), key=lambda p: p.stat().st_mtime)
    size, seconds = metadata_request(cluster.broker_ports[0])
    return {"brokers": brokers, "zk_approximate_data_size_mb": round(int(data.get("zk_approximate_data_size", 0)) / 2**20, 1),
            "zk_znodes": int(data.get("zk_znode_count", 0)),
            "zk_newest_snapshot_mb": round(snaps[-1].stat().st_size / 2**20, 1) if snaps else None,
            "metadata_all_topics_kb": round(size / 1024), "metadata_all_topics_ms": round(seconds * 1000)}


def py_spy_binary() -> str:
    return shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")


def py_spy(pid: int, out: Path, seconds: float) -> subprocess.Popen:
    """py-spy sampling `pid` (GIL holders, with idle frames off) into a collapsed-stack file."""
    return subprocess.Popen([py_spy_binary(), "record", "--pid", str(pid), "--rate", "250", "--duration", str(int(seconds)),
                             "--format", "raw", "--output", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def active_controller(cluster: LocalCluster, timeout: float) -> int:
    zk = cluster.zk_client()
    try:
        return wait_for("an active controller", lambda: cluster.active_controller(zk), timeout=timeout)
    finally:
        zk.stop()
        zk.close()


SHUTDOWN_MARKS = (
    ("first_line", r"shutting down"),
    ("controller_answered", r"controlled shutdown (succeeded|attempt|did not|:)"),
    ("leaderships_given_up", r"controlled shutdown: (still leading|our LeaderAndIsr|gave up leading)"),
    ("replica_manager_stopped", r"replica manager stopped"),
    ("zookeeper_closing", r"closing the ZooKeeper session"),
    ("logs_closing", r"closing \d+ logs"),
    ("stopped", r"broker \d+ stopped"),
    ("exiting", r"broker \d+ exiting"),
)
"""The stopping broker's own lines, in the order it logs them (server.py's shutdown)."""


def shutdown_phases(path: Path, broker: int, signalled: float, gone: float) -> dict:
    """Seconds between consecutive marks from the SIGTERM (the bench's clock) through the broker's
    own log lines to the process gone: what each step of the shutdown took, and what no line covers
    (before the first: the event loop reaching the signal; after the last: the interpreter's exit)."""
    marks = [("signal", signalled)]
    for name, pattern in SHUTDOWN_MARKS:
        t = log_time(path, pattern, signalled)
        if t is not None and t >= marks[-1][1] - 0.001:
            marks.append((name, t))
    marks.append(("gone", gone))
    return {f"{a}->{b}": round(tb - ta, 2) for (a, ta), (b, tb) in pairwise(marks)}


def steady_cpu(cluster: LocalCluster, seconds: float) -> dict:
    """Cores each kind of process uses over `seconds` of the load before the shutdown: what the
    cluster's partitions cost at rest, and what is left of the machine for the shutdown's work."""
    zk = cluster.zookeeper
    kinds = {"controllers": [c.pid for c in cluster.controllers], "brokers": [b.pid for b in cluster.brokers],
             "zookeeper": [zk.process.pid if zk is not None and zk.process is not None else None],
             "bench": [os.getpid()]}
    before = {k: sum(cpu_seconds(pid) for pid in pids) for k, pids in kinds.items()}
    start = time.monotonic()
    time.sleep(seconds)
    took = time.monotonic() - start
    return {k: round((sum(cpu_seconds(pid) for pid in pids) - before[k]) / took, 2) for k, pids in kinds.items()}


def controlled_shutdown(cluster: LocalCluster, admin: AdminClient, topics: set[str], args) -> dict:
    view = cluster_view(admin, topics)
    victim, led = view.leaders.most_common(1)[0]
    if args.stopped_leads is not None:
        victim, led = 0, view.leaders[0]
    targets = [(t, p) for t in sorted(topics) for p in range(args.per_topic)]
    load = Load(cluster.bootstrap, targets, args.rate)
    load.start()
    steady = steady_cpu(cluster, args.warmup)
    process = cluster.broker(victim)
    popen = process._running()
    assert popen is not None
    spies = []
    if args.profile:
        # the stopping broker and the active controller, from just before the signal on
        out = Path(args.profile)
        out.mkdir(parents=True, exist_ok=True)
        controller = cluster.controller_by_id(active_controller(cluster, args.timeout))
        assert controller.pid is not None
        spies = [py_spy(popen.pid, out / "shutdown-broker.txt", 30),
                 py_spy(controller.pid, out / "shutdown-controller.txt", 30)]
        time.sleep(1)  # py-spy attaches
    start, signalled = time.monotonic(), time.time()
    load.phase = "shutting down"
    popen.send_signal(signal.SIGTERM)
    try:
        popen.wait(timeout=args.timeout)
    except Exception:
        process.kill()
        raise
    took, gone = time.monotonic() - start, time.time()
    phases = shutdown_phases(process.log_path, victim, signalled, gone)
    for spy in spies:
        spy.send_signal(signal.SIGINT)  # py-spy writes what it has and exits
        spy.wait(timeout=60)
    load.phase = "broker down"
    time.sleep(args.warmup)
    load.phase = "restarting"
    restart = time.monotonic()
    process.start()
    if args.profile:  # the restarted broker, from its start: loading, registering, catching up
        assert process.pid is not None
        spies = [py_spy(process.pid, Path(args.profile) / "restart-broker.txt", 90)]
    cluster.wait_ready(timeout=args.timeout)
    registered = time.monotonic() - restart
    wait_for("restarted broker back in full ISR", lambda: full(admin, topics, view.partitions),
             timeout=args.timeout, interval=1.0)
    back = time.monotonic() - restart
    for spy in spies:
        spy.send_signal(signal.SIGINT)
        spy.wait(timeout=60)
    load.phase = "after"
    time.sleep(args.warmup)
    load.finish()
    return {"broker": victim, "partitions_led": led, "steady_cores": steady, "sigterm_to_exit_s": round(took, 2),
            "phases_s": phases,
            "produce_sent": load.sent, "produce_delivered": load.delivered, "produce_errors": dict(load.errors),
            "by_phase_sent_in": dict(load.outcomes),
            "returncode": popen.returncode, "restart_registered_s": round(registered, 1),
            "restart_full_isr_s": round(back, 1)}


def crash_restart(cluster: LocalCluster, admin: AdminClient, topics: set[str], partitions: int, victim: int,
                  timeout: float, profile: str | None = None) -> dict:
    process = cluster.broker(victim)
    spies = []
    if profile:  # the peers, which take over the crashed broker's partitions and then give them back
        spies = [py_spy(b.pid, Path(profile) / f"crash-peer-{i}.txt", 120)
                 for i, b in enumerate(cluster.brokers) if i != victim and b.pid is not None]
        time.sleep(1)
    process.kill()
    time.sleep(1)
    start = time.monotonic()
    process.start()
    cluster.wait_ready(timeout=timeout)
    registered = time.monotonic() - start
    wait_for("crashed broker back in full ISR", lambda: full(admin, topics, partitions), timeout=timeout, interval=1.0)
    for spy in spies:
        spy.send_signal(signal.SIGINT)
        spy.wait(timeout=60)
    return {"broker": victim, "registered_s": round(registered, 1), "full_isr_s": round(time.monotonic() - start, 1)}


def failover(cluster: LocalCluster, timeout: float) -> dict:
    active = active_controller(cluster, timeout)
    standby = next(c for j, c in enumerate(cluster.controllers) if 1000 + j != active)
    standby_id = 1000 + cluster.controllers.index(standby)
    start = time.time()
    cluster.controller_by_id(active).kill()
    elected = wait_for("the standby elected",
                       lambda: log_time(standby.log_path, rf"controller {standby_id}: elected", start), timeout=timeout)
    loaded = wait_for("the standby active",
                      lambda: log_time(standby.log_path, rf"controller {standby_id}: active with", start),
                      timeout=timeout)
    updated = [wait_for(f"broker {i} updated",
                        lambda b=b: log_time(b.log_path, rf"metadata from controller {standby_id}\b", start),
                        timeout=timeout) for i, b in enumerate(cluster.brokers)]
    cluster.controller_by_id(active).start()
    return {"killed": active, "standby": standby_id, "standby_elected_s": round(elected - start, 1),
            "standby_loaded_s": round(loaded - elected, 1), "standby_active_s": round(loaded - start, 1),
            "every_broker_updated_s": round(max(updated) - start, 1)}


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--partitions", type=int, default=30_000)
    p.add_argument("--brokers", type=int, default=3)
    p.add_argument("--per-topic", type=int, default=100, help="partitions per topic")
    p.add_argument("--batch", type=int, default=20, help="topics per CreateTopics request")
    p.add_argument("--rate", type=float, default=2000.0, help="acks=all records/s during the shutdown")
    p.add_argument("--warmup", type=float, default=5.0, help="seconds of load before and after the shutdown")
    p.add_argument("--timeout", type=float, default=300.0, help="bound on every wait, seconds")
    p.add_argument("--stopped-leads", type=int, default=None, metavar="N",
                   help="assign replicas so that the broker the shutdown stops (broker 0) leads N partitions "
                        "(default: the controller's even spread, about partitions / brokers each)")
    p.add_argument("--skip", default="", help="comma-separated phases to skip: shutdown,crash,failover")
    p.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    p.add_argument("--work-dir", default=None, help="keep the cluster (logs, data) here, not in a temp dir")
    p.add_argument("--profile", default=None, metavar="DIR",
                   help="py-spy the stopping broker and the active controller for 30 s from the SIGTERM, "
                        "the restarted broker for up to 90 s from its start "
                        "(`.venv/bin/pip install py-spy`); collapsed stacks into DIR")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.partitions % args.per_topic:
        raise SystemExit("--partitions must be a multiple of --per-topic")
    if args.profile and not Path(py_spy_binary()).exists():  # found out after minutes of creation otherwise
        raise SystemExit("--profile needs py-spy (not a project dependency): .venv/bin/pip install py-spy")
    if args.stopped_leads is not None and not (0 <= args.stopped_leads <= args.partitions and args.brokers >= REPLICAS):
        raise SystemExit(f"--stopped-leads needs 0..--partitions and at least {REPLICAS} brokers")
    skip = set(filter(None, args.skip.split(",")))
    hosted = args.partitions * REPLICAS // args.brokers
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard < hosted + 1000:
        raise SystemExit(f"{hosted} replicas per broker need more open files than the hard limit {hard}: "
                         "fewer --partitions or more --brokers")
    figures: dict = {"args": vars(args)}
    with tempfile.TemporaryDirectory(prefix="odradek-scale-") as scratch:
        tmp = args.work_dir or scratch
        cluster = LocalCluster(tmp, brokers=args.brokers, controllers=2, broker_ports=free_ports(args.brokers),
                               zookeeper_port=free_port())
        with cluster:
            admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "socket.timeout.ms": 300_000})
            topics, figures["create"] = create(cluster, admin, args)
            print("create", figures["create"], flush=True)
            figures["footprint"] = footprint(cluster, figures["create"]["partitions"])
            print("footprint", figures["footprint"], flush=True)
            if "shutdown" not in skip:
                figures["controlled_shutdown"] = controlled_shutdown(cluster, admin, topics, args)
                print("controlled_shutdown", figures["controlled_shutdown"], flush=True)
            if "crash" not in skip:
                victim = (figures.get("controlled_shutdown", {}).get("broker", 0) + 1) % len(cluster.brokers)
                figures["crash_restart"] = crash_restart(cluster, admin, topics, figures["create"]["partitions"],
                                                         victim, args.timeout, args.profile)
                print("crash_restart", figures["crash_restart"], flush=True)
            if "failover" not in skip:
                figures["controller_failover"] = failover(cluster, args.timeout)
                print("controller_failover", figures["controller_failover"], flush=True)
    if args.json:
        print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())

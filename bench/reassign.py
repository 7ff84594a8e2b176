"""Moving a partition: how long, and what it costs the producers (issue 13).

One partition of --size-mib (1 GiB by default) on brokers [0, 1] of a 4-broker LocalCluster.
Measured in the same run, in this order:

1. fresh follower: broker 1 is stopped, its copy deleted, and restarted; the time from the new
   log's creation until it is back in the ISR is what the replica fetch path reaches for a
   follower starting from nothing;
2. move, no throttle: reassignment [0, 1] → [0, 2] (AlterPartitionReassignments), until done;
3. move, throttled: [0, 2] → [0, 3] with --throttle-mib per second on the brokers and the topic's
   throttled replica lists set as `odradek reassign --throttle` sets them.

Throughout, a confluent-kafka producer writes --rate records/s (1 KiB, acks=all, linger.ms=0) to
another topic led by broker 0 (RF 2 on [0, 1], then [0, 2]); its p50/p99 latency (produce() to
delivery report) is reported before and during each move. Target: the unthrottled move runs at
least at 0.5x the fresh follower's rate. The machine is shared: read the ratios.
Run: .venv/bin/python bench/reassign.py [--size-mib N]
"""

import argparse
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource
from kafka import KafkaAdminClient
from kafka import TopicPartition as KTP
from kafka.admin import NewTopic

from odradek.dev.waiting import wait_until

VALUE = 64 * 1024
MIB = 1024 * 1024


class LatencyProbe:
    """acks=all records at a fixed rate from a thread that sleeps until each is due (a spinning
    probe takes a core here, FINDINGS); (sent time, latency) of every delivery."""

    def __init__(self, bootstrap: str, topic: str, rate: float):
        self.topic, self.rate = topic, rate
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0,
                                  "enable.idempotence": False, "message.timeout.ms": 120_000})
        self.samples: list[tuple[float, float]] = []
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        start, n = time.monotonic(), 0
        value = bytes(1024)
        while not self._stop.is_set():
            due = start + n / self.rate
            delay = due - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            sent = time.monotonic()

            def report(err, _msg, sent=sent):
                if err is None:
                    self.samples.append((sent, time.monotonic() - sent))
                else:
                    self.errors += 1

            try:
                self.producer.produce(self.topic, value, on_delivery=report)
            except BufferError:
                pass
            n += 1
            self.producer.poll(0)

    def start(self) -> "LatencyProbe":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.producer.flush(60)

    def percentiles(self, since: float, until: float) -> tuple[float, float, int]:
        lat = sorted(latency for sent, latency in list(self.samples) if since <= sent < until)
        if not lat:
            return float("nan"), float("nan"), 0
        return lat[len(lat) // 2] * 1000, lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000, len(lat)


def fill(bootstrap: str, topic: str, size: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 20, "batch.size": 1_000_000,
                  "queue.buffering.max.kbytes": 512 * 1024, "enable.idempotence": False,
                  "message.max.bytes": 2 * VALUE, "message.timeout.ms": 600_000})
    value = bytes(VALUE)
    for _ in range(size // VALUE):
        while True:
            try:
                p.produce(topic, value, partition=0)
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    if p.flush(600):
        raise RuntimeError("records not delivered while filling")


def in_sync(admin: AdminClient, topic: str, broker: int) -> bool:
    t = admin.list_topics(topic, timeout=10).topics.get(topic)
    return bool(t and t.error is None and broker in t.partitions[0].isrs)


def move(kadmin: KafkaAdminClient, topic: str, target: list[int], timeout: float) -> float:
    started = time.monotonic()
    answer = kadmin.alter_partition_reassignments({KTP(topic, 0): target})
    if answer != {KTP(topic, 0): None}:
        raise RuntimeError(f"reassignment refused: {answer}")
    wait_until(lambda: KTP(topic, 0) not in kadmin.list_partition_reassignments(), f"move to {target}", timeout)
    return time.monotonic() - started


def alter(admin: AdminClient, restype, name: str, changes: dict) -> None:
    entries = [ConfigEntry(k, v or "", incremental_operation=AlterConfigOpType.DELETE if v is None
                           else AlterConfigOpType.SET) for k, v in changes.items()]
    resource = ConfigResource(restype, name, incremental_configs=entries)
    admin.incremental_alter_configs([resource])[resource].result(timeout=30)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--throttle-mib", type=float, default=20.0, help="MiB/s for the throttled move")
    ap.add_argument("--rate", type=float, default=200.0, help="probe records/s")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per phase")
    args = ap.parse_args(argv)
    from odradek.dev.cluster import LocalCluster
    from odradek.dev.zookeeper import free_ports

    size = args.size_mib * MIB
    data_dir = Path(tempfile.mkdtemp(prefix="bench-reassign-"))
    overrides = {"message.max.bytes": 2 * VALUE, "zookeeper.session.timeout.ms": 15000}
    cluster = LocalCluster(data_dir, brokers=4, controllers=1, broker_ports=free_ports(4), broker_overrides=overrides)
    cluster.start()
    probe = None
    try:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        kadmin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=60_000)
        for name in ("moved", "load"):
            kadmin.create_topics([NewTopic(name, replica_assignments={0: [0, 1]})])
            wait_until(lambda name=name: in_sync(admin, name, 1), f"{name} in sync", 60)
        t0 = time.monotonic()
        fill(cluster.bootstrap, "moved", size)
        stored = len(cluster.log_bytes(0, "moved", 0))
        print(f"filled {stored / MIB:.0f} MiB in {time.monotonic() - t0:.1f}s", flush=True)
        wait_until(lambda: len(cluster.log_bytes(1, "moved", 0)) == stored, "follower 1 caught up", args.timeout)

        # 1. a fresh follower
        b1 = cluster.brokers[1]
        b1.stop(timeout=60)
        shutil.rmtree(cluster.partition_dir(1, "moved", 0))
        b1.start()
        # timed from the new log's creation: process start-up and registration are not fetching
        wait_until(lambda: cluster.partition_dir(1, "moved", 0).exists(), "fresh follower's log created", 120,
                   interval=0.01)
        started = time.monotonic()
        wait_until(lambda: in_sync(admin, "moved", 1), "fresh follower in sync", args.timeout, interval=0.05)
        fresh_s = time.monotonic() - started
        wait_until(lambda: in_sync(admin, "load", 1), "load topic in sync", 120)

        probe = LatencyProbe(cluster.bootstrap, "load", args.rate).start()
        time.sleep(10)  # the probe's "before" window
        before_end = time.monotonic()

        # 2. unthrottled move
        m1_start = time.monotonic()
        move_s = move(kadmin, "moved", [0, 2], args.timeout)
        m1_end = time.monotonic()

        # 3. throttled move
        rate = int(args.throttle_mib * MIB)
        for b in (0, 2, 3):
            alter(admin, ConfigResource.Type.BROKER, str(b), {"leader.replication.throttled.rate": str(rate),
                                                              "follower.replication.throttled.rate": str(rate)})
        alter(admin, ConfigResource.Type.TOPIC, "moved", {"leader.replication.throttled.replicas": "0:0,0:2",
                                                          "follower.replication.throttled.replicas": "0:3"})
        m2_start = time.monotonic()
        throttled_s = move(kadmin, "moved", [0, 3], args.timeout)
        m2_end = time.monotonic()
        probe.stop()

        mib = stored / MIB
        print()
        print(f"{'phase':34} {'seconds':>8} {'MiB/s':>8}")
        print(f"{'fresh follower catch-up':34} {fresh_s:8.1f} {mib / fresh_s:8.1f}")
        print(f"{'move, no throttle':34} {move_s:8.1f} {mib / move_s:8.1f}")
        print(f"{'move, throttle ' + str(args.throttle_mib) + ' MiB/s':34} {throttled_s:8.1f} {mib / throttled_s:8.1f}")
        print(f"unthrottled move / fresh follower rate: {fresh_s / move_s:.2f} (target >= 0.5)")
        print()
        print(f"{'producer acks=all, ' + str(int(args.rate)) + ' rec/s':34} {'p50 ms':>8} {'p99 ms':>8} {'n':>6}")
        for label, (a, b) in (("before the moves", (before_end - 10, before_end)),
                              ("during the unthrottled move", (m1_start, m1_end)),
                              ("during the throttled move", (m2_start, m2_end))):
            p50, p99, n = probe.percentiles(a, b)
            print(f"{label:34} {p50:8.1f} {p99:8.1f} {n:6d}")
        print(f"probe errors: {probe.errors}; the machine is shared (2 cores): read the ratios")
        return 0
    finally:
        if probe is not None:
            probe.stop()
        cluster.stop()
        shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

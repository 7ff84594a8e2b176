"""Replication cost: produce throughput and latency of a 3-broker cluster with RF=3 topics
(min.insync.replicas=2), acks=all and acks=1, against a 1-broker cluster's acks=1 in the same run.

Throughput: kcat -P of pre-generated 100-byte records (no keys, spread over the partitions),
the cases taking turns round by round on two clusters that run side by side; every run writes a
new topic and checks that its end offsets add up to the records sent. Latency: a
confluent-kafka producer at a fixed moderate rate (linger.ms=0), the time from produce() to the
delivery report of each record; p50 and p99, and the brokers' CPU per record (with linger.ms=0,
per Produce request). Targets (issue 30): RF=3 acks=all ≥ 0.75× the single-broker acks=1
throughput; acks=all p99 ≤ 3 ms at 500 records/s, ≤ 5 ms at 2,000 and 5,000.
Run: .venv/bin/python bench/replication.py [--rate 500,2000,5000] [--latency-only]
"""

import argparse
import gc
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from procfs import children_cpu_seconds, cpu_seconds, system_seconds
from produce_latency import produce_latency  # bench/ is sys.path[0] when run as a script
from throughput import Result, median, write_records

SIZE = 100
PRODUCE_OPTS = ["-X", "linger.ms=5", "-X", "queue.buffering.max.messages=1000000",
                "-X", "sticky.partitioning.linger.ms=0", "-X", "enable.idempotence=false",
                "-X", "message.timeout.ms=120000"]


class Target:
    """A LocalCluster of `brokers` brokers and one controller; topics get RF = `brokers`."""

    def __init__(self, name: str, data_dir: Path, brokers: int):
        from odradek.dev.cluster import LocalCluster
        from odradek.dev.zookeeper import free_ports

        self.name, self.rf = name, brokers
        self.cluster = LocalCluster(data_dir, brokers=brokers, controllers=1, broker_ports=free_ports(brokers))
        self.cluster.start()
        self.bootstrap = self.cluster.bootstrap
        self.admin = AdminClient({"bootstrap.servers": self.bootstrap})

    def create_topic(self, name: str, partitions: int) -> None:
        config = {"min.insync.replicas": "2"} if self.rf >= 3 else {}
        self.admin.create_topics([NewTopic(name, partitions, self.rf, config=config)],
                                 operation_timeout=60)[name].result(timeout=65)
        deadline = time.monotonic() + 60
        while True:
            t = self.admin.list_topics(name, timeout=10).topics.get(name)
            if (t and t.error is None and len(t.partitions) == partitions
                    and all(p.leader >= 0 and len(p.isrs) == self.rf for p in t.partitions.values())):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name} {name}: partitions without a leader or a full ISR after 60s")
            time.sleep(0.2)

    def end_offsets(self, topic: str, partitions: int) -> int:
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "bench-ends"})
        try:
            return sum(c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions))
        finally:
            c.close()

    def close(self) -> None:
        del self.admin  # its reconnect attempts would fill the output once the brokers are gone
        gc.collect()
        self.cluster.stop()


class CpuMeter:
    """CPU-seconds the target's brokers (from /proc) and the finished child processes (kcat) used
    while open: on two cores the client's share decides as much as the brokers' efficiency."""

    def __init__(self, target: Target):
        self.pids = [p.popen.pid for p in target.cluster.brokers]

    def _brokers(self) -> tuple[float, float]:
        """(user + system, system) CPU-seconds of the brokers."""
        return sum(cpu_seconds(pid) for pid in self.pids), sum(system_seconds(pid) for pid in self.pids)

    def __enter__(self) -> "CpuMeter":
        self._b0, self._c0 = self._brokers(), children_cpu_seconds()
        return self

    def __exit__(self, *exc) -> None:
        b1 = self._brokers()
        self.brokers, self.brokers_sys = b1[0] - self._b0[0], b1[1] - self._b0[1]
        self.kcat = children_cpu_seconds() - self._c0


def own_cpu_seconds() -> float:
    """User + system CPU-seconds of this process, every thread (librdkafka's) included."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def settle_page_cache() -> None:
    """Write back what earlier runs left dirty before the next timed run starts.

    The kernel starts writing dirty pages back once they pass dirty_background_ratio (~2 GiB
    here); its flusher threads then compete for the two cores with whatever run is going on. The
    RF=3 runs write three times the bytes and come last, so without this they paid for the
    single-broker runs' writeback as well as their own. A 2M-record run (at most ~650 MB)
    stays below that threshold: no run pays for writing back, its own bytes included.
    """
    os.sync()


def kcat_produce(target: Target, topic: str, data: Path, records: int, partitions: int, acks: str) -> Result:
    start = time.perf_counter()
    proc = subprocess.run(["kcat", "-P", "-b", target.bootstrap, "-t", topic, "-l", "-X", f"acks={acks}",
                           *PRODUCE_OPTS, str(data)],
                          timeout=900, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    elapsed = time.perf_counter() - start
    # End offsets are high watermarks: with acks=1 the followers may still be catching up.
    deadline = time.monotonic() + 60
    while (stored := target.end_offsets(topic, partitions)) < records and time.monotonic() < deadline:
        time.sleep(0.2)
    if proc.returncode != 0 or stored != records:
        tail = proc.stderr.decode(errors="replace").strip().splitlines()[-3:]
        raise RuntimeError(f"kcat -P acks={acks} to {target.name}/{topic}: exit {proc.returncode}, "
                           f"{stored} of {records} records stored; {tail}")
    return Result(records, records * SIZE, elapsed)


def latency(target: Target, topic: str, acks: str, rate: float,
            seconds: float) -> tuple[float, float, int, float, float]:
    """p50 and p99 (ms) from produce() to delivery report, `rate` records/s for `seconds`, and the
    CPU-microseconds all the target's brokers spent per record meanwhile (linger.ms=0: one Produce
    request per record, so per acks=all request at this rate), then the producer's own (this
    process): on two cores a client that takes a core leaves the brokers one."""
    client0 = own_cpu_seconds()
    with CpuMeter(target) as cpu:
        p50, p99, n = produce_latency(target.bootstrap, topic, rate, seconds, acks=acks, size=SIZE)
    return p50, p99, n, cpu.brokers * 1e6 / max(1, n), (own_cpu_seconds() - client0) * 1e6 / max(1, n)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=2_000_000,
                        help="100-byte records per throughput run (shorter runs measure start-up more than steady state)")
    parser.add_argument("--partitions", type=int, default=12, help="partitions of every topic")
    parser.add_argument("--repeat", type=int, default=5, help="rounds (one run of every case each); medians are reported")
    parser.add_argument("--rate", default="500",
                        help="records/s of the latency runs; several, comma-separated, run one after the other")
    parser.add_argument("--latency-only", action="store_true",
                        help="skip the throughput rounds: latency runs (and their CPU per request) only")
    parser.add_argument("--latency-seconds", type=float, default=10.0, help="length of each latency run")
    parser.add_argument("--work-dir", default=None, help="record file and cluster data (default: a temp dir)")
    args = parser.parse_args(argv)
    rates = [float(r) for r in str(args.rate).split(",") if r.strip()]
    if shutil.which("kcat") is None:
        print("kcat not found: run `make setup`", file=sys.stderr)
        return 2

    work = Path(args.work_dir or tempfile.mkdtemp(prefix="odradek-bench-repl-"))
    work.mkdir(parents=True, exist_ok=True)
    data = work / f"records-{SIZE}.txt"
    if args.latency_only:
        args.repeat = -1  # no throughput round, not even the warm-up
    elif not data.exists() or data.stat().st_size != args.records * (SIZE + 1):
        write_records(data, args.records, SIZE)

    # Both clusters run side by side, and the cases take turns, round after round: this machine's
    # speed drifts over tens of seconds (the same kcat run costs 1.2 CPU-seconds in one minute
    # and 2.2 in the next), and a slow spell should hit every case, not whichever ran in it.
    # An idle cluster costs next to nothing; only one case runs at a time.
    cases = [("1 broker", 1, "1"), ("RF=3", 3, "1"), ("RF=3", 3, "all")]
    runs: dict[tuple[str, str], list[Result]] = {(name, acks): [] for name, _, acks in cases}
    throughput: dict[tuple[str, str], Result] = {}
    latencies: dict[tuple[tuple[str, str], float], tuple[float, float, int, float, float]] = {}
    failed: dict[tuple[str, str], str] = {}
    print(f"kcat -P {args.records:,} x {SIZE} B, {args.partitions} partitions, median of {args.repeat} "
          f"rounds; latency at {', '.join(f'{r:,.0f}' for r in rates)} rec/s for {args.latency_seconds:.0f} s; "
          f"work dir {work}", flush=True)
    targets: dict[str, Target] = {}
    try:
        for name, brokers in (("1 broker", 1), ("RF=3", 3)):
            targets[name] = Target(name, work / name.replace(" ", "-").replace("=", ""), brokers)
        # Round 0 warms up and is not counted: a cluster's first kcat run is slower (bench/README.md).
        for rep in range(args.repeat + 1):
            for name, _, acks in cases:
                key = (name, acks)
                if key in failed:
                    continue
                target = targets[name]
                topic = f"bench-acks{acks}-{rep}"
                try:
                    target.create_topic(topic, args.partitions)
                    settle_page_cache()
                    with CpuMeter(target) as cpu:
                        result = kcat_produce(target, topic, data, args.records, args.partitions, acks)
                except RuntimeError as e:
                    failed[key] = str(e)
                    print(f"  {name:8} acks={acks:3} FAILED: {e}", flush=True)
                    continue
                if rep:
                    runs[key].append(result)
                print(f"  {f'round {rep}' if rep else 'warm-up'}: {name:8} acks={acks:3} {result.rps:>11,.0f} rec/s "
                      f"(CPU-seconds: brokers {cpu.brokers:.2f}, kcat {cpu.kcat:.2f})", flush=True)
        for name, _, acks in cases:
            key = (name, acks)
            if key in failed:
                continue
            if runs[key]:
                throughput[key] = median(runs[key])
            topic = f"latency-acks{acks}"
            try:
                targets[name].create_topic(topic, args.partitions)
                for rate in rates:
                    latencies[(key, rate)] = found = latency(targets[name], topic, acks, rate, args.latency_seconds)
                    print(f"  latency: {name:8} acks={acks:3} {rate:>7,.0f} rec/s: p50 {found[0]:.1f} ms, "
                          f"p99 {found[1]:.1f} ms, CPU us/record: brokers {found[3]:,.0f}, producer {found[4]:,.0f}",
                          flush=True)
            except RuntimeError as e:
                failed[key] = str(e)
                print(f"  {name:8} acks={acks:3} FAILED: {e}", flush=True)
    finally:
        for target in targets.values():
            target.close()

    base = throughput.get(("1 broker", "1"))
    print()
    print(f"{'produce, 100 B records':28}{'throughput':>16}{'MB/s':>8}{'vs 1 broker':>13}")
    for name, _, acks in cases:
        key = (name, acks)
        label = f"{name} acks={acks}"
        if key in failed:
            print(f"{label:28}  failed: {failed[key][:80]}")
            continue
        r = throughput.get(key)
        if r is None:
            continue
        ratio = f"{r.rps / base.rps:.2f}x" if base else "-"
        print(f"{label:28}{r.rps:>10,.0f} rec/s{r.mbps:>8.1f}{ratio:>13}")
    print()
    print(f"{'latency, linger.ms=0':28}{'rec/s':>8}{'p50 ms':>9}{'p99 ms':>9}{'brokers CPU-us/rec':>20}"
          f"{'producer':>10}")
    for (key, rate), (p50, p99, _, cpu_us, client_us) in latencies.items():
        print(f"{key[0] + ' acks=' + key[1]:28}{rate:>8,.0f}{p50:>9.1f}{p99:>9.1f}{cpu_us:>20,.0f}{client_us:>10,.0f}")
    print()
    target_key = ("RF=3", "all")
    if args.latency_only:
        pass
    elif base and target_key in throughput:
        rounds = zip(runs[("1 broker", "1")], runs[target_key])
        print("RF=3 acks=all / 1 broker acks=1, round by round: "
              + ", ".join(f"{rf3.rps / one.rps:.2f}" for one, rf3 in rounds))
        ratio = throughput[target_key].rps / base.rps
        print(f"RF=3 acks=all: {ratio:.2f}x the 1-broker acks=1 throughput; "
              f"{'meets' if ratio >= 0.75 else 'misses'} the 0.75x target (issue 30)")
    else:
        print("RF=3 acks=all vs 1-broker acks=1: not measured (a run failed)")
    if not args.work_dir:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

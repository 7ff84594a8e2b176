"""The log cleaner (issue 16): its throughput against a plain read of the same segments, and
produce latency while a big log is cleaned against the same broker not cleaning.

1. Throughput, in this process: a compacted log of `--keys` keys x `--versions` versions (100-byte
   values, 1 MiB segments) is written with the broker's Log, once uncompressed and once lz4. The
   same segments are read sequentially (1 MiB preads: what any pass over them costs at least), then
   cleaned by exactly what the broker's worker process runs (cleaner_worker.clean: offset map,
   rewrite, fsync of the cleaned files). MB/s of dirty log and the ratio cleaning/read are printed,
   `--repeat` times (a read, then a cleaning), and the median ratio.
2. Latency, against a real 1-broker cluster (LocalCluster, default log.cleaner.* settings): a topic
   of `--latency-mb` MB of keyed records is written with cleanup.policy=delete (nothing to clean);
   a confluent-kafka producer sends at `--rate` records/s (acks=1, linger.ms=0) to another topic
   for `--seconds`, and the p50/p99 of produce()->delivery are taken. Then the big topic is switched
   to cleanup.policy=compact (IncrementalAlterConfigs), so the broker's cleaner starts on it, and the
   same latency run is repeated from the moment the broker logs that the cleaning began; the share
   of the run the cleaning overlapped is printed (from the broker's log lines).
3. With `--commits N`: N offset commits of one group to a 1-broker cluster whose __consumer_offsets
   has `--offsets-segment-bytes` segments; the size of __consumer_offsets once cleaned, and how soon
   a restarted broker answers the group's committed offset (loading the compacted log).

The machine is small (2 cores) and shared with other work: read ratios, not absolute numbers.

Run: .venv/bin/python bench/cleaner.py [--keys N --versions N --repeat N --latency-mb N --rate R --seconds S]
     [--skip-latency] [--commits 1000000]
"""

import argparse
import datetime
import gc
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic
from produce_latency import produce_latency  # bench/ is sys.path[0] when run as a script

from odradek.broker.log import Log
from odradek.broker.log.cleaner_worker import clean
from odradek.broker.log.config import LogConfig
from odradek.broker.log.log_cleaner import CleanerConfig, make_task, plan
from odradek.broker.log.record_batch import build_batch

SEGMENT = 1 << 20
_COMMITS_IN_FLIGHT = 200


def write_log(directory: Path, keys: int, versions: int, codec: str | None) -> Log:
    log = Log(directory, LogConfig(cleanup_policy="compact", segment_bytes=SEGMENT))
    per_batch = 100
    rng = random.Random(16)
    for v in range(versions):
        for k0 in range(0, keys, per_batch):
            records = [(b"key-%08d" % k, b"%08d|" % v + rng.randbytes(45).hex().encode())
                       for k in range(k0, min(keys, k0 + per_batch))]
            log.append_as_leader(build_batch(records, compression=codec), leader_epoch=0)
    log.high_watermark = log.log_end_offset
    return log


def sequential_read(log: Log) -> tuple[int, float]:
    started, total = time.perf_counter(), 0
    for seg in log.segments[:-1]:
        with open(seg.log_path, "rb", buffering=0) as f:
            position = 0
            while True:
                chunk = os.pread(f.fileno(), 1 << 20, position)
                if not chunk:
                    break
                position += len(chunk)
            total += position
    return total, time.perf_counter() - started


def throughput(work: Path, keys: int, versions: int, repeat: int) -> None:
    for codec in (None, "lz4"):
        directory = work / f"bench-{codec or 'none'}-0"
        log = write_log(directory, keys, versions, codec)
        dirty = sum(s.size for s in log.segments[:-1])
        if not dirty:
            raise SystemExit(f"codec={codec}: the log fits its active segment; use more --keys or --versions")
        sequential_read(log)  # warm: both passes then read from the page cache
        ratios = []
        for _ in range(repeat):  # a read and a cleaning side by side, each time
            read_bytes, read_s = sequential_read(log)
            task = make_task(log, plan(log, None, 0), CleanerConfig())
            started = time.perf_counter()
            result = clean(task)
            clean_s = time.perf_counter() - started
            for leftover in directory.glob("*.cleaned"):  # written aside, never swapped in here
                leftover.unlink()
            read_rate, clean_rate = read_bytes / read_s / 1e6, dirty / clean_s / 1e6
            ratios.append(clean_rate / read_rate)
            print(f"throughput codec={codec or 'none'}: {dirty / 1e6:.1f} MB dirty, {keys * versions:,} records -> "
                  f"{result.bytes_written / 1e6:.2f} MB in {len(result.groups)} segments; sequential read "
                  f"{read_rate:,.0f} MB/s, cleaning {clean_rate:.1f} MB/s ({clean_s:.2f} s), ratio {ratios[-1]:.4f}",
                  flush=True)
        if repeat > 1:
            print(f"throughput codec={codec or 'none'}: median ratio of {repeat}: {sorted(ratios)[repeat // 2]:.4f}",
                  flush=True)
        log.close()
        shutil.rmtree(directory)


def wait_for_leaders(admin: AdminClient, topics: tuple[str, ...], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        metadata = admin.list_topics(timeout=10).topics
        if all(t in metadata and metadata[t].error is None and all(p.leader >= 0 for p in metadata[t].partitions.values())
               and metadata[t].partitions for t in topics):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{topics}: no leaders after {timeout}s")
        time.sleep(0.2)


def fill_topic(bootstrap: str, topic: str, megabytes: int) -> int:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.size": 512 * 1024,
                         "queue.buffering.max.messages": 1_000_000, "enable.idempotence": False,
                         "message.timeout.ms": 300_000})
    count = megabytes * 1_000_000 // 120
    for i in range(count):
        for _ in range(1000):
            try:
                producer.produce(topic, key=b"key-%06d" % (i % 20_000), value=b"%010d|" % i + b"v" * 89)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10_000 == 0:
            producer.poll(0)
    if producer.flush(300):
        raise RuntimeError("filling the big topic did not finish")
    return count


def cleaner_lines(log_path: Path, what: str) -> list[str]:
    """The broker's log lines about the big log: `what` is "cleaning" (started) or "cleaned"."""
    try:
        text = log_path.read_text(errors="replace")
    except OSError:
        return []
    return [line for line in text.splitlines() if f" {what} Log(big-0" in line]


def line_time(line: str) -> float:
    """The wall-clock time of a broker log line ("2026-11-23 21:00:19,313 ...")."""
    return datetime.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()  # local time, as logging

def wait_for_line(log_path: Path, what: str, count: int, timeout: float) -> list[str]:
    deadline = time.monotonic() + timeout
    while len(lines := cleaner_lines(log_path, what)) < count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"no '{what}' line for the big log within {timeout}s")
        time.sleep(0.1)
    return lines


def latency_case(work: Path, megabytes: int, rate: float, seconds: float, io_rate: float | None) -> None:
    from odradek.dev.cluster import LocalCluster
    from odradek.dev.zookeeper import free_ports

    cluster = LocalCluster(work / "cluster", brokers=1, controllers=1, broker_ports=free_ports(1),
                           broker_overrides={"log.cleaner.backoff.ms": "500", **(
                               {"log.cleaner.io.max.bytes.per.second": str(io_rate)} if io_rate else {})})
    cluster.start()
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    try:
        big, probe = "big", "probe"
        config = {"segment.bytes": str(16 * SEGMENT), "cleanup.policy": "delete", "retention.ms": "-1"}
        for name, cfg in ((big, config), (probe, {})):
            admin.create_topics([NewTopic(name, 1, 1, config=cfg)], operation_timeout=60)[name].result(timeout=65)
        wait_for_leaders(admin, (big, probe))
        count = fill_topic(cluster.bootstrap, big, megabytes)
        print(f"latency: {big} holds {count:,} records ({megabytes} MB, 20,000 keys)", flush=True)
        p50, p99, n = produce_latency(cluster.bootstrap, probe, rate, seconds)
        print(f"latency without cleaning: p50 {p50:.2f} ms, p99 {p99:.2f} ms ({n} records at {rate:.0f}/s)",
              flush=True)
        broker_log = cluster.log_dir / "broker-0.log"
        resource = ConfigResource(ConfigResource.Type.TOPIC, big, incremental_configs=[
            ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET)])
        admin.incremental_alter_configs([resource])[resource].result(timeout=30)
        wait_for_line(broker_log, "cleaning", 1, 120)  # the run starts with the cleaning
        run_start = time.time()
        p50c, p99c, n = produce_latency(cluster.bootstrap, probe, rate, seconds)
        run_end = time.time()
        done = wait_for_line(broker_log, "cleaned", 1, 600)[0]
        started_at = line_time(cleaner_lines(broker_log, "cleaning")[0])
        finished_at = line_time(done)
        overlap = max(0.0, min(run_end, finished_at) - max(run_start, started_at)) / (run_end - run_start)
        print(f"latency while cleaning: p50 {p50c:.2f} ms, p99 {p99c:.2f} ms ({n} records at {rate:.0f}/s); "
              f"p99 ratio {p99c / p99:.2f}; the cleaning ran for {finished_at - started_at:.1f} s, "
              f"{overlap:.0%} of the run: {done.split('cleaned ', 1)[1]}", flush=True)
    finally:
        del admin
        gc.collect()
        cluster.stop()


def commits_case(work: Path, commits: int, segment_bytes: int) -> None:
    """`commits` offset commits of one group (asynchronous, so many are in flight), then the size of
    __consumer_offsets once cleaned, and the time a restarted broker takes to answer the group's
    committed offset (it loads the group from the compacted log)."""
    from confluent_kafka import Consumer, TopicPartition

    from odradek.broker.log.checkpoint import read_offsets
    from odradek.dev.cluster import LocalCluster
    from odradek.dev.zookeeper import free_ports

    cluster = LocalCluster(work / "commits", brokers=1, controllers=1, broker_ports=free_ports(1), broker_overrides={
        "log.cleaner.backoff.ms": "1000", "offsets.topic.num.partitions": "1",
        "offsets.topic.segment.bytes": str(segment_bytes)})
    cluster.start()
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    consumer = None
    try:
        admin.create_topics([NewTopic("source", 1, 1)], operation_timeout=60)["source"].result(timeout=65)
        wait_for_leaders(admin, ("source",))
        done = [0]
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "bench-committer",
                             "enable.auto.commit": False, "on_commit": lambda err, _parts: done.__setitem__(0, done[0] + 1)})
        consumer.commit(offsets=[TopicPartition("source", 0, 0)], asynchronous=False)
        started = time.perf_counter()
        deadline = time.monotonic() + 3600
        for i in range(1, commits):
            consumer.commit(offsets=[TopicPartition("source", 0, i)], asynchronous=True)
            while i - done[0] > _COMMITS_IN_FLIGHT:  # unbounded, librdkafka queues them all and times out
                consumer.poll(0.001)
                if time.monotonic() > deadline:
                    raise RuntimeError(f"commits stalled at {done[0]:,}")
        consumer.commit(offsets=[TopicPartition("source", 0, commits)], asynchronous=False)
        elapsed = time.perf_counter() - started
        print(f"commits: {commits:,} offset commits in {elapsed:.1f} s ({commits / elapsed:,.0f}/s)", flush=True)
        directory = cluster.data_dir / "broker-0" / "__consumer_offsets-0"
        checkpoint = cluster.data_dir / "broker-0" / "cleaner-offset-checkpoint"
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            active = max(int(p.name[:-4]) for p in directory.glob("*.log"))
            try:
                if read_offsets(checkpoint).get(("__consumer_offsets", 0)) == active:
                    break
            except (OSError, ValueError):
                pass
            time.sleep(0.5)
        size = sum(p.stat().st_size for p in directory.glob("*.log"))
        print(f"commits: __consumer_offsets-0 holds {size / 1e6:.2f} MB in {len(list(directory.glob('*.log')))} "
              f"segments once cleaned (segment.bytes {segment_bytes:,}; uncompacted it would hold about "
              f"{commits * 0.1:,.0f} KB)", flush=True)
        consumer.close()
        consumer = None
        cluster.broker(0).stop()
        restarted = time.perf_counter()
        cluster.broker(0).start()
        cluster.wait_ready(timeout=120)
        again = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "bench-committer"})
        try:
            offset = again.committed([TopicPartition("source", 0)], timeout=120)[0].offset
        finally:
            again.close()
        print(f"commits: restarted broker answered the committed offset {offset:,} {time.perf_counter() - restarted:.1f} s "
              f"after its start", flush=True)
    finally:
        if consumer is not None:
            consumer.close()
        del admin
        gc.collect()
        cluster.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=20_000)
    parser.add_argument("--versions", type=int, default=25)
    parser.add_argument("--latency-mb", type=int, default=150)
    parser.add_argument("--rate", type=float, default=500.0)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--skip-latency", action="store_true")
    parser.add_argument("--repeat", type=int, default=3, help="throughput: read and clean this many times each")
    parser.add_argument("--cleaner-io", type=float, default=None,
                        help="log.cleaner.io.max.bytes.per.second of the latency case's broker (default: unlimited)")
    parser.add_argument("--commits", type=int, default=0, help="also run the offset-commit case (e.g. 1000000)")
    parser.add_argument("--offsets-segment-bytes", type=int, default=1 << 20)
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="odradek-bench-cleaner-"))
    try:
        throughput(work, args.keys, args.versions, args.repeat)
        if not args.skip_latency:
            latency_case(work, args.latency_mb, args.rate, args.seconds, args.cleaner_io)
        if args.commits:
            commits_case(work, args.commits, args.offsets_segment_bytes)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

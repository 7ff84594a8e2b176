"""Produce and consume throughput with kcat: a 1-broker Odradek (LocalCluster, what `odradek dev`
runs) against librdkafka's in-memory mock cluster as a peer, in one run, with the same kcat
commands, topics of the same partition count, and the same pre-generated record files.

The mock keeps only the newest 5 MiB per partition, so it is created here through librdkafka's
mock API (ctypes) with a topic of `--partitions` partitions, enough to hold every record; kcat
then reaches it on its loopback port like any broker. Run: .venv/bin/python bench/throughput.py
"""

import argparse
import ctypes
import ctypes.util
import glob
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

MOCK_BYTES_PER_PARTITION = 5 * 1024 * 1024
RECORD_OVERHEAD = 12  # upper bound of a v2 record's framing around a 100..1024-byte value, no key


# --- librdkafka's mock cluster, hosted by this process -----------------------------------------


def _librdkafka() -> ctypes.CDLL:
    """kcat's own librdkafka (Debian's) when present, else the one inside confluent-kafka."""
    candidates = []
    found = ctypes.util.find_library("rdkafka")
    if found:
        candidates.append(found)
    import confluent_kafka

    libs = Path(confluent_kafka.__file__).parent.parent / "confluent_kafka.libs"
    candidates += sorted(glob.glob(str(libs / "librdkafka*.so*")))
    for path in candidates:
        try:
            lib = ctypes.CDLL(path)
            lib.rd_kafka_mock_topic_create  # noqa: B018 (has the mock API)
            return lib
        except (OSError, AttributeError):
            continue
    raise RuntimeError("no librdkafka with the mock cluster API found")


class MockCluster:
    """rd_kafka_mock_cluster_new on a throw-away producer handle; brokers listen on 127.0.0.1."""

    def __init__(self, brokers: int = 1):
        lib = self.lib = _librdkafka()
        lib.rd_kafka_conf_new.restype = ctypes.c_void_p
        lib.rd_kafka_conf_set.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
        lib.rd_kafka_new.restype = ctypes.c_void_p
        lib.rd_kafka_new.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
        lib.rd_kafka_destroy.argtypes = [ctypes.c_void_p]
        lib.rd_kafka_mock_cluster_new.restype = ctypes.c_void_p
        lib.rd_kafka_mock_cluster_new.argtypes = [ctypes.c_void_p, ctypes.c_int]
        lib.rd_kafka_mock_cluster_bootstraps.restype = ctypes.c_char_p
        lib.rd_kafka_mock_cluster_bootstraps.argtypes = [ctypes.c_void_p]
        lib.rd_kafka_mock_topic_create.restype = ctypes.c_int
        lib.rd_kafka_mock_topic_create.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_int]
        lib.rd_kafka_mock_cluster_destroy.argtypes = [ctypes.c_void_p]
        errstr = ctypes.create_string_buffer(512)
        conf = lib.rd_kafka_conf_new()
        lib.rd_kafka_conf_set(conf, b"log_level", b"3", errstr, len(errstr))
        self.rk = lib.rd_kafka_new(0, conf, errstr, len(errstr))  # 0: RD_KAFKA_PRODUCER
        if not self.rk:
            raise RuntimeError(f"rd_kafka_new: {errstr.value.decode()}")
        self.mcluster = lib.rd_kafka_mock_cluster_new(self.rk, brokers)
        if not self.mcluster:
            raise RuntimeError("rd_kafka_mock_cluster_new failed")
        self.bootstrap = lib.rd_kafka_mock_cluster_bootstraps(self.mcluster).decode()

    def create_topic(self, name: str, partitions: int) -> None:
        err = self.lib.rd_kafka_mock_topic_create(self.mcluster, name.encode(), partitions, 1)
        if err:
            raise RuntimeError(f"rd_kafka_mock_topic_create({name}): error {err}")

    def close(self) -> None:
        self.lib.rd_kafka_mock_cluster_destroy(self.mcluster)
        self.lib.rd_kafka_destroy(self.rk)


# --- Odradek ------------------------------------------------------------------------------------


class Odradek:
    def __init__(self, data_dir: Path):
        from odradek.dev.cluster import LocalCluster
        from odradek.dev.zookeeper import free_port

        self.cluster = LocalCluster(data_dir, brokers=1, controllers=1, broker_ports=[free_port()])
        self.cluster.start()
        self.bootstrap = self.cluster.bootstrap

    def create_topic(self, name: str, partitions: int) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        admin.create_topics([NewTopic(name, partitions, 1)], operation_timeout=60)[name].result(timeout=65)
        deadline = time.monotonic() + 60
        while True:
            t = admin.list_topics(name, timeout=10).topics.get(name)
            if t and t.error is None and len(t.partitions) == partitions and all(p.leader >= 0 for p in t.partitions.values()):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name}: partitions without leader after 60s")
            time.sleep(0.2)

    def close(self) -> None:
        self.cluster.stop()


# --- kcat runs ----------------------------------------------------------------------------------


@dataclass
class Result:
    records: int
    bytes: int
    seconds: float

    @property
    def rps(self) -> float:
        return self.records / self.seconds

    @property
    def mbps(self) -> float:
        return self.bytes / self.seconds / 1e6


# Keyless records spread evenly (no sticky partitioning), so no mock partition exceeds its 5 MiB.
PRODUCE_OPTS = ["-X", "acks=1", "-X", "linger.ms=5", "-X", "queue.buffering.max.messages=1000000",
                "-X", "sticky.partitioning.linger.ms=0"]
# librdkafka pauses its fetches (about 1 s, seen here) once more than queued.min.messages
# (100,000) records are queued locally; a broker that fills partition_max_bytes (as Kafka does)
# crosses it with 100-byte records, the mock (one batch per partition) does not. Same for both.
CONSUME_OPTS = ["-X", "queued.min.messages=1000000"]


def kcat_produce(bootstrap: str, topic: str, data: Path, records: int, size: int, opts: list[str]) -> Result:
    start = time.perf_counter()
    subprocess.run(["kcat", "-P", "-b", bootstrap, "-t", topic, "-l", *opts, str(data)],
                   check=True, timeout=900, stdout=subprocess.DEVNULL)
    return Result(records, records * size, time.perf_counter() - start)


def kcat_consume(bootstrap: str, topic: str, records: int, size: int) -> Result:
    """One output byte per record (`-f .`), counted here to check nothing is missing."""
    start = time.perf_counter()
    proc = subprocess.Popen(["kcat", "-C", "-b", bootstrap, "-t", topic, "-o", "beginning", "-e", "-q", "-f", ".",
                             *CONSUME_OPTS],
                            stdout=subprocess.PIPE)
    seen = 0
    while chunk := proc.stdout.read(1 << 16):
        seen += len(chunk)
    proc.wait(900)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0 or seen != records:
        raise RuntimeError(f"kcat -C on {topic}: exit {proc.returncode}, {seen} of {records} records")
    return Result(records, records * size, elapsed)


def write_records(path: Path, records: int, size: int) -> None:
    """`records` lines of exactly `size` bytes (plus the newline kcat splits on), varied content."""
    alphabet = b"abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    line_body = (alphabet * (size // len(alphabet) + 2))
    with open(path, "wb", buffering=1 << 20) as f:
        for i in range(records):
            head = b"%010d" % i
            start = i % len(alphabet)
            f.write(head + line_body[start : start + size - len(head)] + b"\n")


def median(results: list[Result]) -> Result:
    return sorted(results, key=lambda r: r.seconds)[len(results) // 2]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records-100", type=int, default=1_000_000, help="100-byte records per run")
    parser.add_argument("--records-1k", type=int, default=120_000, help="1 KiB records per run")
    parser.add_argument("--partitions", type=int, default=32, help="partitions of every topic (both targets)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per measurement; the median is reported")
    parser.add_argument("--work-dir", default=None, help="record files and Odradek's data (default: a temp dir)")
    parser.add_argument("--compression", default="none", choices=["none", "gzip", "snappy", "lz4", "zstd"],
                        help="kcat's compression.codec for produce (both targets)")
    args = parser.parse_args(argv)
    produce_opts = [*PRODUCE_OPTS, "-X", f"compression.codec={args.compression}"]
    if shutil.which("kcat") is None:
        print("kcat not found: run `make setup`", file=sys.stderr)
        return 2

    cases = [(100, args.records_100), (1024, args.records_1k)]
    for size, n in cases:
        need = n * (size + RECORD_OVERHEAD)
        if need > args.partitions * MOCK_BYTES_PER_PARTITION * 0.9:
            parser.error(f"{n} records of {size} B need more than {args.partitions} partitions of the mock's 5 MiB")

    work = Path(args.work_dir or tempfile.mkdtemp(prefix="odradek-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    files = {}
    for size, n in cases:
        files[size] = work / f"records-{size}.txt"
        if not files[size].exists() or files[size].stat().st_size != n * (size + 1):
            write_records(files[size], n, size)

    print(f"kcat -P {produce_opts}, -C {CONSUME_OPTS}; {args.partitions} partitions; median of {args.repeat}; "
          f"work dir {work}", flush=True)
    results: dict[tuple[str, str, int], list[Result]] = {}
    targets = {}
    try:
        targets["mock"] = MockCluster()
        targets["odradek"] = Odradek(work / "odradek")
        for rep in range(args.repeat):
            for size, n in cases:
                for name, target in targets.items():
                    topic = f"bench-{size}-{rep}"
                    target.create_topic(topic, args.partitions)
                    p = kcat_produce(target.bootstrap, topic, files[size], n, size, produce_opts)
                    c = kcat_consume(target.bootstrap, topic, n, size)
                    results.setdefault((name, "produce", size), []).append(p)
                    results.setdefault((name, "consume", size), []).append(c)
                    print(f"  run {rep + 1} {name:8} {size:5} B  produce {p.rps:>11,.0f} rec/s  "
                          f"consume {c.rps:>11,.0f} rec/s", flush=True)
    finally:
        for target in targets.values():
            target.close()

    print()
    print(f"{'':24}{'odradek':>26}{'librdkafka mock':>26}{'ratio':>8}")
    verdicts = []
    for op in ("produce", "consume"):
        for size, _ in cases:
            o, m = median(results[("odradek", op, size)]), median(results[("mock", op, size)])
            ratio = o.rps / m.rps
            print(f"{op} {size:>5} B records   {o.rps:>11,.0f} rec/s {o.mbps:>7.1f} MB/s"
                  f"{m.rps:>11,.0f} rec/s {m.mbps:>7.1f} MB/s{ratio:>7.2f}x")
            if size == 100:
                verdicts.append(f"{op} 100 B: {ratio:.2f}x {'meets' if ratio >= 0.5 else 'misses'} the 0.5x target")
    print()
    for v in verdicts:
        print(v)
    if not args.work_dir:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Produce and consume throughput with kcat: a 1-broker Odradek (LocalCluster, what `odradek dev`
runs) against librdkafka's in-memory mock cluster as a peer, in one run, with the same kcat
commands, topics of the same partition count, and the same pre-generated record files.

The mock keeps only the newest 5 MiB per partition, so it is created here through librdkafka's
mock API (ctypes) with a topic of `--partitions` partitions, enough to hold every record; kcat
then reaches it on its loopback port like any broker. Run: .venv/bin/python bench/throughput.py

Beside the rates it reports CPU-microseconds per record of the server (the broker process's, from
/proc/PID/stat; the mock's: its one I/O thread `rdk:mock` in this process, from
/proc/self/task/*/stat) and of kcat (its rusage): on two cores one-broker produce is partly a
measure of how much CPU the server leaves the client. `--client-detail` adds, per produce run,
kcat's Produce requests (records per request) and its peak resident memory: how the client
batched and how many records it held, the first things to compare when kcat's CPU per record
differs between the two servers (bench/RESULTS.md).

Before the runs it writes and deletes a scratch file of twice the bytes the runs will store
(`--no-warm` skips it). This machine is a VM whose memory costs about ten times more to write the
first time the guest touches it than once it has been used and freed (bench/README.md, machine
notes): without the warm-up, a run's figures depend on whether the broker's page cache happens to
grow into never-touched memory (the mock keeps 5 MiB per partition and reuses it).
"""

import argparse
import ctypes
import ctypes.util
import glob
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from procfs import children_cpu_seconds, cpu_seconds, thread_cpu_seconds, vm_hwm_mb  # bench/procfs.py, beside this file

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

    def cpu_seconds(self) -> float:
        """CPU time of the mock's I/O thread (`rdk:mock`, which serves every mock broker): the
        throw-away handle's own threads and this script's are not counted."""
        return thread_cpu_seconds("rdk:mock")

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
        self.broker_pid = self.cluster.brokers[0].popen.pid

    def cpu_seconds(self) -> float:
        """CPU time of the broker process, all its threads (ZooKeeper's and the controller's not counted)."""
        return cpu_seconds(self.broker_pid)

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
    server_cpu: float = 0.0
    """CPU-seconds the broker (or the mock) used during the run."""
    client_cpu: float = 0.0
    """CPU-seconds kcat used."""
    client_peak_mb: float = 0.0
    """kcat's peak resident memory (--client-detail): the records it holds unsent or unanswered."""
    requests: int = 0
    """Produce requests kcat sent (--client-detail, from its `debug=protocol` log)."""

    @property
    def server_us(self) -> float:
        return self.server_cpu * 1e6 / self.records

    @property
    def client_us(self) -> float:
        return self.client_cpu * 1e6 / self.records

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


class CpuMeter:
    """CPU-seconds of the target (broker or mock) and of kcat between enter and exit."""

    def __init__(self, target: "MockCluster | Odradek"):
        self.target = target

    def __enter__(self) -> "CpuMeter":
        self._s0, self._c0 = self.target.cpu_seconds(), children_cpu_seconds()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server = self.target.cpu_seconds() - self._s0
        self.client = children_cpu_seconds() - self._c0


def kcat_produce(target: "MockCluster | Odradek", topic: str, data: Path, records: int, size: int,
                 opts: list[str], detail: bool = False) -> Result:
    argv = ["kcat", "-P", "-b", target.bootstrap, "-t", topic, "-l", *opts, str(data)]
    if not detail:
        with CpuMeter(target) as cpu:
            start = time.perf_counter()
            subprocess.run(argv, check=True, timeout=900, stdout=subprocess.DEVNULL)
            elapsed = time.perf_counter() - start
        return Result(records, records * size, elapsed, cpu.server, cpu.client)
    with CpuMeter(target) as cpu:
        start = time.perf_counter()
        proc = subprocess.Popen([*argv, "-X", "debug=protocol"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        peak = PeakRss(proc.pid)
        log = proc.communicate(timeout=900)[1]
        elapsed = time.perf_counter() - start
        peak.stop()
    if proc.returncode != 0:
        raise RuntimeError(f"kcat -P on {topic}: exit {proc.returncode}")
    return Result(records, records * size, elapsed, cpu.server, cpu.client, peak.mb,
                  log.count(b"Sent ProduceRequest"))


class PeakRss:
    """Samples a process's VmHWM every 10 ms until stopped (ru_maxrss of a child is no use here:
    it counts the bench's own pages from before the exec)."""

    def __init__(self, pid: int):
        self.mb = 0.0
        self._pid, self._done = pid, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._done.is_set():
            try:
                self.mb = max(self.mb, vm_hwm_mb(self._pid))
            except (OSError, RuntimeError):  # gone, or a zombie without memory fields
                return
            self._done.wait(0.01)

    def stop(self) -> None:
        self._done.set()
        self._thread.join(5)


def kcat_consume(target: "MockCluster | Odradek", topic: str, records: int, size: int) -> Result:
    """One output byte per record (`-f .`), counted here to check nothing is missing."""
    with CpuMeter(target) as cpu:
        elapsed, proc, seen = _kcat_consume(target.bootstrap, topic)
    if proc.returncode != 0 or seen != records:
        raise RuntimeError(f"kcat -C on {topic}: exit {proc.returncode}, {seen} of {records} records")
    return Result(records, records * size, elapsed, cpu.server, cpu.client)


def _kcat_consume(bootstrap: str, topic: str) -> tuple[float, "subprocess.Popen[bytes]", int]:
    start = time.perf_counter()
    proc = subprocess.Popen(["kcat", "-C", "-b", bootstrap, "-t", topic, "-o", "beginning", "-e", "-q", "-f", ".",
                             *CONSUME_OPTS],
                            stdout=subprocess.PIPE)
    seen = 0
    while chunk := proc.stdout.read(1 << 16):
        seen += len(chunk)
    proc.wait(900)
    return time.perf_counter() - start, proc, seen


def write_records(path: Path, records: int, size: int) -> None:
    """`records` lines of exactly `size` bytes (plus the newline kcat splits on), varied content."""
    alphabet = b"abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    line_body = (alphabet * (size // len(alphabet) + 2))
    with open(path, "wb", buffering=1 << 20) as f:
        for i in range(records):
            head = b"%010d" % i
            start = i % len(alphabet)
            f.write(head + line_body[start : start + size - len(head)] + b"\n")


def warm_memory(work: Path, nbytes: int) -> float:
    """Writes `nbytes` to a scratch file and deletes it before writeback: the page cache the runs
    then grow into is memory the guest has touched (see the module docstring). Returns seconds."""
    start = time.perf_counter()
    path = work / "warm-up.tmp"
    chunk = bytes(1 << 20)
    try:
        with open(path, "wb", buffering=0) as f:
            for _ in range(-(-nbytes // len(chunk))):
                f.write(chunk)
    finally:
        path.unlink(missing_ok=True)
    return time.perf_counter() - start


def median(results: list[Result]) -> Result:
    return sorted(results, key=lambda r: r.seconds)[len(results) // 2]


def median_of(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records-100", type=int, default=1_000_000, help="100-byte records per run")
    parser.add_argument("--records-1k", type=int, default=120_000, help="1 KiB records per run")
    parser.add_argument("--partitions", type=int, default=32, help="partitions of every topic (both targets)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per measurement; the median is reported")
    parser.add_argument("--work-dir", default=None, help="record files and Odradek's data (default: a temp dir)")
    parser.add_argument("--compression", default="none", choices=["none", "gzip", "snappy", "lz4", "zstd"],
                        help="kcat's compression.codec for produce (both targets)")
    parser.add_argument("--client-detail", action="store_true",
                        help="also report kcat's Produce requests (records per request, from -X debug=protocol) and "
                             "its peak resident memory per produce run")
    parser.add_argument("--no-warm", action="store_true",
                        help="skip writing and deleting twice the runs' bytes first (see the docstring)")
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

    if not args.no_warm:
        stored = args.repeat * sum(n * (size + RECORD_OVERHEAD) for size, n in cases)
        print(f"warm-up: wrote and deleted {2 * stored / 1e6:,.0f} MB in {warm_memory(work, 2 * stored):.1f} s",
              flush=True)
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
                    p = kcat_produce(target, topic, files[size], n, size, produce_opts, args.client_detail)
                    c = kcat_consume(target, topic, n, size)
                    results.setdefault((name, "produce", size), []).append(p)
                    results.setdefault((name, "consume", size), []).append(c)
                    print(f"  run {rep + 1} {name:8} {size:5} B  produce {p.rps:>11,.0f} rec/s "
                          f"({p.server_us:.2f} + kcat {p.client_us:.2f} us/rec)  consume {c.rps:>11,.0f} rec/s "
                          f"({c.server_us:.2f} + kcat {c.client_us:.2f} us/rec)"
                          + (f"  kcat -P: {p.requests} requests ({n / max(p.requests, 1):,.0f} records each), "
                             f"peak RSS {p.client_peak_mb:.0f} MiB" if args.client_detail else ""), flush=True)
    finally:
        for target in targets.values():
            target.close()

    print()
    print(f"{'':24}{'odradek':>26}{'librdkafka mock':>26}{'ratio':>8}"
          f"   CPU us/record: broker  mock  kcat(o)  kcat(m)")
    verdicts = []
    for op in ("produce", "consume"):
        for size, _ in cases:
            o, m = median(results[("odradek", op, size)]), median(results[("mock", op, size)])
            ratio = o.rps / m.rps
            cpu = [median_of([getattr(r, attr) for r in results[(name, op, size)]])
                   for name, attr in (("odradek", "server_us"), ("mock", "server_us"),
                                      ("odradek", "client_us"), ("mock", "client_us"))]
            print(f"{op} {size:>5} B records   {o.rps:>11,.0f} rec/s {o.mbps:>7.1f} MB/s"
                  f"{m.rps:>11,.0f} rec/s {m.mbps:>7.1f} MB/s{ratio:>7.2f}x"
                  f"   {cpu[0]:>20.2f}{cpu[1]:>6.2f}{cpu[2]:>9.2f}{cpu[3]:>9.2f}")
            rounds = ", ".join(f"{a.rps / b.rps:.2f}" for a, b in zip(results[("odradek", op, size)],
                                                                       results[("mock", op, size)], strict=True))
            verdicts.append(f"{op} {size} B: {ratio:.2f}x ({'meets' if ratio >= 1.0 else 'misses'} the 1.0x target; "
                            f"rounds {rounds})")
    print("(CPU: medians over the runs; the mock's is its rdk:mock thread, the broker's its whole process)")
    if args.client_detail:
        for size, n in cases:
            runs = {name: results[(name, "produce", size)] for name in ("odradek", "mock")}
            detail = [f"{name}: {median_of([n / max(r.requests, 1) for r in rs]):,.0f} records/request, "
                      f"peak RSS {median_of([r.client_peak_mb for r in rs]):.0f} MiB" for name, rs in runs.items()]
            print(f"kcat -P {size} B (medians): " + "; ".join(detail))
    print()
    for v in verdicts:
        print(v)
    if not args.work_dir:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

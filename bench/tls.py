"""Produce and consume throughput over TLS against plaintext, in one run, on one broker (issue 25).

One broker (LocalCluster with `security`, what `odradek dev --security` runs) with its TLS client
listener and, added for this comparison, a plaintext listener on the same process. kcat produces
the same pre-generated record file to a fresh topic through each listener and consumes it back,
taking turns (plaintext, TLS, plaintext, TLS, ...); the report is the median of each and the ratio
TLS/plaintext (target: at least 0.6; Kafka's own TLS costs roughly 20-40 %).

Run: .venv/bin/python bench/tls.py [--records 1000000] [--size 100] [--partitions 4] [--repeat 3]
"""

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from throughput import CONSUME_OPTS, PRODUCE_OPTS, Result, median, write_records


def kcat(args: list[str], config: Path | None) -> list[str]:
    return ["kcat", *(["-F", str(config)] if config else []), *args]


def produce(bootstrap: str, config: Path | None, topic: str, data: Path, records: int, size: int) -> Result:
    start = time.perf_counter()
    subprocess.run(kcat(["-P", "-b", bootstrap, "-t", topic, "-l", *PRODUCE_OPTS, str(data)], config),
                   check=True, timeout=900, stdout=subprocess.DEVNULL)
    return Result(records, records * size, time.perf_counter() - start)


def consume(bootstrap: str, config: Path | None, topic: str, records: int, size: int) -> Result:
    start = time.perf_counter()
    proc = subprocess.Popen(kcat(["-C", "-b", bootstrap, "-t", topic, "-o", "beginning", "-e", "-q", "-f", ".",
                                  *CONSUME_OPTS], config), stdout=subprocess.PIPE)
    seen = 0
    assert proc.stdout is not None
    while chunk := proc.stdout.read(1 << 16):
        seen += len(chunk)
    proc.wait(900)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0 or seen != records:
        raise RuntimeError(f"kcat -C on {topic}: exit {proc.returncode}, {seen} of {records} records")
    return Result(records, records * size, elapsed)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=100, help="value bytes per record")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    if shutil.which("kcat") is None:
        print("kcat not found: run `make setup`", file=sys.stderr)
        return 1

    from confluent_kafka.admin import AdminClient, NewTopic

    from odradek.dev.cluster import LocalCluster
    from odradek.dev.security import ClusterSecurity
    from odradek.dev.zookeeper import free_port

    with tempfile.TemporaryDirectory(prefix="odradek-bench-tls-") as tmp:
        d = Path(tmp)
        data = d / "records.txt"
        write_records(data, args.records, args.size)
        security = ClusterSecurity(d / "security")
        cluster = LocalCluster(d / "cluster", brokers=1, controllers=1, broker_ports=[free_port()], security=security)
        plain_port = free_port()
        broker = cluster.brokers[0]
        broker.overrides["listeners"] += f",PLAIN://127.0.0.1:{plain_port}"
        broker.overrides["listener.security.protocol.map"] += ",PLAIN:PLAINTEXT"
        cluster.start()
        try:
            targets = {"plaintext": (f"127.0.0.1:{plain_port}", None),
                       "tls": (cluster.bootstrap, security.client_config_path)}
            admin = AdminClient({"bootstrap.servers": targets["plaintext"][0]})
            results: dict[str, dict[str, list[Result]]] = {t: {"produce": [], "consume": []} for t in targets}
            print(f"{args.records} records of {args.size} B, {args.partitions} partitions, 1 broker; kcat -P "
                  f"{' '.join(PRODUCE_OPTS)}; -C {' '.join(CONSUME_OPTS)}; median of {args.repeat}", flush=True)
            for round_ in range(args.repeat):
                for name, (bootstrap, config) in targets.items():
                    topic = f"bench-{name}-{round_}"
                    admin.create_topics([NewTopic(topic, args.partitions, 1)])[topic].result(60)
                    deadline = time.monotonic() + 60
                    while time.monotonic() < deadline:
                        t = admin.list_topics(topic, timeout=10).topics.get(topic)
                        if t and t.error is None and all(p.leader >= 0 for p in t.partitions.values()):
                            break
                        time.sleep(0.2)
                    p = produce(bootstrap, config, topic, data, args.records, args.size)
                    c = consume(bootstrap, config, topic, args.records, args.size)
                    results[name]["produce"].append(p)
                    results[name]["consume"].append(c)
                    print(f"  round {round_ + 1} {name:9} produce {p.mbps:7.1f} MB/s ({p.rps / 1e6:.2f}M rec/s)  "
                          f"consume {c.mbps:7.1f} MB/s ({c.rps / 1e6:.2f}M rec/s)", flush=True)
            print()
            print("| | plaintext MB/s | TLS MB/s | TLS / plaintext |")
            print("|---|---|---|---|")
            for kind in ("produce", "consume"):
                plain, tls = median(results["plaintext"][kind]), median(results["tls"][kind])
                print(f"| {kind} | {plain.mbps:.1f} | {tls.mbps:.1f} | {tls.mbps / plain.mbps:.2f} |")
        finally:
            cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What metrics cost on the produce path: the counters' time per request, measured, against the
time a real broker spends per Produce request under kcat's load, measured in the same run.

The counters are always on (the endpoint only renders them), so an on/off comparison of two
brokers would compare two runs of a shared machine's noise; instead this measures the hot-path
work itself (the request wrapper with its latency bucket, the per-topic counters of an append)
over many calls, and divides by the broker's own time per request:

    .venv/bin/python bench/metrics.py            # about 30 s; --records, --partitions
"""

import argparse
import asyncio
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from throughput import PRODUCE_OPTS, Odradek, kcat_produce, write_records

from odradek.broker.metrics import BrokerTopicStats, RequestStats, metered


def per_call_ns(calls: int) -> tuple[float, float]:
    """(ns the request wrapper adds per request, ns of one append's per-topic counting)."""
    async def handle(frame, conn):
        return None

    async def loop(h) -> float:
        frame = b"\x00\x00" + b"x" * 30
        start = time.perf_counter()
        for _ in range(calls):
            await h(frame, None)
        return time.perf_counter() - start

    plain = min(asyncio.run(loop(handle)) for _ in range(3))
    wrapped = min(asyncio.run(loop(metered(handle, RequestStats()))) for _ in range(3))
    stats = BrokerTopicStats()
    start = time.perf_counter()
    for _ in range(calls):
        stats.record_in("topic", 100, 10_000)
    counting = time.perf_counter() - start
    return (wrapped - plain) / calls * 1e9, counting / calls * 1e9


def scrape(url: str) -> tuple[str, float]:
    start = time.perf_counter()
    with urllib.request.urlopen(url, timeout=10) as r:
        text = r.read().decode()
    return text, time.perf_counter() - start


def sample(text: str, prefix: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(prefix))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=300_000)
    p.add_argument("--size", type=int, default=100)
    p.add_argument("--partitions", type=int, default=8)
    p.add_argument("--calls", type=int, default=200_000)
    args = p.parse_args(argv)

    wrapper_ns, counting_ns = per_call_ns(args.calls)
    print(f"request wrapper: {wrapper_ns:.0f} ns per request; per-topic counting: {counting_ns:.0f} ns per append")
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "records"
        write_records(data, args.records, args.size)
        from odradek.dev.cluster import LocalCluster
        from odradek.dev.zookeeper import free_port

        target = Odradek.__new__(Odradek)
        target.cluster = LocalCluster(Path(tmp) / "cluster", brokers=1, controllers=1, broker_ports=[free_port()],
                                      metrics=True)
        target.cluster.start()
        target.bootstrap = target.cluster.bootstrap
        try:
            target.create_topic("bench", args.partitions)
            result = kcat_produce(target.bootstrap, "bench", data, args.records, args.size, PRODUCE_OPTS)
            text, scrape_s = scrape(target.cluster.metrics_urls["broker-0"])
        finally:
            target.close()
    requests = sample(text, 'kafka_network_requestmetrics_requests_total{request="Produce"}')
    appends_per_request = args.partitions  # at most one append per partition per request
    broker_ms = sample(text, 'kafka_network_requestmetrics_totaltimems_sum{request="Produce"}')
    cost_s = requests * (wrapper_ns + appends_per_request * counting_ns) / 1e9
    print(f"kcat produce: {result.rps:,.0f} records/s over {result.seconds:.1f} s, {requests:,.0f} Produce requests, "
          f"{broker_ms / max(requests, 1):.2f} ms broker time per request (p50/p99 in the scrape)")
    print(f"metrics hot path: {cost_s * 1e3:.1f} ms in all = {cost_s / result.seconds:.3%} of the run's wall time, "
          f"{cost_s / (broker_ms / 1e3):.3%} of the broker's request time; one scrape {scrape_s * 1e3:.1f} ms")
    print("(2-core machine shared with other work: absolute figures are noisy; the ratio is the point)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Produce latency at a fixed rate: the p50 and p99 from produce() to its delivery report.

Shared by the benchmarks that compare latency with and without something going on (replication
factors, the log cleaner). The load generator must not take CPU the brokers need on this 2-core
machine: the sender sleeps until each record is due, and a second thread waits in poll() for
the delivery reports. librdkafka's poll timeout is whole milliseconds, so a single thread that
polls until the next send is due spins whenever sends are under 1 ms apart (at 2,000 records/s and
more): it took a core, and the brokers' answers waited for the other one.
"""

import threading
import time

from confluent_kafka import Producer


def produce_latency(bootstrap: str, topic: str, rate: float, seconds: float, acks: str = "1",
                    size: int = 100) -> tuple[float, float, int]:
    """(p50 ms, p99 ms, records) of `rate` records/s of `size` bytes for `seconds` (linger.ms=0).

    One record goes first, unmeasured: a new topic's first acknowledgement waits for every replica
    to start (logs made, leader-epoch checkpoints fsynced, followers' first fetch), a one-time cost
    of hundreds of ms after heavy writes; the samples measure the steady state. A sample is taken
    when the poll thread runs the delivery callback: poll() wakes when the report arrives."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 0, "enable.idempotence": False,
                         "message.timeout.ms": 30_000})
    samples: list[float] = []
    failures: list[str] = []

    def report(sent_at: float):
        def cb(err, _msg) -> None:
            if err is None:
                samples.append(time.perf_counter() - sent_at)
            else:
                failures.append(str(err))
        return cb

    value = b"x" * size
    producer.produce(topic, value=value)
    if producer.flush(30):
        raise RuntimeError(f"latency run on {topic}: warm-up record not delivered")
    stop = threading.Event()

    def serve_reports(client: Producer) -> None:
        while not stop.is_set():
            client.poll(0.05)

    poller = threading.Thread(target=serve_reports, args=(producer,), name="delivery-reports", daemon=True)
    poller.start()
    total = int(rate * seconds)
    try:
        start = time.perf_counter()
        for i in range(total):
            delay = start + i / rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            producer.produce(topic, value=value, on_delivery=report(time.perf_counter()))
    finally:
        stop.set()
        poller.join(10)
    if producer.flush(60) or failures:
        raise RuntimeError(f"latency run on {topic} acks={acks}: {len(failures)} failures {failures[:2]}")
    del producer
    samples.sort()
    return samples[len(samples) // 2] * 1000, samples[min(len(samples) - 1, int(len(samples) * 0.99))] * 1000, total

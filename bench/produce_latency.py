"""Produce latency at a fixed rate: the p50 and p99 from produce() to its delivery report.

Shared by the benchmarks that compare latency with and without something going on (replication
factors, the log cleaner). The sender sleeps until each record is due (a spinning load generator
would take a core from the brokers on this 2-core machine).
"""

import time

from confluent_kafka import Producer


def produce_latency(bootstrap: str, topic: str, rate: float, seconds: float, acks: str = "1",
                    size: int = 100) -> tuple[float, float, int]:
    """(p50 ms, p99 ms, records) of `rate` records/s of `size` bytes for `seconds` (linger.ms=0).

    One record goes first, unmeasured: a new topic's first acknowledgement waits for every replica
    to start (logs made, leader-epoch checkpoints fsynced, followers' first fetch), a one-time cost
    of hundreds of ms after heavy writes; the samples measure the steady state."""
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
    total = int(rate * seconds)
    start = time.perf_counter()
    for i in range(total):
        due = start + i / rate
        while (now := time.perf_counter()) < due:
            producer.poll(min(0.001, due - now))
        producer.produce(topic, value=value, on_delivery=report(time.perf_counter()))
        producer.poll(0)
    if producer.flush(60) or failures:
        raise RuntimeError(f"latency run on {topic} acks={acks}: {len(failures)} failures {failures[:2]}")
    del producer
    samples.sort()
    return samples[len(samples) // 2] * 1000, samples[min(len(samples) - 1, int(len(samples) * 0.99))] * 1000, total

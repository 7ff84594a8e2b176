"""Issue 31 scaled down: a broker leading a thousand partitions shuts down in a controlled way
while an acks=all producer writes to every partition, and the producer sees no error.

bench/scale.py measures the same at full size (and creation, failover, restarts)."""

import signal
import time
from collections import Counter

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

pytestmark = pytest.mark.integration

TOPICS, PER_TOPIC = 30, 100  # 3,000 partitions at RF 3: 3,000 replicas per broker
RATE = 1000.0  # records/s; the sender sleeps until each is due


def leaders(admin: AdminClient, names: list[str]) -> Counter | None:
    """Partitions led per broker, or None while one is leaderless or not in full ISR."""
    md = admin.list_topics(timeout=30)
    led: Counter = Counter()
    for name in names:
        t = md.topics.get(name)
        if t is None or t.error is not None or len(t.partitions) != PER_TOPIC:
            return None
        for p in t.partitions.values():
            if p.leader < 0 or len(p.isrs) < len(p.replicas):
                return None
            led[p.leader] += 1
    return led


def test_controlled_shutdown_of_a_broker_leading_a_thousand_partitions(cluster_factory):
    cluster = cluster_factory(brokers=3)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    names = [f"scale-{i:02d}" for i in range(TOPICS)]
    for f in admin.create_topics([NewTopic(n, PER_TOPIC, 3) for n in names], request_timeout=120).values():
        f.result(timeout=120)
    deadline, led = time.monotonic() + 120, None
    while led is None and time.monotonic() < deadline:
        led = leaders(admin, names)
        if led is None:
            time.sleep(1)
    assert led is not None, "3,000 partitions not led in full ISR within 120 s"
    victim, count = led.most_common(1)[0]
    assert count >= 900

    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5,
                         "enable.idempotence": True, "delivery.timeout.ms": 60_000})
    errors: Counter = Counter()
    delivered = sent = 0

    def report(err, _msg) -> None:
        nonlocal delivered
        if err is None:
            delivered += 1
        else:
            errors[err.name()] += 1

    targets = [(n, p) for n in names for p in range(PER_TOPIC)]
    popen = cluster.broker(victim)._running()
    assert popen is not None
    start = time.perf_counter()
    signalled_at = exited_at = None
    while time.perf_counter() - start < 60:  # bounded: at most a minute of load
        now = time.perf_counter()
        if signalled_at is None and now - start > 3:
            popen.send_signal(signal.SIGTERM)
            signalled_at = now
        if signalled_at is not None and exited_at is None and popen.poll() is not None:
            exited_at = now
        if exited_at is not None and now - exited_at > 3:
            break
        due = start + sent / RATE
        if now < due:
            producer.poll(min(0.05, due - now))
            continue
        topic, partition = targets[sent % len(targets)]
        producer.produce(topic, value=b"x" * 100, partition=partition, on_delivery=report)
        sent += 1
        producer.poll(0)
    left = producer.flush(60)

    assert exited_at is not None, f"broker {victim} still running 60 s after SIGTERM"
    assert popen.returncode == 0, cluster.broker(victim).log_tail()
    assert not errors and left == 0, f"produce errors {dict(errors)}, {left} undelivered"
    assert delivered == sent
    md = admin.list_topics(timeout=30)
    assert all(p.leader != victim for n in names for p in md.topics[n].partitions.values())

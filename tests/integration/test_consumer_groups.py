"""Consumer groups end to end: real brokers and controller (LocalCluster), real clients."""

import time

import pytest
from confluent_kafka import Consumer, Producer

from .kafka_helpers import create_topic, wait_for_leaders

GROUP_BROKER = {
    "offsets.topic.num.partitions": 4,
    "offsets.topic.replication.factor": 1,
    "group.initial.rebalance.delay.ms": 0,
    "group.min.session.timeout.ms": 1000,
}


def produce(bootstrap: str, topic: str, n: int, tag: str) -> set[bytes]:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    values = set()
    for i in range(n):
        v = b"%s-%05d" % (tag.encode(), i)
        values.add(v)
        p.produce(topic, v, key=b"k%d" % i)
    assert p.flush(30) == 0
    return values


def consumer(bootstrap: str, group: str, **extra) -> Consumer:
    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 500,
    }
    conf.update(extra)
    return Consumer(conf)


def consume(c: Consumer, want: int, timeout: float = 60.0) -> list[bytes]:
    out: list[bytes] = []
    deadline = time.monotonic() + timeout
    while len(out) < want and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is None or m.error():
            continue
        out.append(m.value())
    return out


def test_commit_stop_resume_and_after_restart(cluster_factory):
    cluster = cluster_factory(brokers=1, broker_overrides=GROUP_BROKER)
    bs = cluster.bootstrap
    create_topic(bs, "resume", 3)
    wait_for_leaders(bs, "resume", 3)
    sent = produce(bs, "resume", 60, "a")

    c1 = consumer(bs, "g-resume")
    c1.subscribe(["resume"])
    first = consume(c1, 20)
    assert len(first) >= 20
    c1.commit(asynchronous=False)
    c1.close()

    c2 = consumer(bs, "g-resume")
    c2.subscribe(["resume"])
    rest = consume(c2, 60 - len(first))
    c2.commit(asynchronous=False)
    c2.close()
    assert len(rest) == 60 - len(first)
    assert set(first) | set(rest) == sent and not set(first) & set(rest)

    more = produce(bs, "resume", 10, "b")
    cluster.broker(0).restart()
    cluster.wait_ready()
    c3 = consumer(bs, "g-resume")
    c3.subscribe(["resume"])
    got = consume(c3, 10)
    time.sleep(1)
    got += consume(c3, 1, timeout=1)
    c3.close()
    assert set(got) == more

"""Acceptance: a broker killed with SIGKILL while a producer writes, then restarted, still has
every acknowledged record; offsets continue without gaps or duplicates; the indexes answer.

SIGKILL does not lose the page cache, so every acknowledged record must survive whatever the
flush policy; the acks=all case also flushes after every message (the strictest policy)."""

import signal
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from .kafka_helpers import confluent_consume, confluent_produce, create_topic, make_records, wait_for_leaders

TOPIC = "crash"
PARTITIONS = 3
ACKED_BEFORE_KILL = 20_000


@pytest.mark.parametrize(
    ("acks", "flush_every"),
    [("1", None), ("all", 1)],
    ids=["acks1-pagecache", "acksall-flush-every-message"],
)
def test_sigkill_broker_while_producing(cluster_factory, acks, flush_every):
    overrides = {
        "log.segment.bytes": 256 * 1024,   # several segments, so recovery and lookups cross them
        "log.index.interval.bytes": 4096,
    }
    if flush_every:
        overrides["log.flush.interval.messages"] = flush_every
    cluster = cluster_factory(brokers=1, broker_overrides=overrides)
    bootstrap = cluster.bootstrap
    create_topic(bootstrap, TOPIC, PARTITIONS)

    records = make_records(200_000, "crash")
    base_ts = int(time.time() * 1000) - 3_600_000
    acked: dict[tuple[int, int], int] = {}  # (partition, offset) → record index
    failed: list[int] = []

    def on_delivery(i):
        def cb(err, msg):
            if err is None:
                acked[(msg.partition(), msg.offset())] = i
            else:
                failed.append(i)
        return cb

    producer = Producer({
        "bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5, "enable.idempotence": False,
        "message.timeout.ms": 5000, "queue.buffering.max.messages": 300_000,
    })
    killed_at = None
    deadline = time.monotonic() + 120
    i = 0
    # Produce until enough is acknowledged, kill the broker mid-stream, keep producing a little.
    while i < len(records) and (killed_at is None or i < killed_at + 2_000):
        assert time.monotonic() < deadline, f"only {len(acked)} records acknowledged in 120s"
        r = records[i]
        try:
            producer.produce(TOPIC, key=r.key, value=r.value, headers=list(r.headers),
                             timestamp=base_ts + i, on_delivery=on_delivery(i))
            i += 1
        except BufferError:
            producer.poll(0.05)
        if i % 500 == 0:
            producer.poll(0)
        if killed_at is None and len(acked) >= ACKED_BEFORE_KILL:
            cluster.broker(0).kill(signal.SIGKILL)
            killed_at = i
    assert killed_at is not None, "the broker was never killed"
    producer.flush(30)  # unacknowledged records time out (message.timeout.ms)
    assert len(producer) == 0
    acked_at_kill = dict(acked)
    assert len(acked_at_kill) >= ACKED_BEFORE_KILL

    # Restart once the old registration has expired; wait for the partitions to have a leader.
    cluster.wait_broker_gone(0, timeout=30)
    cluster.broker(0).start()
    cluster.wait_ready(timeout=60)
    wait_for_leaders(bootstrap, TOPIC, PARTITIONS, timeout=60)

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "crash-verify", "enable.auto.commit": False})
    try:
        ends = {}
        for p in range(PARTITIONS):
            lo, hi = c.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10)
            assert lo == 0
            ends[p] = hi
    finally:
        c.close()

    # Every acknowledged record is there; offsets are dense 0..end-1; nothing torn is served.
    consumed = confluent_consume(bootstrap, TOPIC, PARTITIONS, sum(ends.values()), timeout=120)
    for p in range(PARTITIONS):
        got = consumed[p]
        assert [c.offset for c in got] == list(range(ends[p])), f"partition {p}: offsets not dense"
    by_position = {(p, c.offset): c.record for p in consumed for c in consumed[p]}
    for (p, offset), index in acked_at_kill.items():
        assert (p, offset) in by_position, f"acknowledged record {index} at {p}/{offset} lost"
        got = by_position[(p, offset)]
        want = records[index]
        assert (got.key, got.value, got.headers, got.timestamp) == (want.key, want.value, want.headers, base_ts + index)
    valid = {r.value for r in records}
    assert all(rec.value in valid for rec in by_position.values()), "a record that was never produced is served"

    # The indexes answer: a lookup by timestamp and a fetch from the middle of each partition.
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "crash-verify-2", "enable.auto.commit": False})
    try:
        for p in range(PARTITIONS):
            acked_here = sorted(off for (pp, off) in acked_at_kill if pp == p)
            if not acked_here:
                continue
            mid = acked_here[len(acked_here) // 2]
            index = acked_at_kill[(p, mid)]
            (answer,) = c.offsets_for_times([TopicPartition(TOPIC, p, base_ts + index)], timeout=10)
            assert answer.offset == mid, f"partition {p}: timestamp lookup gave {answer.offset}, want {mid}"
    finally:
        c.close()
    middles = {p: ends[p] // 2 for p in range(PARTITIONS)}
    tail = confluent_consume(bootstrap, TOPIC, PARTITIONS, sum(ends[p] - middles[p] for p in middles),
                             start_offsets=middles)
    for p in range(PARTITIONS):
        assert [c.offset for c in tail[p]] == list(range(middles[p], ends[p]))
        assert [c.record for c in tail[p]] == [c.record for c in consumed[p][middles[p]:]]

    # Offsets continue where the log ends: no gap, no reuse.
    more = make_records(3_000, "after-restart")
    delivered = confluent_produce(bootstrap, TOPIC, more, {"acks": acks})
    for p in range(PARTITIONS):
        offsets = [d.offset for d in delivered if d.partition == p]
        assert offsets == list(range(ends[p], ends[p] + len(offsets))), f"partition {p}: offsets do not continue"

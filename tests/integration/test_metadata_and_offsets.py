"""Acceptance: `kcat -L` lists the cluster; ListOffsets by timestamp finds the right offsets;
topics are created and deleted through the admin APIs of both clients."""

import json
import subprocess
import time
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition

from odradek.dev.waiting import wait_until

from .kafka_helpers import Record, admin, confluent_produce, create_topic, wait_for_leaders


def kcat(*args: str, timeout: float = 30.0, input: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["kcat", *args], input=input, capture_output=True, timeout=timeout, check=True)


def test_kcat_lists_brokers_and_topics(shared_cluster):
    create_topic(shared_cluster.bootstrap, "kcat-listed", 3)
    out = kcat("-b", shared_cluster.bootstrap, "-L", "-J")
    md = json.loads(out.stdout)
    assert {b["id"]: b["name"] for b in md["brokers"]} == {
        i: f"127.0.0.1:{port}" for i, port in enumerate(shared_cluster.broker_ports)
    }
    assert md["controllerid"] in {0, 1}, "controller_id must name a live broker"
    topics = {t["topic"]: t for t in md["topics"]}
    assert "kcat-listed" in topics
    parts = topics["kcat-listed"]["partitions"]
    assert sorted(p["partition"] for p in parts) == [0, 1, 2]
    assert all(p["leader"] in {0, 1} for p in parts)

    text = kcat("-b", shared_cluster.bootstrap, "-L", "-t", "kcat-listed").stdout.decode()
    assert "2 brokers:" in text
    assert 'topic "kcat-listed" with 3 partitions' in text


N = 3_000
STEP_MS = 10


@pytest.mark.parametrize("codec", ["none", "lz4"])
def test_list_offsets_by_timestamp(shared_cluster, codec):
    from confluent_kafka import Consumer
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    topic = f"timestamps-{codec}"
    create_topic(shared_cluster.bootstrap, topic, 2)
    base = int(time.time() * 1000) - 3_600_000
    # One key, so one partition holds everything (in batches of many records: lookups land
    # inside batches) and the other stays empty.
    records = [Record(b"k", b"v%d" % i, (), timestamp=base + i * STEP_MS) for i in range(N)]
    delivered = confluent_produce(shared_cluster.bootstrap, topic, records, {"compression.type": codec, "linger.ms": 50})
    (full,) = {d.partition for d in delivered}
    empty = 1 - full
    rows = [(d.offset, base + i * STEP_MS) for i, d in enumerate(delivered)]

    probes: dict[int, int] = {}  # timestamp → the offset Kafka answers
    for idx in (0, 1, N // 3, N // 2, N - 1):
        offset, ts = rows[idx]
        probes[ts] = offset                    # exact timestamp → that record
        if idx:
            probes[ts - STEP_MS // 2] = offset  # between two records → the later one
    probes[base - 60_000] = 0                  # before everything → the first record
    probes[rows[-1][1] + 1] = -1               # after everything → none (Kafka answers -1)

    c = Consumer({"bootstrap.servers": shared_cluster.bootstrap, "group.id": "ts-lookup", "enable.auto.commit": False})
    try:
        assert c.get_watermark_offsets(TopicPartition(topic, full), timeout=10) == (0, N)
        assert c.get_watermark_offsets(TopicPartition(topic, empty), timeout=10) == (0, 0)
        # One partition per request: a ListOffsets request names each partition once.
        asked = [TopicPartition(topic, full, ts) for ts in probes] + [TopicPartition(topic, empty, base)]
        for q in asked:
            (a,) = c.offsets_for_times([q], timeout=10)
            assert a.error is None, a.error
            want = probes[q.offset] if q.partition == full else -1
            assert a.offset == want, f"partition {q.partition} timestamp {q.offset}: offset {a.offset}, want {want}"
    finally:
        c.close()

    kc = KafkaConsumer(bootstrap_servers=shared_cluster.bootstrap, group_id=None)
    try:
        offset, ts = rows[N // 2]
        found = kc.offsets_for_times({KTP(topic, full): ts - 1})[KTP(topic, full)]
        assert (found.offset, found.timestamp) == (offset, ts)
    finally:
        kc.close()


def test_kafka_python_admin_creates_and_deletes_a_topic(shared_cluster):
    from kafka.admin import KafkaAdminClient, NewTopic

    client = KafkaAdminClient(bootstrap_servers=shared_cluster.bootstrap, request_timeout_ms=30_000)
    try:
        client.create_topics([NewTopic("kp-admin", num_partitions=4, replication_factor=1)])
        wait_for_leaders(shared_cluster.bootstrap, "kp-admin", 4)
        assert "kp-admin" in client.list_topics()
        client.delete_topics(["kp-admin"])
        # The answer waits for the broker that got the request; list_topics may ask another one,
        # which learns of the deletion from the controller's UpdateMetadata a moment later.
        wait_until(lambda: "kp-admin" not in client.list_topics(), "every broker forgot kp-admin", timeout=15)
    finally:
        client.close()


def test_delete_topic_removes_it_and_its_files(shared_cluster):
    bootstrap = shared_cluster.bootstrap
    # As in Kafka, a deleted partition's directory is renamed `<dir>.<uuid>-delete` at once and
    # removed after the topic's file.delete.delay.ms (default 60 s; short here).
    create_topic(bootstrap, "to-delete", 4, config={"file.delete.delay.ms": "500"})
    confluent_produce(bootstrap, "to-delete", [Record(b"k%d" % i, b"v", ()) for i in range(100)])
    log_dirs = [Path(b.overrides["log.dirs"]) for b in shared_cluster.brokers]

    def leftovers(live_only: bool) -> list[str]:
        names = [d.name for ld in log_dirs for d in ld.iterdir() if d.name.startswith("to-delete-")]
        return [n for n in names if not n.endswith("-delete")] if live_only else names

    assert sorted(leftovers(live_only=True)) == [f"to-delete-{p}" for p in range(4)]

    client = admin(bootstrap)
    client.delete_topics(["to-delete"], operation_timeout=30)["to-delete"].result(timeout=35)
    # as for kp-admin above: the broker list_topics asks may learn of the deletion a moment later
    wait_until(lambda: "to-delete" not in client.list_topics(timeout=10).topics, "every broker forgot to-delete",
               timeout=15)
    deadline = time.monotonic() + 10
    while leftovers(live_only=True):
        assert time.monotonic() < deadline, f"partition directories still live 10s after DeleteTopics: {leftovers(True)}"
        time.sleep(0.1)
    deadline = time.monotonic() + 90
    while leftovers(live_only=False):
        assert time.monotonic() < deadline, f"deleted partition directories still there after 90s: {leftovers(False)}"
        time.sleep(0.5)

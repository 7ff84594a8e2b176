"""Client-side helpers for the acceptance tests: create topics, generate records, produce and
consume with the real clients (confluent-kafka/librdkafka and kafka-python). Every wait is bounded."""

import time
import uuid
from dataclasses import dataclass

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
_FILLER = (b"the quick brown fox jumps over the lazy dog; pack my box with five dozen liquor jugs. " * 3)


@dataclass(frozen=True)
class Record:
    key: bytes
    value: bytes
    headers: tuple[tuple[str, bytes], ...]
    timestamp: int | None = None


def make_records(n: int, tag: str, distinct_keys: int = 997) -> list[Record]:
    """`n` keyed records with headers; values are unique and mildly compressible (~100 bytes)."""
    out = []
    for i in range(n):
        start = i % 80
        out.append(
            Record(
                key=b"key-%05d" % (i % distinct_keys),
                value=b"%s-%08d|" % (tag.encode(), i) + _FILLER[start : start + 80],
                headers=(("seq", b"%d" % i), ("tag", tag.encode())),
            )
        )
    return out


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def wait_for_leaders(bootstrap: str, topic: str, partitions: int, timeout: float = 30.0) -> dict[int, int]:
    """Poll Metadata until every partition of `topic` has a leader; returns partition → leader."""
    client = admin(bootstrap)
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            md = client.list_topics(topic, timeout=5)
            t = md.topics.get(topic)
            last = t
            if t is not None and t.error is None and len(t.partitions) == partitions:
                leaders = {p: pm.leader for p, pm in t.partitions.items()}
                if all(leader >= 0 for leader in leaders.values()):
                    return leaders
        except KafkaException as e:
            last = e
        time.sleep(0.2)
    raise AssertionError(f"{topic}: not all {partitions} partitions have a leader after {timeout}s; last: {last}")


def create_topic(bootstrap: str, topic: str, partitions: int, config: dict | None = None, timeout: float = 30.0) -> None:
    client = admin(bootstrap)  # must outlive the futures: a collected AdminClient fails them
    futures = client.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=1, config=config or {})],
        operation_timeout=timeout, request_timeout=timeout,
    )
    futures[topic].result(timeout=timeout + 5)
    wait_for_leaders(bootstrap, topic, partitions, timeout)


@dataclass
class Delivered:
    partition: int
    offset: int


def confluent_produce(bootstrap: str, topic: str, records: list[Record], config: dict | None = None,
                      timeout: float = 120.0) -> list[Delivered]:
    """Produce `records` in order; returns where each one landed. Fails on any delivery error."""
    conf = {
        "bootstrap.servers": bootstrap,
        "linger.ms": 20,
        "enable.idempotence": False,
        "queue.buffering.max.messages": 200_000,
        "message.timeout.ms": int(timeout * 1000),
    }
    conf.update(config or {})
    producer = Producer(conf)
    results: list[Delivered | None] = [None] * len(records)
    errors: list[str] = []

    def on_delivery(index):
        def callback(err, msg):
            if err is not None:
                errors.append(f"record {index}: {err}")
            else:
                results[index] = Delivered(msg.partition(), msg.offset())
        return callback

    deadline = time.monotonic() + timeout
    for i, r in enumerate(records):
        kwargs = {"key": r.key, "value": r.value, "headers": list(r.headers), "on_delivery": on_delivery(i)}
        if r.timestamp is not None:
            kwargs["timestamp"] = r.timestamp
        for _ in range(100_000):
            try:
                producer.produce(topic, **kwargs)
                break
            except BufferError:
                producer.poll(0.05)
                assert time.monotonic() < deadline, "producer queue stayed full"
        if i % 1000 == 0:
            producer.poll(0)
    remaining = producer.flush(max(1.0, deadline - time.monotonic()))
    assert remaining == 0, f"{remaining} records not delivered within {timeout}s"
    assert not errors, f"{len(errors)} delivery errors, first: {errors[:3]}"
    assert all(r is not None for r in results)
    return results  # type: ignore[return-value]


@dataclass(frozen=True)
class Consumed:
    partition: int
    offset: int
    record: Record


def confluent_consume(bootstrap: str, topic: str, partitions: int, count: int, timeout: float = 120.0,
                      start_offsets: dict[int, int] | None = None) -> dict[int, list[Consumed]]:
    """Read `count` records from `topic` (assigned partitions, from the beginning or `start_offsets`)."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"verify-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "enable.partition.eof": False,
    })
    try:
        consumer.assign([
            TopicPartition(topic, p, (start_offsets or {}).get(p, OFFSET_BEGINNING)) for p in range(partitions)
        ])
        out: dict[int, list[Consumed]] = {p: [] for p in range(partitions)}
        seen = 0
        deadline = time.monotonic() + timeout
        while seen < count:
            assert time.monotonic() < deadline, f"consumed {seen} of {count} records within {timeout}s"
            for msg in consumer.consume(num_messages=10_000, timeout=0.5):
                if msg.error():
                    raise AssertionError(f"consume error: {msg.error()}")
                ts_type, ts = msg.timestamp()
                out[msg.partition()].append(Consumed(
                    msg.partition(), msg.offset(),
                    Record(msg.key(), msg.value(), tuple(msg.headers() or ()), ts),
                ))
                seen += 1
        return out
    finally:
        consumer.close()


def kafka_python_produce(bootstrap: str, topic: str, records: list[Record], compression: str,
                         timeout: float = 300.0) -> list[Delivered]:
    from kafka import KafkaProducer

    producer = KafkaProducer(
        bootstrap_servers=bootstrap,
        compression_type=None if compression == "none" else compression,
        acks=1,
        linger_ms=20,
        batch_size=256 * 1024,
        max_request_size=1 << 20,
        max_block_ms=int(timeout * 1000),
        request_timeout_ms=30_000,
    )
    try:
        futures = [
            producer.send(topic, key=r.key, value=r.value, headers=list(r.headers),
                          timestamp_ms=r.timestamp)
            for r in records
        ]
        producer.flush(timeout=timeout)
        out = []
        for i, f in enumerate(futures):
            md = f.get(timeout=1)  # raises the delivery error, if any
            out.append(Delivered(md.partition, md.offset))
        return out
    finally:
        producer.close(timeout=10)


def kafka_python_consume(bootstrap: str, topic: str, partitions: int, count: int,
                         timeout: float = 300.0) -> dict[int, list[Consumed]]:
    from kafka import KafkaConsumer, TopicPartition as KTopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        max_partition_fetch_bytes=1 << 20,
    )
    try:
        tps = [KTopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        out: dict[int, list[Consumed]] = {p: [] for p in range(partitions)}
        seen = 0
        deadline = time.monotonic() + timeout
        while seen < count:
            assert time.monotonic() < deadline, f"consumed {seen} of {count} records within {timeout}s"
            for tp, msgs in consumer.poll(timeout_ms=500, max_records=10_000).items():
                for m in msgs:
                    out[tp.partition].append(Consumed(
                        tp.partition, m.offset,
                        Record(m.key, m.value, tuple((k, v) for k, v in m.headers), m.timestamp),
                    ))
                    seen += 1
        return out
    finally:
        consumer.close()


def expected_by_partition(records: list[Record], delivered: list[Delivered]) -> dict[int, list[tuple[int, Record]]]:
    """Per partition, (offset, record) in the order the records were produced."""
    out: dict[int, list[tuple[int, Record]]] = {}
    for r, d in zip(records, delivered):
        out.setdefault(d.partition, []).append((d.offset, r))
    return out


def without_timestamp(r: Record) -> Record:
    return Record(r.key, r.value, r.headers)

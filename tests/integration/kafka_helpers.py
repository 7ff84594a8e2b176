"""Client-side helpers for the acceptance tests: create topics, generate records, produce and
consume with the real clients (confluent-kafka/librdkafka and kafka-python). Every wait is bounded."""

import asyncio
import datetime
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode
from kio.schema.produce.v8.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.static.primitive import i16, i32, i32Timedelta

from odradek.broker.log.record_batch import build_batch
from odradek.common.network.client import NetworkClient
from odradek.dev.waiting import wait_until

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


def create_topic(bootstrap: str, topic: str, partitions: int, config: dict | None = None, timeout: float = 30.0,
                 replication_factor: int = 1) -> None:
    client = admin(bootstrap)  # must outlive the futures: a collected AdminClient fails them
    futures = client.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=replication_factor, config=config or {})],
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
                _ts_type, ts = msg.timestamp()
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
        for _i, f in enumerate(futures):
            md = f.get(timeout=1)  # raises the delivery error, if any
            out.append(Delivered(md.partition, md.offset))
        return out
    finally:
        producer.close(timeout=10)


def kafka_python_consume(bootstrap: str, topic: str, partitions: int, count: int,
                         timeout: float = 300.0) -> dict[int, list[Consumed]]:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTopicPartition

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


# --- replication views through Metadata (what clients see) ------------------------------------------


@dataclass(frozen=True)
class PartitionView:
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


def partition_views(bootstrap: str, topic: str, timeout: float = 5.0) -> dict[int, PartitionView]:
    """Leader, replicas and ISR of every partition of `topic`, as a broker's Metadata answers."""
    md = admin(bootstrap).list_topics(topic, timeout=timeout)
    t = md.topics.get(topic)
    if t is None or t.error is not None:
        raise KafkaException(t.error if t is not None else KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART))
    return {p: PartitionView(pm.leader, tuple(pm.replicas), tuple(sorted(pm.isrs))) for p, pm in t.partitions.items()}


def wait_for_partitions(bootstrap: str, topic: str, predicate, what: str, timeout: float = 60.0) -> dict[int, PartitionView]:
    """Poll Metadata until `predicate(views)` holds; returns the views. `what` names the wait."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        try:
            views = partition_views(bootstrap, topic)
            last = views
            if predicate(views):
                return views
        except KafkaException as e:
            last = e
        if time.monotonic() > deadline:
            raise AssertionError(f"{topic}: {what} not reached within {timeout}s; last Metadata: {last}")
        time.sleep(0.2)


def wait_isr_full(bootstrap: str, topic: str, partitions: int, timeout: float = 60.0) -> dict[int, PartitionView]:
    """Every partition has a leader and its ISR is all of its replicas."""
    return wait_for_partitions(
        bootstrap, topic,
        lambda v: len(v) == partitions and all(x.leader >= 0 and set(x.isr) == set(x.replicas) for x in v.values()),
        "full ISR on every partition", timeout,
    )


QUOTAS_LOADED = "client quotas loaded: "


def quota_loads(broker) -> list[list[str]]:
    """What each "client quotas loaded" line of a broker's log (a LocalCluster process) counts,
    e.g. ["1 produce", "0 fetch", ...]: one line at start-up and one for each change it applied."""
    return [line.partition(QUOTAS_LOADED)[2].split(", ")
            for line in broker.log_path.read_text(errors="replace").splitlines() if QUOTAS_LOADED in line]


def wait_quotas_loaded(broker, expected: str | None = None, after: int = 0, timeout: float = 30.0) -> None:
    """Until `broker` has applied a client quota change: more than `after` loads, the last naming
    `expected` (e.g. "1 produce"). The change reaches it through a ZooKeeper notification, well
    within a second on a quiet machine, not on a busy one."""
    def loaded() -> bool:
        loads = quota_loads(broker)
        return len(loads) > after and (expected is None or expected in loads[-1])

    wait_until(loaded, f"{broker.name} loads client quotas ({expected or f'load {after + 1}'})", timeout, 0.05)


def leader_of(bootstrap: str, topic: str, partition: int, timeout: float = 30.0) -> int:
    views = wait_for_partitions(bootstrap, topic, lambda v: v.get(partition, PartitionView(-1, (), ())).leader >= 0,
                                f"a leader for partition {partition}", timeout)
    return views[partition].leader


def cluster_report(cluster, topic: str, lines: int = 25) -> str:
    """What a stalled test needs to be understood from the CI log alone (the cluster's files do not
    outlive the run): `topic`'s leaders and ISRs as Metadata tells them, and each process's
    last log lines."""
    try:
        views = "\n".join(f"  {topic}-{p}: {v}" for p, v in sorted(partition_views(cluster.bootstrap, topic).items()))
    except Exception as e:  # the report must not hide the failure it reports on
        views = f"  Metadata failed: {e!r}"
    out = [f"--- {topic} as Metadata answers:", views]
    for process in cluster.processes():
        try:
            tail = process.log_tail(lines)
        except Exception as e:
            tail = repr(e)
        out.append(f"--- {process.name}, last {lines} log lines:\n{tail}")
    return "\n".join(out)


# --- a producer writing continuously, recording what was acknowledged ------------------------------


class ContinuousProducer:
    """A confluent-kafka producer thread writing records with unique ids round-robin over the
    partitions until `stop()`. Each value is `<tag>-<id>`; `acked` maps id → (partition, offset)
    for every record the cluster acknowledged, `errors` lists (id, KafkaError) of failed deliveries.
    One request in flight per connection keeps each partition's acknowledged records in send order."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, tag: str = "rec", config: dict | None = None,
                 rate: float = 2000.0):
        self.topic, self.partitions, self.tag, self.rate = topic, partitions, tag, rate
        conf = {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": False,
            "linger.ms": 5,
            "max.in.flight.requests.per.connection": 1,
            "message.timeout.ms": 60_000,
            "request.timeout.ms": 10_000,
            "retry.backoff.ms": 100,
            "error_cb": self._on_error,
        }
        conf.update(config or {})
        self.producer = Producer(conf)
        self.sent = 0
        self.acked: dict[int, tuple[int, int]] = {}
        self.errors: list[tuple[int, KafkaError]] = []
        self.client_errors: list[KafkaError] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"produce-{topic}", daemon=True)

    def value(self, record_id: int) -> bytes:
        return b"%s-%09d" % (self.tag.encode(), record_id)

    def _on_error(self, err: KafkaError) -> None:
        self.client_errors.append(err)  # connection drops etc.: librdkafka retries them

    def _on_delivery(self, record_id: int):
        def cb(err, msg):
            with self._lock:
                if err is None:
                    self.acked[record_id] = (msg.partition(), msg.offset())
                else:
                    self.errors.append((record_id, err))
        return cb

    def start(self) -> "ContinuousProducer":
        self._thread.start()
        return self

    def _run(self) -> None:
        started = time.monotonic()
        while not self._stop.is_set():
            due = int((time.monotonic() - started) * self.rate) + 1
            while self.sent < due and not self._stop.is_set():
                i = self.sent
                try:
                    self.producer.produce(self.topic, value=self.value(i), partition=i % self.partitions,
                                          on_delivery=self._on_delivery(i))
                    self.sent += 1
                except BufferError:
                    break
            self.producer.poll(0.01)

    def acked_count(self) -> int:
        with self._lock:
            return len(self.acked)

    def wait_acked(self, n: int, timeout: float = 60.0, diagnose: Callable[[], str] | None = None) -> None:
        """Wait until at least `n` more records than now are acknowledged. A stall fails with the
        client's last errors and, with `diagnose` (e.g. `cluster_report`), the cluster's state."""
        target = self.acked_count() + n
        deadline = time.monotonic() + timeout
        while self.acked_count() < target:
            assert self._thread.is_alive(), "producer thread died"
            if time.monotonic() >= deadline:
                report = diagnose() if diagnose is not None else ""
                raise AssertionError(f"only {self.acked_count()} of {target} records acknowledged in {timeout}s; "
                                     f"{len(self.errors)} failed, last client errors {self.client_errors[-5:]}\n{report}")
            time.sleep(0.05)

    def stop(self, flush_timeout: float = 90.0) -> None:
        """Stop sending, then wait for every outstanding delivery report."""
        self._stop.set()
        self._thread.join(10)
        remaining = self.producer.flush(flush_timeout)
        assert remaining == 0, f"{remaining} records without a delivery report after {flush_timeout}s"


def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"ends-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False})
    try:
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)}
    finally:
        c.close()


def verify_acknowledged(bootstrap: str, producer: ContinuousProducer, timeout: float = 120.0) -> dict[int, list[Consumed]]:
    """Consume the whole topic and check every acknowledged record is there, at the offset it was
    acknowledged with, and that each partition serves acknowledged records in send order."""
    ends = end_offsets(bootstrap, producer.topic, producer.partitions)
    consumed = confluent_consume(bootstrap, producer.topic, producer.partitions, sum(ends.values()), timeout)
    at = {(p, c.offset): c.record.value for p in consumed for c in consumed[p]}
    lost = [(i, pos) for i, pos in producer.acked.items() if at.get(pos) != producer.value(i)]
    assert not lost, f"{len(lost)} of {len(producer.acked)} acknowledged records lost or moved, first: {sorted(lost)[:5]}"
    for p in range(producer.partitions):
        offsets = [c.offset for c in consumed[p]]
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets), f"partition {p}: offsets out of order"
        acked_ids = [int(c.record.value.rsplit(b"-", 1)[1]) for c in consumed[p]
                     if producer.acked.get(int(c.record.value.rsplit(b"-", 1)[1])) == (p, c.offset)]
        assert acked_ids == sorted(acked_ids), f"partition {p}: acknowledged records out of send order"
    return consumed


def produce_error(port: int, topic: str, partition: int, value: bytes, host: str = "127.0.0.1") -> ErrorCode:
    """One acks=1 Produce v8 straight to the broker at `host`:`port`, without a client's retries
    or metadata: the error code it answers for the partition."""
    request = ProduceRequest(
        transactional_id=None, acks=i16(1), timeout=i32Timedelta.parse(datetime.timedelta(seconds=5)),
        topic_data=(TopicProduceData(name=topic, partition_data=(
            PartitionProduceData(index=i32(partition), records=build_batch([value])),)),),
    )

    async def send() -> ErrorCode:
        client = NetworkClient(host, port, client_id="odradek-test", connect_attempts=1, connect_timeout=5)
        try:
            response = await client.send(request, timeout=10)
            for t in response.responses:
                for r in t.partition_responses:
                    if t.name == topic and int(r.index) == partition:
                        return ErrorCode(r.error_code)
            raise AssertionError(f"no answer for {topic}-{partition} in {response}")
        finally:
            await client.close()

    return asyncio.run(send())


def ask(port: int, requests: list) -> list:
    """The responses to `requests`, sent in order on one connection to the broker at `port`."""

    async def run():
        client = NetworkClient("127.0.0.1", port)
        try:
            return [await client.send(r, timeout=30) for r in requests]
        finally:
            await client.close()

    return asyncio.run(run())

"""The nemesis workload: acks=all producers writing records with unique ids, one idempotent and
one not, and a reader that remembers every record it was served.

Each record's value is `<tag>-<id>` (ids count up from 0 per producer) and it goes to partition
`id % partitions`, so every partition receives its producer's ids in increasing order. A delivery
report without error is an acknowledgement: the id, its partition and its offset are kept.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition


@dataclass(frozen=True)
class Stream:
    """One producer's topic: its records are `<tag>-<id>`."""

    topic: str
    partitions: int
    idempotent: bool

    @property
    def tag(self) -> str:
        return self.topic

    def value(self, record_id: int) -> bytes:
        return b"%s-%09d" % (self.tag.encode(), record_id)

    def parse(self, value: bytes | None) -> int | None:
        """The id of one of this stream's values; None for anything else (a probe, a stray)."""
        if value is None:
            return None
        prefix = self.tag.encode() + b"-"
        if not value.startswith(prefix):
            return None
        try:
            return int(value[len(prefix):])
        except ValueError:
            return None


@dataclass
class ProducerStats:
    sent: int = 0
    acked: dict[int, tuple[int, int]] = field(default_factory=dict)
    failed: dict[int, str] = field(default_factory=dict)
    client_errors: list[str] = field(default_factory=list)


class StreamProducer:
    """A confluent-kafka producer thread writing `stream` at `rate` records per second."""

    def __init__(self, bootstrap: str, stream: Stream, rate: float, *, message_timeout_ms: int = 120_000,
                 debug_log: Path | None = None, client_properties: dict[str, str] | None = None):
        self.stream = stream
        self.rate = rate
        conf = {
            **(client_properties or {}),
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": stream.idempotent,
            # Without idempotence one request in flight keeps retries from reordering records.
            "max.in.flight.requests.per.connection": 5 if stream.idempotent else 1,
            "linger.ms": 5,
            "message.timeout.ms": message_timeout_ms,
            "request.timeout.ms": 15_000,
            "retry.backoff.ms": 100,
            "retry.backoff.max.ms": 1000,
            "socket.connection.setup.timeout.ms": 5000,
            "error_cb": self._on_error,
        }
        if debug_log is not None:  # librdkafka's own account of what it did, for a failing run
            conf.update({"debug": "broker,topic,msg,eos", "logger": _file_logger(stream.topic, debug_log)})
        self.producer: Producer | None = Producer(conf)
        self.stats = ProducerStats()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"nemesis-produce-{stream.topic}", daemon=True)

    def _on_error(self, err: KafkaError) -> None:
        with self._lock:
            if len(self.stats.client_errors) < 1000:
                self.stats.client_errors.append(str(err))

    def _report(self, record_id: int):
        def cb(err, msg) -> None:
            with self._lock:
                if err is None:
                    self.stats.acked[record_id] = (msg.partition(), msg.offset())
                else:
                    self.stats.failed[record_id] = str(err)
        return cb

    def start(self) -> StreamProducer:
        self._thread.start()
        return self

    def _run(self) -> None:
        started = time.monotonic()
        s, producer = self.stream, self.producer
        assert producer is not None, "started after close()"
        while not self._stop.is_set():
            due = int((time.monotonic() - started) * self.rate) + 1
            while self.stats.sent < due and not self._stop.is_set():
                i = self.stats.sent
                try:
                    producer.produce(s.topic, value=s.value(i), key=b"%d" % i, partition=i % s.partitions,
                                     on_delivery=self._report(i))
                    self.stats.sent += 1
                except BufferError:
                    break
            producer.poll(0.02)

    def acked_count(self) -> int:
        with self._lock:
            return len(self.stats.acked)

    def held(self) -> set[int]:
        """Ids sent and still without a delivery report (what the client holds)."""
        with self._lock:
            sent, acked, failed = self.stats.sent, set(self.stats.acked), set(self.stats.failed)
        return {i for i in range(sent) if i not in acked and i not in failed}

    def reported(self, ids: set[int]) -> tuple[set[int], set[int]]:
        """Of `ids`: (acknowledged, failed) so far."""
        with self._lock:
            return ({i for i in ids if i in self.stats.acked}, {i for i in ids if i in self.stats.failed})

    def stop(self, flush_timeout: float = 150.0) -> int:
        """Stop sending and wait for every delivery report (message.timeout.ms bounds them);
        returns how many records are still without one."""
        self._stop.set()
        self._thread.join(10)
        return 0 if self.producer is None else self.producer.flush(flush_timeout)

    def close(self, flush_timeout: float = 1.0) -> int:
        """`stop`, then let the client go: its error callback and this object hold each other, so
        without this librdkafka's threads would go on reconnecting to the torn-down cluster (log
        lines in later tests' output, CPU) until a garbage collection."""
        left = self.stop(flush_timeout)
        self.producer = None
        return left


def _file_logger(name: str, path: Path) -> logging.Logger:
    logger = logging.getLogger(f"nemesis.librdkafka.{name}")
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    logger.handlers = [handler]
    return logger


class Reader:
    """A consumer thread reading every partition of `streams` from the start, as far as the
    brokers serve (the high watermark); `seen[(topic, partition, offset)]` is what it was served."""

    def __init__(self, bootstrap: str, streams: list[Stream], client_properties: dict[str, str] | None = None):
        self.consumer = Consumer({
            **(client_properties or {}),
            "bootstrap.servers": bootstrap, "group.id": f"nemesis-reader-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False, "auto.offset.reset": "earliest", "enable.partition.eof": False,
            "fetch.wait.max.ms": 200, "socket.connection.setup.timeout.ms": 5000,
        })
        self.consumer.assign([TopicPartition(s.topic, p, OFFSET_BEGINNING) for s in streams for p in range(s.partitions)])
        self.seen: dict[tuple[str, int, int], bytes | None] = {}
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="nemesis-reader", daemon=True)

    def start(self) -> Reader:
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                for msg in self.consumer.consume(500, timeout=0.2):
                    if msg.error() is not None:
                        if len(self.errors) < 1000:
                            self.errors.append(str(msg.error()))
                        continue
                    self.seen[(msg.topic(), msg.partition(), msg.offset())] = msg.value()
        finally:
            self.consumer.close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)


def read_all(bootstrap: str, streams: list[Stream], timeout: float = 180.0,
             client_properties: dict[str, str] | None = None) -> dict[tuple[str, int], list[tuple[int, bytes | None]]]:
    """Every record of every partition of `streams`, up to each partition's end when called:
    (topic, partition) → [(offset, value)] in offset order."""
    c = Consumer({**(client_properties or {}), "bootstrap.servers": bootstrap,
                  "group.id": f"nemesis-check-{uuid.uuid4().hex[:8]}",
                  "enable.auto.commit": False, "enable.partition.eof": True})
    try:
        ends = {}
        for s in streams:
            for p in range(s.partitions):
                ends[(s.topic, p)] = c.get_watermark_offsets(TopicPartition(s.topic, p), timeout=30)[1]
        out: dict[tuple[str, int], list[tuple[int, bytes | None]]] = {k: [] for k in ends}
        pending = {k for k, end in ends.items() if end > 0}
        c.assign([TopicPartition(t, p, OFFSET_BEGINNING) for (t, p) in ends])
        deadline = time.monotonic() + timeout
        while pending:
            if time.monotonic() > deadline:
                raise TimeoutError(f"read_all: {sorted(pending)} not read to their ends {ends} in {timeout}s")
            for msg in c.consume(1000, timeout=0.5):
                key = (msg.topic(), msg.partition())
                if msg.error() is not None:
                    if msg.error().code() == KafkaError._PARTITION_EOF and key in ends and msg.offset() >= ends[key]:
                        pending.discard(key)
                    continue
                if msg.offset() < ends[key]:
                    out[key].append((msg.offset(), msg.value()))
                if msg.offset() + 1 >= ends[key]:
                    pending.discard(key)
        return out
    finally:
        c.close()

"""Writing DataFrames to topics: batch and streaming, at-least-once or exactly-once.

Rows follow Spark's Kafka sink schema (`value` required; `key`, `topic`, `partition`, `headers`
optional; the `topic` option wins over a topic column) and arrive as Arrow record batches.

at-least-once: an idempotent producer (no duplicates from the producer's own retries), but a
task Spark retries, or a micro-batch it re-runs after a restart, writes its rows again. The
producer outlives the task: each Python worker keeps an idle one per configuration (Spark's
CachedKafkaProducer) and hands it to its next task, which skips the connection, the metadata
request and the cold first batches; a task still succeeds only once every one of its records is
acknowledged (a flush), and a producer that saw any failure is thrown away.

exactly-once: each task writes its rows in one Kafka transaction whose transactional id is
(query, task partition), and commits with them, atomically, a progress marker: the offset
`batch id + 1` committed for the group of that same name (a transactional offset commit). A retried
task first fences any earlier attempt (init_transactions aborts its open transaction), then reads
the marker; if the batch is already there it writes nothing. Conditions: a batch id's input is the
same each time it runs (Spark's replayable sources and deterministic transformations), and readers
use isolation.level=read_committed.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import time
import uuid
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, cast

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage

from . import progress
from .options import AT_LEAST_ONCE, EXACTLY_ONCE, ClientConfig, WriteOptions

if TYPE_CHECKING:
    from confluent_kafka import KafkaError, Message, Producer
    from pyspark.taskcontext import TaskContext

log = logging.getLogger(__name__)

TRANSACTION_TIMEOUT = 60.0
AT_LEAST_ONCE_WARNING = (
    "The Kafka cluster at {bootstrap} has no transaction coordinator: the odradek sink writes "
    "at-least-once (idempotent producer; a retried task or a re-run micro-batch writes its rows "
    "again). Set deliveryGuarantee=at-least-once to silence this warning."
)
CONNECTION_KEYS = ("bootstrap.", "security.", "sasl.", "ssl.", "client.", "socket.", "broker.")
"""The keys of the producer's configuration that the marker's consumer shares."""
QUERY_ID_PROPERTY = "sql.streaming.queryId"
BATCH_ID_PROPERTY = "streaming.sql.batchId"
QUEUE_FULL_WAIT = 0.005
"""Seconds one wait for room in a full producer queue lasts: with error-only delivery reports no
event ends poll() early, so a long wait would leave the connection idle once the queue drained."""
QUEUE_FULL_TIMEOUT = 100.0
IDLE_PRODUCERS = 4
"""Idle at-least-once producers one Python worker keeps (one per distinct configuration)."""


class NoTransactionsError(RuntimeError):
    pass


def choose_guarantee(options: WriteOptions) -> str:
    """The asked-for guarantee, or exactly-once when the cluster can give it. Exactly-once asked
    of a cluster without transactions is refused with a clear error."""
    if options.delivery_guarantee == AT_LEAST_ONCE:
        return AT_LEAST_ONCE
    from .transactions import transactions_supported  # the broker client's modules: only imported when asked

    bootstrap = options.kafka_params["bootstrap.servers"]
    supported = transactions_supported(
        bootstrap, props={k: str(v) for k, v in options.kafka_params.items() if k.startswith(CONNECTION_KEYS)})
    if supported:
        return EXACTLY_ONCE
    if options.delivery_guarantee == EXACTLY_ONCE:
        raise NoTransactionsError(
            f"deliveryGuarantee=exactly-once needs Kafka transactions, and the cluster at {bootstrap} has no "
            "transaction coordinator (its brokers do not advertise the transactional APIs). "
            "Use deliveryGuarantee=at-least-once.")
    log.warning(AT_LEAST_ONCE_WARNING.format(bootstrap=bootstrap))
    return AT_LEAST_ONCE


@dataclasses.dataclass
class WriteResult(WriterCommitMessage):
    partition: int
    rows: int
    skipped: bool = False
    """exactly-once: the marker showed this task's rows were already committed"""


Header = dict[str, Any]
"""One element of the `headers` column as Arrow gives it: {"key": str, "value": bytes | None}."""


class _Rows:
    """Column access to one record batch, as Python values."""

    def __init__(self, batch: pa.RecordBatch, topic_option: str | None):
        names: list[str] = batch.schema.names
        n: int = batch.num_rows
        self.values: list[bytes | str | None] = batch.column(names.index("value")).to_pylist()
        self.keys: list[bytes | str | None] = (
            batch.column(names.index("key")).to_pylist() if "key" in names else [None] * n)
        self.topics: list[str | None] = (
            [topic_option] * n if topic_option is not None else batch.column(names.index("topic")).to_pylist())
        self.partitions: list[int | None] | None = (
            batch.column(names.index("partition")).to_pylist() if "partition" in names else None)
        self.headers: list[list[Header] | None] | None = (
            batch.column(names.index("headers")).to_pylist() if "headers" in names else None)
        self.n = n


def _produce(producer: Producer, topic: str, value: bytes | str | None, key: bytes | str | None,
             partition: int = -1, headers: list[tuple[str, str | bytes | None]] | None = None) -> None:
    """produce(), waiting in short steps (bounded) while the producer's queue is full."""
    deadline = time.monotonic() + QUEUE_FULL_TIMEOUT
    for _ in range(int(QUEUE_FULL_TIMEOUT / QUEUE_FULL_WAIT)):
        try:
            producer.produce(topic, value, key, partition=partition, headers=headers)
            return
        except BufferError:
            if time.monotonic() > deadline:
                break
            producer.poll(QUEUE_FULL_WAIT)
    raise BufferError(f"the producer's queue stayed full for {QUEUE_FULL_TIMEOUT:.0f} s")


def _produce_all(producer: Producer, batches: Iterable[pa.RecordBatch], topic_option: str | None) -> int:
    rows = 0
    produce = producer.produce
    for batch in batches:
        cols = _Rows(batch, topic_option)
        if cols.n == 0:
            continue
        if topic_option is None and None in cols.topics:
            raise ValueError("Null topic present in the data. Use the topic option for setting a default topic.")
        # no None left in the topics (checked above)
        topics = itertools.repeat(topic_option) if topic_option is not None else cast("list[str]", cols.topics)
        if cols.partitions is None and cols.headers is None:
            # the hot loop: one produce() per row, nothing else
            for topic, value, key in zip(topics, cols.values, cols.keys):
                try:
                    produce(topic, value, key)
                except BufferError:
                    _produce(producer, topic, value, key)
        else:
            for i, topic in zip(range(cols.n), topics):
                partition = cols.partitions[i] if cols.partitions is not None else None
                row_headers = cols.headers[i] if cols.headers is not None else None
                _produce(producer, topic, cols.values[i], cols.keys[i], -1 if partition is None else partition,
                         [(h["key"], h["value"]) for h in row_headers] if row_headers else None)
        producer.poll(0)  # delivery reports (errors only matter) once per record batch
        rows += cols.n
    return rows


class _Errors:
    """The delivery callback: counts failed records (librdkafka reports only those)."""

    def __init__(self) -> None:
        self.first: KafkaError | None = None
        self.count = 0

    def __call__(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            self.count += 1
            if self.first is None:
                self.first = err

    def check(self) -> None:
        if self.first is not None:
            raise RuntimeError(f"{self.count} records were not delivered; the first error: {self.first}")


@dataclasses.dataclass
class _Pooled:
    producer: Producer
    errors: _Errors


_idle: dict[tuple[tuple[str, str], ...], _Pooled] = {}
"""This Python worker's idle at-least-once producers, by configuration. A task takes one out and
puts it back only when all its records were acknowledged, so a producer in here has nothing in
flight and no failure behind it; two tasks never share one."""


def _config_key(conf: ClientConfig) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, repr(v)) for k, v in conf.items()))


def _take_producer(conf: ClientConfig) -> tuple[tuple[tuple[str, str], ...], _Pooled]:
    from confluent_kafka import Producer

    key = _config_key(conf)
    pooled = _idle.pop(key, None)
    if pooled is None:
        errors = _Errors()
        pooled = _Pooled(Producer({**conf, "on_delivery": errors}), errors)
    return key, pooled


def _give_back(key: tuple[tuple[str, str], ...], pooled: _Pooled) -> None:
    while len(_idle) >= IDLE_PRODUCERS:
        _idle.pop(next(iter(_idle)))  # the oldest: nothing in flight, dropping it closes it
    _idle[key] = pooled


def _discard(pooled: _Pooled) -> None:
    try:
        pooled.producer.purge()
    except Exception as e:  # the task's own error is the one to report
        log.warning("purging a failed task's producer: %s", e)


def write_at_least_once(options: WriteOptions, batches: Iterable[pa.RecordBatch], partition: int) -> WriteResult:
    key, pooled = _take_producer(options.producer_config())
    try:
        rows = _produce_all(pooled.producer, batches, options.topic)
        remaining = pooled.producer.flush(TRANSACTION_TIMEOUT * 5)
    except BaseException:
        _discard(pooled)  # the task fails and Spark retries it; nothing of it may linger
        raise
    pooled.errors.check()
    if remaining:
        _discard(pooled)
        raise TimeoutError(f"{remaining} records were not delivered in time")
    _give_back(key, pooled)
    return WriteResult(partition, rows)


def _committed_offsets(options: WriteOptions, group: str) -> list[int]:
    """Every offset the group has committed, on whatever partitions (KIP-447's stable offsets)."""
    from confluent_kafka import ConsumerGroupTopicPartitions
    from confluent_kafka.admin import AdminClient

    conf = {k: v for k, v in options.kafka_params.items() if k.startswith(CONNECTION_KEYS)}
    admin = AdminClient(conf)
    futures = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)], require_stable=True,
                                                request_timeout=TRANSACTION_TIMEOUT)
    result = futures[group].result(TRANSACTION_TIMEOUT)
    return [tp.offset for tp in result.topic_partitions or [] if tp.error is None]


def write_exactly_once(options: WriteOptions, batches: Iterable[pa.RecordBatch], query: str, batch_id: int,
                       partition: int) -> WriteResult:
    """One transaction for the task's rows and its marker; nothing when the marker says the
    batch is already written."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    rest = iter(batches)
    first = next((b for b in rest if b.num_rows > 0), None)
    if first is None:
        return WriteResult(partition, 0)
    marker_topic = options.topic or _Rows(first, None).topics[0]
    if marker_topic is None:
        raise ValueError("Null topic present in the data. Use the topic option for setting a default topic.")
    txn_id = progress.transactional_id(query, partition)
    errors = _Errors()
    conf = options.producer_config()
    conf.update({"transactional.id": txn_id, "enable.idempotence": True, "on_delivery": errors})
    producer = Producer(conf)
    # fences every earlier attempt of this task and completes or aborts its transaction, so the
    # marker read next is final
    producer.init_transactions(TRANSACTION_TIMEOUT)
    if progress.already_written(_committed_offsets(options, txn_id), batch_id):
        log.warning("%s: batch %d was written by an earlier attempt; writing nothing", txn_id, batch_id)
        return WriteResult(partition, 0, skipped=True)
    consumer_conf = {k: v for k, v in options.kafka_params.items() if k.startswith(CONNECTION_KEYS)}
    consumer_conf.update({"group.id": txn_id, "enable.auto.commit": False})
    consumer = Consumer(consumer_conf)  # only for its group metadata: it joins nothing
    try:
        producer.begin_transaction()
        try:
            rows = _produce_all(producer, itertools.chain((first,), rest), options.topic)
            producer.send_offsets_to_transaction(
                [TopicPartition(marker_topic, 0, progress.marker_offset(batch_id), metadata=f"{query} batch {batch_id}")],
                consumer.consumer_group_metadata(), TRANSACTION_TIMEOUT)
            producer.commit_transaction(TRANSACTION_TIMEOUT)
        except BaseException:
            try:
                producer.abort_transaction(TRANSACTION_TIMEOUT)
            except Exception as e:  # a fenced producer cannot abort; the coordinator already did
                log.warning("%s: abort failed: %s", txn_id, e)
            raise
        errors.check()
        return WriteResult(partition, rows)
    finally:
        consumer.close()


def _task() -> TaskContext:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None:
        raise RuntimeError("the odradek sink writes from Spark tasks only")
    return ctx


class BatchWriter(DataSourceArrowWriter):
    """`df.write.format("odradek").mode("append")`: a job's tasks share one job id, so a retried
    task finds its earlier attempt's marker."""

    def __init__(self, options: WriteOptions, guarantee: str) -> None:
        self.options = options
        self.guarantee = guarantee
        self.job = uuid.uuid4().hex

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteResult:
        ctx = _task()
        if self.guarantee == EXACTLY_ONCE:
            return write_exactly_once(self.options, iterator, self.job, 0, ctx.partitionId())
        return write_at_least_once(self.options, iterator, ctx.partitionId())

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        rows = sum(m.rows for m in messages if isinstance(m, WriteResult))
        log.info("odradek sink: job %s wrote %d rows (%s)", self.job, rows, self.guarantee)


class StreamWriter(DataSourceStreamArrowWriter):
    """`writeStream.format("odradek")`: the query id (kept in the checkpoint, the same after a
    restart) and the batch id come from the task's local properties, which Spark sets for every
    micro-batch."""

    def __init__(self, options: WriteOptions, guarantee: str) -> None:
        self.options = options
        self.guarantee = guarantee

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteResult:
        ctx = _task()
        if self.guarantee == EXACTLY_ONCE:
            query = ctx.getLocalProperty(QUERY_ID_PROPERTY)
            batch_id = ctx.getLocalProperty(BATCH_ID_PROPERTY)
            if query is None or batch_id is None:
                raise RuntimeError("exactly-once needs the streaming query id and batch id, which this Spark "
                                   f"does not give tasks ({QUERY_ID_PROPERTY}, {BATCH_ID_PROPERTY})")
            return write_exactly_once(self.options, iterator, query, int(batch_id), ctx.partitionId())
        return write_at_least_once(self.options, iterator, ctx.partitionId())

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        rows = sum(m.rows for m in messages if isinstance(m, WriteResult))
        log.info("odradek sink: batch %d wrote %d rows (%s)", batchId, rows, self.guarantee)

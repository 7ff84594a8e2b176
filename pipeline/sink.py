"""Writing DataFrames to topics: batch and streaming, at-least-once or exactly-once.

Rows follow Spark's Kafka sink schema (`value` required; `key`, `topic`, `partition`, `headers`
optional; the `topic` option wins over a topic column) and arrive as Arrow record batches.

at-least-once: an idempotent producer (no duplicates from the producer's own retries), but a
task Spark retries, or a micro-batch it re-runs after a restart, writes its rows again.

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
import logging
import uuid

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage

from . import progress
from .options import AT_LEAST_ONCE, EXACTLY_ONCE, WriteOptions

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


class _Rows:
    """Column access to one record batch, as Python values."""

    def __init__(self, batch: pa.RecordBatch, topic_option: str | None):
        names = batch.schema.names
        n = batch.num_rows
        self.values = batch.column(names.index("value")).to_pylist()
        self.keys = batch.column(names.index("key")).to_pylist() if "key" in names else [None] * n
        if topic_option is not None:
            self.topics = [topic_option] * n
        else:
            self.topics = batch.column(names.index("topic")).to_pylist()
        self.partitions = batch.column(names.index("partition")).to_pylist() if "partition" in names else None
        self.headers = batch.column(names.index("headers")).to_pylist() if "headers" in names else None
        self.n = n


def _produce(producer, topic, value, key, **kwargs) -> None:
    """produce(), waiting (bounded) while the producer's queue is full."""
    for _ in range(1000):
        try:
            producer.produce(topic, value, key, **kwargs)
            return
        except BufferError:
            producer.poll(0.1)
    raise BufferError("the producer's queue stayed full for 100 s")


def _produce_all(producer, batches, topic_option: str | None) -> int:
    rows = 0
    for batch in batches:
        cols = _Rows(batch, topic_option)
        if None in cols.topics:
            raise ValueError("Null topic present in the data. Use the topic option for setting a default topic.")
        if cols.partitions is None and cols.headers is None:
            for topic, value, key in zip(cols.topics, cols.values, cols.keys):
                try:
                    producer.produce(topic, value, key)
                except BufferError:
                    _produce(producer, topic, value, key)
        else:
            for i in range(cols.n):
                kwargs = {}
                if cols.partitions is not None and cols.partitions[i] is not None:
                    kwargs["partition"] = cols.partitions[i]
                if cols.headers is not None and cols.headers[i]:
                    kwargs["headers"] = [(h["key"], h["value"]) for h in cols.headers[i]]
                _produce(producer, cols.topics[i], cols.values[i], cols.keys[i], **kwargs)
        producer.poll(0)  # delivery reports (errors only matter) once per record batch
        rows += cols.n
    return rows


class _Errors:
    def __init__(self):
        self.first = None
        self.count = 0

    def __call__(self, err, msg):
        if err is not None:
            self.count += 1
            if self.first is None:
                self.first = err

    def check(self) -> None:
        if self.first is not None:
            raise RuntimeError(f"{self.count} records were not delivered; the first error: {self.first}")


def write_at_least_once(options: WriteOptions, batches, partition: int) -> WriteResult:
    from confluent_kafka import Producer

    errors = _Errors()
    conf = options.producer_config()
    conf["on_delivery"] = errors
    producer = Producer(conf)
    rows = _produce_all(producer, batches, options.topic)
    remaining = producer.flush(TRANSACTION_TIMEOUT * 5)
    errors.check()
    if remaining:
        raise TimeoutError(f"{remaining} records were not delivered in time")
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


def write_exactly_once(options: WriteOptions, batches, query: str, batch_id: int, partition: int) -> WriteResult:
    """One transaction for the task's rows and its marker; nothing when the marker says the
    batch is already written."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    batches = iter(batches)
    first = next((b for b in batches if b.num_rows > 0), None)
    if first is None:
        return WriteResult(partition, 0)
    marker_topic = options.topic or _Rows(first, None).topics[0]
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
            rows = _produce_all(producer, _chain(first, batches), options.topic)
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


def _chain(first, rest):
    yield first
    yield from rest


def _task():
    from pyspark import TaskContext

    return TaskContext.get()


class BatchWriter(DataSourceArrowWriter):
    """`df.write.format("odradek").mode("append")`: a job's tasks share one job id, so a retried
    task finds its earlier attempt's marker."""

    def __init__(self, options: WriteOptions, guarantee: str):
        self.options = options
        self.guarantee = guarantee
        self.job = uuid.uuid4().hex

    def write(self, iterator):
        ctx = _task()
        if self.guarantee == EXACTLY_ONCE:
            return write_exactly_once(self.options, iterator, self.job, 0, ctx.partitionId())
        return write_at_least_once(self.options, iterator, ctx.partitionId())

    def commit(self, messages):
        rows = sum(m.rows for m in messages if m is not None)
        log.info("odradek sink: job %s wrote %d rows (%s)", self.job, rows, self.guarantee)


class StreamWriter(DataSourceStreamArrowWriter):
    """`writeStream.format("odradek")`: the query id (kept in the checkpoint, the same after a
    restart) and the batch id come from the task's local properties, which Spark sets for every
    micro-batch."""

    def __init__(self, options: WriteOptions, guarantee: str):
        self.options = options
        self.guarantee = guarantee

    def write(self, iterator):
        ctx = _task()
        if self.guarantee == EXACTLY_ONCE:
            query = ctx.getLocalProperty(QUERY_ID_PROPERTY)
            batch_id = ctx.getLocalProperty(BATCH_ID_PROPERTY)
            if query is None or batch_id is None:
                raise RuntimeError("exactly-once needs the streaming query id and batch id, which this Spark "
                                   f"does not give tasks ({QUERY_ID_PROPERTY}, {BATCH_ID_PROPERTY})")
            return write_exactly_once(self.options, iterator, query, int(batch_id), ctx.partitionId())
        return write_at_least_once(self.options, iterator, ctx.partitionId())

    def commit(self, messages, batchId):
        rows = sum(m.rows for m in messages if m is not None)
        log.info("odradek sink: batch %d wrote %d rows (%s)", batchId, rows, self.guarantee)

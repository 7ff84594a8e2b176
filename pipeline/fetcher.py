"""An executor reads one planned offset range with a confluent-kafka consumer and yields Arrow
record batches (Spark's KafkaDataConsumer and KafkaRecordToRowConverter).

The consumer is assigned the partition at the range's first offset, never joins a group and
commits nothing. Gaps inside a range are normal (compacted records, transaction markers, aborted
records under read_committed); a first offset below the log start, or an end that never becomes
readable, is data loss, reported as Spark does (failOnDataLoss).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, KafkaException, Message
from confluent_kafka import TopicPartition as KTopicPartition

from .offsets import INSTRUCTION_FAIL_ON_DATA_LOSS_FALSE, INSTRUCTION_FAIL_ON_DATA_LOSS_TRUE, DataLossError, OffsetRange
from .options import ClientConfig, ReadOptions
from .schema import arrow_schema

log = logging.getLogger(__name__)
AUTHORIZATION_ERRORS = frozenset({KafkaError.TOPIC_AUTHORIZATION_FAILED})
"""Fetch errors no retry can cure: the read fails at once, as Kafka's consumer fails a Spark task.
(Not GROUP_AUTHORIZATION_FAILED: librdkafka reports it for the reader's group even though an
assigned, never-committing reader does not need the group.)"""

MAX_BATCH_ROWS = 10_000
POLL_SECONDS = 1.0
MAX_OFFSET_RESETS = 10
"""Bounds how often one range may jump over lost records (failOnDataLoss=false)."""


class _RangeConsumer:
    """The consumer reading one range. A consumer made while the partition's leader had just died
    keeps that leader in its metadata and asks it until the periodic refresh (minutes): a question
    that times out is asked again by a fresh consumer, which bootstraps from whoever answers."""

    def __init__(self, config: ClientConfig, tp: KTopicPartition, attempts: int = 5):
        self.config = config
        self.tp = tp
        self.attempts = attempts
        self.consumer = Consumer(config)

    def watermarks(self) -> tuple[int, int]:
        """(log start, high watermark) from the partition's leader. May replace the consumer:
        the caller assigns the partition afterwards."""
        for attempt in range(self.attempts):
            try:
                return self.consumer.get_watermark_offsets(self.tp, timeout=10, cached=False)
            except KafkaException as e:
                if attempt == self.attempts - 1:
                    raise
                log.warning("watermarks of %s-%d: %s; asking again with a fresh consumer",
                            self.tp.topic, self.tp.partition, e)
                time.sleep(0.5 * (attempt + 1))
                stale, self.consumer = self.consumer, Consumer(self.config)
                stale.close()
        raise AssertionError("unreachable")

    def close(self) -> None:
        self.consumer.close()


def report_data_loss(fail: bool, message: str) -> None:
    if fail:
        raise DataLossError(f"{message}. {INSTRUCTION_FAIL_ON_DATA_LOSS_TRUE}")
    log.warning("%s. %s", message, INSTRUCTION_FAIL_ON_DATA_LOSS_FALSE)


def _to_batch(messages: list[Message], r: OffsetRange, schema: pa.Schema, include_headers: bool) -> pa.RecordBatch:
    keys, values, offsets, timestamps, types = [], [], [], [], []
    headers: list[list[dict[str, str | bytes | None]]] = []
    for m in messages:
        keys.append(m.key())
        values.append(m.value())
        offsets.append(m.offset())
        ts_type, ts = m.timestamp()
        # confluent-kafka: 1 create time, 2 log append time, 0 none; Kafka's (and Spark's) ids: 0, 1, -1
        types.append(ts_type - 1)
        timestamps.append(ts * 1000 if ts_type else None)
        if include_headers:
            h = m.headers()
            pairs = [] if h is None else h.items() if isinstance(h, dict) else h
            headers.append([{"key": k, "value": v} for k, v in pairs])
    n = len(messages)
    columns = [
        pa.array(keys, pa.binary()),
        pa.array(values, pa.binary()),
        pa.repeat(pa.scalar(r.topic, pa.string()), n),
        pa.repeat(pa.scalar(r.partition, pa.int32()), n),
        pa.array(offsets, pa.int64()),
        pa.array(timestamps, pa.int64()).cast(schema.field("timestamp").type),
        pa.array(types, pa.int32()),
    ]
    if include_headers:
        columns.append(pa.array(headers, schema.field("headers").type))
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def read_range(options: ReadOptions, r: OffsetRange) -> Iterator[pa.RecordBatch]:
    """The records of `r` in offset order, as record batches of up to MAX_BATCH_ROWS rows."""
    if r.size <= 0:
        return
    schema = arrow_schema(options.include_headers)
    fail = options.fail_on_data_loss
    reader = _RangeConsumer(options.consumer_config(), KTopicPartition(r.topic, r.partition))
    try:
        low, high = reader.watermarks()
        start = r.from_offset
        if start < low:
            report_data_loss(fail, f"Cannot fetch offset {start} of {r.topic}-{r.partition}: the log starts at {low}")
            start = low
        if start >= r.until_offset:
            return
        reader.consumer.assign([KTopicPartition(r.topic, r.partition, start)])
        next_offset = start
        resets = 0
        idle_since = time.monotonic()
        while next_offset < r.until_offset:
            messages = reader.consumer.consume(num_messages=min(MAX_BATCH_ROWS, r.until_offset - next_offset),
                                        timeout=POLL_SECONDS)
            out = []
            done = False
            for m in messages:
                err = m.error()
                if err is None:
                    off = m.offset()
                    if off is None or off >= r.until_offset:
                        done = True
                        break
                    out.append(m)
                    next_offset = off + 1
                elif err.code() == KafkaError._PARTITION_EOF:
                    # m.offset() is the end a consumer may read (high watermark or last stable offset)
                    eof = m.offset()
                    if eof is not None and eof >= r.until_offset:
                        done = True
                        break
                elif err.code() in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
                    low, high = reader.watermarks()
                    resets += 1
                    if next_offset < low:
                        report_data_loss(fail, f"Cannot fetch offset {next_offset} of {r.topic}-{r.partition}: "
                                               f"the log starts at {low}")
                        next_offset = low
                    elif next_offset > high:
                        report_data_loss(fail, f"Cannot fetch offset {next_offset} of {r.topic}-{r.partition}: "
                                               f"the log ends at {high}")
                        done = True
                        break
                    if resets > MAX_OFFSET_RESETS:
                        raise DataLossError(f"{r.topic}-{r.partition}: offset {next_offset} out of range "
                                            f"{resets} times (log {low}..{high})")
                    reader.consumer.assign([KTopicPartition(r.topic, r.partition, next_offset)])
                    break
                elif err.code() in AUTHORIZATION_ERRORS or (not err.retriable() and err.fatal()):
                    # Kafka's consumer throws TopicAuthorizationException from poll: the task fails
                    raise RuntimeError(f"reading {r.topic}-{r.partition}: {err}")
            if out:
                idle_since = time.monotonic()
                yield _to_batch(out, r, schema, options.include_headers)
            if done:
                break
            if time.monotonic() - idle_since > options.poll_timeout_ms / 1000:
                low, high = reader.watermarks()
                if high < r.until_offset:
                    report_data_loss(fail, f"Cannot fetch offsets {next_offset}..{r.until_offset} of "
                                           f"{r.topic}-{r.partition}: the log ends at {high}")
                    break
                raise TimeoutError(f"Cannot fetch record for offset {next_offset} of {r.topic}-{r.partition} "
                                   f"in {options.poll_timeout_ms} milliseconds")
    finally:
        reader.close()

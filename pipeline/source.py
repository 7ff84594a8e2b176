"""Reading topics as DataFrames: the batch reader and the partitioned stream reader.

Both plan on the driver (which partitions, which offsets; OffsetReader) and read on executors
(read_range), one Spark task per offset range. The stream reader keeps its position in Spark's
checkpoint as `{"topic": {"partition": next offset}}`; everything it needs to redo a batch after a
crash is in those offsets, so a batch replayed from the checkpoint reads the same records.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from .admin import OffsetReader
from .fetcher import read_range, report_data_loss
from .offsets import (
    LATEST,
    JsonOffsets,
    OffsetRange,
    PartitionOffsets,
    from_json_dict,
    rate_limit,
    split_ranges,
    stream_ranges,
    to_json_dict,
)
from .options import ReadOptions

if TYPE_CHECKING:
    from confluent_kafka import Consumer

log = logging.getLogger(__name__)


class RangePartition(InputPartition):
    """One Spark task: an offset range of one Kafka partition."""

    def __init__(self, r: OffsetRange) -> None:
        super().__init__(r)
        self.range = r


def _read(options: ReadOptions, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    if not isinstance(partition, RangePartition):  # Spark plans one empty partition when a batch read has no ranges
        return iter(())
    return read_range(options, partition.range)


def _warn(options: ReadOptions) -> None:
    for w in options.warnings:
        log.warning("%s", w)


class BatchReader(DataSourceReader):
    """`spark.read.format("odradek")`: the offsets are resolved when the query is planned, so
    every task reads a fixed range (Spark's KafkaBatch)."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options

    def partitions(self) -> list[RangePartition]:
        _warn(self.options)
        reader = OffsetReader(self.options)
        tps = reader.partitions()
        start = reader.resolve(self.options.starting, tps)
        end = reader.resolve(self.options.ending, tps)
        if set(start) != set(end):
            raise ValueError(f"different topic partitions for starting offsets {sorted(start)} "
                             f"and ending offsets {sorted(end)}")
        ranges = []
        for tp in sorted(end):
            begin, until = start[tp], end[tp]
            if begin > until:
                raise ValueError(
                    f"Beginning offset {begin} is after the ending offset {until} for topic {tp[0]} partition {tp[1]}. "
                    "You either provided an invalid fromOffset, or the Kafka topic has been damaged")
            ranges.append(OffsetRange(tp[0], tp[1], begin, until))
        return [RangePartition(r) for r in split_ranges(ranges, self.options.min_partitions)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.options, partition)


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """`spark.readStream.format("odradek")` (Spark's KafkaMicroBatchStream).

    `latestOffset(start, limit)` is Spark 4.2's admission control: ReadMaxRows comes from
    maxOffsetsPerTrigger and spreads over the partitions as Spark does; ReadAllAvailable (what
    Spark asks for under availableNow) reads everything. A PySpark without admission control
    calls `latestOffset()` with nothing, and the reader applies maxOffsetsPerTrigger itself from
    the end it handed out last.
    """

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self.offsets = OffsetReader(options)
        self.latest_seen: PartitionOffsets = {}
        self.available_now_end: PartitionOffsets | None = None
        self.available_now = False
        self.last_end: JsonOffsets | None = None
        self._group_consumer: Consumer | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_group_consumer"] = None
        return state

    # --- offsets ---------------------------------------------------------------------------------

    def initialOffset(self) -> JsonOffsets:
        """startingOffsets: earliest, specific offsets and timestamps are resolved now; latest
        stays -1 so that a crash before the first batch commits cannot move the start (the
        first batch turns it into that batch's end and reads nothing)."""
        _warn(self.options)
        tps = self.offsets.partitions()
        start = self.offsets.resolve(self.options.starting, tps, keep_latest=True)
        return to_json_dict(start)

    def getDefaultReadLimit(self) -> ReadLimit:
        m = self.options.max_offsets_per_trigger
        return ReadMaxRows(m) if m is not None else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self.available_now = True

    def _latest(self, start: PartitionOffsets) -> PartitionOffsets:
        tps = self.offsets.partitions()
        known = {tp: o for tp, o in start.items() if o >= 0}
        for tp, o in self.latest_seen.items():
            known[tp] = max(known.get(tp, o), o)
        return self.offsets.latest_checked(tps, known)

    def latestOffset(self, start: JsonOffsets | None = None, limit: ReadLimit | None = None) -> JsonOffsets:
        if start is None:  # a PySpark without admission control
            start = self.last_end if self.last_end is not None else self.initialOffset()
            limit = self.getDefaultReadLimit()
        begin = from_json_dict(start)
        if self.available_now:
            if self.available_now_end is None:
                self.available_now_end = self._latest(begin)
            latest = dict(self.available_now_end)
        else:
            latest = self._latest(begin)
        self.latest_seen = dict(latest)
        # a start of -1 (startingOffsets=latest) is pinned to the latest offset by this batch
        begin = {tp: (latest.get(tp, o) if o == LATEST else o) for tp, o in begin.items()}
        if isinstance(limit, ReadMaxRows):  # under availableNow too, as Spark's Kafka source
            new = [tp for tp in latest if tp not in begin]
            end = rate_limit(limit.max_rows, begin, latest, self.offsets.earliest(new) if new else {})
        else:
            end = latest
        # partitions that vanished keep their start; partitions() reports them
        for tp, o in begin.items():
            end.setdefault(tp, o)
        result = to_json_dict(end)
        self.last_end = result
        return result

    def reportLatestOffset(self) -> JsonOffsets | None:
        return to_json_dict(self.latest_seen) if self.latest_seen else None

    def partitions(self, start: JsonOffsets, end: JsonOffsets) -> list[RangePartition]:
        begin, until = from_json_dict(start), from_json_dict(end)
        if begin == until:
            return []
        tps_now = set(self.offsets.partitions())
        gone = [tp for tp in begin if tp not in tps_now]
        until = {tp: o for tp, o in until.items() if tp not in gone}
        new = [tp for tp in until if tp not in begin]
        earliest_of_new = self.offsets.earliest(new) if new else {}

        def loss(message: str) -> None:
            report_data_loss(self.options.fail_on_data_loss, message)

        ranges = stream_ranges(begin, until, earliest_of_new, loss)
        return [RangePartition(r) for r in split_ranges(ranges, self.options.min_partitions)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.options, partition)

    def commit(self, end: JsonOffsets) -> None:
        """Spark calls this once a batch is done; with commitOffsetsToGroup the batch's end goes
        to that consumer group, so lag tools (kafka-consumer-groups, Burrow, ...) see the query."""
        group = self.options.commit_offsets_to_group
        if group is None:
            return
        from confluent_kafka import Consumer
        from confluent_kafka import TopicPartition as KTopicPartition

        if self._group_consumer is None:
            conf = self.options.client_config()
            conf.update({"group.id": group, "enable.auto.commit": False})
            self._group_consumer = Consumer(conf)
        offsets = [KTopicPartition(t, p, o) for (t, p), o in from_json_dict(end).items() if o >= 0]
        if offsets:
            self._group_consumer.commit(offsets=offsets, asynchronous=False)

    def stop(self) -> None:
        if self._group_consumer is not None:
            self._group_consumer.close()
            self._group_consumer = None
        self.offsets.close()

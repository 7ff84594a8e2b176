"""Offsets as Spark's Kafka source sees them: pure functions over plain data.

A partition's offset here is the next offset to read (Kafka's consumer position), so a range
[from, until) holds `until - from` offsets at most. In option JSON and in Spark's checkpoint the
offsets of a query are `{"topic": {"0": 23, "1": -2}}`: partition numbers are strings (JSON
object keys), -2 means earliest and -1 latest, as in Spark's Kafka source.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

EARLIEST = -2
LATEST = -1

TopicPartition = tuple[str, int]
PartitionOffsets = dict[TopicPartition, int]
JsonOffsets = dict[str, dict[str, int]]
"""Offsets in the checkpoint's form: {topic: {"partition": offset}}."""


class DataLossError(RuntimeError):
    """Records a query was asked to read are gone (failOnDataLoss=true), as Spark's
    IllegalStateException says it."""


INSTRUCTION_FAIL_ON_DATA_LOSS_TRUE = (
    "Some data may have been lost because they are not available in Kafka any more; either the "
    "data was aged out by Kafka or the topic may have been deleted before all the data in the "
    "topic was processed. If you don't want your streaming query to fail on such cases, set the "
    'source option "failOnDataLoss" to "false".'
)
INSTRUCTION_FAIL_ON_DATA_LOSS_FALSE = (
    "Some data may have been lost because they are not available in Kafka any more; either the "
    "data was aged out by Kafka or the topic may have been deleted before all the data in the "
    "topic was processed. If you want your streaming query to fail on such cases, set the source "
    'option "failOnDataLoss" to "true".'
)


@dataclass(frozen=True)
class OffsetRange:
    """Offsets [from_offset, until_offset) of one Kafka partition: one Spark input partition."""

    topic: str
    partition: int
    from_offset: int
    until_offset: int

    @property
    def size(self) -> int:
        return self.until_offset - self.from_offset


# --- JSON -------------------------------------------------------------------------------------------


def parse_partition_offsets(text: str, what: str = "offsets") -> PartitionOffsets:
    """`{"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}` → {(topic, partition): offset}."""
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise ValueError(f'Expected e.g. {{"topicA":{{"0":23,"1":-1}},"topicB":{{"0":-2}}}}, got {text}') from e
    if not isinstance(doc, dict):
        raise ValueError(f'Expected e.g. {{"topicA":{{"0":23,"1":-1}},"topicB":{{"0":-2}}}}, got {text}')
    out: PartitionOffsets = {}
    for topic, partitions in doc.items():
        if not isinstance(partitions, dict):
            raise ValueError(f"{what}: partitions of topic {topic!r} must be a JSON object, got {partitions!r}")
        for p, offset in partitions.items():
            try:
                partition = int(p)
            except ValueError as e:
                raise ValueError(f"{what}: partition {p!r} of topic {topic!r} is not a number") from e
            if isinstance(offset, bool) or not isinstance(offset, int):
                raise ValueError(f"{what}: offset of {topic}-{partition} must be an integer, got {offset!r}")
            out[(topic, partition)] = offset
    return out


def parse_assign(text: str) -> list[TopicPartition]:
    """`{"topicA":[0,1],"topicB":[2,4]}` → [(topic, partition), ...]."""
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise ValueError(f'Expected e.g. {{"topicA":[0,1],"topicB":[0,1]}}, got {text}') from e
    if not isinstance(doc, dict) or not all(isinstance(v, list) for v in doc.values()):
        raise ValueError(f'Expected e.g. {{"topicA":[0,1],"topicB":[0,1]}}, got {text}')
    out = []
    for topic, partitions in doc.items():
        for p in partitions:
            if isinstance(p, bool) or not isinstance(p, int):
                raise ValueError(f"assign: partition {p!r} of topic {topic!r} is not an integer")
            out.append((topic, p))
    return out


def to_json_dict(offsets: PartitionOffsets) -> JsonOffsets:
    """The checkpoint form: {topic: {"partition": offset}} with sorted keys (a stable JSON)."""
    out: JsonOffsets = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = int(offset)
    return out


def from_json_dict(doc: Mapping[str, Mapping[str, int]]) -> PartitionOffsets:
    return {(topic, int(p)): int(o) for topic, parts in doc.items() for p, o in parts.items()}


# --- planning ranges --------------------------------------------------------------------------------


def _part_count(size: int, total: int, min_parts: int) -> int:
    # Java's Math.round: half up
    return max(math.floor(size / total * min_parts + 0.5), 1)


def split_ranges(ranges: list[OffsetRange], min_partitions: int | None) -> list[OffsetRange]:
    """Spark's KafkaOffsetRangeCalculator: drop empty ranges; when fewer ranges than
    `min_partitions` remain, split the large ones in proportion to their size so the number of
    Spark tasks comes close to `min_partitions`."""
    ranges = [r for r in ranges if r.size > 0]
    if min_partitions is None or len(ranges) >= min_partitions:
        return ranges
    total = sum(r.size for r in ranges)
    unsplit = {(r.topic, r.partition) for r in ranges if _part_count(r.size, total, min_partitions) == 1}
    unsplit_total = sum(r.size for r in ranges if (r.topic, r.partition) in unsplit)
    split_total = total - unsplit_total
    split_min = max(min_partitions - len(unsplit), 1)
    out = []
    for r in ranges:
        parts = 1 if (r.topic, r.partition) in unsplit else _part_count(r.size, split_total, split_min)
        remaining, start = r.size, r.from_offset
        for part in range(parts):
            this = remaining // (parts - part)
            remaining -= this
            end = min(start + this, r.until_offset)
            out.append(OffsetRange(r.topic, r.partition, start, end))
            start = end
    return [r for r in out if r.size > 0]


def rate_limit(limit: int, start: PartitionOffsets, latest: PartitionOffsets,
               earliest_of_new: PartitionOffsets) -> PartitionOffsets:
    """Spark's rateLimit: spread `limit` offsets over the partitions in proportion to how far
    each is behind `latest`; a small partition gets at least one offset. Partitions missing from
    `start` (new ones) begin at `earliest_of_new`."""
    begins = {tp: start[tp] if tp in start else earliest_of_new[tp]
              for tp in latest if tp in start or tp in earliest_of_new}
    sizes = {tp: latest[tp] - b for tp, b in begins.items() if latest[tp] - b > 0}
    total = sum(sizes.values())
    if total < 1:
        return dict(latest)
    out: PartitionOffsets = {}
    for tp, end in latest.items():
        if tp not in sizes:
            out[tp] = end
            continue
        begin = begins[tp]
        prorate = limit * (sizes[tp] / total)
        step = math.ceil(prorate) if prorate < 1 else math.floor(prorate)
        out[tp] = min(end, begin + step)
    return out


def incorrect_latest(known: PartitionOffsets, latest: PartitionOffsets) -> list[tuple[TopicPartition, int, int]]:
    """Partitions whose listed latest offset is below one already seen (a lagging broker's
    answer): (partition, known, listed). Spark lists again when there are any."""
    return [(tp, known[tp], off) for tp, off in sorted(latest.items()) if tp in known and known[tp] > off]


def stream_ranges(start: PartitionOffsets, end: PartitionOffsets, earliest_of_new: PartitionOffsets,
                  report_data_loss: Callable[[str], None]) -> list[OffsetRange]:
    """The ranges of one micro-batch, Spark's getOffsetRangesFromResolvedOffsets.

    A start of LATEST (a query started at "latest" whose first batch pins its start) reads
    nothing: the batch's end is where the query begins. New partitions start at their earliest
    offset; anything that cannot be read as planned goes to `report_data_loss(message)`.
    """
    new = set(end) - set(start)
    missing_new = sorted(new - set(earliest_of_new))
    if missing_new:
        report_data_loss(f"Cannot find earliest offsets of {_names(missing_new)}. Some data may have been missed")
    for tp, offset in sorted(earliest_of_new.items()):
        if tp in new and offset != 0:
            report_data_loss(f"Added partition {_name(tp)} starts from {offset} instead of 0. "
                             "Some data may have been missed")
    deleted = sorted(set(start) - set(end))
    if deleted:
        report_data_loss(f"{_names(deleted)} are gone. Some data may have been missed.")
    ranges = []
    for tp in sorted(end):
        if tp in start:
            begin = start[tp]
        elif tp in earliest_of_new:
            begin = earliest_of_new[tp]
        else:
            continue
        until = end[tp]
        if begin == LATEST:
            begin = until
        if until < begin:
            report_data_loss(f"Partition {_name(tp)}'s offset was changed from {begin} to {until}, "
                             "some data may have been missed")
        ranges.append(OffsetRange(tp[0], tp[1], begin, until))
    return ranges


def offsets_behind_latest(consumed: PartitionOffsets, latest: PartitionOffsets) -> dict[str, str]:
    """Spark's Kafka source metrics: min/max/avg of (latest - consumed) over the partitions."""
    behind = [latest[tp] - consumed[tp] for tp in latest if tp in consumed]
    if not behind:
        return {}
    return {
        "minOffsetsBehindLatest": str(min(behind)),
        "maxOffsetsBehindLatest": str(max(behind)),
        "avgOffsetsBehindLatest": str(float(sum(behind)) / len(behind)),
    }


def _name(tp: TopicPartition) -> str:
    return f"{tp[0]}-{tp[1]}"


def _names(tps: Iterable[TopicPartition]) -> str:
    return "Set(" + ", ".join(_name(tp) for tp in tps) + ")"

"""The exactly-once sink's progress marker, as pure functions over plain data.

A write task is known by (query, task partition): its transactional id and the consumer group that
holds its marker are both named after that pair, so every attempt of the task, and the same task
of every later micro-batch, uses the same ones. The marker is an offset committed in the task's
transaction (TxnOffsetCommit): `batch id + 1`, Kafka's "next offset to read" convention, so that a
group with nothing committed (-1001) means no batch written yet. It can sit on any partition of any
existing topic (Kafka checks that the partition exists); the reader takes the highest offset the
group has, wherever it is.
"""

from __future__ import annotations

from collections.abc import Iterable

PREFIX = "spark-odradek"


def transactional_id(query: str, task_partition: int) -> str:
    """Also the marker's group id."""
    return f"{PREFIX}-{query}-{task_partition}"


def marker_offset(batch_id: int) -> int:
    """The offset committed with batch `batch_id`'s rows."""
    if batch_id < 0:
        raise ValueError(f"batch id {batch_id} is negative")
    return batch_id + 1


def last_written_batch(committed: Iterable[int]) -> int | None:
    """The newest batch the group's offsets say was written, or None. Negative offsets are
    Kafka's "none committed" (-1001) and count for nothing."""
    newest = max((o for o in committed if o > 0), default=None)
    return None if newest is None else newest - 1


def already_written(committed: Iterable[int], batch_id: int) -> bool:
    """Was this batch (or a later one: batches run in order) committed by this task before? Then a
    re-run must write nothing."""
    last = last_written_batch(committed)
    return last is not None and last >= batch_id

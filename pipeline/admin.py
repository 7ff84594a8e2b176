"""The driver's view of the cluster (Spark's KafkaOffsetReaderAdmin): which partitions a query
reads and their earliest, latest or by-timestamp offsets, through confluent-kafka's AdminClient.

Latest offsets are the high watermark, or the last stable offset under read_committed, so a
batch never plans past what a read_committed consumer may see.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any, TypeVar, cast

from confluent_kafka import IsolationLevel, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KTopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from .offsets import EARLIEST, LATEST, PartitionOffsets, TopicPartition, incorrect_latest
from .options import OffsetLimit, ReadOptions

log = logging.getLogger(__name__)

INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
REQUEST_TIMEOUT = 30.0
T = TypeVar("T")

# confluent-kafka leaves these two class methods unannotated
_earliest_spec = cast("Callable[[], OffsetSpec]", OffsetSpec.earliest)
_latest_spec = cast("Callable[[], OffsetSpec]", OffsetSpec.latest)


class OffsetReader:
    """Opened lazily and dropped when pickled: Spark ships readers to other processes."""

    def __init__(self, options: ReadOptions):
        self.options = options
        self._admin: AdminClient | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options, "_admin": None}

    @property
    def admin(self) -> AdminClient:
        if self._admin is None:
            self._admin = AdminClient(self.options.client_config())
        return self._admin

    def close(self) -> None:
        self._admin = None

    def _retrying(self, what: str, body: Callable[[], T]) -> T:
        """Spark's withRetries: fetchOffset.numRetries attempts, fetchOffset.retryIntervalMs apart."""
        attempts = self.options.fetch_offset_retries
        for attempt in range(1, attempts + 1):
            try:
                return body()
            except KafkaException as e:
                if attempt == attempts:
                    raise
                log.warning("attempt %d of %d to %s failed: %s", attempt, attempts, what, e)
                time.sleep(self.options.fetch_offset_retry_interval_ms / 1000)
                self._admin = None
        raise AssertionError("unreachable")

    # --- which partitions ------------------------------------------------------------------------

    def partitions(self) -> list[TopicPartition]:
        """Spark's ConsumerStrategy.assignedTopicPartitions: assigned ones as given; subscribed
        topics' partitions (topics that do not exist yet have none); pattern-matched topics."""
        o = self.options
        if o.strategy == "assign":
            return sorted(set(o.assigned))

        def body() -> list[TopicPartition]:
            md = self.admin.list_topics(timeout=REQUEST_TIMEOUT)
            out: list[TopicPartition] = []
            for name, t in md.topics.items():
                if o.strategy == "subscribe" and name not in o.topics:
                    continue
                if o.strategy == "subscribepattern" and (name in INTERNAL_TOPICS or not o.matches(name)):
                    continue
                if t.error is not None:
                    if o.strategy == "subscribe" and t.error.code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                        # a named topic the broker cannot describe now (no leader yet, not
                        # authorized): asked again, then failed, never read as "no partitions"
                        raise KafkaException(t.error)
                    continue
                out.extend((name, p) for p in t.partitions)
            return sorted(out)

        return self._retrying("list topics", body)

    # --- offsets ---------------------------------------------------------------------------------

    def _list(self, specs: dict[TopicPartition, OffsetSpec]) -> dict[TopicPartition, int]:
        if not specs:
            return {}
        isolation = IsolationLevel.READ_COMMITTED if self.options.read_committed else IsolationLevel.READ_UNCOMMITTED

        def body() -> dict[TopicPartition, int]:
            futures = self.admin.list_offsets(
                {KTopicPartition(t, p): spec for (t, p), spec in specs.items()},
                isolation_level=isolation, request_timeout=REQUEST_TIMEOUT,
            )
            return {(tp.topic, tp.partition): f.result(timeout=REQUEST_TIMEOUT + 5).offset for tp, f in futures.items()}

        return self._retrying("list offsets", body)

    def earliest(self, tps: Iterable[TopicPartition]) -> PartitionOffsets:
        return self._list(dict.fromkeys(tps, _earliest_spec()))

    def latest(self, tps: Iterable[TopicPartition]) -> PartitionOffsets:
        return self._list(dict.fromkeys(tps, _latest_spec()))

    def latest_checked(self, tps: Iterable[TopicPartition], known: PartitionOffsets) -> PartitionOffsets:
        """Latest offsets, listed again (a bounded number of times) while a partition's answer is
        below an offset already seen: a broker that has not yet learned the high watermark must
        not make records look lost."""
        latest = self.latest(tps)
        for attempt in range(1, self.options.fetch_offset_retries):
            wrong = incorrect_latest(known, latest)
            if not wrong:
                break
            log.warning("found incorrect offsets in some partitions (partition, previous offset, fetched offset): "
                        "%s; listing them again (attempt %d)", wrong, attempt)
            time.sleep(self.options.fetch_offset_retry_interval_ms / 1000)
            latest = self.latest(tps)
        return latest

    def by_timestamp(self, timestamps: dict[TopicPartition, int], no_match_latest: bool) -> PartitionOffsets:
        """The first offset whose timestamp is at or after each partition's timestamp. No such
        offset: latest if `no_match_latest`, else Spark's error."""
        found = self._list({tp: OffsetSpec.for_timestamp(ts) for tp, ts in timestamps.items()})
        out = {}
        for tp, off in found.items():
            if off < 0:
                if not no_match_latest:
                    raise ValueError(f"No offset matched from request of topic-partition {tp[0]}-{tp[1]} "
                                     f"and timestamp {timestamps[tp]}.")
                off = LATEST
            out[tp] = off
        return out

    def resolve(self, limit: OffsetLimit, tps: list[TopicPartition], keep_latest: bool = False) -> PartitionOffsets:
        """Concrete offsets for `limit` over the partitions `tps`. Specific offsets and
        per-partition timestamps must name exactly those partitions (Spark's check).
        `keep_latest` leaves LATEST (-1) unresolved: a stream's first batch pins it."""
        if limit.kind == "earliest":
            offsets = dict.fromkeys(tps, EARLIEST)
        elif limit.kind == "latest":
            offsets = dict.fromkeys(tps, LATEST)
        elif limit.kind == "offsets":
            if set(limit.offsets) != set(tps):
                raise ValueError(
                    "If startingOffsets contains specific offsets, you must specify all TopicPartitions.\n"
                    "Use -1 for latest, -2 for earliest, if you don't care.\n"
                    f"Specified: {sorted(limit.offsets)} Assigned: {sorted(tps)}")
            offsets = dict(limit.offsets)
        elif limit.kind == "timestamps":
            if set(limit.offsets) != set(tps):
                raise ValueError(f"Specified timestamps of partitions {sorted(limit.offsets)} "
                                 f"do not match the assigned partitions {sorted(tps)}")
            offsets = self.by_timestamp(limit.offsets, limit.no_match_latest)
        else:
            assert limit.timestamp is not None
            offsets = self.by_timestamp(dict.fromkeys(tps, limit.timestamp), limit.no_match_latest)
        earliest = self.earliest([tp for tp, o in offsets.items() if o == EARLIEST])
        latest = {} if keep_latest else self.latest([tp for tp, o in offsets.items() if o == LATEST])
        return {tp: earliest.get(tp, latest.get(tp, o)) if o in (EARLIEST, LATEST) else o
                for tp, o in offsets.items()}

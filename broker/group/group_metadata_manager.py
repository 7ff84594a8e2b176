"""GroupMetadataManager: the groups this broker coordinates, kept in `__consumer_offsets`.

A group belongs to partition abs(javaHashCode(group_id)) % n of the offsets topic, and the leader of
that partition is its coordinator. Every change (a generation's assignment, committed offsets, a
deletion) is appended to that partition as records; when this broker becomes the partition's
leader it replays them (load), when it stops leading it forgets them (unload).
"""

import asyncio
import functools
import logging
import time

from kio.schema.errors import ErrorCode

from odradek.broker.log.clock import now_ms
from odradek.broker.log.record_batch import build_batch, decode_records, iter_batches

from . import records
from .group_metadata import GroupMetadata, GroupState

log = logging.getLogger(__name__)

GROUP_METADATA_TOPIC_NAME = "__consumer_offsets"
GROUP_METADATA_TOPIC_CONFIG = {"cleanup.policy": "compact", "compression.type": "producer", "segment.bytes": "104857600"}
"""Kafka's groupMetadataTopicConfigs: how the offsets topic is created, wherever that happens."""
LOAD_CHUNK_BYTES = 4 * 1024 * 1024


@functools.lru_cache(maxsize=4096)
def java_string_hash(s: str) -> int:
    """Java's String.hashCode (over UTF-16 code units), as a signed 32-bit int."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def kafka_abs(n: int) -> int:
    """Kafka's Utils.abs: Integer.MIN_VALUE maps to 0."""
    return 0 if n == -(1 << 31) else abs(n)


def partition_for(group_id: str, partition_count: int) -> int:
    return kafka_abs(java_string_hash(group_id)) % partition_count


def append_error_to_commit_error(code: ErrorCode) -> ErrorCode:
    """Kafka's mapping of a failed __consumer_offsets append to what the committer sees."""
    if code in (ErrorCode.unknown_topic_or_partition, ErrorCode.not_enough_replicas,
                ErrorCode.not_enough_replicas_after_append, ErrorCode.request_timed_out):
        return ErrorCode.coordinator_not_available
    if code in (ErrorCode.not_leader_or_follower, ErrorCode.kafka_storage_error):
        return ErrorCode.not_coordinator
    if code in (ErrorCode.message_too_large, ErrorCode.record_list_too_large, ErrorCode.invalid_fetch_size):
        return ErrorCode.invalid_commit_offset_size
    return code


class GroupMetadataManager:
    def __init__(self, broker_id: int, replica_manager, partition_count, commit_timeout_ms: int = 5000):
        """`partition_count`: an int, or a callable giving the offsets topic's current partition count."""
        self.broker_id = broker_id
        self.replica_manager = replica_manager
        self._partition_count = partition_count
        self.commit_timeout_ms = commit_timeout_ms
        self.groups: dict[str, GroupMetadata] = {}
        self.owned: dict[int, int] = {}
        """Offsets partitions this broker leads → the leader epoch it loaded them at."""
        self.loading: set[int] = set()
        self._load_tasks: dict[int, asyncio.Task] = {}

    # --- ownership ------------------------------------------------------------------------------

    @property
    def partition_count(self) -> int:
        pc = self._partition_count
        return pc() if callable(pc) else pc

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.partition_count)

    def is_local(self, group_id: str) -> bool:
        p = self.partition_for(group_id)
        return p in self.owned or p in self.loading

    def is_loading(self, group_id: str) -> bool:
        return self.partition_for(group_id) in self.loading

    def groups_of(self, partition: int) -> list[GroupMetadata]:
        return [g for g in self.groups.values() if self.partition_for(g.group_id) == partition]

    # --- storing --------------------------------------------------------------------------------

    def append(self, group_id: str, entries: list[tuple[bytes, bytes | None]]) -> "asyncio.Future[ErrorCode]":
        """Appends key/value records to the group's partition (acks=all); resolves to the commit error code.

        The append task is created here, at call time: tasks take their first step in creation
        order, and that step writes the log, so records land in the order of the calls (a group's
        Empty generation spawned before a deletion cannot overtake the deletion's tombstones)."""
        return asyncio.ensure_future(self._append(self.partition_for(group_id), entries))

    async def _append(self, p: int, entries: list[tuple[bytes, bytes | None]]) -> ErrorCode:
        batch = build_batch(entries, base_timestamp=now_ms())
        try:
            results = await self.replica_manager.append_records(
                self.commit_timeout_ms, -1, [(GROUP_METADATA_TOPIC_NAME, p, batch)]
            )
        except Exception:
            log.exception("append to %s-%d failed", GROUP_METADATA_TOPIC_NAME, p)
            return ErrorCode.unknown_server_error
        code = results[(GROUP_METADATA_TOPIC_NAME, p)].error
        return append_error_to_commit_error(code)

    # --- loading --------------------------------------------------------------------------------

    def replay(self, partition: int, recs) -> None:
        """Applies records in log order to the cached groups of `partition` (pure apart from self)."""
        for rec in recs:
            if rec.key is None:
                continue
            try:
                key = records.decode_key(rec.key)
            except Exception:
                log.warning("%s-%d: undecodable key at offset %d", GROUP_METADATA_TOPIC_NAME, partition, rec.offset)
                continue
            if isinstance(key, records.OffsetKey):
                group = self.groups.get(key.group)
                if rec.value is None:
                    if group is not None:
                        group.offsets.pop((key.topic, key.partition), None)
                    continue
                if group is None:
                    group = self.groups[key.group] = GroupMetadata(key.group)
                group.offsets[(key.topic, key.partition)] = records.decode_offset_value(rec.value)
            elif isinstance(key, records.GroupKey):
                old = self.groups.get(key.group)
                if rec.value is None:
                    if old is not None:
                        old.state = GroupState.DEAD
                        self.groups.pop(key.group, None)
                        if old.offsets:  # offsets committed after the tombstone survive it
                            self.groups[key.group] = GroupMetadata(key.group, offsets=old.offsets)
                    continue
                group = records.decode_group_value(key.group, rec.value)
                if old is not None:
                    group.offsets = old.offsets
                self.groups[key.group] = group

    def _load(self, partition: int) -> None:
        from .txn_offsets import TxnOffsetReplay

        plog = self.replica_manager.partitions[(GROUP_METADATA_TOPIC_NAME, partition)].log
        offset, end = plog.log_start_offset, plog.log_end_offset
        transactional = TxnOffsetReplay(self, partition)
        while offset < end:
            data = plog.read(offset, LOAD_CHUNK_BYTES, max_offset=end, min_one_message=True).read_bytes()
            if not data:
                break
            for info in iter_batches(data, verify_crc=False):  # decode_records verifies each batch's CRC
                batch = data[info.position : info.position + info.size]
                if not transactional.batch(info, batch):
                    self.replay(partition, decode_records(batch))
                offset = info.next_offset
        transactional.finish()

    def on_election(self, partition: int, epoch: int, on_loaded) -> None:
        """Becomes coordinator of `partition`'s groups: loads them (COORDINATOR_LOAD_IN_PROGRESS meanwhile)."""
        if self.owned.get(partition) == epoch or partition in self.loading:
            return
        self.loading.add(partition)

        async def load():
            try:
                await asyncio.sleep(0)
                started = time.monotonic()
                self._load(partition)
                log.info("loaded %d groups of %s-%d in %.0f ms", len(self.groups_of(partition)),
                         GROUP_METADATA_TOPIC_NAME, partition, (time.monotonic() - started) * 1000)
                self.owned[partition] = epoch
                on_loaded(partition)
            except Exception:
                log.exception("loading %s-%d failed", GROUP_METADATA_TOPIC_NAME, partition)
            finally:
                self.loading.discard(partition)
                self._load_tasks.pop(partition, None)

        self._load_tasks[partition] = asyncio.get_running_loop().create_task(load())

    def on_resignation(self, partition: int) -> list[GroupMetadata]:
        """Stops coordinating `partition`; returns the groups dropped (the coordinator answers their waiters)."""
        task = self._load_tasks.pop(partition, None)
        if task is not None:
            task.cancel()
        self.loading.discard(partition)
        self.owned.pop(partition, None)
        dropped = self.groups_of(partition)
        for g in dropped:
            self.groups.pop(g.group_id, None)
        return dropped

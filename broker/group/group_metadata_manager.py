"""GroupMetadataManager: the groups this broker coordinates, kept in `__consumer_offsets`.

A group belongs to partition abs(javaHashCode(group_id)) % n of the offsets topic, and the leader of
that partition is its coordinator. Every change (a generation's assignment, committed offsets, a
deletion) is appended to that partition as records; when this broker becomes the partition's
leader it replays them (load), when it stops leading it forgets them (unload).
"""

import asyncio
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from kio.schema.errors import ErrorCode

from odradek.broker.log.record_batch import Record, build_batch, decode_records
from odradek.common.clock import Clock, monotonic_s, now_ms

from . import records
from .group_metadata import GroupMetadata, GroupState
from .offsets_topic import GROUP_METADATA_TOPIC_NAME, append_error_to_commit_error, partition_for
from .txn_offsets import TxnOffsetReplay

log = logging.getLogger(__name__)


class GroupMetadataManager:
    def __init__(self, broker_id: int, replica_manager: Any, partition_count: int | Callable[[], int],
                 commit_timeout_ms: int = 5000, *, clock: Clock = now_ms) -> None:
        """`partition_count`: an int, or a callable giving the offsets topic's current partition count;
        `clock`: the broker's (stamps the records it appends). `replica_manager` is typed Any: importing
        its module here closes an import cycle among the broker's modules (import-linter)."""
        self.broker_id = broker_id
        self.clock = clock
        self.replica_manager = replica_manager
        self._partition_count = partition_count
        self.commit_timeout_ms = commit_timeout_ms
        self.groups: dict[str, GroupMetadata] = {}
        self.owned: dict[int, int] = {}
        """Offsets partitions this broker leads → the leader epoch it loaded them at."""
        self.loading: set[int] = set()
        self._load_tasks: dict[int, asyncio.Task[None]] = {}

    # --- ownership ------------------------------------------------------------------------------

    @property
    def partition_count(self) -> int:
        pc = self._partition_count
        return pc() if callable(pc) else int(pc)

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

    def append(self, group_id: str, entries: Sequence[tuple[bytes, bytes | None]]) -> "asyncio.Future[ErrorCode]":
        """Appends key/value records to the group's partition (acks=all); resolves to the commit error code.

        The append task is created here, at call time: tasks take their first step in creation
        order, and that step writes the log, so records land in the order of the calls (a group's
        Empty generation spawned before a deletion cannot overtake the deletion's tombstones)."""
        return asyncio.ensure_future(self._append(self.partition_for(group_id), entries))

    async def _append(self, p: int, entries: Sequence[tuple[bytes, bytes | None]]) -> ErrorCode:
        batch = build_batch(entries, base_timestamp=self.clock())
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

    def replay(self, partition: int, recs: Iterable[Record]) -> None:
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
        transactional = TxnOffsetReplay(self, partition)
        for info, batch in self.replica_manager.local_log((GROUP_METADATA_TOPIC_NAME, partition)).scan_batches():
            if not transactional.batch(info, batch):
                self.replay(partition, decode_records(batch))
        transactional.finish()

    def on_election(self, partition: int, epoch: int, on_loaded: Callable[[int], None]) -> None:
        """Becomes coordinator of `partition`'s groups: loads them (COORDINATOR_LOAD_IN_PROGRESS meanwhile)."""
        if self.owned.get(partition) == epoch or partition in self.loading:
            return
        self.loading.add(partition)

        async def load() -> None:
            try:
                await asyncio.sleep(0)
                started = monotonic_s()
                self._load(partition)
                log.info("loaded %d groups of %s-%d in %.0f ms", len(self.groups_of(partition)),
                         GROUP_METADATA_TOPIC_NAME, partition, (monotonic_s() - started) * 1000)
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

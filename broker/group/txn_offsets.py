"""Transactional offset commits (TxnOffsetCommit, KIP-98/447) at the group coordinator.

The offsets are appended to the group's `__consumer_offsets` partition as a transactional batch
of the producer, and held per producer as pending; the COMMIT marker the transaction coordinator
has written to that partition makes them the group's committed offsets, an ABORT drops them.
Loading replays the same rule from the log. While offsets are pending, an OffsetFetch asking
for stable offsets (require_stable) gets UNSTABLE_OFFSET_COMMIT for them, so a consumer that
takes over never starts from offsets a transaction may still change.
"""

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from kio.schema.errors import ErrorCode

from odradek.broker.log.control_batch import TRANSACTIONAL_MASK, read_marker
from odradek.broker.log.producer_state import AppendOrigin
from odradek.broker.log.record_batch import BatchInfo, Buffer, Record, build_batch, decode_records

from . import records
from .group_metadata import GroupMetadata, GroupState, OffsetAndMetadata
from .offsets_topic import GROUP_METADATA_TOPIC_NAME, append_error_to_commit_error

log = logging.getLogger(__name__)
# The coordinator and the metadata manager are typed Any here: both import this module.

Verify = Callable[[str, int, int, tuple[str, int]], Awaitable[tuple[ErrorCode, Any]]]
"""(transactional id, producer id, epoch, partition) → (error, guard): the transaction coordinator's
confirmation that the partition is in the producer's open transaction."""


def pending_of(group: GroupMetadata) -> dict[int, dict[tuple[str, int], OffsetAndMetadata]]:
    """producer id → {(topic, partition): OffsetAndMetadata} not yet committed or aborted."""
    return group.pending_txn_offsets


def has_pending(group: GroupMetadata | None, key: tuple[str, int]) -> bool:
    return group is not None and any(key in offsets for offsets in group.pending_txn_offsets.values())


async def commit_txn_offsets(coordinator: Any, group_id: str, producer_id: int, epoch: int, member_id: str,
                             instance_id: str | None, generation_id: int,
                             offsets: dict[tuple[str, int], OffsetAndMetadata], transactional_id: str = "",
                             verify: Verify | None = None) -> dict[tuple[str, int], ErrorCode]:
    """Kafka's handleTxnCommitOffsets: member checks only when the request names a generation
    (v3+, KIP-447), then the transactional append. With `verify(transactional_id, producer id,
    epoch, partition) -> (error, guard)` the transaction coordinator first confirms the offsets
    partition is in the producer's open transaction (as for produce, KIP-890), so offsets no
    marker will ever end cannot be left pending."""
    def all_(code: ErrorCode) -> dict[tuple[str, int], ErrorCode]:
        return dict.fromkeys(offsets, code)

    manager = coordinator.manager
    error = coordinator._group_error(group_id)
    if error != ErrorCode.none:
        return all_(error)
    group = manager.groups.get(group_id)
    if group is None:
        group = manager.groups[group_id] = GroupMetadata(group_id, state_timestamp=coordinator.clock_ms())
    if group.state == GroupState.DEAD:
        return all_(ErrorCode.coordinator_not_available)
    if generation_id >= 0 or member_id:
        if group.is_static_member_fenced(member_id, instance_id):
            return all_(ErrorCode.fenced_instance_id)
        if generation_id >= 0 and not group.has(member_id):
            return all_(ErrorCode.unknown_member_id)
        if generation_id >= 0 and generation_id != group.generation_id:
            return all_(ErrorCode.illegal_generation)
    result: dict[tuple[str, int], ErrorCode] = {}
    entries: list[tuple[bytes, bytes | None]] = []
    accepted: dict[tuple[str, int], OffsetAndMetadata] = {}
    for key, om in offsets.items():
        if om.metadata is not None and len(om.metadata.encode()) > coordinator.config.offset_metadata_max_bytes:
            result[key] = ErrorCode.offset_metadata_too_large
            continue
        accepted[key] = om
        entries.append((records.offset_key(group_id, *key), records.offset_value(om)))
    if entries:
        batch = build_batch(entries, base_timestamp=coordinator.clock_ms(), producer_id=producer_id, producer_epoch=epoch,
                            base_sequence=-1, attributes=TRANSACTIONAL_MASK)
        p = manager.partition_for(group_id)
        key = (GROUP_METADATA_TOPIC_NAME, p)
        verified = None
        if verify is not None:
            code, guard = await verify(transactional_id, producer_id, epoch, key)
            if code != ErrorCode.none:
                return {k: result.get(k, code) for k in offsets}
            verified = {key: (producer_id, guard)} if guard is not None else None
        try:
            appended = await manager.replica_manager.append_records(
                manager.commit_timeout_ms, -1, [(GROUP_METADATA_TOPIC_NAME, p, batch)], AppendOrigin.COORDINATOR,
                verified=verified)
            code = appended[key].error
        except Exception:
            log.exception("transactional offset commit of group %s failed", group_id)
            code = ErrorCode.unknown_server_error
        code = append_error_to_commit_error(code)
        if code == ErrorCode.none and manager.groups.get(group_id) is group:
            group.pending_txn_offsets.setdefault(producer_id, {}).update(accepted)
        for key in accepted:
            result[key] = code
    return {k: result[k] for k in offsets}


def complete_txn(manager: Any, producer_id: int, commit: bool, offsets_partitions: set[int]) -> None:
    """A marker reached these `__consumer_offsets` partitions: the producer's pending offsets in
    their groups are committed or dropped (Kafka's handleTxnCompletion)."""
    for group in list(manager.groups.values()):
        if manager.partition_for(group.group_id) not in offsets_partitions:
            continue
        pending = group.pending_txn_offsets.pop(producer_id, None)
        if pending and commit:
            group.offsets.update(pending)


class TxnOffsetReplay:
    """Loading a `__consumer_offsets` partition: transactional offset records wait for their
    producer's marker; what is still open at the end stays pending in its group."""

    def __init__(self, manager: Any, partition: int) -> None:
        self.manager = manager
        self.partition = partition
        self.open: dict[int, list[Record]] = {}

    def batch(self, info: BatchInfo, data: Buffer) -> bool:
        """Handles one transactional or control batch; False for a plain batch (replayed as usual)."""
        if info.is_control:
            marker = read_marker(data, 0, len(data))
            recs = self.open.pop(info.producer_id, [])
            if marker is not None and marker.commit:
                self.manager.replay(self.partition, recs)
            return True
        if not info.attributes & TRANSACTIONAL_MASK:
            return False
        self.open.setdefault(info.producer_id, []).extend(decode_records(data))
        return True

    def finish(self) -> None:
        for producer_id, recs in self.open.items():
            for rec in recs:
                try:
                    key = records.decode_key(rec.key) if rec.key is not None else None
                except Exception:  # as replay does: a bad record is skipped, the load goes on
                    log.warning("%s-%d: undecodable key at offset %d", GROUP_METADATA_TOPIC_NAME, self.partition,
                                rec.offset)
                    continue
                if not isinstance(key, records.OffsetKey) or rec.value is None:
                    continue
                group = self.manager.groups.get(key.group)
                if group is None:
                    group = self.manager.groups[key.group] = GroupMetadata(key.group)
                group.pending_txn_offsets.setdefault(producer_id, {})[(key.topic, key.partition)] = (
                    records.decode_offset_value(rec.value))

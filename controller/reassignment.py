"""Partition reassignment (KIP-455) as pure functions: (ControllerContext, event) → Decisions.

Kafka's ZooKeeper-era algorithm. A partition being reassigned has, in its topic's assignment
znode, the full replica set RS = target ∪ original, `adding_replicas` AR = target − original and
`removing_replicas` RR = original − target; that znode is the progress record, so a new controller
resumes from it (`on_reassignment_progress` at failover).

- Start (phase A): write RS/AR/RR to the topic znode first, then bump the leader epoch (ISR kept
  within RS) so that the leader learns the new replica set, and send LeaderAndIsr to RS (the added
  replicas as new: they create their logs and fetch).
- Complete (phase B), once every target replica is in the ISR: the leader moves to the first live
  in-sync target replica if it is leaving, the ISR drops the removed replicas (one new leader
  epoch), LeaderAndIsr goes to the targets, StopReplica(delete) to the removed replicas, then the
  topic znode is written with RS = target and no AR/RR, the partition leaves
  `/admin/reassign_partitions`, and every broker gets UpdateMetadata.
- Cancel: reassign back to the original replicas (RS − AR); the added replicas are stopped and
  deleted at once.

Any step repeated after a crash finds the same znodes and decides the same writes: idempotent.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from odradek.common.zk_data import LeaderIsrAndControllerEpoch

from .context import ControllerContext, ReplicaAssignment, TopicPartition
from .state_machine import (
    NO_LEADER,
    Answering,
    Decisions,
    MetadataEntry,
    RequestBatch,
    StateWrite,
    _written_by_newer_controller,
    next_state,
)

MAX_REPLICAS = 1000
"""Longest replica list a reassignment may name (a hostile request must not make a huge znode)."""


def assignment_of(ctx: ControllerContext, tp: TopicPartition) -> ReplicaAssignment | None:
    a = ctx.assignments.get(tp.topic)
    if a is None or tp.partition not in a.partitions:
        return None
    return ReplicaAssignment(tuple(a.partitions[tp.partition]), tuple(a.adding_replicas.get(tp.partition, ())),
                             tuple(a.removing_replicas.get(tp.partition, ())))


def ongoing(ctx: ControllerContext) -> dict[TopicPartition, ReplicaAssignment]:
    """Every partition being reassigned (AR or RR not empty in its topic znode)."""
    out = {}
    for tp in ctx.all_partitions():
        ra = assignment_of(ctx, tp)
        if ra is not None and ra.is_being_reassigned and tp.topic not in ctx.topics_to_delete:
            out[tp] = ra
    return out


# --- validation -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Result:
    """Per partition: Kafka's error code (0 = accepted) and message."""

    error: int = 0
    message: str | None = None


Results = dict[TopicPartition, Result]
"""The answer to ElectLeaders and AlterPartitionReassignments: a result per partition."""


def target_error(ctx: ControllerContext, tp: TopicPartition, target: tuple[int, ...] | None) -> Result | None:
    """Why `target` (None: cancel) cannot be started for `tp`, as Kafka's controller answers."""
    current = assignment_of(ctx, tp)
    if current is None or tp.topic in ctx.topics_to_delete or tp not in ctx.partition_states:
        return Result(int(ErrorCode.unknown_topic_or_partition), f"Unable to find partition {tp}.")
    if target is None:
        if not current.is_being_reassigned:
            return Result(int(ErrorCode.no_reassignment_in_progress), f"No reassignment in progress for {tp}.")
        if not set(ctx.partition_states[tp].isr) & set(current.origin):
            return Result(int(ErrorCode.reassignment_in_progress),
                          f"Cannot cancel the reassignment of {tp}: no original replica is in sync.")
        return None
    if not target:
        return Result(int(ErrorCode.invalid_replica_assignment), "Empty replica list specified in partition reassignment.")
    if len(target) > MAX_REPLICAS:
        return Result(int(ErrorCode.invalid_replica_assignment), f"More than {MAX_REPLICAS} replicas.")
    if len(set(target)) != len(target):
        return Result(int(ErrorCode.invalid_replica_assignment),
                      "Duplicate replica ids in partition reassignment replica list: " + str(list(target)))
    if any(b < 0 for b in target):
        return Result(int(ErrorCode.invalid_replica_assignment),
                      "Invalid broker id in replica list: " + str(list(target)))
    missing = sorted(set(target) - set(ctx.live_brokers))
    if missing:
        return Result(int(ErrorCode.invalid_replica_assignment),
                      f"Replica assignment has brokers that are not alive. Replica list: {list(target)}, "
                      f"live broker list: {sorted(ctx.live_brokers)}")
    return None


# --- decisions ------------------------------------------------------------------------------------


def _restated(ctx: ControllerContext, tp: TopicPartition, state: LeaderIsrAndControllerEpoch,
              replicas: tuple[int, ...], leaders: tuple[int, ...]) -> LeaderIsrAndControllerEpoch | None:
    """`state` with the next leader epoch, the ISR within `replicas`, and a leader from `leaders`
    (the current one if it is there and live, else the first live, online, in-sync one that is not
    shutting down); None when no such leader exists."""
    isr = tuple(b for b in state.isr if b in replicas)
    online = ctx.online_replicas(tp, ctx.live_brokers)
    if state.leader in leaders and state.leader in online and state.leader in isr:
        leader = state.leader
    else:
        candidates = [r for r in leaders if r in isr and r in online and r not in ctx.shutting_down_brokers]
        if not candidates:
            return None
        leader = candidates[0]
    return next_state(state, leader, isr, ctx.epoch)


def _start(ctx: ControllerContext, tp: TopicPartition, new: ReplicaAssignment, d: Decisions,
           batch: RequestBatch, updates: dict[TopicPartition, MetadataEntry]) -> Result:
    """Phase A for one partition (its validity checked): record RS/AR/RR, bump the leader epoch,
    tell RS; replicas a replaced reassignment had added are stopped and deleted."""
    current = assignment_of(ctx, tp)
    assert current is not None  # validated by target_error
    state = ctx.partition_states[tp]
    dropped = tuple(r for r in current.replicas if r not in new.replicas)
    leaders = new.origin if new.is_being_reassigned else new.replicas
    restated = _restated(ctx, tp, state, new.replicas, leaders + tuple(r for r in new.replicas if r not in leaders))
    if restated is None:
        if not set(state.isr) & set(new.replicas):
            return Result(int(ErrorCode.reassignment_in_progress),
                          f"Cannot reassign {tp}: none of its replicas in sync would remain.")
        restated = next_state(state, NO_LEADER, tuple(b for b in state.isr if b in new.replicas), ctx.epoch)
    d.assignment_writes[tp] = new
    d.state_writes.append(StateWrite(tp, restated, state.zk_version))
    for r in new.replicas:
        batch.add_leader_and_isr((r,), tp, restated, new.replicas, is_new=r in new.adding and r not in current.replicas)
    for r in dropped:
        batch.add_stop_replica((r,), tp, delete=True)
    _remember_strays(ctx, tp, dropped, d)
    updates[tp] = (restated, new.replicas)
    return Result()


def _complete(ctx: ControllerContext, tp: TopicPartition, ra: ReplicaAssignment, d: Decisions,
              batch: RequestBatch, updates: dict[TopicPartition, MetadataEntry]) -> bool:
    """Phase B for one partition if every target replica is in the ISR and a target replica can
    lead; True when decided."""
    state = ctx.partition_states.get(tp)
    target = ra.target
    if state is None or not set(target) <= set(state.isr):
        return False
    restated = _restated(ctx, tp, state, target, target)
    if restated is None:
        return False
    d.state_writes.append(StateWrite(tp, restated, state.zk_version))
    batch.add_leader_and_isr(target, tp, restated, target)
    for r in ra.removing:
        batch.add_stop_replica((r,), tp, delete=True)
    _remember_strays(ctx, tp, ra.removing, d)
    d.final_assignment_writes[tp] = ReplicaAssignment(target)
    updates[tp] = (restated, target)
    return True


def _remember_strays(ctx: ControllerContext, tp: TopicPartition, removed: Iterable[int], d: Decisions) -> None:
    """Removed replicas on brokers that are down miss their StopReplica: keep it for their return."""
    down = [b for b in removed if b not in ctx.live_brokers]
    if down:
        strays = {b: set(tps) for b, tps in (d.stray_replicas or ctx.stray_replicas).items()}
        for b in down:
            strays.setdefault(b, set()).add(tp)
        d.stray_replicas = strays


def _zk_reassignment_after(ctx: ControllerContext, done: Iterable[TopicPartition]
                           ) -> dict[TopicPartition, tuple[int, ...]] | None:
    """The new `/admin/reassign_partitions` content once `done` left it; None: unchanged."""
    done = set(done) & set(ctx.zk_reassignment)
    if not done:
        return None
    return {tp: t for tp, t in ctx.zk_reassignment.items() if tp not in done}


def on_reassign(ctx: ControllerContext,
                targets: Mapping[TopicPartition, tuple[int, ...] | None]) -> Answering[Results]:
    """AlterPartitionReassignments (or new entries of `/admin/reassign_partitions`): each partition
    to its target, None cancelling. The answer maps each partition to its Result. Targets already in
    sync complete by the on_reassignment_progress that the caller runs next."""
    if _written_by_newer_controller(ctx):
        return Answering(deposed=True)
    d: Answering[Results] = Answering()
    batch = RequestBatch(ctx, ctx.live_brokers)
    updates: dict[TopicPartition, MetadataEntry] = {}
    results: Results = {}
    finished = []
    for tp in sorted(targets):
        target = targets[tp]
        error = target_error(ctx, tp, None if target is None else tuple(target))
        if error is not None:
            results[tp] = error
            continue
        current = assignment_of(ctx, tp)
        assert current is not None  # validated by target_error
        new = current.reassign_to(current.origin if target is None else target)
        if new == current:
            results[tp] = Result()
            finished.append(tp)
            continue
        results[tp] = _start(ctx, tp, new, d, batch, updates)
        if results[tp].error or new.is_being_reassigned:
            continue
        # a cancel, or a target within the current replicas: nothing to wait for
        d.final_assignment_writes[tp] = d.assignment_writes.pop(tp)
        finished.append(tp)
    d.reassign_znode = _zk_reassignment_after(ctx, [tp for tp, r in results.items() if r.error] + finished)
    if updates:
        batch.add_update_metadata(ctx.live_brokers, updates)
    d.batch = batch
    d.answer = results
    return d


def on_reassignment_progress(ctx: ControllerContext, tps: Iterable[TopicPartition] | None = None) -> Decisions:
    """Complete every reassignment (of `tps`, default all) whose target replicas are all in the
    ISR (after an ISR expansion, a broker change, a failover)."""
    moving = ongoing(ctx)
    if tps is not None:
        moving = {tp: ra for tp, ra in moving.items() if tp in set(tps)}
    if not moving:
        return Decisions()
    if _written_by_newer_controller(ctx):
        return Decisions(deposed=True)
    d = Decisions()
    batch = RequestBatch(ctx, ctx.live_brokers)
    updates: dict[TopicPartition, MetadataEntry] = {}
    done = [tp for tp, ra in sorted(moving.items()) if _complete(ctx, tp, ra, d, batch, updates)]
    d.reassign_znode = _zk_reassignment_after(ctx, done)
    d.batch = batch
    if updates:
        final = RequestBatch(ctx, ctx.live_brokers)
        final.add_update_metadata(ctx.live_brokers, updates)
        d.final_requests = final.build()
    return d


def on_zk_reassignment(ctx: ControllerContext) -> Answering[Results]:
    """`/admin/reassign_partitions` was written (older tools; its content, as read, is in
    `ctx.zk_reassignment`): start the listed partitions that are not already moving to their
    target. Invalid entries leave the znode (Kafka logs and drops them), the others as they
    complete."""
    fresh = {tp: t for tp, t in ctx.zk_reassignment.items()
             if (ra := assignment_of(ctx, tp)) is None or not ra.is_being_reassigned or ra.target != tuple(t)}
    return on_reassign(ctx, fresh)


def list_reassignments(ctx: ControllerContext, tps: Iterable[TopicPartition] | None
                       ) -> dict[TopicPartition, ReplicaAssignment]:
    """ListPartitionReassignments: the ongoing ones, all or of `tps` (unknown ones left out)."""
    moving = ongoing(ctx)
    return moving if tps is None else {tp: moving[tp] for tp in tps if tp in moving}


# --- /admin/reassign_partitions JSON ----------------------------------------------------------------


def decode_reassign_partitions(data: bytes) -> dict[TopicPartition, tuple[int, ...]]:
    """Kafka's `{"version":1,"partitions":[{"topic":t,"partition":p,"replicas":[...]}]}`; ValueError
    on anything else (entries that are not well-formed make the whole znode unreadable)."""
    try:
        obj = json.loads(data)
        out = {}
        for e in obj["partitions"]:
            topic, partition, replicas = e["topic"], e["partition"], e["replicas"]
            if (not isinstance(topic, str) or not isinstance(partition, int) or not isinstance(replicas, list)
                    or not all(isinstance(r, int) and not isinstance(r, bool) for r in replicas)):
                raise ValueError(f"bad entry {e!r}")
            out[TopicPartition(topic, partition)] = tuple(replicas)
        return out
    except (KeyError, TypeError, AttributeError) as e:
        raise ValueError(str(e)) from e


def encode_reassign_partitions(entries: Mapping[TopicPartition, tuple[int, ...]]) -> bytes:
    return json.dumps({"version": 1, "partitions": [
        {"topic": tp.topic, "partition": tp.partition, "replicas": list(r)} for tp, r in sorted(entries.items())
    ]}, separators=(",", ":")).encode()

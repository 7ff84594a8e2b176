"""ElectLeaders (KIP-183 preferred, KIP-460 unclean) as a pure function over the context.

Preferred: the first assigned replica takes leadership if it is live, online, in the ISR and not
shutting down. Unclean: a partition without a live leader takes the first live replica even if it
is not in the ISR (records acknowledged only by the lost ISR may be gone: the operator asked for
it). Each partition is answered Kafka's way: NONE (moved), ELECTION_NOT_NEEDED,
PREFERRED_LEADER_NOT_AVAILABLE, ELIGIBLE_LEADERS_NOT_AVAILABLE or UNKNOWN_TOPIC_OR_PARTITION.
"""

from __future__ import annotations

from collections.abc import Iterable

from kio.schema.errors import ErrorCode

from .context import ControllerContext, TopicPartition
from .reassignment import Result, Results
from .state_machine import (
    Answering,
    MetadataEntry,
    RequestBatch,
    _record_change,
    _written_by_newer_controller,
    next_state,
)

PREFERRED, UNCLEAN = 0, 1


def _preferred(ctx: ControllerContext, tp: TopicPartition) -> tuple[Result, int | None]:
    replicas, state = ctx.replicas(tp), ctx.partition_states[tp]
    preferred = replicas[0]
    if state.leader == preferred:
        return Result(int(ErrorCode.election_not_needed), "Leader election not needed for topic partition."), None
    if (preferred not in state.isr or preferred not in ctx.online_replicas(tp, ctx.live_brokers)
            or preferred in ctx.shutting_down_brokers):
        return Result(int(ErrorCode.preferred_leader_not_available),
                      f"Failed to elect leader for partition {tp} under strategy "
                      "PreferredReplicaPartitionLeaderElectionStrategy"), None
    return Result(), preferred


def _unclean(ctx: ControllerContext, tp: TopicPartition) -> tuple[Result, int | None]:
    replicas, state = ctx.replicas(tp), ctx.partition_states[tp]
    online = ctx.online_replicas(tp, ctx.live_brokers)
    if state.leader in online and state.leader not in ctx.shutting_down_brokers:
        return Result(int(ErrorCode.election_not_needed), "Leader election not needed for topic partition."), None
    candidates = [r for r in replicas if r in online and r not in ctx.shutting_down_brokers]
    if not candidates:
        return Result(int(ErrorCode.eligible_leaders_not_available),
                      f"Failed to elect leader for partition {tp} under strategy "
                      "OfflinePartitionLeaderElectionStrategy(true)"), None
    in_sync = [r for r in candidates if r in state.isr]
    return Result(), (in_sync or candidates)[0]


def on_elect_leaders(ctx: ControllerContext, election_type: int, partitions: Iterable[TopicPartition] | None
                     ) -> Answering[Results]:
    """ElectLeaders for `partitions` (None: every partition); the answer maps each to its Result.
    An election type other than preferred (0) or unclean (1) answers INVALID_REQUEST."""
    if _written_by_newer_controller(ctx):
        return Answering(deposed=True)
    tps = ctx.all_partitions() if partitions is None else sorted(set(partitions))
    d: Answering[Results] = Answering()
    results: Results = {}
    batch = RequestBatch(ctx, ctx.live_brokers)
    updates: dict[TopicPartition, MetadataEntry] = {}
    for tp in tps:
        if election_type not in (PREFERRED, UNCLEAN):
            results[tp] = Result(int(ErrorCode.invalid_request), f"Unknown election type {election_type}.")
            continue
        if not ctx.replicas(tp) or tp not in ctx.partition_states or tp.topic in ctx.topics_to_delete:
            results[tp] = Result(int(ErrorCode.unknown_topic_or_partition),
                                 "The partition does not exist.")
            continue
        result, leader = (_preferred if election_type == PREFERRED else _unclean)(ctx, tp)
        results[tp] = result
        if leader is None:
            continue
        state, replicas = ctx.partition_states[tp], ctx.replicas(tp)
        isr = state.isr if leader in state.isr else (leader,)
        _record_change(d, batch, updates, tp, state, next_state(state, leader, isr, ctx.epoch), replicas, replicas)
    if updates:
        batch.add_update_metadata(ctx.live_brokers, updates)
        d.batch = batch
    d.answer = results
    return d

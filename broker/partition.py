"""A partition hosted on this broker: its replica state from LeaderAndIsr and its local Log.

Kafka's Partition: the leader/follower decision, the leader epoch fence, the ISR, and the high
watermark, which the leader advances to the smallest log end offset among the ISR (with RF=1 that is
its own log end offset right after an append).

ISR changes follow Kafka 3.x (KIP-497): the leader proposes a new ISR to the controller
(AlterPartition) and keeps it *pending* until answered. Meanwhile the "maximal ISR" (committed ∪
proposed) decides the high watermark and acks=all, so a shrink takes effect only once committed and
an expansion counts the joining follower at once; no second change is proposed while one is in
flight. A LeaderAndIsr always wins over a pending change. The decisions here are pure: they take
the time as an argument and return what to send; the ReplicaManager does the sending.
"""

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from odradek.broker.log.log import Log, LogAppendInfo
from odradek.broker.log.producer_state import AppendOrigin
from odradek.broker.log.record_batch import Buffer
from odradek.common.messages import LeaderAndIsrPartitionState

log = logging.getLogger(__name__)


@dataclass
class ReplicaState:
    """What the leader knows about a follower, updated by its fetches (Kafka's ReplicaState)."""

    log_end_offset: int = -1
    last_caught_up_ms: int = 0
    """The last time the follower had everything the leader had (Kafka's lastCaughtUpTimeMs)."""
    last_fetch_leader_log_end_offset: int = -1
    last_fetch_time_ms: int = 0
    log_start_offset: int = -1
    """The follower's log start offset, as its fetches report it (-1: not yet heard)."""

    def update_fetch_state(self, fetch_offset: int, leader_end_offset: int, now_ms: int) -> None:
        """Kafka's rule: caught up *now* if it asks for the leader's end; caught up *as of its
        previous fetch* if it asks for at least what the leader had then. Under steady load the
        leader's end moves on between fetches, so the second case is what keeps a healthy
        follower in the ISR."""
        if fetch_offset >= leader_end_offset:
            self.last_caught_up_ms = max(self.last_caught_up_ms, now_ms)
        elif fetch_offset >= self.last_fetch_leader_log_end_offset >= 0:
            self.last_caught_up_ms = max(self.last_caught_up_ms, self.last_fetch_time_ms)
        self.log_end_offset = fetch_offset
        self.last_fetch_leader_log_end_offset = leader_end_offset
        self.last_fetch_time_ms = now_ms

    def is_caught_up(self, leader_end_offset: int, now_ms: int, max_lag_ms: int) -> bool:
        return self.log_end_offset >= leader_end_offset or now_ms - self.last_caught_up_ms <= max_lag_ms

    def reset(self, now_ms: int, in_isr: bool) -> None:
        """A new leader epoch: an ISR member gets a full lag period from now (Kafka's reset)."""
        self.last_caught_up_ms = now_ms if in_isr else 0
        self.last_fetch_leader_log_end_offset = -1
        self.last_fetch_time_ms = 0


@dataclass(frozen=True)
class PendingIsrChange:
    """An ISR change sent to the controller and not yet answered (AlterPartition item)."""

    leader_epoch: int
    new_isr: tuple[int, ...]
    partition_epoch: int
    """The state znode version the change is based on (compare-and-set at the controller)."""

    def describe(self, current: tuple[int, ...]) -> str:
        added = [b for b in self.new_isr if b not in current]
        removed = [b for b in current if b not in self.new_isr]
        return f"ISR {list(current)} -> {list(self.new_isr)} (+{added} -{removed})"


@dataclass
class Partition:
    topic: str
    partition: int
    local_broker_id: int
    log: Log
    leader_id: int = -1
    leader_epoch: int = -1
    zk_version: int = -1
    isr: tuple[int, ...] = ()
    replicas: tuple[int, ...] = ()
    remote_replicas: dict[int, ReplicaState] = field(default_factory=dict)
    pending_isr_change: PendingIsrChange | None = None
    isr_change_blocked_until_ms: int = 0
    """After a fenced/stale answer: no new proposal before this time (or the next LeaderAndIsr)."""
    leader_epoch_start_offset: int = -1
    """Our log end offset when this leader epoch began: a follower must reach it to rejoin."""
    fenced: bool = False
    """The broker lost its ZooKeeper registration: whatever it leads, the controller may have given
    to another replica, so it appends nothing, moves no high watermark and proposes no ISR change."""

    @property
    def key(self) -> tuple[str, int]:
        return (self.topic, self.partition)

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.local_broker_id

    # --- state changes from LeaderAndIsr --------------------------------------------------------

    def _apply(self, state: LeaderAndIsrPartitionState) -> None:
        # The controller's word replaces whatever we proposed (Kafka: LeaderAndIsr wins).
        self.pending_isr_change = None
        self.isr_change_blocked_until_ms = 0
        self.leader_id = int(state.leader)
        self.leader_epoch = int(state.leader_epoch)
        self.zk_version = int(state.zk_version)
        self.isr = tuple(int(r) for r in state.isr)
        self.replicas = tuple(int(r) for r in state.replicas)

    def make_leader(self, state: LeaderAndIsrPartitionState, now_ms: int = 0) -> bool:
        """Become leader for `state` (a LeaderAndIsrPartitionState); True if newly leader."""
        was_leader = self.is_leader
        self._apply(state)
        # The new epoch starts at our log end offset, so OffsetForLeaderEpoch answers correctly
        # even before the first append under it (Kafka assigns it here too).
        self.log.leader_epoch_cache.assign(self.leader_epoch, self.log.log_end_offset)
        self.leader_epoch_start_offset = self.log.log_end_offset
        self.remote_replicas = {
            r: self.remote_replicas.get(r, ReplicaState())
            for r in self.replicas
            if r != self.local_broker_id
        }
        for r, replica in self.remote_replicas.items():
            replica.reset(now_ms, r in self.isr)
        self.maybe_increment_high_watermark()
        return not was_leader

    def make_follower(self, state: LeaderAndIsrPartitionState) -> None:
        """Become a follower of state.leader (the ReplicaManager restarts its fetcher at every new epoch)."""
        self._apply(state)
        self.remote_replicas = {}

    def make_offline(self) -> None:
        """StopReplica without deletion: stop serving; the controller will say what comes next."""
        self.leader_id = -1
        self.remote_replicas = {}
        self.pending_isr_change = None

    # --- leader duties --------------------------------------------------------------------------

    def check_leader_epoch(self, current_leader_epoch: int) -> ErrorCode:
        """KIP-320 fencing of a request's current_leader_epoch against ours (-1: not checked)."""
        if current_leader_epoch < 0 or current_leader_epoch == self.leader_epoch:
            return ErrorCode.none
        if current_leader_epoch < self.leader_epoch:
            return ErrorCode.fenced_leader_epoch
        return ErrorCode.unknown_leader_epoch

    def min_insync_replicas(self) -> int:
        return self.log.config.min_insync_replicas

    def append_records_to_leader(self, records: Buffer, required_acks: int,
                                 origin: AppendOrigin | None = None) -> ErrorCode | LogAppendInfo:
        """Appends as leader; NOT_ENOUGH_REPLICAS (committed ISR too small) as an error code for acks=-1."""
        if required_acks == -1 and len(self.isr) < self.min_insync_replicas():
            return ErrorCode.not_enough_replicas
        if origin is None:
            return self.log.append_as_leader(records, self.leader_epoch)
        return self.log.append_as_leader(records, self.leader_epoch, origin=origin)

    def update_follower_fetch_state(self, replica_id: int, fetch_offset: int, now_ms: int,
                                    log_start_offset: int = -1) -> bool:
        """A follower fetched from `fetch_offset`: it has everything below it. True if HW moved."""
        replica = self.remote_replicas.get(replica_id)
        if replica is None:
            return False
        replica.update_fetch_state(fetch_offset, self.log.log_end_offset, now_ms)
        if log_start_offset >= 0:
            replica.log_start_offset = log_start_offset
        return self.maybe_increment_high_watermark()

    def low_watermark(self, alive: Callable[[int], bool]) -> int:
        """Kafka's lowWatermarkIfLeader: the smallest log start offset among this replica and the
        live followers (a follower not heard from yet counts as -1). DeleteRecords is done when it
        reaches the asked offset."""
        low = self.log.log_start_offset
        for r, replica in self.remote_replicas.items():
            if alive(r) and replica.log_start_offset < low:
                low = replica.log_start_offset
        return low

    # --- ISR changes (pure decisions; the ReplicaManager sends them) ----------------------------

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        """The committed ISR plus any member a pending change adds (Kafka's maximalIsr)."""
        pending = self.pending_isr_change
        if pending is None:
            return self.isr
        return self.isr + tuple(b for b in pending.new_isr if b not in self.isr)

    def can_change_isr(self, now_ms: int) -> bool:
        return (self.is_leader and not self.fenced and self.pending_isr_change is None
                and now_ms >= self.isr_change_blocked_until_ms)

    def out_of_sync_replicas(self, now_ms: int, max_lag_ms: int) -> tuple[int, ...]:
        """ISR followers that have not caught up within max_lag_ms (never the leader itself)."""
        leo = self.log.log_end_offset
        out = []
        for r in self.isr:
            if r == self.local_broker_id:
                continue
            replica = self.remote_replicas.get(r)
            if replica is None or not replica.is_caught_up(leo, now_ms, max_lag_ms):
                out.append(r)
        return tuple(out)

    def maybe_shrink_isr(self, now_ms: int, max_lag_ms: int) -> PendingIsrChange | None:
        """Kafka's maybeShrinkIsr: propose the ISR without the laggards; None when nothing to do."""
        if not self.can_change_isr(now_ms):
            return None
        out = self.out_of_sync_replicas(now_ms, max_lag_ms)
        if not out:
            return None
        return self._propose(tuple(b for b in self.isr if b not in out))

    def is_follower_in_sync(self, replica_id: int) -> bool:
        """Kafka's isFollowerInSync: at or past the HW and the start of this leader epoch."""
        replica = self.remote_replicas.get(replica_id)
        if replica is None:
            return False
        end = replica.log_end_offset
        return end >= self.log.high_watermark and end >= self.leader_epoch_start_offset >= 0

    def maybe_expand_isr(self, replica_id: int, now_ms: int) -> PendingIsrChange | None:
        """Kafka's maybeExpandIsr after a follower's fetch: propose adding it once it is in sync."""
        if replica_id in self.isr or replica_id not in self.replicas or not self.can_change_isr(now_ms):
            return None
        if not self.is_follower_in_sync(replica_id):
            return None
        return self._propose(self.isr + (replica_id,))

    def _propose(self, new_isr: tuple[int, ...]) -> PendingIsrChange:
        change = PendingIsrChange(self.leader_epoch, new_isr, self.zk_version)
        self.pending_isr_change = change
        log.info("%s-%d: proposing %s", self.topic, self.partition, change.describe(self.isr))
        return change

    def on_alter_partition_answer(self, change: PendingIsrChange, error: ErrorCode, leader_epoch: int = -1,
                                  isr: tuple[int, ...] = (), partition_epoch: int = -1, now_ms: int = 0,
                                  retry_after_ms: int = 0) -> bool:
        """Apply the controller's answer to `change`; True when the committed ISR changed.

        An answer to a change that is no longer pending (a LeaderAndIsr came first) is ignored.
        NONE adopts the controller's state; any other error drops the change, and no new one is
        proposed for `retry_after_ms` or until the next LeaderAndIsr, which carries the state that
        made ours stale."""
        if self.pending_isr_change is not change:
            return False
        self.pending_isr_change = None
        if error != ErrorCode.none:
            log.info("%s-%d: ISR change %s refused: %s", self.topic, self.partition,
                     change.describe(self.isr), error.name)
            self.isr_change_blocked_until_ms = now_ms + retry_after_ms
            return False
        if leader_epoch != self.leader_epoch or partition_epoch < self.zk_version:
            return False  # an answer about a state older than ours
        changed = tuple(isr) != self.isr
        self.isr = tuple(isr)
        self.zk_version = partition_epoch
        if changed:
            log.info("%s-%d: ISR now %s (partition epoch %d)", self.topic, self.partition, list(self.isr),
                     self.zk_version)
        return changed

    # --- high watermark ----------------------------------------------------------------------------

    def maybe_increment_high_watermark(self) -> bool:
        """HW = the smallest log end offset among the maximal ISR members; never moves backwards."""
        if not self.is_leader or self.fenced:
            return False
        new_hw = self.log.log_end_offset
        for r in self.maximal_isr:
            if r == self.local_broker_id:
                continue
            replica = self.remote_replicas.get(r)
            if replica is None or replica.log_end_offset < 0:
                return False
            new_hw = min(new_hw, replica.log_end_offset)
        if new_hw > self.log.high_watermark:
            self.log.high_watermark = new_hw
            return True
        return False

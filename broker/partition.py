"""A partition hosted on this broker: its replica state from LeaderAndIsr and its local Log.

Kafka's Partition: the leader/follower decision, the leader epoch fence, the ISR, and the high
watermark, which the leader advances to the smallest log end offset among the ISR (with RF=1 that is
its own log end offset right after an append).
"""

import logging
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

log = logging.getLogger(__name__)


@dataclass
class ReplicaState:
    """What the leader knows about a follower (updated by its fetches; issue 3 fills this in)."""

    log_end_offset: int = -1
    last_caught_up_ms: int = 0


@dataclass
class Partition:
    topic: str
    partition: int
    local_broker_id: int
    log: object
    """The local odradek.broker.log.Log."""
    leader_id: int = -1
    leader_epoch: int = -1
    controller_epoch: int = -1
    zk_version: int = -1
    isr: tuple[int, ...] = ()
    replicas: tuple[int, ...] = ()
    remote_replicas: dict[int, ReplicaState] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, int]:
        return (self.topic, self.partition)

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.local_broker_id

    # --- state changes from LeaderAndIsr --------------------------------------------------------

    def _apply(self, state) -> None:
        self.leader_id = int(state.leader)
        self.leader_epoch = int(state.leader_epoch)
        self.controller_epoch = int(state.controller_epoch)
        self.zk_version = int(state.zk_version)
        self.isr = tuple(int(r) for r in state.isr)
        self.replicas = tuple(int(r) for r in state.replicas)

    def make_leader(self, state) -> bool:
        """Become leader for `state` (a LeaderAndIsrPartitionState); True if newly leader."""
        was_leader = self.is_leader
        self._apply(state)
        # The new epoch starts at our log end offset, so OffsetForLeaderEpoch answers correctly
        # even before the first append under it (Kafka assigns it here too).
        self.log.leader_epoch_cache.assign(self.leader_epoch, self.log.log_end_offset)
        self.remote_replicas = {
            r: self.remote_replicas.get(r, ReplicaState())
            for r in self.replicas
            if r != self.local_broker_id
        }
        self.maybe_increment_high_watermark()
        return not was_leader

    def make_follower(self, state) -> bool:
        """Become a follower of state.leader; True if the leader changed (fetcher must restart)."""
        old_leader = self.leader_id
        self._apply(state)
        self.remote_replicas = {}
        return old_leader != self.leader_id

    def make_offline(self) -> None:
        """StopReplica without deletion: stop serving; the controller will say what comes next."""
        self.leader_id = -1
        self.remote_replicas = {}

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

    def append_records_to_leader(self, records, required_acks: int):
        """Appends as leader; NOT_ENOUGH_REPLICAS is raised as an error code for acks=-1."""
        if required_acks == -1 and len(self.isr) < self.min_insync_replicas():
            return ErrorCode.not_enough_replicas
        return self.log.append_as_leader(records, self.leader_epoch)

    def update_follower_fetch_state(self, replica_id: int, fetch_offset: int, now_ms: int) -> bool:
        """A follower fetched from `fetch_offset`: it has everything below it. True if HW moved."""
        replica = self.remote_replicas.get(replica_id)
        if replica is None:
            return False
        replica.log_end_offset = fetch_offset
        if fetch_offset >= self.log.log_end_offset:
            replica.last_caught_up_ms = now_ms
        return self.maybe_increment_high_watermark()

    def maybe_increment_high_watermark(self) -> bool:
        """HW = the smallest log end offset among ISR members we know; never moves backwards."""
        if not self.is_leader:
            return False
        new_hw = self.log.log_end_offset
        for r in self.isr:
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

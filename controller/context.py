"""ControllerContext: what the active controller knows about the cluster, as plain data.

Loaded from ZooKeeper on failover, then changed only by applying the decisions of the state
machines (controller/state_machine.py) after their ZooKeeper writes succeeded.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from odradek.common.zk_data import BrokerInfo, LeaderIsrAndControllerEpoch, TopicAssignment


@dataclass(frozen=True)
class ReplicaAssignment:
    """Kafka's ReplicaAssignment: one partition's full replica set and what is moving."""

    replicas: tuple[int, ...]
    adding: tuple[int, ...] = ()
    removing: tuple[int, ...] = ()

    @property
    def is_being_reassigned(self) -> bool:
        return bool(self.adding or self.removing)

    @property
    def target(self) -> tuple[int, ...]:
        return tuple(r for r in self.replicas if r not in self.removing)

    @property
    def origin(self) -> tuple[int, ...]:
        return tuple(r for r in self.replicas if r not in self.adding)

    def reassign_to(self, target: Iterable[int]) -> ReplicaAssignment:
        """Towards `target` from this assignment's original replicas (a reassignment replacing an
        ongoing one keeps the first one's originals, as in Kafka)."""
        target = tuple(target)
        origin = self.origin
        return ReplicaAssignment(
            tuple(dict.fromkeys(target + origin)),
            tuple(r for r in target if r not in origin),
            tuple(r for r in origin if r not in target),
        )


class TopicPartition(NamedTuple):
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass
class ControllerContext:
    controller_id: int = -1
    epoch: int = 0
    """This controller's epoch (the value it wrote to /controller_epoch); requests carry it."""
    epoch_zk_version: int = -1
    """Version of /controller_epoch after our increment: every write checks it (fencing)."""
    live_brokers: dict[int, BrokerInfo] = field(default_factory=dict)
    """Registered brokers; BrokerInfo.epoch is the czxid of the registration znode."""
    shutting_down_brokers: set[int] = field(default_factory=set)
    """Brokers in controlled shutdown (issue 3): alive, but not eligible as leaders."""
    assignments: dict[str, TopicAssignment] = field(default_factory=dict)
    partition_states: dict[TopicPartition, LeaderIsrAndControllerEpoch] = field(default_factory=dict)
    """Only partitions whose state znode exists; a partition missing here is New (never led)."""
    topics_to_delete: set[str] = field(default_factory=set)
    """Topics marked under /admin/delete_topics that still exist (deletion waits for replicas)."""
    unclean_leader_election: bool = False
    inter_broker_listener: str = "PLAINTEXT"
    """The brokers' listener named to followers as their leader's address (inter.broker.listener.name)."""
    replicas_on_offline_dirs: dict[int, set[TopicPartition]] = field(default_factory=dict)
    """broker → its replicas on a failed log directory (Kafka's replicasOnOfflineDirs), learned
    from LeaderAndIsr answers (KAFKA_STORAGE_ERROR); forgotten when the broker re-registers."""

    stray_replicas: dict[int, set[TopicPartition]] = field(default_factory=dict)
    """broker → replicas a reassignment removed while the broker was down: the StopReplica(delete)
    it missed goes to it when it registers again (this controller's memory only, as Kafka's
    replica deletion retries)."""
    zk_reassignment: dict[TopicPartition, tuple[int, ...]] = field(default_factory=dict)
    """The content of /admin/reassign_partitions (older tools' reassignments), as last read or
    written: each listed partition leaves it when its reassignment completes or is refused."""

    def online_replicas(self, tp: TopicPartition, live: Iterable[int]) -> set[int]:
        """Of the brokers in `live`, those whose replica of `tp` is not on a failed log dir."""
        offline = self.replicas_on_offline_dirs
        return {b for b in live if tp not in offline.get(b, ())}

    def replicas(self, tp: TopicPartition) -> tuple[int, ...]:
        a = self.assignments.get(tp.topic)
        return a.partitions.get(tp.partition, ()) if a else ()

    def partitions_of(self, topic: str) -> list[TopicPartition]:
        a = self.assignments.get(topic)
        return [TopicPartition(topic, p) for p in sorted(a.partitions)] if a else []

    def all_partitions(self) -> list[TopicPartition]:
        return [tp for t in sorted(self.assignments) for tp in self.partitions_of(t)]

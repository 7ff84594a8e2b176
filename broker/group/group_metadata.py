"""GroupMetadata and MemberMetadata: one consumer group's state machine, free of I/O.

Kafka's classic rebalance protocol: Empty → PreparingRebalance (members (re)join) →
CompletingRebalance (the leader computes the assignment) → Stable (SyncGroup delivered it), and
Dead once the group is deleted or its partition moves away. The coordinator (the I/O shell) calls
these methods and owns the timers and the waiting clients; everything here is synchronous and
unit-testable.
"""

import asyncio
import enum
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from odradek.broker.group.consumer_protocol import CONSUMER_PROTOCOL_TYPE, subscription_topics


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


VALID_PREVIOUS = {
    GroupState.EMPTY: {GroupState.PREPARING_REBALANCE},
    GroupState.PREPARING_REBALANCE: {GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY},
    GroupState.COMPLETING_REBALANCE: {GroupState.PREPARING_REBALANCE},
    GroupState.STABLE: {GroupState.COMPLETING_REBALANCE},
    GroupState.DEAD: {
        GroupState.STABLE, GroupState.PREPARING_REBALANCE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY,
        GroupState.DEAD,
    },
}


@dataclass
class MemberMetadata:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    supported_protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    awaiting_join: asyncio.Future[Any] | None = None
    """The coordinator's pending JoinGroup answer (a future) while this member waits in a join."""
    awaiting_sync: asyncio.Future[Any] | None = None
    heartbeat_deadline_ms: int = 0
    is_new: bool = False

    def protocols(self) -> list[str]:
        return [name for name, _ in self.supported_protocols]

    def metadata(self, protocol: str) -> bytes:
        for name, data in self.supported_protocols:
            if name == protocol:
                return data
        raise KeyError(protocol)

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        return list(protocols) == list(self.supported_protocols)

    def answer_join(self, result: object) -> None:
        """Completes the pending JoinGroup answer, if any, and forgets it."""
        fut, self.awaiting_join = self.awaiting_join, None
        if fut is not None and not fut.done():
            fut.set_result(result)

    def answer_sync(self, code: int, assignment: bytes = b"") -> None:
        """Completes the pending SyncGroup answer, if any, with (code, assignment) and forgets it."""
        fut, self.awaiting_sync = self.awaiting_sync, None
        if fut is not None and not fut.done():
            fut.set_result((code, assignment))

    def vote(self, candidates: set[str]) -> str:
        """This member's most preferred protocol among those every member supports."""
        for name in self.protocols():
            if name in candidates:
                return name
        raise ValueError("member supports none of the candidate protocols")


@dataclass
class OffsetAndMetadata:
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = 0
    expire_timestamp: int | None = None


@dataclass
class GroupMetadata:
    group_id: str
    state: GroupState = GroupState.EMPTY
    state_timestamp: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    generation_id: int = 0
    leader_id: str | None = None
    members: dict[str, MemberMetadata] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)
    """group.instance.id → member id."""
    pending_members: set[str] = field(default_factory=set)
    """Member ids handed out by MEMBER_ID_REQUIRED that have not joined yet (KIP-394)."""
    offsets: dict[tuple[str, int], OffsetAndMetadata] = field(default_factory=dict)
    pending_txn_offsets: dict[int, dict[tuple[str, int], OffsetAndMetadata]] = field(default_factory=dict)
    """producer id → offsets its open transaction committed (broker/group/txn_offsets)."""
    new_member_added: bool = False

    # --- state ----------------------------------------------------------------------------------

    def transition_to(self, target: GroupState, now_ms: int = 0) -> None:
        if self.state not in VALID_PREVIOUS[target]:
            raise ValueError(f"group {self.group_id}: illegal transition {self.state.value} → {target.value}")
        self.state = target
        self.state_timestamp = now_ms

    def is_in(self, state: GroupState) -> bool:
        """`state == s`, for a check after an await: mypy keeps `group.state` narrowed by the
        checks before the await, though the group may have moved meanwhile."""
        return self.state == state

    # --- members --------------------------------------------------------------------------------

    def has(self, member_id: str) -> bool:
        return member_id in self.members

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def add(self, member: MemberMetadata) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.pending_members.discard(member.member_id)

    def remove(self, member_id: str) -> MemberMetadata | None:
        member = self.members.pop(member_id, None)
        self.pending_members.discard(member_id)
        if (member is not None and member.group_instance_id is not None
                and self.static_members.get(member.group_instance_id) == member_id):
            del self.static_members[member.group_instance_id]
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def replace_static_member(self, instance_id: str, old_id: str, new_id: str) -> MemberMetadata:
        """A static member rejoined with an empty member id: it keeps its place under a new id."""
        member = self.members.pop(old_id)
        member.member_id = new_id
        self.members[new_id] = member
        self.static_members[instance_id] = new_id
        if self.leader_id == old_id:
            self.leader_id = new_id
        return member

    def static_member_id(self, instance_id: str | None) -> str | None:
        return None if instance_id is None else self.static_members.get(instance_id)

    def is_static_member_fenced(self, member_id: str, instance_id: str | None) -> bool:
        """A known group.instance.id now belongs to another member id (a newer incarnation)."""
        known = self.static_member_id(instance_id)
        return known is not None and known != member_id

    def not_yet_rejoined(self) -> list[MemberMetadata]:
        return [m for m in self.members.values() if m.awaiting_join is None]

    def num_awaiting_join(self) -> int:
        return sum(1 for m in self.members.values() if m.awaiting_join is not None)

    def accepts_joining_member(self, member_id: str, max_size: int) -> bool:
        """Whether a JoinGroup from `member_id` fits under group.max.size (Kafka's acceptJoiningMember).
        While preparing a rebalance the members already waiting count, not the group size: the size may
        exceed a lowered limit, and counting arrivals sheds the last members to rejoin."""
        if self.state in (GroupState.EMPTY, GroupState.DEAD):
            return True
        if self.state == GroupState.PREPARING_REBALANCE:
            member = self.members.get(member_id)
            return (member is not None and member.awaiting_join is not None) or self.num_awaiting_join() < max_size
        return self.has(member_id) or len(self.members) < max_size

    def all_members_joined(self) -> bool:
        return not self.pending_members and all(m.awaiting_join is not None for m in self.members.values())

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    # --- protocols ------------------------------------------------------------------------------

    def candidate_protocols(self) -> set[str]:
        sets = [set(m.protocols()) for m in self.members.values()]
        return set.intersection(*sets) if sets else set()

    def supports(self, protocol_type: str, protocols: list[str]) -> bool:
        """Whether a member with these protocols may join (Kafka's supportsProtocols)."""
        if not self.members:
            return bool(protocol_type) and bool(protocols)
        return self.protocol_type == protocol_type and bool(self.candidate_protocols() & set(protocols))

    def select_protocol(self) -> str:
        candidates = self.candidate_protocols()
        if not candidates:
            raise ValueError("no protocol common to all members")
        votes = Counter(m.vote(candidates) for m in self.members.values())
        # Most votes; ties broken by the order of the first member's preferences (deterministic).
        order = {name: i for i, name in enumerate(next(iter(self.members.values())).protocols())}
        return max(votes, key=lambda n: (votes[n], -order.get(n, len(order))))

    def init_next_generation(self, now_ms: int) -> None:
        """Close the join phase: a new generation, its protocol and state (Kafka's initNextGeneration)."""
        if self.members:
            self.generation_id += 1
            self.protocol_name = self.select_protocol()
            self.transition_to(GroupState.COMPLETING_REBALANCE, now_ms)
        else:
            self.generation_id += 1
            self.protocol_name = None
            self.transition_to(GroupState.EMPTY, now_ms)
        self.new_member_added = False

    def current_member_metadata(self) -> list[tuple[str, str | None, bytes]]:
        protocol = self.protocol_name
        if protocol is None:  # no protocol chosen: an Empty group, no member metadata to hand out
            return []
        return [(m.member_id, m.group_instance_id, m.metadata(protocol)) for m in self.members.values()]

    def clear_assignments(self) -> None:
        for m in self.members.values():
            m.assignment = b""

    def can_rebalance(self) -> bool:
        return self.state in VALID_PREVIOUS[GroupState.PREPARING_REBALANCE]

    # --- offsets --------------------------------------------------------------------------------

    def subscribed_topics(self) -> set[str] | None:
        """The topics a consumer-protocol group's members subscribe to (Kafka's
        computeSubscribedTopics); None when unknown: another protocol type, no members or no
        protocol chosen yet, or a member's metadata that is not a consumer subscription."""
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE or self.protocol_name is None or not self.members:
            return None
        topics: set[str] = set()
        for member in self.members.values():
            try:
                topics.update(subscription_topics(member.metadata(self.protocol_name)))
            except (KeyError, ValueError):  # KeyError: a member joined since without that protocol
                return None
        return topics

    def expired_offsets(self, now_ms: int, retention_ms: int, subscribed: set[str] | None = None) -> list[tuple[str, int]]:
        """Offsets past retention (Kafka 2.1+): an Empty group's offsets once retention has passed
        since it became empty (or since the commit, if later); a live group's offsets for topics it
        no longer consumes (`subscribed` known only for the consumer protocol)."""
        out = []
        for key, om in self.offsets.items():
            if om.expire_timestamp is not None:
                if now_ms >= om.expire_timestamp:
                    out.append(key)
                continue
            if self.state == GroupState.EMPTY:
                base = max(self.state_timestamp, om.commit_timestamp) if self.protocol_type else om.commit_timestamp
                if now_ms - base >= retention_ms:
                    out.append(key)
            elif (subscribed is not None and key[0] not in subscribed
                  and now_ms - om.commit_timestamp >= retention_ms):
                out.append(key)
        return out

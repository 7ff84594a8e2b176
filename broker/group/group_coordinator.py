"""GroupCoordinator: Kafka's classic group protocol over GroupMetadata, with the timers and waiters.

JoinGroup answers wait until the join phase closes (every member rejoined, or the rebalance timeout,
or the initial delay of a new group); SyncGroup answers of followers wait for the leader's
assignment; a member that misses its session timeout is removed and the group rebalances, by a
timer at its deadline (Kafka's heartbeat purgatory), so expiry is neither early nor late. Results
are (error code, data) tuples; GroupApis turns them into each API version's response. Time comes
from `clock_ms` and the event loop, so tests can run the coordinator on a virtual clock.
"""

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from odradek.common.clock import now_ms

from . import records
from .consumer_protocol import CONSUMER_PROTOCOL_TYPE
from .group_metadata import GroupMetadata, GroupState, MemberMetadata, OffsetAndMetadata
from .group_metadata_manager import GroupMetadataManager

log = logging.getLogger(__name__)

UNKNOWN_MEMBER_ID = ""
NO_GENERATION = -1


@dataclass
class JoinResult:
    error: ErrorCode
    member_id: str = UNKNOWN_MEMBER_ID
    generation_id: int = NO_GENERATION
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)


@dataclass
class GroupConfig:
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000
    initial_rebalance_delay_ms: int = 3000
    offset_metadata_max_bytes: int = 4096
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    offsets_retention_check_interval_ms: int = 600_000
    max_size: int = 2**31 - 1


class GroupCoordinator:
    def __init__(self, manager: GroupMetadataManager, config: GroupConfig, clock_ms: Callable[[], int] = now_ms):
        self.manager = manager
        self.config = config
        self.clock_ms = clock_ms
        """Milliseconds for deadlines and timestamps; the event loop's timers must run on the same clock."""
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._initial_delay: set[str] = set()
        """Groups whose join phase is in the initial delay of a new group (the timer decides)."""
        self._heartbeats: dict[tuple[str, str], asyncio.TimerHandle] = {}
        """(group, member) → the timer that expires the member at its session deadline."""
        self._tasks: set[asyncio.Task[Any]] = set()
        self._offset_expiry: asyncio.Task[None] | None = None

    # --- life cycle -----------------------------------------------------------------------------

    def startup(self) -> None:
        self._offset_expiry = asyncio.get_running_loop().create_task(self._offset_expiry_loop())

    def shutdown(self) -> None:
        if self._offset_expiry is not None:
            self._offset_expiry.cancel()
        for h in [*self._timers.values(), *self._heartbeats.values()]:
            h.cancel()
        for t in list(self._tasks):
            t.cancel()
        for g in list(self.manager.groups.values()):
            self._fail_waiters(g, ErrorCode.not_coordinator)

    def on_election(self, partition: int, epoch: int) -> None:
        if partition in self.manager.owned and self.manager.owned[partition] != epoch:
            self.on_resignation(partition)
        self.manager.on_election(partition, epoch, self._on_loaded)

    def _on_loaded(self, partition: int) -> None:
        for g in self.manager.groups_of(partition):
            if len(g.members) > self.config.max_size:
                self._prepare_rebalance(g, f"loaded group is over capacity ({self.config.max_size}); rebalancing "
                                           "to give its consumers a chance to commit offsets")
            for m in g.members.values():
                self._schedule_heartbeat_expiry(g, m)

    def on_resignation(self, partition: int) -> None:
        for g in self.manager.on_resignation(partition):
            self._fail_waiters(g, ErrorCode.not_coordinator)
            g.state = GroupState.DEAD
            timer = self._timers.pop(g.group_id, None)
            if timer is not None:
                timer.cancel()
            for member_id in g.members:
                self._cancel_heartbeat_expiry(g.group_id, member_id)

    def _fail_waiters(self, group: GroupMetadata, code: ErrorCode) -> None:
        for m in group.members.values():
            m.answer_join(JoinResult(code, m.member_id))
            m.answer_sync(code)

    def _spawn(self, awaitable: Awaitable[Any]) -> None:
        t = asyncio.ensure_future(awaitable)
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)

    # --- validation -----------------------------------------------------------------------------

    def _group_error(self, group_id: str | None) -> ErrorCode:
        """Kafka's validateGroupStatus."""
        if not group_id:
            return ErrorCode.invalid_group_id
        if self.manager.is_loading(group_id):
            return ErrorCode.coordinator_load_in_progress
        if not self.manager.is_local(group_id):
            return ErrorCode.not_coordinator
        return ErrorCode.none

    # --- JoinGroup ------------------------------------------------------------------------------

    async def join_group(
        self, group_id: str, member_id: str, instance_id: str | None, require_known_member_id: bool,
        client_id: str, client_host: str, rebalance_timeout_ms: int, session_timeout_ms: int,
        protocol_type: str, protocols: list[tuple[str, bytes]],
    ) -> JoinResult:
        error = self._group_error(group_id)
        if error != ErrorCode.none:
            return JoinResult(error, member_id)
        if not self.config.min_session_timeout_ms <= session_timeout_ms <= self.config.max_session_timeout_ms:
            return JoinResult(ErrorCode.invalid_session_timeout, member_id)
        group = self.manager.groups.get(group_id)
        if group is None:
            if member_id != UNKNOWN_MEMBER_ID:
                return JoinResult(ErrorCode.unknown_member_id, member_id)
            group = self.manager.groups[group_id] = GroupMetadata(group_id, state_timestamp=self.clock_ms())
        if not group.accepts_joining_member(member_id, self.config.max_size):
            group.remove(member_id)  # an existing member that rejoined too late gives up its place
            self._check_join_complete(group)
            return JoinResult(ErrorCode.group_max_size_reached, UNKNOWN_MEMBER_ID)
        if group.state == GroupState.DEAD:
            return JoinResult(ErrorCode.coordinator_not_available, member_id)
        if not group.supports(protocol_type, [n for n, _ in protocols]):
            return JoinResult(ErrorCode.inconsistent_group_protocol, member_id)
        if member_id == UNKNOWN_MEMBER_ID:
            return await self._join_unknown(group, instance_id, require_known_member_id, client_id, client_host,
                                            rebalance_timeout_ms, session_timeout_ms, protocol_type, protocols)
        return await self._join_known(group, member_id, instance_id, client_id, client_host,
                                      rebalance_timeout_ms, session_timeout_ms, protocol_type, protocols)

    async def _join_unknown(self, group: GroupMetadata, instance_id: str | None, require_known: bool, client_id: str,
                            client_host: str, rebalance_ms: int, session_ms: int, protocol_type: str,
                            protocols: list[tuple[str, bytes]]) -> JoinResult:
        new_id = f"{client_id}-{uuid.uuid4()}" if instance_id is None else f"{instance_id}-{uuid.uuid4()}"
        if instance_id is not None:
            old_id = group.static_member_id(instance_id)
            if old_id is not None:
                return await self._replace_static(group, instance_id, old_id, new_id, protocols, rebalance_ms, session_ms)
        elif require_known:
            group.pending_members.add(new_id)
            self._schedule_pending_expiry(group, new_id, session_ms)
            return JoinResult(ErrorCode.member_id_required, new_id)
        return await self._add_and_rebalance(group, new_id, instance_id, client_id, client_host,
                                             rebalance_ms, session_ms, protocol_type, protocols)

    async def _replace_static(self, group: GroupMetadata, instance_id: str, old_id: str, new_id: str,
                              protocols: list[tuple[str, bytes]], rebalance_ms: int, session_ms: int) -> JoinResult:
        """A known static member restarted: same place, new id, no rebalance unless its protocols changed."""
        old = group.members[old_id]
        old.answer_join(JoinResult(ErrorCode.fenced_instance_id, old_id))
        old.answer_sync(ErrorCode.fenced_instance_id)
        member = group.replace_static_member(instance_id, old_id, new_id)
        member.rebalance_timeout_ms, member.session_timeout_ms = rebalance_ms, session_ms
        self._schedule_heartbeat_expiry(group, member)
        changed = not member.matches(protocols)
        member.supported_protocols = list(protocols)
        if group.state == GroupState.STABLE and not changed:
            self._spawn(self._store_group(group))
            return JoinResult(ErrorCode.none, new_id, group.generation_id, group.protocol_type, group.protocol_name,
                              group.leader_id or "", [])
        return await self._await_join(group, member, f"static member {instance_id} rejoined")

    async def _add_and_rebalance(self, group: GroupMetadata, member_id: str, instance_id: str | None, client_id: str,
                                 client_host: str, rebalance_ms: int, session_ms: int, protocol_type: str,
                                 protocols: list[tuple[str, bytes]]) -> JoinResult:
        member = MemberMetadata(member_id, instance_id, client_id, client_host, rebalance_ms, session_ms,
                                protocol_type, list(protocols), is_new=True)
        group.add(member)
        self._schedule_heartbeat_expiry(group, member)
        group.new_member_added = True
        return await self._await_join(group, member, f"adding new member {member_id}")

    async def _await_join(self, group: GroupMetadata, member: MemberMetadata, reason: str) -> JoinResult:
        """Puts the member in the join phase (rebalancing if the group may) and waits for its answer."""
        fut: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
        member.awaiting_join = fut
        self._maybe_prepare_rebalance(group, reason)
        self._check_join_complete(group)
        return await fut

    async def _join_known(self, group: GroupMetadata, member_id: str, instance_id: str | None, client_id: str,
                          client_host: str, rebalance_ms: int, session_ms: int, protocol_type: str,
                          protocols: list[tuple[str, bytes]]) -> JoinResult:
        if member_id in group.pending_members:
            return await self._add_and_rebalance(group, member_id, instance_id, client_id, client_host,
                                                 rebalance_ms, session_ms, protocol_type, protocols)
        if group.is_static_member_fenced(member_id, instance_id):
            return JoinResult(ErrorCode.fenced_instance_id, member_id)
        if not group.has(member_id) or (instance_id is not None and group.static_member_id(instance_id) is None):
            return JoinResult(ErrorCode.unknown_member_id, member_id)
        member = group.members[member_id]
        loop = asyncio.get_running_loop()
        # The future is taken before the join can complete: completing it clears member.awaiting_join.
        if group.state == GroupState.PREPARING_REBALANCE:
            fut = self._update_member(group, member, protocols, rebalance_ms, session_ms, loop)
            self._check_join_complete(group)
            return await fut
        if group.state == GroupState.COMPLETING_REBALANCE:
            if member.matches(protocols):
                # The member missed the join response: send it again.
                return self._join_result(group, member_id)
            fut = self._update_member(group, member, protocols, rebalance_ms, session_ms, loop)
            self._prepare_rebalance(group, f"member {member_id} changed protocols")
            return await fut
        if group.state in (GroupState.STABLE, GroupState.EMPTY):
            if group.state == GroupState.STABLE and not group.is_leader(member_id) and member.matches(protocols):
                return self._join_result(group, member_id)
            fut = self._update_member(group, member, protocols, rebalance_ms, session_ms, loop)
            self._prepare_rebalance(group, f"member {member_id} rejoined")
            return await fut
        return JoinResult(ErrorCode.unknown_member_id, member_id)

    def _update_member(self, group: GroupMetadata, member: MemberMetadata, protocols: list[tuple[str, bytes]],
                       rebalance_ms: int, session_ms: int, loop: asyncio.AbstractEventLoop
                       ) -> "asyncio.Future[JoinResult]":
        """Records the member's (re)join; returns the future its JoinGroup answer will come on."""
        member.supported_protocols = list(protocols)
        member.rebalance_timeout_ms, member.session_timeout_ms = rebalance_ms, session_ms
        fut: asyncio.Future[JoinResult] | None = member.awaiting_join
        if fut is None or fut.done():
            fut = member.awaiting_join = loop.create_future()
        return fut  # a repeated JoinGroup shares the pending answer

    def _join_result(self, group: GroupMetadata, member_id: str) -> JoinResult:
        members = group.current_member_metadata() if group.is_leader(member_id) else []
        return JoinResult(ErrorCode.none, member_id, group.generation_id, group.protocol_type,
                          group.protocol_name, group.leader_id or "", members)

    # --- rebalance ------------------------------------------------------------------------------

    def _maybe_prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group, reason)

    def _prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        if group.state == GroupState.PREPARING_REBALANCE:
            return
        if group.state == GroupState.COMPLETING_REBALANCE:
            self._fail_sync(group, ErrorCode.rebalance_in_progress)  # the old generation's pending SyncGroups
        was_empty = group.state == GroupState.EMPTY
        group.clear_assignments()
        group.transition_to(GroupState.PREPARING_REBALANCE, self.clock_ms())
        log.info("group %s: preparing to rebalance (generation %d): %s", group.group_id, group.generation_id, reason)
        delay = (self.config.initial_rebalance_delay_ms if was_empty else 0)
        timeout = max(group.rebalance_timeout_ms(), delay)
        self._schedule(group, delay if was_empty else timeout, initial=was_empty, remaining=timeout - delay)
        self._check_join_complete(group)  # e.g. the last member left: Empty at once, as Kafka's tryCompleteElseWatch

    def _schedule(self, group: GroupMetadata, delay_ms: int, initial: bool, remaining: int) -> None:
        old = self._timers.pop(group.group_id, None)
        if old is not None:
            old.cancel()
        loop = asyncio.get_running_loop()
        (self._initial_delay.add if initial else self._initial_delay.discard)(group.group_id)
        self._timers[group.group_id] = loop.call_later(
            max(0, delay_ms) / 1000, self._on_rebalance_timer, group, initial, remaining
        )

    def _on_rebalance_timer(self, group: GroupMetadata, initial: bool, remaining: int) -> None:
        self._timers.pop(group.group_id, None)
        if group.state != GroupState.PREPARING_REBALANCE or self.manager.groups.get(group.group_id) is not group:
            return
        if initial and group.new_member_added and remaining > 0:
            # Kafka's InitialDelayedJoin: keep waiting, by the initial delay, while members arrive.
            group.new_member_added = False
            step = min(self.config.initial_rebalance_delay_ms, remaining)
            self._schedule(group, step, initial=True, remaining=remaining - step)
            return
        self._complete_join(group, timed_out=True)

    def _check_join_complete(self, group: GroupMetadata) -> None:
        if group.state != GroupState.PREPARING_REBALANCE or group.group_id not in self._timers:
            return
        handle = self._timers[group.group_id]
        # During the initial delay of a new group, the timer decides; otherwise all-joined completes.
        if group.group_id in self._initial_delay:
            return
        if group.all_members_joined():
            handle.cancel()
            self._timers.pop(group.group_id, None)
            self._complete_join(group, timed_out=False)

    def _complete_join(self, group: GroupMetadata, timed_out: bool) -> None:
        self._initial_delay.discard(group.group_id)
        now = self.clock_ms()
        for m in group.not_yet_rejoined():
            if m.group_instance_id is not None:
                continue  # static members keep their place until their session expires (Kafka)
            log.info("group %s: removing member %s (did not rejoin in time)", group.group_id, m.member_id)
            group.remove(m.member_id)
            self._cancel_heartbeat_expiry(group.group_id, m.member_id)
        group.pending_members.clear()
        group.init_next_generation(now)
        log.info("group %s: generation %d, protocol %s, %d members, leader %s", group.group_id,
                 group.generation_id, group.protocol_name, len(group.members), group.leader_id)
        if group.state == GroupState.EMPTY:
            self._spawn(self._store_group(group))
            return
        for m in group.members.values():
            m.answer_join(self._join_result(group, m.member_id))
            m.is_new = False
            self._schedule_heartbeat_expiry(group, m)

    # --- SyncGroup ------------------------------------------------------------------------------

    async def sync_group(self, group_id: str, generation_id: int, member_id: str, instance_id: str | None,
                         protocol_type: str | None, protocol_name: str | None,
                         assignments: dict[str, bytes]) -> tuple[ErrorCode, bytes]:
        error = self._group_error(group_id)
        if error == ErrorCode.coordinator_load_in_progress:
            return ErrorCode.rebalance_in_progress, b""  # Kafka: the member must rejoin anyway
        if error != ErrorCode.none:
            return error, b""
        group = self.manager.groups.get(group_id)
        if group is None:
            return ErrorCode.unknown_member_id, b""
        if group.state == GroupState.DEAD:
            return ErrorCode.coordinator_not_available, b""
        if group.is_static_member_fenced(member_id, instance_id):
            return ErrorCode.fenced_instance_id, b""
        if not group.has(member_id):
            return ErrorCode.unknown_member_id, b""
        if generation_id != group.generation_id:
            return ErrorCode.illegal_generation, b""
        if (protocol_type is not None and protocol_type != group.protocol_type) or (
            protocol_name is not None and protocol_name != group.protocol_name
        ):
            return ErrorCode.inconsistent_group_protocol, b""
        member = group.members[member_id]
        if group.state == GroupState.EMPTY:
            return ErrorCode.unknown_member_id, b""
        if group.state == GroupState.PREPARING_REBALANCE:
            return ErrorCode.rebalance_in_progress, b""
        if group.state == GroupState.STABLE:
            self._schedule_heartbeat_expiry(group, member)
            return ErrorCode.none, member.assignment
        member.awaiting_sync = asyncio.get_running_loop().create_future()
        self._schedule_heartbeat_expiry(group, member)
        if group.is_leader(member_id):
            generation = group.generation_id
            for mid, m in group.members.items():
                m.assignment = assignments.get(mid, b"")
            code = await self._store_group(group)
            if group.state != GroupState.COMPLETING_REBALANCE or group.generation_id != generation:
                pass  # a rebalance began meanwhile; its waiters were answered
            elif code != ErrorCode.none:
                self._fail_sync(group, code)
                self._prepare_rebalance(group, f"storing the assignment failed: {code.name}")
            else:
                group.transition_to(GroupState.STABLE, self.clock_ms())
                for m in group.members.values():
                    m.answer_sync(ErrorCode.none, m.assignment)
        fut: asyncio.Future[tuple[ErrorCode, bytes]] | None = member.awaiting_sync
        if fut is None:  # answered already (this is the leader); the state may have moved during the await
            stable = group.is_in(GroupState.STABLE)
            return (ErrorCode.none, member.assignment) if stable else (
                ErrorCode.rebalance_in_progress, b"")
        return await fut

    def _fail_sync(self, group: GroupMetadata, code: ErrorCode) -> None:
        for m in group.members.values():
            m.answer_sync(code)

    def _store_group(self, group: GroupMetadata) -> "asyncio.Future[ErrorCode]":
        """Appends the group's current generation now (call order is log order); await for the code."""
        if not group.protocol_type and not group.members:
            done = asyncio.get_running_loop().create_future()
            done.set_result(ErrorCode.none)
            return done
        return self.manager.append(group.group_id, [(records.group_key(group.group_id), records.group_value(group))])

    # --- Heartbeat / LeaveGroup -----------------------------------------------------------------

    def heartbeat(self, group_id: str, member_id: str, instance_id: str | None, generation_id: int) -> ErrorCode:
        error = self._group_error(group_id)
        if error == ErrorCode.coordinator_load_in_progress:
            return ErrorCode.none  # Kafka: the member keeps its session until the group is loaded
        if error != ErrorCode.none:
            return error
        group = self.manager.groups.get(group_id)
        if group is None or group.state == GroupState.DEAD:
            return ErrorCode.unknown_member_id if group is None else ErrorCode.coordinator_not_available
        if group.is_static_member_fenced(member_id, instance_id):
            return ErrorCode.fenced_instance_id
        if not group.has(member_id):
            return ErrorCode.unknown_member_id
        if generation_id != group.generation_id:
            return ErrorCode.illegal_generation
        member = group.members[member_id]
        self._schedule_heartbeat_expiry(group, member)
        if group.state == GroupState.PREPARING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        if group.state == GroupState.EMPTY:
            return ErrorCode.unknown_member_id
        return ErrorCode.none

    def leave_group(self, group_id: str, leaving: list[tuple[str, str | None]]) -> tuple[ErrorCode, list[ErrorCode]]:
        error = self._group_error(group_id)
        if error != ErrorCode.none:
            return error, []
        group = self.manager.groups.get(group_id)
        if group is None or group.state == GroupState.DEAD:
            return ErrorCode.none, [ErrorCode.unknown_member_id for _ in leaving]
        codes = []
        for member_id, instance_id in leaving:
            if instance_id is not None:
                known = group.static_member_id(instance_id)
                if known is None:
                    codes.append(ErrorCode.unknown_member_id)
                    continue
                if member_id != UNKNOWN_MEMBER_ID and known != member_id:
                    codes.append(ErrorCode.fenced_instance_id)
                    continue
                member_id = known
            elif member_id in group.pending_members:
                group.pending_members.discard(member_id)
                codes.append(ErrorCode.none)
                self._check_join_complete(group)
                continue
            if not group.has(member_id):
                codes.append(ErrorCode.unknown_member_id)
                continue
            codes.append(ErrorCode.none)
            self._remove_member_and_rebalance(group, member_id, "member left the group")
        return ErrorCode.none, codes

    def _remove_member_and_rebalance(self, group: GroupMetadata, member_id: str, reason: str) -> None:
        member = group.remove(member_id)
        self._cancel_heartbeat_expiry(group.group_id, member_id)
        if member is not None:
            member.answer_join(JoinResult(ErrorCode.unknown_member_id, member_id))
            member.answer_sync(ErrorCode.unknown_member_id)
        log.info("group %s: member %s removed: %s", group.group_id, member_id, reason)
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, reason)
        elif group.state == GroupState.PREPARING_REBALANCE:
            if not group.members:
                self._complete_join(group, timed_out=False)
            else:
                self._check_join_complete(group)

    def _schedule_pending_expiry(self, group: GroupMetadata, member_id: str, session_ms: int) -> None:
        def expire() -> None:
            if member_id in group.pending_members:
                group.pending_members.discard(member_id)
                self._check_join_complete(group)

        asyncio.get_running_loop().call_later(session_ms / 1000, expire)

    # --- session expiry (Kafka's heartbeat purgatory) --------------------------------------------

    def _schedule_heartbeat_expiry(self, group: GroupMetadata, member: MemberMetadata) -> None:
        """The member was heard from: its session now ends session.timeout.ms later, and a timer
        expires it right then unless it is heard from again (Kafka's
        completeAndScheduleNextHeartbeatExpiration)."""
        now = self.clock_ms()
        member.heartbeat_deadline_ms = now + member.session_timeout_ms
        self._arm_heartbeat_expiry(group, member.member_id, member.heartbeat_deadline_ms, now)

    def _arm_heartbeat_expiry(self, group: GroupMetadata, member_id: str, deadline_ms: int, now: int) -> None:
        key = (group.group_id, member_id)
        old = self._heartbeats.pop(key, None)
        if old is not None:
            old.cancel()
        self._heartbeats[key] = asyncio.get_running_loop().call_later(
            max(0, deadline_ms - now) / 1000, self._on_heartbeat_expiry, group, member_id, deadline_ms)

    def _cancel_heartbeat_expiry(self, group_id: str, member_id: str) -> None:
        handle = self._heartbeats.pop((group_id, member_id), None)
        if handle is not None:
            handle.cancel()

    def _on_heartbeat_expiry(self, group: GroupMetadata, member_id: str, deadline_ms: int) -> None:
        """A member's deadline passed without news: it leaves the group (Kafka's onExpireHeartbeat),
        unless it waits in a JoinGroup or SyncGroup, which keeps it alive until answered."""
        key = (group.group_id, member_id)
        self._heartbeats.pop(key, None)
        member = group.members.get(member_id)
        if (member is None or self.manager.groups.get(group.group_id) is not group or group.state == GroupState.DEAD
                or not self.manager.is_local(group.group_id) or self.manager.is_loading(group.group_id)):
            return
        now = self.clock_ms()
        if member.heartbeat_deadline_ms > deadline_ms:  # heard from since, without a new timer
            self._arm_heartbeat_expiry(group, member_id, member.heartbeat_deadline_ms, now)
        elif member.awaiting_join is not None or member.awaiting_sync is not None:
            self._arm_heartbeat_expiry(group, member_id, now + member.session_timeout_ms, now)
        else:
            self._remove_member_and_rebalance(group, member_id, "session timeout expired")

    async def _offset_expiry_loop(self) -> None:
        """Expires old offsets every offsets.retention.check.interval.ms (Kafka's scheduled task)."""
        while True:
            await asyncio.sleep(self.config.offsets_retention_check_interval_ms / 1000)
            try:
                await self.cleanup_offsets(self.clock_ms())
            except Exception:
                log.exception("offset expiration failed")

    # --- offsets --------------------------------------------------------------------------------

    async def commit_offsets(self, group_id: str, member_id: str, instance_id: str | None, generation_id: int,
                             offsets: dict[tuple[str, int], OffsetAndMetadata]) -> dict[tuple[str, int], ErrorCode]:
        def all_(code: ErrorCode) -> dict[tuple[str, int], ErrorCode]:
            return dict.fromkeys(offsets, code)

        error = self._group_error(group_id)
        if error != ErrorCode.none:
            return all_(error)
        group = self.manager.groups.get(group_id)
        if group is None:
            if generation_id >= 0:
                return all_(ErrorCode.illegal_generation)
            group = self.manager.groups[group_id] = GroupMetadata(group_id, state_timestamp=self.clock_ms())
        if group.state == GroupState.DEAD:
            return all_(ErrorCode.coordinator_not_available)
        if not (generation_id < 0 and group.state == GroupState.EMPTY):
            if group.is_static_member_fenced(member_id, instance_id):
                return all_(ErrorCode.fenced_instance_id)
            if not group.has(member_id):
                return all_(ErrorCode.unknown_member_id)
            if generation_id != group.generation_id:
                return all_(ErrorCode.illegal_generation)
            if group.state == GroupState.COMPLETING_REBALANCE:
                return all_(ErrorCode.rebalance_in_progress)
            self._schedule_heartbeat_expiry(group, group.members[member_id])
        result: dict[tuple[str, int], ErrorCode] = {}
        entries = []
        accepted = {}
        for (topic, p), om in offsets.items():
            if om.metadata is not None and len(om.metadata.encode()) > self.config.offset_metadata_max_bytes:
                result[(topic, p)] = ErrorCode.offset_metadata_too_large
                continue
            accepted[(topic, p)] = om
            entries.append((records.offset_key(group_id, topic, p), records.offset_value(om)))
        if entries:
            code = await self.manager.append(group_id, entries)
            if code == ErrorCode.none and self.manager.groups.get(group_id) is group:
                group.offsets.update(accepted)
            for k in accepted:
                result[k] = code
        return {k: result[k] for k in offsets}

    def fetch_offsets(self, group_id: str, partitions: list[tuple[str, int]] | None
                      ) -> tuple[ErrorCode, dict[tuple[str, int], OffsetAndMetadata | None]]:
        """(error, {(topic, partition): OffsetAndMetadata | None}); None partitions = all committed."""
        error = self._group_error(group_id)
        if error != ErrorCode.none:
            return error, {}
        group = self.manager.groups.get(group_id)
        committed = {} if group is None or group.state == GroupState.DEAD else group.offsets
        if partitions is None:
            return ErrorCode.none, dict(committed)
        return ErrorCode.none, {k: committed.get(k) for k in partitions}

    async def cleanup_offsets(self, now: int) -> int:
        removed = 0
        for group in list(self.manager.groups.values()):
            if not self.manager.is_local(group.group_id) or self.manager.is_loading(group.group_id):
                continue
            expired = group.expired_offsets(now, self.config.offsets_retention_ms, group.subscribed_topics())
            if expired and await self._remove_offsets(group, expired) == ErrorCode.none:
                removed += len(expired)
        return removed

    async def _remove_offsets(self, group: GroupMetadata, keys: list[tuple[str, int]]) -> ErrorCode:
        """Tombstones for the group's offsets of `keys` (Kafka's cleanupGroupMetadata); an Empty
        group left without offsets is deleted with them (its own tombstone). Returns the append's
        code; nothing to tombstone is nothing to append (Kafka's cleanupGroupMetadata): NONE."""
        entries = [(records.offset_key(group.group_id, t, p), None) for t, p in keys]
        drop_group = group.state == GroupState.EMPTY and not set(group.offsets) - set(keys)
        if drop_group:
            entries.append((records.group_key(group.group_id), None))
        if not entries:
            return ErrorCode.none
        code = await self.manager.append(group.group_id, entries)
        if code == ErrorCode.none and self.manager.groups.get(group.group_id) is group:
            for k in keys:
                group.offsets.pop(k, None)
            if drop_group and group.state == GroupState.EMPTY and not group.offsets:
                group.transition_to(GroupState.DEAD, self.clock_ms())
                self.manager.groups.pop(group.group_id, None)
        return code

    async def delete_offsets(self, group_id: str, partitions: list[tuple[str, int]]
                             ) -> tuple[ErrorCode, dict[tuple[str, int], ErrorCode]]:
        """OffsetDelete (KIP-496, Kafka's handleDeleteOffsets): an Empty group loses the offsets
        asked for; a live consumer group only those of topics no member subscribes to
        (GROUP_SUBSCRIBED_TO_TOPIC for the others); another live group refuses (NON_EMPTY_GROUP).
        Returns (group error, per-partition codes); a group error comes with no partition codes."""
        error = self._group_error(group_id)
        if error != ErrorCode.none:
            return error, {}
        group = self.manager.groups.get(group_id)
        if group is None or group.state == GroupState.DEAD:
            return ErrorCode.group_id_not_found, {}
        out: dict[tuple[str, int], ErrorCode] = {}
        if group.state == GroupState.EMPTY:
            eligible = list(partitions)
        elif group.protocol_type == CONSUMER_PROTOCOL_TYPE:
            subscribed = group.subscribed_topics() or set()
            eligible = [k for k in partitions if k[0] not in subscribed]
            out.update({k: ErrorCode.group_subscribed_to_topic for k in partitions if k[0] in subscribed})
        else:
            return ErrorCode.non_empty_group, {}
        if eligible:
            code = await self._remove_offsets(group, [k for k in dict.fromkeys(eligible) if k in group.offsets])
            out.update(dict.fromkeys(eligible, code))
            log.info("group %s: offsets of %s deleted (%s)", group_id, eligible, code.name)
        return ErrorCode.none, out

    # --- admin ----------------------------------------------------------------------------------

    def describe_group(self, group_id: str) -> tuple[ErrorCode, GroupMetadata | None]:
        error = self._group_error(group_id)
        if error != ErrorCode.none:
            return error, None
        return ErrorCode.none, self.manager.groups.get(group_id)

    def list_groups(self, states: set[str] | None) -> tuple[ErrorCode, list[GroupMetadata]]:
        if self.manager.loading:
            return ErrorCode.coordinator_load_in_progress, []
        groups = [g for g in self.manager.groups.values() if self.manager.is_local(g.group_id) and g.state != GroupState.DEAD]
        if states:
            lowered = {s.lower() for s in states}
            groups = [g for g in groups if g.state.value.lower() in lowered]
        return ErrorCode.none, groups

    async def delete_groups(self, group_ids: list[str]) -> dict[str, ErrorCode]:
        out: dict[str, ErrorCode] = {}
        for gid in group_ids:
            error = self._group_error(gid)
            if error != ErrorCode.none:
                out[gid] = error
                continue
            group = self.manager.groups.get(gid)
            if group is None or group.state == GroupState.DEAD:
                out[gid] = ErrorCode.group_id_not_found
                continue
            if group.state != GroupState.EMPTY:
                out[gid] = ErrorCode.non_empty_group
                continue
            entries = [(records.offset_key(gid, t, p), None) for t, p in group.offsets]
            entries.append((records.group_key(gid), None))
            code = await self.manager.append(gid, entries)
            if code == ErrorCode.none and self.manager.groups.get(gid) is group:
                group.transition_to(GroupState.DEAD, self.clock_ms())
                self.manager.groups.pop(gid, None)
            out[gid] = code
        return out

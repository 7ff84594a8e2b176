"""GroupCoordinator and GroupMetadata driven in-process: the rebalance state machine and the error
codes Kafka's coordinator returns, with `__consumer_offsets` appends captured by a stand-in
replica manager (its records are replayed to check that what was stored reloads)."""

import asyncio
import struct
from types import SimpleNamespace

import pytest
from kio.schema.errors import ErrorCode
from virtual_time import VirtualClock, run_virtual, turns, until

from odradek.broker.group.consumer_protocol import subscription_topics
from odradek.broker.group.group_coordinator import GroupConfig, GroupCoordinator
from odradek.broker.group.group_metadata import GroupMetadata, GroupState, MemberMetadata, OffsetAndMetadata
from odradek.broker.group.group_metadata_manager import GroupMetadataManager
from odradek.broker.log.record_batch import decode_records

E = ErrorCode
PROTOS = [("range", b"sub")]


class StubReplicaManager:
    """Accepts every append (or fails them with `error`) and keeps the batches."""

    def __init__(self):
        self.batches: list[bytes] = []
        self.error = E.none

    async def append_records(self, timeout_ms, acks, entries):
        out = {}
        for topic, p, batch in entries:
            if self.error == E.none:
                self.batches.append(batch)
            out[(topic, p)] = SimpleNamespace(error=self.error)
        return out

    def records(self):
        return [r for b in self.batches for r in decode_records(b)]


def make(clock=None, **cfg) -> tuple[GroupCoordinator, StubReplicaManager]:
    rm = StubReplicaManager()
    mgr = GroupMetadataManager(0, rm, partition_count=1)
    mgr.owned[0] = 0
    config = GroupConfig(min_session_timeout_ms=10, initial_rebalance_delay_ms=0, **cfg)
    return (GroupCoordinator(mgr, config) if clock is None else GroupCoordinator(mgr, config, clock_ms=clock)), rm


def test_times_come_from_the_injected_clock():
    now = [1_000_000]
    gc, _ = make(clock=lambda: now[0])

    async def scenario():
        m1, _ = await stable_single(gc)
        group = gc.manager.groups["g"]
        assert group.state_timestamp == 1_000_000
        now[0] += 500
        gc.heartbeat("g", m1, None, group.generation_id)
        assert group.members[m1].heartbeat_deadline_ms == 1_000_500 + group.members[m1].session_timeout_ms

    run(scenario)


def run(coro_fn, timeout=10):
    return asyncio.run(asyncio.wait_for(coro_fn(), timeout))


async def join(gc, member="", group="g", instance=None, require_known=False, session=10_000, rebalance=2_000,
               protocols=PROTOS):
    return await gc.join_group(group, member, instance, require_known, "cid", "/127.0.0.1", rebalance, session,
                               "consumer", protocols)


async def stable_single(gc, group="g"):
    """One member through join and sync: (member id, generation)."""
    r = await join(gc, group=group)
    assert r.error == E.none and r.leader_id == r.member_id
    code, assignment = await gc.sync_group(group, r.generation_id, r.member_id, None, "consumer", "range",
                                           {r.member_id: b"all"})
    assert (code, assignment) == (E.none, b"all")
    return r.member_id, r.generation_id


# --- GroupMetadata transitions ---------------------------------------------------------------------


def test_legal_and_illegal_transitions():
    g = GroupMetadata("g")
    for target in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
        with pytest.raises(ValueError):
            g.transition_to(target)
    g.transition_to(GroupState.PREPARING_REBALANCE)
    g.transition_to(GroupState.COMPLETING_REBALANCE)
    with pytest.raises(ValueError):
        g.transition_to(GroupState.EMPTY)
    g.transition_to(GroupState.STABLE)
    g.transition_to(GroupState.PREPARING_REBALANCE)
    g.transition_to(GroupState.EMPTY)
    g.transition_to(GroupState.DEAD)
    with pytest.raises(ValueError):
        g.transition_to(GroupState.PREPARING_REBALANCE)


def test_protocol_selection_by_vote():
    g = GroupMetadata("g")
    for mid, protos in (("a", ["roundrobin", "range"]), ("b", ["range", "roundrobin"]), ("c", ["range", "sticky"])):
        g.add(MemberMetadata(mid, None, "c", "h", 1, 1, "consumer", [(p, b"") for p in protos]))
    assert g.candidate_protocols() == {"range"}
    assert g.select_protocol() == "range"
    assert g.supports("consumer", ["range"]) and not g.supports("consumer", ["sticky"])
    assert not g.supports("connect", ["range"])


# --- rebalance state machine -----------------------------------------------------------------------


def test_single_member_empty_to_stable_to_empty():
    gc, rm = make()

    async def scenario():
        r = await join(gc)
        group = gc.manager.groups["g"]
        assert (r.generation_id, group.state, r.protocol_name) == (1, GroupState.COMPLETING_REBALANCE, "range")
        assert [m[0] for m in r.members] == [r.member_id]  # the leader gets the member list
        assert gc.heartbeat("g", r.member_id, None, 1) == E.none  # allowed while completing
        code, assignment = await gc.sync_group("g", 1, r.member_id, None, None, None, {r.member_id: b"A"})
        assert (code, assignment, group.state) == (E.none, b"A", GroupState.STABLE)
        code, codes = gc.leave_group("g", [(r.member_id, None)])
        assert (code, codes) == (E.none, [E.none])
        assert group.state == GroupState.EMPTY and group.generation_id == 2

    run(scenario)
    # The stored generations reload as the same group.
    loaded = GroupMetadataManager(0, None, 1)
    loaded.replay(0, rm.records())
    assert loaded.groups["g"].state == GroupState.EMPTY and loaded.groups["g"].generation_id == 2


def test_member_id_required_then_join_with_it():
    gc, _ = make()

    async def scenario():
        r = await join(gc, require_known=True)
        assert r.error == E.member_id_required and r.member_id.startswith("cid-")
        r2 = await join(gc, member=r.member_id, require_known=True)
        assert r2.error == E.none and r2.member_id == r.member_id and r2.generation_id == 1

    run(scenario)


def test_second_member_triggers_rebalance_and_old_generation_is_refused():
    gc, _ = make()

    async def scenario():
        m1, gen1 = await stable_single(gc)
        group = gc.manager.groups["g"]
        j2 = asyncio.ensure_future(join(gc))
        await until(lambda: group.state == GroupState.PREPARING_REBALANCE, "the second member's join")
        assert group.state == GroupState.PREPARING_REBALANCE
        assert gc.heartbeat("g", m1, None, gen1) == E.rebalance_in_progress
        offsets = {("t", 0): OffsetAndMetadata(5)}
        assert await gc.commit_offsets("g", m1, None, gen1, offsets) == {("t", 0): E.none}  # still allowed
        assert await gc.sync_group("g", gen1, m1, None, None, None, {}) == (E.rebalance_in_progress, b"")
        r1 = await join(gc, member=m1)
        r2 = await j2
        assert r1.generation_id == r2.generation_id == gen1 + 1
        assert r1.leader_id == m1 and len(r1.members) == 2 and r2.members == []
        assert group.state == GroupState.COMPLETING_REBALANCE
        # Old generation everywhere → ILLEGAL_GENERATION; mid-sync commits → REBALANCE_IN_PROGRESS.
        assert gc.heartbeat("g", m1, None, gen1) == E.illegal_generation
        assert await gc.commit_offsets("g", m1, None, gen1, offsets) == {("t", 0): E.illegal_generation}
        assert await gc.sync_group("g", gen1, m1, None, None, None, {}) == (E.illegal_generation, b"")
        assert await gc.commit_offsets("g", m1, None, r1.generation_id, offsets) == {("t", 0): E.rebalance_in_progress}
        # The follower's SyncGroup waits for the leader's.
        s2 = asyncio.ensure_future(gc.sync_group("g", r2.generation_id, r2.member_id, None, None, None, {}))
        await turns()
        assert not s2.done()
        s1 = await gc.sync_group("g", r1.generation_id, m1, None, None, None, {m1: b"p0", r2.member_id: b"p1"})
        assert s1 == (E.none, b"p0") and await s2 == (E.none, b"p1")
        assert group.state == GroupState.STABLE

    run(scenario)


def test_unknown_member_errors():
    gc, _ = make()

    async def scenario():
        assert gc.heartbeat("g", "nobody", None, 1) == E.unknown_member_id  # no such group
        assert (await join(gc, member="nobody")).error == E.unknown_member_id
        _m1, gen = await stable_single(gc)
        assert gc.heartbeat("g", "nobody", None, gen) == E.unknown_member_id
        assert await gc.sync_group("g", gen, "nobody", None, None, None, {}) == (E.unknown_member_id, b"")
        assert (await gc.commit_offsets("g", "nobody", None, gen, {("t", 0): OffsetAndMetadata(1)})
                == {("t", 0): E.unknown_member_id})
        assert gc.leave_group("g", [("nobody", None)]) == (E.none, [E.unknown_member_id])
        assert (await join(gc, member="nobody")).error == E.unknown_member_id

    run(scenario)


def test_commits_outside_group_management():
    gc, _ = make()

    async def scenario():
        o = {("t", 0): OffsetAndMetadata(7, metadata="m")}
        # No group yet: generation -1 is a standalone committer; a real generation is stale.
        assert await gc.commit_offsets("solo", "", None, -1, o) == {("t", 0): E.none}
        assert await gc.commit_offsets("other", "x", None, 3, o) == {("t", 0): E.illegal_generation}
        code, found = gc.fetch_offsets("solo", [("t", 0), ("t", 1)])
        assert code == E.none and found[("t", 0)].offset == 7 and found[("t", 0)].metadata == "m"
        assert found[("t", 1)] is None
        too_big = {("t", 0): OffsetAndMetadata(1, metadata="x" * 5000)}
        assert await gc.commit_offsets("solo", "", None, -1, too_big) == {("t", 0): E.offset_metadata_too_large}

    run(scenario)


def test_failed_offsets_append_maps_to_coordinator_errors():
    gc, rm = make()

    async def scenario():
        o = {("t", 0): OffsetAndMetadata(1)}
        rm.error = E.not_leader_or_follower
        assert await gc.commit_offsets("g", "", None, -1, o) == {("t", 0): E.not_coordinator}
        rm.error = E.not_enough_replicas
        assert await gc.commit_offsets("g", "", None, -1, o) == {("t", 0): E.coordinator_not_available}
        rm.error = E.none
        assert gc.fetch_offsets("g", [("t", 0)])[1][("t", 0)] is None  # nothing cached when the append failed

    run(scenario)


def test_static_member_rejoin_keeps_its_place_and_fences_the_old_id():
    gc, _ = make()

    async def scenario():
        r = await join(gc, instance="inst-1")
        code, _ = await gc.sync_group("g", r.generation_id, r.member_id, "inst-1", None, None, {r.member_id: b"A"})
        assert code == E.none
        again = await join(gc, instance="inst-1")  # restarted: empty member id, same instance id
        assert again.error == E.none and again.member_id != r.member_id
        assert again.generation_id == r.generation_id  # no rebalance for an unchanged static member
        group = gc.manager.groups["g"]
        assert group.state == GroupState.STABLE and group.members[again.member_id].assignment == b"A"
        assert gc.heartbeat("g", r.member_id, "inst-1", r.generation_id) == E.fenced_instance_id
        assert await gc.sync_group("g", r.generation_id, r.member_id, "inst-1", None, None, {}) == (
            E.fenced_instance_id, b"")
        assert (await gc.commit_offsets("g", r.member_id, "inst-1", r.generation_id, {("t", 0): OffsetAndMetadata(1)})
                == {("t", 0): E.fenced_instance_id})
        assert (await join(gc, member=r.member_id, instance="inst-1")).error == E.fenced_instance_id
        assert gc.leave_group("g", [(r.member_id, "inst-1")]) == (E.none, [E.fenced_instance_id])
        assert gc.heartbeat("g", again.member_id, "inst-1", again.generation_id) == E.none

    run(scenario)


def test_session_expiry_removes_member_and_rebalances():
    gc, _ = make()

    async def scenario():
        gc.startup()
        try:
            r1 = await join(gc, session=300)
            await gc.sync_group("g", r1.generation_id, r1.member_id, None, None, None, {})
            j2 = asyncio.ensure_future(join(gc, session=10_000, rebalance=10_000))
            # m1 never heartbeats or rejoins: it expires, and the join completes with m2 alone.
            r2 = await asyncio.wait_for(j2, 5)
            group = gc.manager.groups["g"]
            assert r2.error == E.none and list(group.members) == [r2.member_id]
            assert r2.leader_id == r2.member_id and r2.generation_id == r1.generation_id + 1
        finally:
            gc.shutdown()

    run(scenario)


def make_virtual(clock: VirtualClock, **cfg) -> GroupCoordinator:
    gc, _ = make(**cfg)
    return GroupCoordinator(gc.manager, gc.config, clock_ms=clock.ms)


def test_session_expires_exactly_at_the_deadline_on_a_virtual_clock():
    """Kafka's heartbeat purgatory: a member is removed when session.timeout.ms has passed since
    it was last heard from, not a reaper tick later; every heartbeat moves the deadline."""
    clock = VirtualClock()
    gc = make_virtual(clock)

    async def scenario():
        gc.startup()
        try:
            m, gen = await stable_single(gc)
            group = gc.manager.groups["g"]
            for _ in range(3):  # heartbeats just inside the session keep the member
                await asyncio.sleep(9.999)
                assert gc.heartbeat("g", m, None, gen) == E.none
            last_heard = clock.now
            await asyncio.sleep(9.999)
            assert group.has(m) and group.state == GroupState.STABLE
            await asyncio.sleep(0.001)  # exactly the deadline: 10 000 ms after the last heartbeat
            assert clock.now == pytest.approx(last_heard + 10.0)
            assert not group.has(m) and group.state == GroupState.EMPTY
        finally:
            gc.shutdown()

    run_virtual(scenario, clock)


def test_a_member_waiting_in_a_join_or_sync_does_not_expire():
    """Waiting in JoinGroup or SyncGroup keeps a member alive however long the wait (Kafka's
    shouldKeepAlive); once answered, its session runs from the answer."""
    clock = VirtualClock()
    gc = make_virtual(clock)

    async def heartbeats(member, generation, seconds):
        for _ in range(int(seconds / 5)):
            await asyncio.sleep(5)
            gc.heartbeat("g", member, None, generation)

    async def scenario():
        gc.startup()
        try:
            r1 = await join(gc, session=10_000, rebalance=60_000)
            await gc.sync_group("g", r1.generation_id, r1.member_id, None, None, None, {r1.member_id: b"a"})
            group = gc.manager.groups["g"]
            started = clock.now
            # r2 waits in JoinGroup; r1 heartbeats but never rejoins: the join waits out the rebalance timeout
            j2 = asyncio.ensure_future(join(gc, session=10_000, rebalance=60_000))
            await heartbeats(r1.member_id, r1.generation_id, 55)
            assert not j2.done() and len(group.members) == 2
            r2 = await j2
            assert clock.now == pytest.approx(started + 60)  # the rebalance timeout, not r2's session
            assert r2.error == E.none and list(group.members) == [r2.member_id]  # r1 did not rejoin

            # r3 joins; r2 (now leader) rejoins; r3 then waits in SyncGroup while r2 heartbeats
            j3 = asyncio.ensure_future(join(gc, session=10_000, rebalance=60_000))
            j2b = asyncio.ensure_future(join(gc, member=r2.member_id, session=10_000, rebalance=60_000))
            r3, r2b = await j3, await j2b
            s3 = asyncio.ensure_future(gc.sync_group("g", r3.generation_id, r3.member_id, None, None, None, {}))
            await heartbeats(r2b.member_id, r2b.generation_id, 30)
            assert group.has(r3.member_id) and not s3.done()
            await gc.sync_group("g", r2b.generation_id, r2b.member_id, None, None, None,
                                {r2b.member_id: b"x", r3.member_id: b"y"})
            assert await s3 == (E.none, b"y")
            answered = clock.now
            await asyncio.sleep(10)  # no news from r3 since its SyncGroup answer: it expires then
            assert not group.has(r3.member_id) and clock.now == pytest.approx(answered + 10)
        finally:
            gc.shutdown()

    run_virtual(scenario, clock)


def test_rebalance_timeout_drops_members_that_did_not_rejoin():
    gc, _ = make()

    async def scenario():
        r1 = await join(gc, rebalance=300)
        await gc.sync_group("g", r1.generation_id, r1.member_id, None, None, None, {})
        r2 = await asyncio.wait_for(join(gc, rebalance=300), 5)  # m1 keeps its session but never rejoins
        assert r2.error == E.none and list(gc.manager.groups["g"].members) == [r2.member_id]

    run(scenario)


def test_not_coordinator_and_loading():
    gc, _ = make()
    gc.manager._partition_count = 2
    owned_group = next(g for g in (f"g{i}" for i in range(100)) if gc.manager.partition_for(g) == 0)
    other_group = next(g for g in (f"g{i}" for i in range(100)) if gc.manager.partition_for(g) == 1)

    async def scenario():
        assert (await join(gc, group=other_group)).error == E.not_coordinator
        assert gc.heartbeat(other_group, "m", None, 1) == E.not_coordinator
        assert gc.fetch_offsets(other_group, None)[0] == E.not_coordinator
        gc.manager.loading.add(1)
        assert (await join(gc, group=other_group)).error == E.coordinator_load_in_progress
        assert gc.fetch_offsets(other_group, None)[0] == E.coordinator_load_in_progress
        assert (await join(gc, group="")).error == E.invalid_group_id
        r = await join(gc, group=owned_group, session=5)  # below group.min.session.timeout.ms
        assert r.error == E.invalid_session_timeout

    run(scenario)


def test_inconsistent_protocols_refused():
    gc, _ = make()

    async def scenario():
        await stable_single(gc)
        r = await join(gc, protocols=[("roundrobin", b"")])
        assert r.error == E.inconsistent_group_protocol

    run(scenario)


def test_delete_groups_and_offset_expiry():
    gc, rm = make(offsets_retention_ms=1000)

    async def scenario():
        m, gen = await stable_single(gc)
        assert await gc.commit_offsets("g", m, None, gen, {("t", 0): OffsetAndMetadata(4, commit_timestamp=0)}) == {
            ("t", 0): E.none}
        assert await gc.delete_groups(["g", "nope"]) == {"g": E.non_empty_group, "nope": E.group_id_not_found}
        gc.leave_group("g", [(m, None)])
        group = gc.manager.groups["g"]
        assert group.state == GroupState.EMPTY
        # Retention: nothing expires while the group has been empty less than offsets.retention.
        assert await gc.cleanup_offsets(group.state_timestamp + 999) == 0
        assert await gc.cleanup_offsets(group.state_timestamp + 1000) == 1
        assert "g" not in gc.manager.groups  # an empty group without offsets is gone
        assert await gc.commit_offsets("h", "", None, -1, {("t", 0): OffsetAndMetadata(1)}) == {("t", 0): E.none}
        assert await gc.delete_groups(["h"]) == {"h": E.none}
        assert gc.fetch_offsets("h", [("t", 0)])[1][("t", 0)] is None

    run(scenario)
    # The log holds the tombstones: replaying it leaves neither group.
    loaded = GroupMetadataManager(0, None, 1)
    loaded.replay(0, rm.records())
    assert loaded.groups == {}


def subscription(*topics: str, version: int = 1) -> bytes:
    """ConsumerProtocolSubscription bytes: version, topics, user data (null) and, v1+, no owned partitions."""
    out = struct.pack(">hi", version, len(topics))
    for t in topics:
        name = t.encode()
        out += struct.pack(">h", len(name)) + name
    out += struct.pack(">i", -1)
    return out + (struct.pack(">i", 0) if version >= 1 else b"")


def test_live_group_offsets_of_topics_no_member_subscribes_to_expire():
    gc, _ = make(offsets_retention_ms=1000)

    async def scenario():
        r = await join(gc, protocols=[("range", subscription("kept", "also"))])
        code, _ = await gc.sync_group("g", r.generation_id, r.member_id, None, "consumer", "range", {r.member_id: b""})
        assert code == E.none
        committed = {("kept", 0): OffsetAndMetadata(1, commit_timestamp=0),
                     ("gone", 0): OffsetAndMetadata(2, commit_timestamp=0)}
        assert await gc.commit_offsets("g", r.member_id, None, r.generation_id, committed) == dict.fromkeys(committed, E.none)
        group = gc.manager.groups["g"]
        assert group.state == GroupState.STABLE and group.subscribed_topics() == {"kept", "also"}
        assert await gc.cleanup_offsets(999) == 0
        assert await gc.cleanup_offsets(1000) == 1
        assert set(group.offsets) == {("kept", 0)} and "g" in gc.manager.groups

    run(scenario)


def test_offset_delete_refuses_subscribed_topics_and_tombstones_the_rest():
    gc, rm = make()

    async def scenario():
        assert await gc.delete_offsets("nope", [("t", 0)]) == (E.group_id_not_found, {})
        assert await gc.delete_offsets("", [("t", 0)]) == (E.invalid_group_id, {})
        r = await join(gc, protocols=[("range", subscription("kept"))])
        code, _ = await gc.sync_group("g", r.generation_id, r.member_id, None, "consumer", "range", {r.member_id: b""})
        assert code == E.none
        committed = {("kept", 0): OffsetAndMetadata(1), ("kept", 1): OffsetAndMetadata(2),
                     ("other", 0): OffsetAndMetadata(3)}
        assert await gc.commit_offsets("g", r.member_id, None, r.generation_id, committed) == dict.fromkeys(committed, E.none)
        # Stable consumer group: a topic a member subscribes to is refused, the others deleted.
        assert await gc.delete_offsets("g", [("kept", 0), ("other", 0), ("never", 0)]) == (E.none, {
            ("kept", 0): E.group_subscribed_to_topic, ("other", 0): E.none, ("never", 0): E.none})
        group = gc.manager.groups["g"]
        assert set(group.offsets) == {("kept", 0), ("kept", 1)}
        # Partitions without offsets only: nothing to tombstone, answered NONE (an empty batch
        # failed the whole request with UNKNOWN_SERVER_ERROR, found by a structured fuzz run)
        appended = len(rm.records())
        assert await gc.delete_offsets("g", [("never", 0), ("never", 0)]) == (E.none, {("never", 0): E.none})
        assert len(rm.records()) == appended and set(group.offsets) == {("kept", 0), ("kept", 1)}
        # Empty: everything may go; the last offsets take the group with them.
        gc.leave_group("g", [(r.member_id, None)])
        assert await gc.delete_offsets("g", [("kept", 0)]) == (E.none, {("kept", 0): E.none})
        assert "g" in gc.manager.groups
        assert await gc.delete_offsets("g", [("kept", 1)]) == (E.none, {("kept", 1): E.none})
        assert "g" not in gc.manager.groups
        assert await gc.delete_offsets("g", [("kept", 1)]) == (E.group_id_not_found, {})

    run(scenario)
    loaded = GroupMetadataManager(0, None, 1)
    loaded.replay(0, rm.records())
    assert loaded.groups == {}  # the tombstones reload as deletions


def test_offset_delete_of_a_live_group_of_another_protocol_is_refused():
    gc, _ = make()

    async def scenario():
        r = await gc.join_group("c", "", None, False, "cid", "/h", 2000, 10_000, "connect", [("v1", b"")])
        assert r.error == E.none
        await gc.sync_group("c", r.generation_id, r.member_id, None, None, None, {r.member_id: b""})
        assert await gc.delete_offsets("c", [("t", 0)]) == (E.non_empty_group, {})

    run(scenario)


def test_subscription_topics_of_every_version_and_garbage():
    for version in (0, 1, 3):
        assert subscription_topics(subscription("a", "bé", version=version)) == ["a", "bé"]
    for garbage in (b"", b"\x00\x01", struct.pack(">hi", 0, 2) + b"\x00\x09abc", struct.pack(">hi", -1, 0)):
        with pytest.raises(ValueError):
            subscription_topics(garbage)
    g = GroupMetadata("g", protocol_type="consumer", protocol_name="range")
    g.add(MemberMetadata("m1", None, "c", "h", 1, 1, "consumer", [("range", subscription("a"))]))
    g.add(MemberMetadata("m2", None, "c", "h", 1, 1, "consumer", [("range", subscription("b"))]))
    assert g.subscribed_topics() == {"a", "b"}
    g.add(MemberMetadata("m3", None, "c", "h", 1, 1, "consumer", [("range", b"not a subscription")]))
    assert g.subscribed_topics() is None  # unknown: nothing expires for lack of a subscription
    assert GroupMetadata("c", protocol_type="connect", protocol_name="x").subscribed_topics() is None


# --- group.max.size ---------------------------------------------------------------------------------


async def stable_pair(gc, group="g"):
    """Two members joined together and synced: (leader id, follower id, generation)."""
    j1, j2 = asyncio.ensure_future(join(gc, group=group)), asyncio.ensure_future(join(gc, group=group))
    r1, r2 = await j1, await j2
    leader, follower = (r1, r2) if r1.leader_id == r1.member_id else (r2, r1)
    s2 = asyncio.ensure_future(gc.sync_group(group, follower.generation_id, follower.member_id, None, None, None, {}))
    await gc.sync_group(group, leader.generation_id, leader.member_id, None, None, None,
                        {leader.member_id: b"a", follower.member_id: b"b"})
    assert await s2 == (E.none, b"b")
    return leader.member_id, follower.member_id, leader.generation_id


def test_group_max_size_refuses_a_new_member_of_a_full_group():
    gc, _ = make(max_size=2)

    async def scenario():
        m1, m2, gen = await stable_pair(gc)
        group = gc.manager.groups["g"]
        assert group.state == GroupState.STABLE
        for require_known in (False, True):  # before MEMBER_ID_REQUIRED too, as Kafka checks first
            r = await join(gc, require_known=require_known)
            assert (r.error, r.member_id) == (E.group_max_size_reached, "")
        assert set(group.members) == {m1, m2} and group.state == GroupState.STABLE and not group.pending_members
        # Existing members still rejoin; a member that left makes room for a new one.
        assert gc.leave_group("g", [(m2, None)]) == (E.none, [E.none])
        j3 = asyncio.ensure_future(join(gc))
        await until(lambda: len(group.members) == 2, "the newcomer's join")
        r1 = await join(gc, member=m1)
        r3 = await j3
        assert r1.error == r3.error == E.none and r1.generation_id == r3.generation_id == gen + 1
        assert set(group.members) == {m1, r3.member_id}

    run(scenario)


def test_group_max_size_while_preparing_counts_the_members_waiting():
    """Kafka's rule in PreparingRebalance: a newcomer fits while fewer than group.max.size members
    wait in the join; an old member that rejoins once the join is full is dropped."""
    gc, _ = make(max_size=2)

    async def scenario():
        m1, m2, gen = await stable_pair(gc)
        group = gc.manager.groups["g"]
        j1 = asyncio.ensure_future(join(gc, member=m1))
        await until(lambda: group.num_awaiting_join() == 1, "m1's rejoin")
        assert group.state == GroupState.PREPARING_REBALANCE and group.num_awaiting_join() == 1
        j3 = asyncio.ensure_future(join(gc))  # one waiting < 2: accepted although the group has 2 members
        await until(lambda: len(group.members) == 3, "the newcomer's join")
        assert len(group.members) == 3 and group.num_awaiting_join() == 2
        late = await join(gc, member=m2)
        assert (late.error, late.member_id) == (E.group_max_size_reached, "")
        r1, r3 = await j1, await j3  # dropping m2 completed the join
        assert r1.error == r3.error == E.none and r1.generation_id == r3.generation_id == gen + 1
        assert set(group.members) == {m1, r3.member_id} and group.state == GroupState.COMPLETING_REBALANCE
        assert gc.heartbeat("g", m2, None, gen + 1) == E.unknown_member_id

    run(scenario)


def test_group_max_size_default_is_kafkas():
    assert GroupConfig().max_size == 2147483647

"""Drain and spread decisions over a ClusterView (plain data, no cluster)."""

from collections import Counter
from math import ceil

from odradek.operator.data_movement import MovementStep, plan_movement
from odradek.operator.rolling import ClusterView, PartitionView


def view(assignment: dict[str, dict[int, tuple[int, ...]]], registered=range(5)) -> ClusterView:
    return ClusterView(frozenset(registered), tuple(
        PartitionView(t, p, r, r) for t, parts in assignment.items() for p, r in parts.items()))


def rr(partitions, rf, brokers):
    return {p: tuple((p + i) % brokers for i in range(rf)) for p in range(partitions)}


def apply(assignment, targets):
    out = {t: dict(parts) for t, parts in assignment.items()}
    for (t, p), r in targets.items():
        out[t][p] = r
    return out


def test_drain_highest_first_one_at_a_time_then_nothing():
    a = {"t": rr(10, 3, 5), "u": rr(4, 2, 5)}
    step = plan_movement(view(a), 5, 3, [])
    assert step.draining == 4 and step.targets and step.blocked is None
    assert all(4 in a[t][p] for t, p in step.targets)
    a = apply(a, step.targets)
    assert not any(4 in r for parts in a.values() for r in parts.values())
    assert all(set(r) <= {0, 1, 2} for (t, p), r in step.targets.items())
    step = plan_movement(view(a), 5, 3, [])
    assert step.draining == 3
    a = apply(a, step.targets)
    assert plan_movement(view(a), 5, 3, []) == MovementStep()
    assert all(set(r) <= {0, 1, 2} for parts in a.values() for r in parts.values())


def test_a_topic_wider_than_what_stays_blocks_and_names_it():
    step = plan_movement(view({"ok": rr(2, 2, 5), "wide": rr(1, 5, 5)}), 5, 3, [])
    assert step.blocked and "wide" in step.blocked and not step.targets


def test_nothing_starts_while_a_reassignment_runs():
    step = plan_movement(view({"t": rr(3, 3, 5)}), 5, 3, [("t", 1)])
    assert not step.targets and "t-1" in step.waiting


def test_scale_up_spreads_once_all_brokers_registered():
    a = {"t": rr(10, 3, 3)}
    assert not plan_movement(view(a, registered=range(4)), 5, 5, []).targets  # broker 4 not yet there
    step = plan_movement(view(a), 5, 5, [])
    a = apply(a, step.targets)
    counts = Counter(b for r in a["t"].values() for b in r)
    assert max(counts.values()) <= ceil(30 / 5) and set(counts) == set(range(5))
    assert plan_movement(view(a), 5, 5, []) == MovementStep(elect_preferred=True)  # balanced: leaders next
    lagging = ClusterView(frozenset(range(5)), (PartitionView("t", 0, (0, 1, 2), (0, 1)),))
    assert plan_movement(lagging, 5, 5, []) == MovementStep()  # not while a replica is out of sync
    assert not plan_movement(view({"t": rr(10, 3, 3)}), 5, 5, [], auto_rebalance=False).targets


def test_moves_are_throttled_recorded_and_the_throttle_cleared_when_done():
    from odradek.operator.data_movement import Progress

    a = {"t": rr(6, 2, 3)}
    step = plan_movement(view(a), 5, 5, [], throttle=1000)
    assert step.targets and step.throttle is not None and step.clear is None
    moved = {b for (_, p), r in step.targets.items() for b in set(r) ^ set(a["t"][p])}
    assert {3, 4} <= step.throttle.brokers and moved <= step.throttle.brokers
    follower = step.throttle.topics["t"]["follower.replication.throttled.replicas"]
    assert {int(x.split(":")[1]) for x in follower.split(",")} <= {3, 4}
    progress = step.progress
    assert progress == Progress("rebalancing", len(step.targets), len(step.targets), 1000,
                                tuple(sorted(step.throttle.brokers)), ("t",))
    assert Progress.from_status(progress.to_status()) == progress
    # while moving: progress counts down, nothing new, nothing cleared
    running = plan_movement(view(a), 5, 5, [("t", 0)], throttle=1000, previous=progress)
    assert running.progress.remaining == 1 and running.clear is None and "partitions moved" in running.waiting
    # done: the throttle is cleared, and nothing is left to record
    a = apply(a, step.targets)
    done = plan_movement(view(a), 5, 5, [], throttle=1000, previous=running.progress)
    assert done.clear == running.progress and done.progress is None and not done.targets
    # 0 = unthrottled
    assert plan_movement(view({"t": rr(6, 2, 3)}), 5, 5, [], throttle=0).throttle is None


def test_drains_and_spreads_are_rack_aware():
    racks = {0: "a", 1: "b", 2: "c", 3: "a", 4: "b"}
    a = {"t": rr(10, 3, 3)}
    racked = ClusterView(frozenset(range(5)), tuple(PartitionView("t", p, r, r) for p, r in a["t"].items()),
                         racks=racks)
    a = apply(a, plan_movement(racked, 5, 5, []).targets)
    assert all(len({racks[b] for b in r}) == 3 for r in a["t"].values())
    racked = ClusterView(frozenset(range(5)), tuple(PartitionView("t", p, r, r) for p, r in a["t"].items()),
                         racks=racks)
    drained = apply(a, plan_movement(racked, 5, 4, []).targets)
    assert all(4 not in r and len({racks[b] for b in r}) == 3 for r in drained["t"].values())

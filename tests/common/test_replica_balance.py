"""Balanced placement with few moves: scale up, drain, leaders, and refusals."""

from collections import Counter
from math import ceil

import pytest

from odradek.common.replica_balance import BalanceError, balance, balance_topic, moves


def round_robin(partitions: int, rf: int, brokers: int) -> dict[int, tuple[int, ...]]:
    return {p: tuple((p + i) % brokers for i in range(rf)) for p in range(partitions)}


def replica_counts(a):
    return Counter(b for r in a.values() for b in r)


@pytest.mark.parametrize(("partitions", "rf"), [(10, 3), (7, 2), (1, 1), (24, 3)])
def test_scale_up_spreads_replicas_and_leaders(partitions, rf):
    before = round_robin(partitions, rf, 3)
    after = balance_topic("t", before, range(5))
    cap = ceil(partitions * rf / 5)
    assert max(replica_counts(after).values()) <= cap
    assert max(Counter(r[0] for r in after.values()).values()) <= ceil(partitions / 5)
    assert all(len(set(r)) == rf for r in after.values())
    # moved only what balance needs: nothing moves between the old brokers
    moved = sum(len(set(after[p]) - set(before[p])) for p in before)
    assert moved == replica_counts(after)[3] + replica_counts(after)[4]


def test_balanced_stays_put():
    a = round_robin(10, 3, 5)
    assert balance_topic("t", a, range(5)) == a


def test_drain_moves_everything_off_the_removed_brokers():
    before = round_robin(12, 3, 5)
    after = balance_topic("t", before, [0, 1, 2])
    assert set(replica_counts(after)) <= {0, 1, 2}
    assert max(replica_counts(after).values()) == 12
    # partitions that had no replica on 3 or 4 keep their replica set
    for p, r in before.items():
        if not {3, 4} & set(r):
            assert set(after[p]) == set(r)


def test_refusals_name_the_topic():
    with pytest.raises(BalanceError, match="topic big"):
        balance({"ok": round_robin(2, 3, 5), "big": round_robin(2, 5, 5)}, [0, 1, 2])
    with pytest.raises(BalanceError):
        balance_topic("t", {0: (0,)}, [])


def test_moves_lists_only_changes():
    current = {"t": round_robin(4, 2, 3)}
    proposed = balance(current, range(4))
    changed = moves(current, proposed)
    assert changed and all(proposed["t"][p] == r for (_, p), r in changed.items())
    assert all(tuple(current["t"][p]) != r for (_, p), r in changed.items())


def test_replication_factor_changes_keep_the_leader_and_spread():
    from odradek.common.replica_balance import change_replication_factor

    grown = change_replication_factor("t", {0: (0,), 1: (1,), 2: (2,), 3: (0,)}, 3, range(4))
    assert all(len(set(r)) == 3 for r in grown.values())
    assert [r[0] for r in grown.values()] == [0, 1, 2, 0]
    assert max(replica_counts(grown).values()) - min(replica_counts(grown).values()) <= 1
    shrunk = change_replication_factor("t", round_robin(6, 3, 3), 2, range(3))
    assert all(len(r) == 2 and r[0] == round_robin(6, 3, 3)[p][0] for p, r in shrunk.items())
    assert max(replica_counts(shrunk).values()) == 4
    with pytest.raises(BalanceError, match="topic t"):
        change_replication_factor("t", {0: (0,)}, 4, range(3))


# --- racks -----------------------------------------------------------------------------------------

from odradek.common.replica_balance import per_broker, rack_violations, rebalance  # noqa: E402

ZONES = {0: "a", 1: "b", 2: "c", 3: "a", 4: "b", 5: "c"}


def racks_of(assignment, racks):
    return [[racks[b] for b in r] for r in assignment.values()]


@pytest.mark.parametrize(("partitions", "rf"), [(12, 3), (7, 2), (30, 3), (5, 1)])
def test_scale_up_never_puts_two_replicas_of_a_partition_in_one_rack(partitions, rf):
    # 3 brokers in zones a, b, c; three more join (again a, b, c)
    before = round_robin(partitions, rf, 3)
    after = balance_topic("t", before, range(6), ZONES)
    assert all(len(set(z)) == rf for z in racks_of(after, ZONES))
    counts = replica_counts(after)
    assert max(counts.values()) - min(counts.get(b, 0) for b in range(6)) <= 1
    assert max(Counter(r[0] for r in after.values()).values()) <= ceil(partitions / 6)


def test_a_rack_unaware_placement_is_repaired_with_few_moves():
    racks = {0: "a", 1: "a", 2: "b", 3: "b"}
    before = {0: (0, 1), 1: (2, 3), 2: (0, 2), 3: (1, 3)}  # partitions 0 and 1 each in one rack
    assert rack_violations(before, range(4), racks) == [0, 1]
    after = balance_topic("t", before, range(4), racks)
    assert rack_violations(after, range(4), racks) == []
    assert sum(len(set(after[p]) - set(before[p])) for p in before) <= 3  # two fixes, one level
    assert all(len(set(r)) == 2 for r in after.values())
    assert max(replica_counts(after).values()) == 2


def test_drain_keeps_racks_apart():
    racks = {0: "a", 1: "b", 2: "c", 3: "a", 4: "b", 5: "c"}
    before = round_robin(12, 3, 6)
    after = balance_topic("t", before, range(5), racks)  # broker 5 (zone c) leaves
    assert all(5 not in r for r in after.values())
    assert all(len(set(z)) == 3 for z in racks_of(after, racks))


def test_fewer_racks_than_replicas_fills_each_rack_evenly():
    racks = {0: "a", 1: "a", 2: "b", 3: "b"}
    after = balance_topic("t", round_robin(8, 3, 4), range(4), racks)
    for z in racks_of(after, racks):
        assert sorted(Counter(z).values()) == [1, 2]  # ceil(3 / 2) per rack at most


def test_a_broker_without_a_rack_means_rack_unaware():
    a = round_robin(6, 2, 3)
    assert balance_topic("t", a, range(3), {0: "a", 1: "a"}) == balance_topic("t", a, range(3))


def test_replication_factor_growth_is_rack_aware():
    from odradek.common.replica_balance import change_replication_factor

    racks = {0: "a", 1: "a", 2: "b", 3: "c"}
    grown = change_replication_factor("t", {0: (0,), 1: (1,), 2: (2,)}, 3, range(4), racks)
    assert all(len({racks[b] for b in r}) == 3 for r in grown.values())


def test_on_demand_rebalance_evens_totals_and_leaders_and_is_a_fixed_point():
    # many one-partition topics all created on broker 0 and 1: each topic is balanced on its own,
    # the brokers' totals are not
    current = {f"t{i}": {0: (0, 1)} for i in range(12)}
    assert balance(current, range(4)) == current or moves(current, balance(current, range(4))) == {}
    planned = rebalance(current, range(4), {0: "a", 1: "b", 2: "a", 3: "b"})
    totals = per_broker(planned)
    assert [totals[b][0] for b in range(4)] == [6, 6, 6, 6]
    assert [totals[b][1] for b in range(4)] == [3, 3, 3, 3]
    assert all(rack_violations(parts, range(4), {0: "a", 1: "b", 2: "a", 3: "b"}) == [] for parts in planned.values())
    # the automatic per-topic balance leaves the result alone (no fight between the two)
    again = balance(planned, range(4), {0: "a", 1: "b", 2: "a", 3: "b"})
    assert all(set(again[t][p]) == set(planned[t][p]) for t in planned for p in planned[t])
    assert rebalance(planned, range(4), {0: "a", 1: "b", 2: "a", 3: "b"}) == planned


def test_per_broker_counts_replicas_and_preferred_leaders():
    assert per_broker({"t": {0: (0, 1), 1: (1, 2)}}) == {0: (1, 1), 1: (2, 1), 2: (1, 0)}

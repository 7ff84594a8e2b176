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

"""The on-demand rebalance's approve flow (operator/rebalance.decide) over plain data."""

from odradek.operator.rebalance import APPROVE, PLAN, decide, propose

# twelve one-partition topics, all on brokers 0 and 1 of four (each topic is balanced on its own)
CURRENT = {f"t{i}": {0: (0, 1)} for i in range(12)}
RACKS = {0: "a", 1: "b", 2: "a", 3: "b"}


def test_plan_is_a_dry_run_with_per_broker_before_and_after():
    d = decide(PLAN, CURRENT, range(4), RACKS, None, False, None)
    assert not d.targets and d.annotation is None
    s = d.status
    assert s["state"] == "ProposalReady" and s["partitionsToReassign"] > 0 and s["replicasToCopy"] == 12
    rows = {r["id"]: r for r in s["brokers"]}
    assert [rows[b]["replicasBefore"] for b in range(4)] == [12, 12, 0, 0]
    assert [rows[b]["replicasAfter"] for b in range(4)] == [6, 6, 6, 6]
    assert [rows[b]["leadersAfter"] for b in range(4)] == [3, 3, 3, 3]
    assert rows[2]["rack"] == "a"


def test_approve_runs_the_plan_shown_and_removes_the_annotation():
    shown = decide(PLAN, CURRENT, range(4), RACKS, None, False, None).status
    d = decide(APPROVE, CURRENT, range(4), RACKS, None, False, shown)
    assert d.status["state"] == "Rebalancing" and d.annotation == ""
    assert d.targets == propose(CURRENT, range(4), RACKS).targets
    # moving: nothing new; done: Ready and the preferred leaders elected
    assert decide(None, CURRENT, range(4), RACKS, None, True, d.status).status == d.status
    done = decide(None, CURRENT, range(4), RACKS, None, False, d.status)
    assert done.status["state"] == "Ready" and done.elect_preferred and not done.targets
    assert decide(None, CURRENT, range(4), RACKS, None, False, done.status).status == done.status


def test_approve_without_a_matching_plan_shows_the_new_one_and_asks_again():
    shown = decide(PLAN, CURRENT, range(4), RACKS, None, False, None).status
    changed = {**CURRENT, "new": {0: (0, 1)}}
    d = decide(APPROVE, changed, range(4), RACKS, None, False, shown)
    assert not d.targets and d.annotation == PLAN and d.status["state"] == "ProposalReady"
    assert d.status["planId"] != shown["planId"]
    assert decide(APPROVE, CURRENT, range(4), RACKS, None, False, None).annotation == PLAN  # never planned


def test_nothing_while_scaling_or_moving_and_bad_values_say_so():
    d = decide(APPROVE, CURRENT, range(4), RACKS, "broker 3 not registered", False, None)
    assert d.status["state"] == "NotReady" and "broker 3" in d.status["message"] and not d.targets
    assert decide(PLAN, CURRENT, range(4), RACKS, None, True, None).status["state"] == "NotReady"
    assert decide("yes", CURRENT, range(4), RACKS, None, False, None).status["state"] == "NotReady"
    assert decide(None, CURRENT, range(4), RACKS, None, False, None).status is None


def test_a_balanced_cluster_needs_no_moves():
    balanced = {f"t{i}": {0: ((i % 4), (i + 1) % 4)} for i in range(12)}
    shown = decide(PLAN, balanced, range(4), None, None, False, None).status
    assert shown["partitionsToReassign"] == 0 and "nothing to move" in shown["message"]
    d = decide(APPROVE, balanced, range(4), None, None, False, shown)
    assert d.status["state"] == "Ready" and not d.targets and d.annotation == ""

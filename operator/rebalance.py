"""On-demand rebalance of a KafkaCluster, as plain data: Strimzi's KafkaRebalance approve flow
driven by an annotation on the KafkaCluster.

    kubectl annotate kc my-cluster odradek.io/rebalance=plan      # dry run: the plan in the status
    kubectl annotate kc my-cluster odradek.io/rebalance=approve --overwrite   # run that plan

`plan` computes a rebalance (common/replica_balance.rebalance: replicas and preferred leaders
evened across brokers and racks, few moves) and shows it in `status.rebalance` (state
ProposalReady, plan id, partitions to reassign, replicas to copy, per-broker before/after) without
moving anything; it is recomputed at every pass while the annotation says `plan`. `approve` runs the
proposal only if a fresh computation still gives the same plan id (the cluster did not change
since it was shown); otherwise the new plan is shown and the annotation goes back to `plan`. Once
started (state Rebalancing) the annotation is removed; the moves are throttled like every other
(operator/data_movement), and when they are done the preferred leaders are elected (state Ready).
Nothing is proposed or started while brokers are being added or removed or another reassignment
runs.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from odradek.common.replica_balance import BalanceError, moves, per_broker, rebalance

ANNOTATION = "odradek.io/rebalance"
PLAN, APPROVE = "plan", "approve"
PROPOSAL_READY, REBALANCING, READY, NOT_READY = "ProposalReady", "Rebalancing", "Ready", "NotReady"

Targets = dict[tuple[str, int], tuple[int, ...]]
Current = dict[str, dict[int, tuple[int, ...]]]


@dataclass(frozen=True)
class Decision:
    status: dict[str, Any] | None = None
    """status.rebalance (None: nothing to show)."""
    targets: Targets = field(default_factory=dict)
    """Reassignments to start now."""
    annotation: str | None = None
    """The annotation's new value ("" = remove it); None: leave it."""
    elect_preferred: bool = False


@dataclass(frozen=True)
class Proposal:
    targets: Targets
    plan_id: str
    summary: dict[str, Any]


def propose(current: Current, brokers: Iterable[int], racks: dict[int, str] | None) -> Proposal:
    """The rebalance of `current` onto `brokers`, its id and its dry-run summary."""
    brokers = sorted(set(brokers))
    planned = rebalance(current, brokers, racks or None)
    targets = moves(current, planned)
    copies = sum(len(set(r) - set(current[t][p])) for (t, p), r in targets.items())
    before, after = per_broker(current), per_broker(planned)
    plan_id = hashlib.sha256(json.dumps(sorted([t, p, list(r)] for (t, p), r in targets.items()),
                                        separators=(",", ":")).encode()).hexdigest()[:16]
    rows = []
    for b in brokers:
        row: dict[str, Any] = {"id": b}
        if racks and b in racks:
            row["rack"] = racks[b]
        rows.append({**row, "replicasBefore": before.get(b, (0, 0))[0], "replicasAfter": after.get(b, (0, 0))[0],
                     "leadersBefore": before.get(b, (0, 0))[1], "leadersAfter": after.get(b, (0, 0))[1]})
    summary = {"planId": plan_id, "partitionsToReassign": len(targets), "replicasToCopy": copies,
               "leaderChanges": sum(1 for (t, p), r in targets.items() if r[0] != current[t][p][0]),
               "brokers": rows}
    return Proposal(targets, plan_id, summary)


def decide(action: str | None, current: Current, brokers: Iterable[int], racks: dict[int, str] | None,
           settled: str | None, moving: bool, previous: dict[str, Any] | None) -> Decision:
    """What the annotation (`action`) asks for now. `settled` is None when brokers are all there
    and not scaling, else why not; `moving`: a reassignment is in progress; `previous` is the
    status.rebalance the last pass wrote."""
    state = (previous or {}).get("state")
    if state == REBALANCING:
        if moving:
            return Decision(previous)
        return Decision({**(previous or {}), "state": READY, "message": "rebalance complete; preferred leaders elected"},
                        elect_preferred=True, annotation="" if action == APPROVE else None)
    if action is None:
        return Decision(previous if state in (READY, NOT_READY) else None)
    if action not in (PLAN, APPROVE):
        return Decision({"state": NOT_READY, "message": f"{ANNOTATION}={action!r}: use {PLAN!r} or {APPROVE!r}"})
    if settled is not None or moving:
        why = settled or "a partition reassignment is in progress"
        return Decision({**(previous or {}), "state": NOT_READY, "message": f"waiting: {why}"})
    try:
        proposal = propose(current, brokers, racks)
    except BalanceError as e:
        return Decision({"state": NOT_READY, "message": str(e)})
    shown = {"state": PROPOSAL_READY, **proposal.summary}
    if action == PLAN:
        message = ("already balanced: nothing to move" if not proposal.targets
                   else f"annotate {ANNOTATION}={APPROVE} to run this plan")
        return Decision({**shown, "message": message})
    if state != PROPOSAL_READY or (previous or {}).get("planId") != proposal.plan_id:
        return Decision({**shown, "message": "the cluster changed since the plan was shown (or none was): review "
                                             f"this one and annotate {ANNOTATION}={APPROVE} again"},
                        annotation=PLAN)
    if not proposal.targets:
        return Decision({**shown, "state": READY, "message": "already balanced: nothing moved"}, annotation="")
    return Decision({**shown, "state": REBALANCING,
                     "message": f"moving {len(proposal.targets)} partitions (status.dataMovement has the progress)"},
                    targets=proposal.targets, annotation="")

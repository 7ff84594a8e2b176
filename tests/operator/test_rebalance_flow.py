"""The rebalance annotation through the operator against the emulated API server: the reconciler
writes status.rebalance as the data mover decides and removes the annotation once a rebalance
starts (operator/rebalance decides; here a scripted mover stands in for the brokers)."""

import pytest
from operator_harness import NS, OperatorThread, wait_for
from test_operator_flow import SPEC, env  # noqa: F401  (the fixture)

from odradek.operator.data_movement import MovementStep
from odradek.operator.rebalance import ANNOTATION

pytestmark = [pytest.mark.timeout(90), pytest.mark.asyncio]

PLAN = {"state": "ProposalReady", "planId": "abc", "partitionsToReassign": 2, "replicasToCopy": 2,
        "leaderChanges": 1, "brokers": [{"id": 0, "replicasBefore": 4, "replicasAfter": 2,
                                          "leadersBefore": 2, "leadersAfter": 1}]}


async def scripted_mover(body, view, current, desired):
    action = (body["metadata"].get("annotations") or {}).get(ANNOTATION)
    previous = (body.get("status") or {}).get("rebalance")
    if action == "plan":
        return MovementStep(rebalance=PLAN)
    if action == "approve" and (previous or {}).get("state") == "ProposalReady":
        return MovementStep(rebalance={**PLAN, "state": "Rebalancing"}, annotation="")
    return MovementStep(rebalance=previous)


async def annotate(env, value):  # noqa: F811
    status, body = await env.api.call(
        "PATCH", f"/apis/odradek.io/v1alpha1/namespaces/{NS}/kafkaclusters/demo",
        {"metadata": {"annotations": {ANNOTATION: value}}}, "application/merge-patch+json")
    assert status == 200, body


async def test_plan_shows_in_the_status_and_approve_starts_and_clears_the_annotation(env):  # noqa: F811
    env.operator = OperatorThread(env.url, env.view, data_mover=scripted_mover)
    await env.api.create_cluster(SPEC)
    await env.ready()
    await annotate(env, "plan")
    await wait_for(lambda: (env.cluster()["status"].get("rebalance") or {}).get("state") == "ProposalReady", 20,
                   "the plan in the status")
    assert env.cluster()["status"]["rebalance"]["brokers"][0]["replicasAfter"] == 2
    await annotate(env, "approve")
    await wait_for(lambda: (env.cluster()["status"].get("rebalance") or {}).get("state") == "Rebalancing", 20,
                   "the rebalance started")
    await wait_for(lambda: ANNOTATION not in (env.cluster()["metadata"].get("annotations") or {}), 20,
                   "the annotation removed")

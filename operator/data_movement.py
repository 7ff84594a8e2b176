"""Moving partitions when the broker count changes: drain before a scale-down, spread after a
scale-up. A pure decision over what Metadata and ListPartitionReassignments report, and a thin
shell that starts the reassignments it decides (AlterPartitionReassignments at any broker, which
forwards them to the controller).

- Scale-down (desired < current): the brokers to remove are drained one at a time, highest id
  first: every partition with a replica there is reassigned, per topic balanced over the brokers
  that stay (common/replica_balance). A topic whose replication factor exceeds the brokers that
  stay blocks the drain (the reason names it) and nothing is removed. rolling.broker_count only
  lowers the count past brokers that hold no replica, so an interrupted drain never removes a
  broker; the next pass sees the same Metadata and resumes.
- Scale-up (all brokers of the desired count registered): unless automatic rebalancing is off,
  topics whose replicas are unevenly spread are balanced over every broker (few moves: only a
  broker's excess replicas move; preferred leaders spread by reordering).
- Once the replicas are spread and every partition is fully in sync, a preferred leader
  election (ElectLeaders) moves leadership to each partition's first replica, so that leaders are
  spread too (Kafka's kafka-leader-election after kafka-reassign-partitions); partitions already
  led by their preferred replica are left alone.
- While any reassignment is in progress nothing new is started (one step at a time, as a
  reassignment tool would).
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from kio.schema.alter_partition_reassignments.v0.request import (
    AlterPartitionReassignmentsRequest,
    ReassignablePartition,
    ReassignableTopic,
)
from kio.schema.elect_leaders.v2.request import ElectLeadersRequest
from kio.schema.errors import ErrorCode
from kio.schema.list_partition_reassignments.v0.request import ListPartitionReassignmentsRequest
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i8, i32, i32Timedelta

from odradek.common.network.client import NetworkClient
from odradek.common.replica_balance import BalanceError, balance, balance_topic
from odradek.common.security.channel import PLAINTEXT, ClientSecurity

from .rolling import ClusterView

log = logging.getLogger(__name__)

Targets = dict[tuple[str, int], tuple[int, ...]]


@dataclass(frozen=True)
class MovementStep:
    targets: Targets = field(default_factory=dict)
    """Reassignments to start now: (topic, partition) → new replicas."""
    waiting: str | None = None
    """Data is moving (or about to): what, for the Progressing condition."""
    blocked: str | None = None
    """Why a drain cannot be done (names the topic): nothing is removed."""
    draining: int | None = None
    elect_preferred: bool = False
    """Replicas are where they belong and all in sync: move leaders to their preferred replicas."""


def _by_topic(view: ClusterView) -> dict[str, dict[int, tuple[int, ...]]]:
    out: dict[str, dict[int, tuple[int, ...]]] = {}
    for p in view.partitions:
        out.setdefault(p.topic, {})[p.partition] = tuple(p.replicas)
    return out


def plan_movement(view: ClusterView, current: int, desired: int, moving: Iterable[tuple[str, int]],
                  auto_rebalance: bool = True) -> MovementStep:
    """What to move now, given the broker count the runtime runs (`current`) and the desired one."""
    moving = sorted(moving)
    if moving:
        return MovementStep(waiting=f"{len(moving)} partition reassignments in progress "
                                    f"({', '.join(f'{t}-{p}' for t, p in moving[:5])})")
    topics = _by_topic(view)
    if desired < current:
        holding = sorted(b for b in range(desired, current) if view.replicas_by_broker.get(b, 0) > 0)
        if not holding:
            return MovementStep()
        draining = holding[-1]
        stay = range(desired)
        targets: Targets = {}
        for topic, parts in sorted(topics.items()):
            if not any(draining in r for r in parts.values()):
                continue
            try:
                proposed = balance_topic(topic, parts, stay)
            except BalanceError as e:
                return MovementStep(blocked=f"cannot drain broker {draining}: {e}", draining=draining)
            targets.update({(topic, p): r for p, r in proposed.items()
                            if draining in parts[p] and r != parts[p]})
        return MovementStep(targets, f"draining broker {draining}: moving {len(targets)} partitions",
                            draining=draining)
    if not auto_rebalance or current != desired or not set(range(current)) <= view.registered:
        return MovementStep()
    try:
        spread = balance(topics, range(current))
    except BalanceError:
        return MovementStep()  # a topic wider than the cluster: nothing to spread it onto
    targets = {(t, p): r for t, parts in spread.items() for p, r in parts.items()
               if set(r) != set(topics[t][p])}
    if not targets:
        return MovementStep(elect_preferred=not view.under_replicated)
    return MovementStep(targets, f"rebalancing: moving {len(targets)} partitions onto brokers 0-{current - 1}")


# --- the shell ---------------------------------------------------------------------------------------


async def _send_any(bootstrap: list[tuple[str, int]], request: object, timeout: float,
                    security: ClientSecurity = PLAINTEXT) -> Any:
    errors: list[str] = []
    for host, port in bootstrap:
        client = NetworkClient(host, port, client_id="odradek-operator", connect_attempts=1, connect_timeout=timeout,
                               security=security)
        try:
            return await client.send(request, timeout=timeout)
        except (OSError, ConnectionError, TimeoutError) as e:
            errors.append(f"{host}:{port}: {e}")
        finally:
            await client.close()
    raise ConnectionError("no broker answered: " + "; ".join(errors))


async def ongoing_reassignments(bootstrap: list[tuple[str, int]], timeout: float = 10.0,
                                security: ClientSecurity = PLAINTEXT) -> list[tuple[str, int]]:
    response = await _send_any(bootstrap, ListPartitionReassignmentsRequest(
        timeout=i32Timedelta.parse(datetime.timedelta(seconds=timeout)), topics=None), timeout, security)
    if response.error_code != ErrorCode.none:
        raise ConnectionError(f"ListPartitionReassignments: {response.error_code.name}")
    return [(str(t.name), int(p.partition_index)) for t in response.topics for p in t.partitions]


async def start_reassignments(bootstrap: list[tuple[str, int]], targets: Targets, timeout: float = 10.0,
                              security: ClientSecurity = PLAINTEXT) -> dict[tuple[str, int], str]:
    """AlterPartitionReassignments; the partitions refused → their error."""
    topics: dict[str, list[ReassignablePartition]] = {}
    for (t, p), r in sorted(targets.items()):
        topics.setdefault(t, []).append(ReassignablePartition(partition_index=i32(p),
                                                              replicas=tuple(BrokerId(b) for b in r)))
    response = await _send_any(bootstrap, AlterPartitionReassignmentsRequest(
        timeout=i32Timedelta.parse(datetime.timedelta(seconds=timeout)),
        topics=tuple(ReassignableTopic(name=TopicName(t), partitions=tuple(ps)) for t, ps in topics.items())), timeout, security)
    if response.error_code != ErrorCode.none:
        return dict.fromkeys(targets, response.error_code.name)
    return {(str(t.name), int(p.partition_index)): f"{p.error_code.name}: {p.error_message or ''}"
            for t in response.responses for p in t.partitions if p.error_code != ErrorCode.none}


async def elect_preferred_leaders(bootstrap: list[tuple[str, int]], timeout: float = 10.0,
                                  security: ClientSecurity = PLAINTEXT) -> int:
    """ElectLeaders (preferred, every partition); how many partitions changed leader."""
    response = await _send_any(bootstrap, ElectLeadersRequest(
        election_type=i8(0), topic_partitions=None,
        timeout=i32Timedelta.parse(datetime.timedelta(seconds=timeout))), timeout, security)
    if response.error_code != ErrorCode.none:
        raise ConnectionError(f"ElectLeaders: {response.error_code.name}")
    return sum(1 for t in response.replica_election_results for p in t.partition_result
               if p.error_code == ErrorCode.none)


async def move_data(bootstrap: list[tuple[str, int]], view: ClusterView, current: int, desired: int,
                    auto_rebalance: bool = True, timeout: float = 10.0,
                    security: ClientSecurity = PLAINTEXT) -> MovementStep:
    """One pass: decide from the cluster's word, start what is decided, report."""
    moving = await ongoing_reassignments(bootstrap, timeout, security)
    step = plan_movement(view, current, desired, moving, auto_rebalance)
    if step.targets:
        refused = await start_reassignments(bootstrap, step.targets, timeout, security)
        for tp, error in sorted(refused.items()):
            log.warning("reassignment of %s-%d to %s refused: %s", *tp, list(step.targets[tp]), error)
        log.info("%s", step.waiting)
    elif step.elect_preferred:
        moved = await elect_preferred_leaders(bootstrap, timeout, security)
        if moved:
            log.info("preferred leader election: %d partitions changed leader", moved)
    return step

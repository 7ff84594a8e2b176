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
- Placement is rack-aware when brokers have `broker.rack` (common/replica_balance).
- Every move is throttled as kafka-reassign-partitions --throttle does
  (common/reassignment_throttle; `spec.brokers.rebalance.throttleBytesPerSecond`, 0 = off). What
  was throttled is kept in the status (`status.dataMovement`, with the progress) and removed at the
  first pass that finds no reassignment in progress, before anything new starts.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from kio.schema.alter_partition_reassignments.v0.request import (
    AlterPartitionReassignmentsRequest,
    ReassignablePartition,
    ReassignableTopic,
)
from kio.schema.elect_leaders.v2.request import ElectLeadersRequest
from kio.schema.errors import ErrorCode
from kio.schema.incremental_alter_configs.v1.request import (
    AlterableConfig,
    AlterConfigsResource,
    IncrementalAlterConfigsRequest,
)
from kio.schema.list_partition_reassignments.v0.request import ListPartitionReassignmentsRequest
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i8, i32, i32Timedelta

from odradek.common.network.client import NetworkClient
from odradek.common.reassignment_throttle import Throttle, cleared, throttled_replicas
from odradek.common.replica_balance import BalanceError, balance, balance_topic
from odradek.common.security.channel import PLAINTEXT, ClientSecurity

from . import rebalance
from .rolling import ClusterView

log = logging.getLogger(__name__)

Targets = dict[tuple[str, int], tuple[int, ...]]
RESOURCE_TOPIC, RESOURCE_BROKER = 2, 4
OP_SET, OP_DELETE = 0, 1


@dataclass(frozen=True)
class Progress:
    """A move under way, as the status keeps it between passes (status.dataMovement)."""

    reason: str
    partitions: int
    remaining: int
    throttle: int = 0
    """bytes/s per broker, 0 = not throttled"""
    brokers: tuple[int, ...] = ()
    """brokers whose throttled rates were set"""
    topics: tuple[str, ...] = ()
    """topics whose throttled replicas were set"""

    def to_status(self) -> dict[str, Any]:
        return {"reason": self.reason, "partitions": self.partitions, "done": self.partitions - self.remaining,
                "throttleBytesPerSecond": self.throttle, "throttledBrokers": list(self.brokers),
                "throttledTopics": list(self.topics)}

    @classmethod
    def from_status(cls, found: Any) -> Progress | None:
        if not isinstance(found, dict):
            return None
        try:
            total = int(found.get("partitions") or 0)
            return cls(str(found.get("reason") or ""), total, total - int(found.get("done") or 0),
                       int(found.get("throttleBytesPerSecond") or 0),
                       tuple(int(b) for b in found.get("throttledBrokers") or ()),
                       tuple(str(t) for t in found.get("throttledTopics") or ()))
        except (TypeError, ValueError):
            return None

    def describe(self) -> str:
        rate = f", throttled at {self.throttle} B/s per broker" if self.throttle else ""
        return f"{self.reason}: {self.partitions - self.remaining}/{self.partitions} partitions moved{rate}"


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
    throttle: Throttle | None = None
    """Set before the targets start."""
    clear: Progress | None = None
    """A finished move whose throttles to remove first."""
    progress: Progress | None = None
    """What the status keeps (None: nothing moving)."""
    rebalance: dict[str, Any] | None = None
    """status.rebalance: the on-demand rebalance's state and plan (operator/rebalance)."""
    annotation: str | None = None
    """The rebalance annotation's new value ("" = remove it), None = leave it."""


def _by_topic(view: ClusterView) -> dict[str, dict[int, tuple[int, ...]]]:
    out: dict[str, dict[int, tuple[int, ...]]] = {}
    for p in view.partitions:
        out.setdefault(p.topic, {})[p.partition] = tuple(p.replicas)
    return out


def plan_movement(view: ClusterView, current: int, desired: int, moving: Iterable[tuple[str, int]],
                  auto_rebalance: bool = True, throttle: int = 0, previous: Progress | None = None,
                  requested: Targets | None = None) -> MovementStep:
    """What to move now, given the broker count the runtime runs (`current`) and the desired one;
    `throttle` (bytes/s, 0 = none) for what starts, `previous` what the status kept, `requested`
    an approved on-demand rebalance (operator/rebalance) to start instead of the automatic spread."""
    moving = sorted(moving)
    if moving:
        progress = replace(previous, remaining=min(len(moving), previous.partitions)) if previous else \
            Progress("reassignments in progress", len(moving), len(moving))
        return MovementStep(waiting=f"{len(moving)} partition reassignments in progress "
                                    f"({', '.join(f'{t}-{p}' for t, p in moving[:5])})"
                                    + (f"; {progress.describe()}" if previous else ""),
                            progress=progress)
    clear = previous if previous is not None and (previous.brokers or previous.topics) else None
    if requested and current == desired:
        step = MovementStep(dict(requested), f"on-demand rebalance: moving {len(requested)} partitions")
    else:
        step = _decide(view, current, desired, auto_rebalance)
    if not step.targets:
        return replace(step, clear=clear)
    current_plan = {(p.topic, p.partition): tuple(p.replicas) for p in view.partitions}
    settings = throttled_replicas(current_plan, step.targets) if throttle > 0 else None
    reason = (f"draining broker {step.draining}" if step.draining is not None
              else "on-demand rebalance" if requested and current == desired else "rebalancing")
    progress = Progress(reason, len(step.targets), len(step.targets), throttle if settings else 0,
                        tuple(sorted(settings.brokers)) if settings else (),
                        tuple(sorted(settings.topics)) if settings else ())
    return replace(step, throttle=settings, clear=clear, progress=progress)


def _decide(view: ClusterView, current: int, desired: int, auto_rebalance: bool) -> MovementStep:
    topics = _by_topic(view)
    racks = view.racks or None
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
                proposed = balance_topic(topic, parts, stay, racks)
            except BalanceError as e:
                return MovementStep(blocked=f"cannot drain broker {draining}: {e}", draining=draining)
            targets.update({(topic, p): r for p, r in proposed.items()
                            if draining in parts[p] and r != parts[p]})
        return MovementStep(targets, f"draining broker {draining}: moving {len(targets)} partitions",
                            draining=draining)
    if not auto_rebalance or current != desired or not set(range(current)) <= view.registered:
        return MovementStep()
    try:
        spread = balance(topics, range(current), racks)
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


async def alter_configs(endpoints: list[tuple[str, int]], resource_type: int, name: str,
                        changes: dict[str, str | None], timeout: float,
                        security: ClientSecurity = PLAINTEXT) -> None:
    """IncrementalAlterConfigs of one resource (None values deleted); ConnectionError on a refusal."""
    response = await _send_any(endpoints, IncrementalAlterConfigsRequest(resources=(AlterConfigsResource(
        resource_type=i8(resource_type), resource_name=name, configs=tuple(
            AlterableConfig(name=k, config_operation=i8(OP_DELETE if v is None else OP_SET), value=v)
            for k, v in sorted(changes.items()))),), validate_only=False), timeout, security)
    for r in response.responses:
        if r.error_code != ErrorCode.none:
            raise ConnectionError(f"IncrementalAlterConfigs {name}: {r.error_code.name}: {r.error_message or ''}")


async def set_throttle(bootstrap: list[tuple[str, int]], view: ClusterView, throttle: Throttle, rate: int,
                       timeout: float, security: ClientSecurity = PLAINTEXT) -> None:
    """The rates on each involved broker (sent to that broker, as Kafka wants), the replicas on each topic."""
    for b in sorted(throttle.brokers & set(view.endpoints)):
        await alter_configs([view.endpoints[b]], RESOURCE_BROKER, str(b), throttle.broker_configs(rate), timeout, security)
    for t, values in sorted(throttle.topics.items()):
        await alter_configs(bootstrap, RESOURCE_TOPIC, t, dict(values), timeout, security)


async def clear_throttle(bootstrap: list[tuple[str, int]], view: ClusterView, done: Progress, timeout: float,
                         security: ClientSecurity = PLAINTEXT) -> None:
    """Remove what `done` set; brokers and topics that are gone are skipped."""
    per_broker, per_topic = cleared()
    for b in done.brokers:
        if b in view.endpoints:
            await alter_configs([view.endpoints[b]], RESOURCE_BROKER, str(b), per_broker, timeout, security)
    existing = {p.topic for p in view.partitions}
    for t in done.topics:
        if t in existing:
            await alter_configs(bootstrap, RESOURCE_TOPIC, t, per_topic, timeout, security)
    log.info("%s: done, throttles removed from brokers %s and topics %s", done.reason, list(done.brokers),
             list(done.topics))


async def move_data(bootstrap: list[tuple[str, int]], view: ClusterView, current: int, desired: int,
                    auto_rebalance: bool = True, timeout: float = 10.0, throttle: int = 0,
                    previous: Progress | None = None, rebalance_action: str | None = None,
                    rebalance_status: dict[str, Any] | None = None,
                    security: ClientSecurity = PLAINTEXT) -> MovementStep:
    """One pass: decide from the cluster's word (and the rebalance annotation, `rebalance_action`),
    remove a finished move's throttles, throttle and start what is decided, report."""
    ongoing = await ongoing_reassignments(bootstrap, timeout, security)
    decision = rebalance.Decision()
    if rebalance_action is not None or rebalance_status is not None:
        settled = None if current == desired and set(range(current)) <= view.registered else \
            f"brokers {sorted(view.registered)} registered, {current} running, {desired} desired"
        decision = rebalance.decide(rebalance_action, _by_topic(view), range(current), view.racks, settled,
                                    bool(ongoing), rebalance_status)
    step = plan_movement(view, current, desired, ongoing, auto_rebalance, throttle, previous,
                         requested=decision.targets or None)
    step = replace(step, rebalance=decision.status, annotation=decision.annotation,
                   elect_preferred=step.elect_preferred or (decision.elect_preferred and not view.under_replicated))
    if step.clear is not None:
        await clear_throttle(bootstrap, view, step.clear, timeout, security)
    if step.targets:
        if step.throttle is not None:
            await set_throttle(bootstrap, view, step.throttle, throttle, timeout, security)
        refused = await start_reassignments(bootstrap, step.targets, timeout, security)
        for tp, error in sorted(refused.items()):
            log.warning("reassignment of %s-%d to %s refused: %s", *tp, list(step.targets[tp]), error)
        log.info("%s", step.waiting)
    elif step.elect_preferred:
        moved = await elect_preferred_leaders(bootstrap, timeout, security)
        if moved:
            log.info("preferred leader election: %d partitions changed leader", moved)
    return step

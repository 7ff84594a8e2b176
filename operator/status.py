"""KafkaCluster status as a pure function of what one reconcile pass saw.

Conditions follow the Kubernetes convention: Ready, Progressing and Degraded, each with a reason,
a message, the generation it describes, and a lastTransitionTime that moves only when the
condition's status changes (so `kubectl wait` and alerting see real transitions, not churn).
Reconciling and Stalled are the two kstatus reads (Flux, `helm --wait`, Argo CD's health check):
Reconciling mirrors Progressing; Stalled is True when the operator cannot go on without a person
(an invalid spec, a change it refuses, an API error).
"""

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

Condition = dict[str, Any]
"""A Kubernetes status condition: type, status, reason, message, observedGeneration, lastTransitionTime."""

READY, PROGRESSING, DEGRADED = "Ready", "Progressing", "Degraded"
RECONCILING, STALLED = "Reconciling", "Stalled"


@dataclass(frozen=True)
class Observation:
    """What a reconcile pass found; `invalid` set means the spec was rejected."""
    generation: int | None
    desired_brokers: int = 0
    ready_broker_ids: tuple[int, ...] = ()
    running_brokers: int = 0
    desired_controllers: int = 0
    ready_controllers: int = 0  # controller pods Ready (their probe: active or healthy standby)
    desired_zookeeper: int | None = None  # None: an existing ensemble the operator does not run
    ready_zookeeper: int = 0
    bootstrap_servers: str | None = None
    invalid: str | None = None
    waiting: str | None = None  # roll or scale held back until the cluster is healthy
    refused: str | None = None  # a requested change the operator will not make (why)
    pending_restarts: tuple[int, ...] = ()
    unreachable: str | None = None  # the cluster did not answer Metadata
    stalled: tuple[tuple[str, str], ...] = ()  # (reason, message) of each change the operator refuses
    moving: str | None = None  # partitions being moved (a drain before a scale-down, a rebalance)


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def support_problem(o: Observation) -> tuple[str, str] | None:
    """(reason, message) when what the brokers need is not there: the managed ZooKeeper ensemble
    with every member ready (a partial ensemble may have no quorum after the next restart), then
    at least one ready controller pod (without one no leader moves when a broker fails)."""
    if o.desired_zookeeper is not None and o.ready_zookeeper < o.desired_zookeeper:
        return "ZooKeeperNotReady", f"{o.ready_zookeeper}/{o.desired_zookeeper} ZooKeeper pods ready"
    if o.ready_controllers < 1:
        return "ControllerNotReady", (f"0/{o.desired_controllers} controller pods ready "
                                      "(none is the active controller or a healthy standby)")
    return None


def condition(
    type_: str, ok: bool, reason: str, message: str, generation: int | None, previous: dict[Any, Condition], at: str
) -> Condition:
    status = "True" if ok else "False"
    old = previous.get(type_)
    since = old.get("lastTransitionTime") if old and old.get("status") == status else None
    return {"type": type_, "status": status, "reason": reason, "message": message,
            "observedGeneration": generation, "lastTransitionTime": since or at}


def conditions(o: Observation, previous: list[Condition] | None = None, at: str | None = None) -> list[Condition]:
    prev = {c.get("type"): c for c in previous or []}
    when = at or now()
    g = o.generation

    def cond(type_: str, ok: bool, reason: str, message: str) -> Condition:
        return condition(type_, ok, reason, message, g, prev, when)

    if o.invalid:
        return [cond(READY, False, "InvalidSpec", o.invalid),
                cond(PROGRESSING, False, "InvalidSpec", "fix the spec to continue"),
                cond(DEGRADED, True, "InvalidSpec", o.invalid),
                cond(RECONCILING, False, "InvalidSpec", "fix the spec to continue"),
                cond(STALLED, True, "InvalidSpec", o.invalid)]
    ready = len(o.ready_broker_ids)
    brokers_ready = (ready >= o.desired_brokers and o.running_brokers == o.desired_brokers
                     and not o.pending_restarts and not o.unreachable)
    # No broker pod ready yet (a new cluster, or all restarting): nothing to reach, not a fault.
    unreachable = o.unreachable if o.ready_broker_ids else None
    stalled = "; ".join(m for _, m in o.stalled)
    support = support_problem(o)
    all_ready = brokers_ready and support is None
    if o.pending_restarts:
        progressing = (True, "RollingUpdate",
                       f"brokers {list(o.pending_restarts)} to restart with the new configuration"
                       + (f"; {o.waiting}" if o.waiting else ""))
    elif o.moving:
        progressing = (True, "MovingData", o.moving)
    elif o.running_brokers != o.desired_brokers and not o.refused:
        progressing = (True, "Scaling", f"{o.running_brokers} broker pods, {o.desired_brokers} desired")
    elif not brokers_ready:
        progressing = (True, "WaitingForBrokers", o.waiting or f"{ready}/{o.desired_brokers} brokers ready")
    elif support is not None:
        progressing = (True, *support)
    elif o.stalled:
        progressing = (False, o.stalled[0][0], stalled)
    else:
        progressing = (False, "ReconcileComplete", "the cluster matches the spec")
    if o.stalled:
        degraded = (True, o.stalled[0][0], stalled)
    elif o.refused:
        degraded = (True, "ScaleDownRefused", o.refused)
    elif unreachable:
        degraded = (True, "ClusterUnreachable", unreachable)
    else:
        degraded = (False, "AsExpected", "")
    if all_ready:
        ready_c = (True, "ClusterReady", f"{ready} brokers ready")
    else:
        ready_c = (False, progressing[1] if progressing[0] else degraded[1],
                   f"{ready}/{o.desired_brokers} brokers ready"
                   + (f"; {support[1]}" if support is not None else ""))
    stalled_c = (True, o.stalled[0][0], stalled) if o.stalled else (False, "AsExpected", "")
    return [cond(READY, *ready_c), cond(PROGRESSING, *progressing), cond(DEGRADED, *degraded),
            cond(RECONCILING, *progressing), cond(STALLED, *stalled_c)]


def error_status(previous: dict[str, Any] | None, generation: int | None, message: str,
                 at: str | None = None) -> dict[str, Any]:
    """The status after a pass that the Kubernetes API failed: what was last observed stays, the
    conditions say why nothing moved, for this generation (so `kubectl wait` and kstatus see it)."""
    previous = dict(previous or {})
    prev = {c.get("type"): c for c in previous.get("conditions") or []}
    when = at or now()

    def cond(type_: str, ok: bool) -> Condition:
        return condition(type_, ok, "KubernetesApiError", message, generation, prev, when)

    return {**previous, "observedGeneration": generation,
            "conditions": [cond(READY, False), cond(PROGRESSING, False), cond(DEGRADED, True),
                           cond(RECONCILING, False), cond(STALLED, True)]}


def status(o: Observation, previous: dict[str, Any] | None = None, at: str | None = None) -> dict[str, Any]:
    """The whole status object (camelCase, as the CRD declares it)."""
    previous = previous or {}
    return {
        "observedGeneration": o.generation,
        "conditions": conditions(o, previous.get("conditions"), at),
        "brokers": {"desired": o.desired_brokers, "ready": len(o.ready_broker_ids),
                    "ids": sorted(o.ready_broker_ids)},
        # The active controller's id is in ZooKeeper only (a Metadata answer's controller_id is
        # a broker, see broker/metadata_apis.py), so the status reports the pods' readiness.
        "controllers": {"desired": o.desired_controllers, "ready": o.ready_controllers},
        "zookeeper": (None if o.desired_zookeeper is None
                      else {"desired": o.desired_zookeeper, "ready": o.ready_zookeeper}),
        "bootstrapServers": o.bootstrap_servers,
    }


def changed(old: dict[str, Any] | None, new: dict[str, Any]) -> bool:
    """Whether writing `new` would change anything (avoids a status write, hence an event, per tick)."""
    old = old or {}
    return any(old.get(k) != v for k, v in new.items())

"""KafkaCluster status as a pure function of what one reconcile pass saw.

Conditions follow the Kubernetes convention: Ready, Progressing and Degraded, each with a reason,
a message, the generation it describes, and a lastTransitionTime that moves only when the
condition's status changes (so `kubectl wait` and alerting see real transitions, not churn).
Reconciling and Stalled are the two kstatus reads (Flux, `helm --wait`, Argo CD's health check):
Reconciling mirrors Progressing and covers whatever fixes itself (a roll, brokers starting, an
unreachable cluster, a transient API error: each with its reason and the retry); Stalled (kstatus
"Failed": Flux and `helm --wait` give up) is only for what will not fix itself without a person
(an invalid spec, a change the operator refuses, an API answer such as 403 Forbidden), and only
while nothing else is in progress. The conditions never contradict each other: Ready=True never
stands beside Stalled=True or Degraded=True, and Reconciling=True never beside Stalled=True
(tests/operator/test_operator_status.py checks every combination an Observation can produce).
"""

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

Condition = dict[str, Any]
"""A Kubernetes status condition: type, status, reason, message, observedGeneration, lastTransitionTime."""

READY, PROGRESSING, DEGRADED = "Ready", "Progressing", "Degraded"
RECONCILING, STALLED = "Reconciling", "Stalled"
RETRY = "retrying at the next pass"

PERMANENT_API_STATUSES = frozenset({400, 403, 405, 422})
"""API answers that the same request will get again until a person changes something (the RBAC,
an object the API server rejects); every other one (409 conflicts, 429, 5xx, a lost connection,
a 404 of an object deleted meanwhile, a 401 before the token is read again) fixes itself."""


def permanent_api_error(status_code: int) -> bool:
    return status_code in PERMANENT_API_STATUSES


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
    zookeeper_scaling: tuple[str, str] | None = None  # (reason, message) of a managed ensemble's scale under way
    bootstrap_servers: str | None = None
    invalid: str | None = None
    waiting: str | None = None  # roll or scale held back until the cluster is healthy
    refused: str | None = None  # a requested change the operator will not make (why)
    pending_restarts: tuple[int, ...] = ()
    unreachable: str | None = None  # the cluster did not answer Metadata
    stalled: tuple[tuple[str, str], ...] = ()  # (reason, message) of each change the operator refuses
    moving: str | None = None  # partitions being moved (a drain before a scale-down, a rebalance)
    data_movement: dict[str, Any] | None = None  # status.dataMovement: progress and throttles (data_movement)
    rebalance: dict[str, Any] | None = None  # status.rebalance: the on-demand rebalance (operator/rebalance)


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
    if o.pending_restarts:
        progressing = (True, "RollingUpdate",
                       f"brokers {list(o.pending_restarts)} to restart with the new configuration"
                       + (f"; {o.waiting}" if o.waiting else ""))
    elif o.moving:
        progressing = (True, "MovingData", o.moving)
    elif o.running_brokers != o.desired_brokers and not o.refused:
        progressing = (True, "Scaling", f"{o.running_brokers} broker pods, {o.desired_brokers} desired")
    elif o.zookeeper_scaling:
        progressing = (True, *o.zookeeper_scaling)
    elif unreachable:
        progressing = (True, "ClusterUnreachable", f"{unreachable}; {RETRY}")
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
    # Ready: the cluster serves and matches the spec (a refused change is a spec not met).
    if brokers_ready and support is None and not degraded[0] and not o.zookeeper_scaling:
        ready_c = (True, "ClusterReady", f"{ready} brokers ready")
    else:
        ready_c = (False, progressing[1] if progressing[0] else degraded[1],
                   f"{ready}/{o.desired_brokers} brokers ready"
                   + (f"; {support[1]}" if support is not None else "")
                   + (f"; {stalled}" if o.stalled else ""))
    # Stalled only once nothing else moves (kstatus reads Reconciling first; both True would say
    # "in progress" and "failed" at once); until then Degraded carries the refusal.
    if o.stalled and not progressing[0]:
        stalled_c = (True, o.stalled[0][0], stalled)
    else:
        stalled_c = (False, "AsExpected", "")
    return [cond(READY, *ready_c), cond(PROGRESSING, *progressing), cond(DEGRADED, *degraded),
            cond(RECONCILING, *progressing), cond(STALLED, *stalled_c)]


def error_status(previous: dict[str, Any] | None, generation: int | None, message: str,
                 permanent: bool = False, at: str | None = None) -> dict[str, Any]:
    """The status after a pass that the Kubernetes API failed: what was last observed stays, the
    conditions say why nothing moved, for this generation (so `kubectl wait` and kstatus see it).
    A transient error is Reconciling (reason KubernetesApiError, retried); only a `permanent` one
    (see permanent_api_error) is Stalled."""
    previous = dict(previous or {})
    prev = {c.get("type"): c for c in previous.get("conditions") or []}
    when = at or now()
    reason = "KubernetesApiError"

    def cond(type_: str, ok: bool, text: str = message) -> Condition:
        return condition(type_, ok, reason, text, generation, prev, when)

    if permanent:
        conds = [cond(READY, False), cond(PROGRESSING, False), cond(DEGRADED, True),
                 cond(RECONCILING, False), cond(STALLED, True)]
    else:
        retry = f"{message}; {RETRY}"
        # Ready keeps what was last seen unless it would claim a spec met that this pass did not
        # finish applying (a new generation).
        old_ready = prev.get(READY) or {}
        if old_ready.get("status") == "True" and old_ready.get("observedGeneration") == generation:
            ready_c = condition(READY, True, str(old_ready.get("reason") or "ClusterReady"),
                                str(old_ready.get("message") or ""), generation, prev, when)
        else:
            ready_c = cond(READY, False, retry)
        conds = [ready_c, cond(PROGRESSING, True, retry), cond(DEGRADED, False, retry),
                 cond(RECONCILING, True, retry), cond(STALLED, False, "")]
    return {**previous, "observedGeneration": generation, "conditions": conds}


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
        "dataMovement": o.data_movement,
        "rebalance": o.rebalance,
    }


def changed(old: dict[str, Any] | None, new: dict[str, Any]) -> bool:
    """Whether writing `new` would change anything (avoids a status write, hence an event, per tick)."""
    old = old or {}
    return any(old.get(k) != v for k, v in new.items())

"""What to do about one Topic resource: pure decisions over the resource and what the cluster
reports, returning the admin actions to take and the status to write.

A pass has two decision points around one observation of the cluster:

1. `gate` — from the resource alone (and which KafkaCluster exists, and which older resource
   claims the same topic): stop here with a status (unmanaged, invalid, conflict, no cluster),
   release the finalizer, delete the topic, or go on and observe the topic.
2. `plan` — from the spec and the live topic: create it, add partitions, set and remove config
   overrides; refuse what Kafka cannot do (fewer partitions, another replication factor).
   Adopting an existing topic destroys nothing: the overrides the spec does not name are kept
   and reported (status.keptConfig) until the spec names them; only overrides the operator
   manages are removed when the spec stops naming them.

`outcome` turns what happened into the status: conditions Ready, Reconciling and Stalled (the
pair kstatus reads for Flux and `helm --wait`), each carrying the generation it describes, so
`kubectl wait --for=condition=Ready` waits for the current spec.
"""

from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any

from pydantic import ValidationError

from odradek.common.topic_config import parse_topic_config
from odradek.operator.status import condition, now
from odradek.operator.topic_models import (
    FINALIZER,
    TopicSpec,
    managed,
    parse_topic_spec,
    spec_problem,
    topic_name,
)

READY, RECONCILING, STALLED = "Ready", "Reconciling", "Stalled"


# --- the resource ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class TopicResource:
    """The parts of a Topic body the decisions read."""
    namespace: str
    name: str
    generation: int | None
    created: str  # creationTimestamp: RFC 3339 in UTC, so text order is time order
    cluster_ref: str | None
    topic: str  # the claimed topic: the one managed so far, else the one the spec names
    spec: TopicSpec | None
    invalid: tuple[str, str] | None  # (reason, message) when the spec does not validate
    managed: bool
    deleting: bool
    has_finalizer: bool
    managed_topic: str | None  # status.topicName: the topic this resource created or adopted
    retain: bool = False  # spec.deletionPolicy is Retain (read from the raw spec when invalid)
    previous_conditions: tuple[dict[str, Any], ...] = ()
    kept_config: frozenset[str] = frozenset()  # status.keptConfig: overrides found at adoption, left alone

    @property
    def adopting(self) -> bool:
        """Not managing a topic yet: a live topic found now is adopted, not created by us."""
        return self.managed_topic is None

    @property
    def key(self) -> tuple[str, str]:
        return self.namespace, self.name

    @property
    def claim(self) -> tuple[str, str | None, str]:
        """Resources with equal claims name one topic of one cluster."""
        return self.namespace, self.cluster_ref, self.topic


def resource_from_body(body: dict[str, Any]) -> TopicResource:
    meta = body["metadata"]
    raw_spec = body.get("spec") or {}
    status = body.get("status") or {}
    try:
        spec, invalid = parse_topic_spec(raw_spec), None
    except ValidationError as e:
        spec, invalid = None, spec_problem(e)
    managed_topic = status.get("topicName")
    spec_topic = topic_name(body, spec) if spec is not None else (raw_spec.get("topicName") or meta["name"])
    cluster_ref = spec.cluster_ref if spec is not None else raw_spec.get("clusterRef")
    return TopicResource(
        namespace=meta["namespace"], name=meta["name"], generation=meta.get("generation"),
        created=meta.get("creationTimestamp") or "", cluster_ref=cluster_ref if isinstance(cluster_ref, str) else None,
        topic=managed_topic or str(spec_topic), spec=spec, invalid=invalid, managed=managed(body),
        deleting=bool(meta.get("deletionTimestamp")), has_finalizer=FINALIZER in (meta.get("finalizers") or ()),
        managed_topic=managed_topic,
        retain=(spec.deletion_policy if spec is not None else raw_spec.get("deletionPolicy")) == "Retain",
        previous_conditions=tuple(status.get("conditions") or ()),
        kept_config=frozenset(str(k) for k in status.get("keptConfig") or ()))


def owner_of(claimants: list[TopicResource]) -> TopicResource:
    """The one resource of several naming one topic that manages it: the one managing it
    already, else the oldest (ties: by name, unique in a namespace). A resource renamed onto a
    managed topic never takes it over, however old."""
    return min(claimants, key=lambda r: (r.managed_topic != r.topic, r.created, r.name))


# --- 1. the gate ----------------------------------------------------------------------------------


class Cluster(Enum):
    PRESENT = "present"
    MISSING = "missing"
    DELETING = "deleting"


class Step(Enum):
    NONE = "none"  # nothing at all (a deleted resource that is not ours to hold up)
    STATUS = "status"  # write the status below; nothing to do in Kafka
    RELEASE = "release"  # remove the finalizer, touch nothing in Kafka
    DELETE = "delete"  # delete the topic, then remove the finalizer
    OBSERVE = "observe"  # look at the topic and plan


@dataclass(frozen=True)
class Gate:
    step: Step
    finalizer: bool | None = None  # True: add it; False: remove it; None: leave as it is
    outcome: "Outcome | None" = None  # for STATUS


def gate(r: TopicResource, cluster: Cluster, owner: str | None) -> Gate:
    """`owner` is the name of the older resource claiming the same topic, None when it is `r`."""
    if r.deleting:
        if not r.has_finalizer:
            return Gate(Step.NONE)  # not ours to hold up (unmanaged, or released already)
        # The finalizer is only added on the way to create or adopt `r.topic`, so holding it
        # means the topic is this resource's: deleted unless retained, unmanaged, no longer
        # this resource's, or the cluster itself is gone (then nothing could delete it, and a
        # namespace being deleted must not hang on it).
        keep_topic = not r.managed or r.retain or owner is not None or cluster is not Cluster.PRESENT
        return Gate(Step.RELEASE if keep_topic else Step.DELETE)
    if not r.managed:
        return Gate(Step.STATUS, finalizer=False, outcome=Outcome(
            r, Phase.IDLE, "Unmanaged", "odradek.io/managed is \"false\": the topic is left as it is"))
    if r.invalid is not None:
        return Gate(Step.STATUS, outcome=Outcome(r, Phase.STALLED, *r.invalid))
    if owner is not None:
        return Gate(Step.STATUS, finalizer=False, outcome=Outcome(
            r, Phase.STALLED, "ResourceConflict",
            f"topic {r.topic!r} is managed by the older Topic {owner!r} in this namespace"))
    if cluster is not Cluster.PRESENT:
        what = "is being deleted" if cluster is Cluster.DELETING else "does not exist"
        return Gate(Step.STATUS, outcome=Outcome(
            r, Phase.PROGRESSING, "ClusterNotFound", f"KafkaCluster {r.cluster_ref!r} {what} in this namespace"))
    wanted = topic_name_of(r)
    if r.managed_topic is not None and wanted != r.managed_topic:
        return Gate(Step.STATUS, outcome=Outcome(
            r, Phase.STALLED, "TopicNameChangeNotSupported",
            f"this resource manages topic {r.managed_topic!r}; spec.topicName cannot change to {wanted!r}",
            live=None))
    return Gate(Step.OBSERVE, finalizer=True)


def topic_name_of(r: TopicResource) -> str:
    """The topic the spec names (the spec is valid here)."""
    return (r.spec.topic_name if r.spec is not None else None) or r.name


# --- 2. the plan ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class LiveTopic:
    """A topic as the cluster reports it: Metadata and its DYNAMIC_TOPIC_CONFIG overrides."""
    partitions: int
    replicas: int
    config: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class CreateTopic:
    topic: str
    partitions: int | None
    replicas: int | None
    config: dict[str, str]


@dataclass(frozen=True)
class CreatePartitions:
    topic: str
    count: int


@dataclass(frozen=True)
class AlterConfigs:
    """IncrementalAlterConfigs: SET `set`, DELETE `delete` (back to the broker default)."""
    topic: str
    set: dict[str, str]
    delete: tuple[str, ...]


@dataclass(frozen=True)
class ChangeReplicationFactor:
    """By partition reassignment: replicas added on the least loaded brokers or removed from the
    most loaded ones (common/replica_balance.change_replication_factor)."""
    topic: str
    replicas: int


@dataclass(frozen=True)
class DeleteTopic:
    topic: str


Action = CreateTopic | CreatePartitions | AlterConfigs | ChangeReplicationFactor | DeleteTopic


@dataclass(frozen=True)
class Plan:
    actions: tuple[Action, ...]
    refusals: tuple[tuple[str, str], ...] = ()  # (reason, message): changes Kafka cannot make


def same_value(key: str, a: str, b: str) -> bool:
    """Equal as the broker reads them (`1e3` is not a long, but " 100" and "100" are one value)."""
    if a == b:
        return True
    try:
        return bool(parse_topic_config(key, a) == parse_topic_config(key, b))
    except ValueError:
        return False


def config_changes(desired: dict[str, str], live: dict[str, str]) -> tuple[dict[str, str], tuple[str, ...]]:
    """(keys to set, keys to delete) that make the live overrides the desired ones."""
    to_set = {k: v for k, v in desired.items() if k not in live or not same_value(k, v, live[k])}
    return to_set, tuple(sorted(k for k in live if k not in desired))


def kept_overrides(spec: TopicSpec, live: LiveTopic | None, kept: frozenset[str], adopting: bool) -> frozenset[str]:
    """The live overrides the operator leaves alone: those the topic had when it was adopted
    (`kept` from earlier passes, or all of them now when `adopting`) that the spec does not name.
    Naming one in the spec makes it managed from then on."""
    if live is None:
        return frozenset()
    found = frozenset(live.config) if adopting else kept
    return frozenset(k for k in found if k in live.config and k not in spec.config_texts())


def plan(spec: TopicSpec, topic: str, live: LiveTopic | None, keep: frozenset[str] = frozenset()) -> Plan:
    """`keep`: live overrides not to remove (kept_overrides)."""
    desired = spec.config_texts()
    if live is None:
        return Plan((CreateTopic(topic, spec.partitions, spec.replicas, desired),))
    actions: list[Action] = []
    refusals = []
    if spec.partitions is not None:
        if spec.partitions > live.partitions:
            actions.append(CreatePartitions(topic, spec.partitions))
        elif spec.partitions < live.partitions:
            refusals.append(("PartitionDecreaseNotSupported",
                             f"topic {topic!r} has {live.partitions} partitions; Kafka cannot remove partitions "
                             f"({spec.partitions} desired)"))
    if spec.replicas is not None and spec.replicas != live.replicas:
        actions.append(ChangeReplicationFactor(topic, spec.replicas))
    to_set, to_delete = config_changes(desired, live.config)
    to_delete = tuple(k for k in to_delete if k not in keep)
    if to_set or to_delete:
        actions.append(AlterConfigs(topic, to_set, to_delete))
    return Plan(tuple(actions), tuple(refusals))


def applied(live: LiveTopic | None, action: Action, result: "ActionResult") -> LiveTopic | None:
    """The topic after `action` succeeded (what the status reports without asking again)."""
    if isinstance(action, CreateTopic):
        return LiveTopic(result.partitions or action.partitions or 0, result.replicas or action.replicas or 0,
                         dict(action.config))
    if live is None:
        return None
    if isinstance(action, CreatePartitions):
        return replace(live, partitions=action.count)
    if isinstance(action, AlterConfigs):
        config = {k: v for k, v in live.config.items() if k not in action.delete}
        return replace(live, config={**config, **action.set})
    if isinstance(action, ChangeReplicationFactor):
        return replace(live, replicas=action.replicas)  # started: the reassignment completes in the cluster
    return live


# --- 3. the outcome -------------------------------------------------------------------------------


class Phase(Enum):
    READY = "ready"
    PROGRESSING = "progressing"  # not there yet; the operator keeps trying (Reconciling=True)
    STALLED = "stalled"  # needs a change to the resource or the cluster (Stalled=True)
    IDLE = "idle"  # not managed: neither Ready nor working on it


@dataclass(frozen=True)
class ActionResult:
    """What the cluster answered to one action: an error (Kafka's code name and message) or, for a
    created topic, its partition count and replication factor."""
    error: str | None = None  # Kafka's error code name, e.g. "invalid_config"
    message: str | None = None
    partitions: int | None = None
    replicas: int | None = None


# Errors a retry cannot fix: the resource (or the cluster) must change first.
USER_ERRORS = frozenset({
    "invalid_config", "invalid_replication_factor", "invalid_partitions", "invalid_topic_exception",
    "invalid_request", "policy_violation", "topic_authorization_failed", "cluster_authorization_failed",
    "invalid_replica_assignment", "unsupported_version", "topic_deletion_disabled",
})


def error_reason(error: str) -> str:
    """Kafka's error code name as a condition reason: invalid_config → InvalidConfig."""
    return "".join(part.capitalize() for part in error.split("_"))


@dataclass(frozen=True)
class Outcome:
    resource: TopicResource
    phase: Phase
    reason: str
    message: str
    live: LiveTopic | None = None
    topic: str | None = None  # the topic managed from now on (status.topicName)
    kept: frozenset[str] | None = None  # status.keptConfig from now on (None: as it was)


def outcome(r: TopicResource, topic: str, live: LiveTopic | None, p: Plan,
            results: list[tuple[Action, ActionResult]], keep: frozenset[str] = frozenset()) -> Outcome:
    """The result of an OBSERVE pass: the live topic after the actions that succeeded, and the
    first problem (a failed action, then a refusal), if any."""
    failed = []
    for action, result in results:
        if result.error is None:
            live = applied(live, action, result)
        else:
            failed.append((action, result))
    managed_topic = topic if live is not None else r.managed_topic
    kept = frozenset(k for k in keep if live is not None and k in live.config)
    if failed:
        action, result = failed[0]
        error = result.error or ""  # failed holds only results with an error
        phase = Phase.STALLED if error in USER_ERRORS else Phase.PROGRESSING
        what = type(action).__name__
        return Outcome(r, phase, error_reason(error), f"{what} failed: {result.message or error}",
                       live, managed_topic, kept)
    if p.refusals:
        reason, message = p.refusals[0]
        messages = "; ".join(m for _, m in p.refusals)
        return Outcome(r, Phase.STALLED, reason, messages if len(p.refusals) > 1 else message, live, managed_topic,
                       kept)
    message = f"topic {topic!r} matches the spec"
    if kept:
        message += (f"; overrides it had when adopted and the spec does not name are kept: {', '.join(sorted(kept))} "
                    "(name them in spec.config to manage them)")
    return Outcome(r, Phase.READY, "TopicReady", message, live, managed_topic, kept)


def unreachable(r: TopicResource, message: str) -> Outcome:
    return Outcome(r, Phase.PROGRESSING, "ClusterUnreachable", message)


def phase_conditions(phase: Phase, reason: str, message: str, generation: int | None,
                     previous: tuple[dict[str, Any], ...], at: str | None = None) -> list[dict[str, Any]]:
    """Ready, Reconciling and Stalled of a resource in `phase` (Topic and KafkaUser alike);
    `previous` conditions keep their lastTransitionTime while their status stays."""
    prev = {c.get("type"): c for c in previous}
    at = at or now()

    def cond(type_: str, ok: bool, reason: str, message: str) -> dict[str, Any]:
        return condition(type_, ok, reason, message, generation, prev, at)

    ready = phase is Phase.READY
    working = phase is Phase.PROGRESSING
    stalled = phase is Phase.STALLED
    return [
        cond(READY, ready, reason, message),
        cond(RECONCILING, working, reason if working else "ReconcileComplete" if ready else reason,
             message if working else ""),
        cond(STALLED, stalled, reason if stalled else "AsExpected", message if stalled else ""),
    ]


def conditions(o: Outcome, at: str | None = None) -> list[dict[str, Any]]:
    return phase_conditions(o.phase, o.reason, o.message, o.resource.generation, o.resource.previous_conditions, at)


def status(o: Outcome, previous: dict[str, Any] | None = None, at: str | None = None) -> dict[str, Any]:
    """The whole status (camelCase, as the CRD declares it). Live fields keep their last known
    values while the topic cannot be looked at (no cluster, conflict, unmanaged)."""
    previous = previous or {}
    live = o.live
    return {
        "observedGeneration": o.resource.generation,
        "conditions": conditions(o, at),
        "topicName": o.topic if o.topic is not None else previous.get("topicName"),
        "partitions": live.partitions if live else previous.get("partitions"),
        "replicas": live.replicas if live else previous.get("replicas"),
        "config": dict(sorted(live.config.items())) if live else previous.get("config") or {},
        "keptConfig": sorted(o.kept) if o.kept is not None else list(previous.get("keptConfig") or []),
    }


def status_changed(old: dict[str, Any] | None, new: dict[str, Any]) -> bool:
    old = old or {}
    return any(old.get(k) != v for k, v in new.items())


def status_patch(old: dict[str, Any] | None, new: dict[str, Any]) -> dict[str, Any]:
    """The merge patch from `old` to `new`: a config key that left the status is set to null
    (a merge patch merges maps, so leaving it out would keep it)."""
    old = old or {}
    patch = dict(new)
    old_config = old.get("config") or {}
    patch["config"] = {**{k: None for k in old_config if k not in new["config"]}, **new["config"]}
    return patch

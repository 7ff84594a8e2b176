"""What to do about one KafkaUser: pure decisions over the resource and what the cluster reports,
returning the admin actions to take, the Secret to write and the status.

The same two decision points as a Topic's (topic_reconciler):

1. `gate` — from the resource alone (and whether its KafkaCluster exists): stop with a status
   (invalid spec, no cluster), release the finalizer, remove the user from the cluster, or go on.
2. `plan` — from the spec and the user as the cluster reports it (its SCRAM credentials, every
   ACL naming its principal, its quotas): upsert or delete credentials, create the ACLs the spec
   adds and delete the ones it does not name, set and remove quotas. The operator owns all of the
   principal's ACLs and quotas, so changes made in the cluster are reverted at the next resync.

A password is never decided here beyond "upsert": the shell reads or generates it, and writes the
user's Secret only once the cluster holds the credential, so a Secret always carries a password
that works (a Secret missing or holding another password is what makes the next pass upsert).
SCRAM credentials cannot be read back: an out-of-band password change with the same iteration
count goes unnoticed until the password changes here.
"""

import base64
import binascii
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from pydantic import ValidationError

from odradek.common.security import jaas
from odradek.operator.topic_reconciler import Cluster, Phase, error_reason, phase_conditions
from odradek.operator.user_models import (
    FINALIZER,
    SCRAM,
    KafkaUserSpec,
    parse_user_spec,
    spec_problem,
    username,
)

SCRAM_MECHANISM = "SCRAM-SHA-512"
SCRAM_ITERATIONS = 4096
"""Kafka's minimum and its tools' default: clients pay this per connection."""

# Kafka's codes (org.apache.kafka.common.resource / acl): the operator reads and writes ints.
RESOURCE_TYPES = {"topic": 2, "group": 3, "cluster": 4, "transactionalId": 5}
PATTERN_TYPES = {"literal": 3, "prefix": 4}
OPERATIONS = {"All": 2, "Read": 3, "Write": 4, "Create": 5, "Delete": 6, "Alter": 7, "Describe": 8,
              "ClusterAction": 9, "DescribeConfigs": 10, "AlterConfigs": 11, "IdempotentWrite": 12}
PERMISSIONS = {"deny": 2, "allow": 3}
CLUSTER_NAME = "kafka-cluster"


# --- the resource ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class UserResource:
    """The parts of a KafkaUser body the decisions read."""
    namespace: str
    name: str
    uid: str | None
    generation: int | None
    cluster_ref: str | None
    spec: KafkaUserSpec | None
    invalid: tuple[str, str] | None
    deleting: bool
    has_finalizer: bool
    managed_username: str | None  # status.username: the user this resource made in the cluster
    previous_conditions: tuple[dict[str, Any], ...] = ()

    @property
    def key(self) -> tuple[str, str]:
        return self.namespace, self.name

    @property
    def username(self) -> str:
        """The user the spec names (the managed one while the spec is invalid)."""
        if self.spec is None:
            return self.managed_username or self.name
        return username(self.name, self.spec)

    @property
    def secret_name(self) -> str:
        return self.name


def resource_from_body(body: dict[str, Any]) -> UserResource:
    meta = body["metadata"]
    raw_spec = body.get("spec") or {}
    status = body.get("status") or {}
    try:
        spec, invalid = parse_user_spec(raw_spec), None
    except ValidationError as e:
        spec, invalid = None, spec_problem(e)
    if spec is not None and (own := own_secret_as_password(spec, meta["name"])) is not None:
        spec, invalid = None, ("InvalidSpec", own)
    cluster_ref = spec.cluster_ref if spec is not None else raw_spec.get("clusterRef")
    return UserResource(
        namespace=meta["namespace"], name=meta["name"], uid=meta.get("uid"), generation=meta.get("generation"),
        cluster_ref=cluster_ref if isinstance(cluster_ref, str) else None, spec=spec, invalid=invalid,
        deleting=bool(meta.get("deletionTimestamp")), has_finalizer=FINALIZER in (meta.get("finalizers") or ()),
        managed_username=status.get("username"), previous_conditions=tuple(status.get("conditions") or ()))


def own_secret_as_password(spec: KafkaUserSpec, name: str) -> str | None:
    """Why a password taken from the user's own Secret (named after the resource, written by the
    operator) is refused: each pass would read back what the last one wrote, and from its
    sasl.jaas.config key a new, longer password every pass (clients locked out, the Secret
    growing until the API server refuses it)."""
    password = spec.authentication.password if spec.authentication is not None else None
    if password is None or password.value_from.secret_key_ref.name != name:
        return None
    return (f"spec.authentication.password.valueFrom.secretKeyRef.name: {name!r} is the Secret the operator "
            "writes for this user; name another Secret")


# --- 1. the gate ----------------------------------------------------------------------------------


class Step(Enum):
    NONE = "none"
    STATUS = "status"
    RELEASE = "release"  # remove the finalizer, touch nothing in Kafka
    REMOVE = "remove"  # remove the user's credentials, ACLs and quotas, then the finalizer
    OBSERVE = "observe"


@dataclass(frozen=True)
class Gate:
    step: Step
    finalizer: bool | None = None
    outcome: "Outcome | None" = None


def gate(r: UserResource, cluster: Cluster) -> Gate:
    if r.deleting:
        if not r.has_finalizer:
            return Gate(Step.NONE)
        # A cluster that is gone holds no user to remove; a namespace being deleted must not hang.
        return Gate(Step.RELEASE if cluster is not Cluster.PRESENT else Step.REMOVE)
    if r.invalid is not None:
        return Gate(Step.STATUS, outcome=Outcome(r, Phase.STALLED, *r.invalid))
    if cluster is not Cluster.PRESENT:
        what = "is being deleted" if cluster is Cluster.DELETING else "does not exist"
        return Gate(Step.STATUS, outcome=Outcome(
            r, Phase.PROGRESSING, "ClusterNotFound", f"KafkaCluster {r.cluster_ref!r} {what} in this namespace"))
    return Gate(Step.OBSERVE, finalizer=True)


# --- 2. the plan ----------------------------------------------------------------------------------


@dataclass(frozen=True, order=True)
class Acl:
    """One ACL binding, with Kafka's int codes (a DescribeAcls row, a CreateAcls creation)."""
    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission: int


@dataclass(frozen=True)
class LiveUser:
    """A user as the cluster reports it. `acls` None: the cluster has no authorizer."""
    scram: dict[str, int] = field(default_factory=dict)  # mechanism name → iterations
    acls: frozenset[Acl] | None = frozenset()
    quotas: dict[str, float] = field(default_factory=dict)


def principal(user: str) -> str:
    return f"User:{user}"


def desired_acls(spec: KafkaUserSpec, user: str) -> frozenset[Acl]:
    out = set()
    for rule in spec.authorization.acls if spec.authorization is not None else ():
        res = rule.resource
        name = CLUSTER_NAME if res.type == "cluster" else res.name or ""
        pattern = PATTERN_TYPES["literal"] if res.type == "cluster" else PATTERN_TYPES[res.pattern_type]
        for op in rule.operations:
            out.add(Acl(RESOURCE_TYPES[res.type], name, pattern, principal(user), rule.host, OPERATIONS[op],
                        PERMISSIONS[rule.type]))
    return frozenset(out)


@dataclass(frozen=True)
class AlterScram:
    """AlterUserScramCredentials for one user: upsert SCRAM_MECHANISM with `password` (the shell
    salts it), delete `delete` (mechanism names)."""
    user: str
    password: str | None = field(default=None, repr=False)
    delete: tuple[str, ...] = ()

    def __str__(self) -> str:
        what = [f"upsert {SCRAM_MECHANISM}"] if self.password is not None else []
        return f"SCRAM credentials of {self.user!r}: " + ", ".join(what + [f"delete {m}" for m in self.delete])


@dataclass(frozen=True)
class CreateAcls:
    user: str
    acls: tuple[Acl, ...]

    def __str__(self) -> str:
        return f"created {len(self.acls)} ACLs of {self.user!r}"


@dataclass(frozen=True)
class DeleteAcls:
    """Delete exactly these bindings; `everything` deletes every ACL of the principal."""
    user: str
    acls: tuple[Acl, ...] = ()
    everything: bool = False

    def __str__(self) -> str:
        return f"deleted {'every ACL' if self.everything else f'{len(self.acls)} ACLs'} of {self.user!r}"


@dataclass(frozen=True)
class AlterQuotas:
    user: str
    set: dict[str, float]
    remove: tuple[str, ...] = ()

    def __str__(self) -> str:
        return f"quotas of {self.user!r}: set {sorted(self.set)}, removed {list(self.remove)}"


Action = AlterScram | CreateAcls | DeleteAcls | AlterQuotas


@dataclass(frozen=True)
class Plan:
    actions: tuple[Action, ...]
    refusals: tuple[tuple[str, str], ...] = ()


def plan(spec: KafkaUserSpec, user: str, live: LiveUser, password: str | None, password_stored: bool) -> Plan:
    """`password`: the SCRAM password the user must have (scram-sha-512 only); `password_stored`:
    the user's Secret holds exactly it already (so the cluster was given it)."""
    actions: list[Action] = []
    refusals: list[tuple[str, str]] = []
    scram = spec.authentication is not None and spec.authentication.type == SCRAM
    upsert = None
    if scram and password is not None and (
            not password_stored or live.scram.get(SCRAM_MECHANISM) != SCRAM_ITERATIONS):
        upsert = password
    drop = tuple(sorted(m for m in live.scram if not scram or m != SCRAM_MECHANISM))
    if upsert is not None or drop:
        actions.append(AlterScram(user, upsert, drop))
    wanted = desired_acls(spec, user)
    if live.acls is None:
        if wanted:
            refusals.append(("AuthorizerNotEnabled", "the cluster has no authorizer (spec.authorization of the "
                                                     "KafkaCluster): ACLs cannot be set"))
    else:
        if wanted - live.acls:
            actions.append(CreateAcls(user, tuple(sorted(wanted - live.acls))))
        if live.acls - wanted:
            actions.append(DeleteAcls(user, tuple(sorted(live.acls - wanted))))
    quotas = spec.quotas.kafka() if spec.quotas is not None else {}
    to_set = {k: v for k, v in quotas.items() if live.quotas.get(k) != v}
    to_remove = tuple(sorted(k for k in live.quotas if k not in quotas))
    if to_set or to_remove:
        actions.append(AlterQuotas(user, to_set, to_remove))
    return Plan(tuple(actions), tuple(refusals))


def removal(user: str, live: LiveUser) -> tuple[Action, ...]:
    """Everything of `user` out of the cluster (a deleted resource, or a user name it no longer has)."""
    actions: list[Action] = []
    if live.scram:
        actions.append(AlterScram(user, None, tuple(sorted(live.scram))))
    if live.acls:
        actions.append(DeleteAcls(user, everything=True))
    if live.quotas:
        actions.append(AlterQuotas(user, {}, tuple(sorted(live.quotas))))
    return tuple(actions)


# --- the Secret -----------------------------------------------------------------------------------

SECRET_LABELS = {"app.kubernetes.io/managed-by": "odradek-operator", "odradek.io/kind": "KafkaUser"}


def scram_secret_data(user: str, password: str) -> dict[str, str]:
    """The Secret's keys (plain text; the shell base64-encodes): Strimzi's `password` and `sasl.jaas.config`."""
    return {"password": password, "sasl.jaas.config": jaas.client_config(SCRAM_MECHANISM, user, password)}


def user_secret(r: UserResource, data: dict[str, str]) -> dict[str, Any]:
    """The user's Secret, owned by the KafkaUser (garbage-collected with it). `data` in plain text."""
    meta: dict[str, Any] = {
        "name": r.secret_name, "namespace": r.namespace,
        "labels": {**SECRET_LABELS, "odradek.io/cluster": r.cluster_ref or "", "odradek.io/user": r.name}}
    if r.uid:
        meta["ownerReferences"] = [{"apiVersion": "odradek.io/v1alpha1", "kind": "KafkaUser", "name": r.name,
                                    "uid": r.uid, "controller": True, "blockOwnerDeletion": True}]
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "metadata": meta,
            "data": {k: base64.b64encode(v.encode()).decode() for k, v in sorted(data.items())}}


def secret_value(secret: dict[str, Any] | None, key: str) -> str | None:
    """A key of a Secret as text (None: no Secret, no key, or not UTF-8)."""
    if secret is None:
        return None
    raw = (secret.get("data") or {}).get(key)
    if raw is None:
        text = (secret.get("stringData") or {}).get(key)
        return text if isinstance(text, str) else None
    try:
        return base64.b64decode(raw, validate=True).decode()
    except (binascii.Error, ValueError):
        return None


# --- 3. the outcome -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ActionResult:
    error: str | None = None  # Kafka's error code name
    message: str | None = None


USER_ERRORS = frozenset({
    "invalid_request", "cluster_authorization_failed", "unsupported_version", "security_disabled",
    "unacceptable_credential", "unsupported_sasl_mechanism", "invalid_config", "policy_violation",
})
"""Errors a retry cannot fix: the resource or the cluster must change first."""


@dataclass(frozen=True)
class Outcome:
    resource: UserResource
    phase: Phase
    reason: str
    message: str
    username: str | None = None  # status.username from now on (None: as it was)
    secret: str | None = None


def outcome(r: UserResource, user: str, p: Plan, results: list[tuple[Action, ActionResult]],
            secret: str | None) -> Outcome:
    failed = [(a, res) for a, res in results if res.error is not None]
    if failed:
        action, result = failed[0]
        error = result.error or ""
        phase = Phase.STALLED if error in USER_ERRORS else Phase.PROGRESSING
        return Outcome(r, phase, error_reason(error), f"{type(action).__name__} failed: {result.message or error}",
                       user, secret)
    if p.refusals:
        reason = p.refusals[0][0]
        return Outcome(r, Phase.STALLED, reason, "; ".join(m for _, m in p.refusals), user, secret)
    return Outcome(r, Phase.READY, "UserReady", f"user {user!r} matches the spec", user, secret)


def unreachable(r: UserResource, message: str) -> Outcome:
    return Outcome(r, Phase.PROGRESSING, "ClusterUnreachable", message)


def conditions(o: Outcome, at: str | None = None) -> list[dict[str, Any]]:
    return phase_conditions(o.phase, o.reason, o.message, o.resource.generation, o.resource.previous_conditions, at)


def status(o: Outcome, previous: dict[str, Any] | None = None, at: str | None = None) -> dict[str, Any]:
    previous = previous or {}
    return {
        "observedGeneration": o.resource.generation,
        "conditions": conditions(o, at),
        "username": o.username if o.username is not None else previous.get("username"),
        "secret": o.secret if o.username is not None else previous.get("secret"),
    }


def status_changed(old: dict[str, Any] | None, new: dict[str, Any]) -> bool:
    old = old or {}
    return any(old.get(k) != v for k, v in new.items())


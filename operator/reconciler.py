"""One reconcile pass of a KafkaCluster: apply the desired objects, take one broker step, observe.

Every pass decides from scratch (the live objects, the pods, one Metadata answer), so the
operator can be killed anywhere and the next pass continues; each pass makes at most one
disruptive change (one pod deleted or one count change, by rolling.reconcile_brokers).
"""

import base64
import datetime
import logging
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from odradek.common.clock import Clock, now_ms
from odradek.common.security.channel import PLAINTEXT, ClientSecurity
from odradek.operator import builders, certificates, cluster_security, rebalance
from odradek.operator.apply import apply, prune
from odradek.operator.broker_config import apply_dynamic_defaults, startup_problem
from odradek.operator.cluster_access import cached_access, cluster_access
from odradek.operator.cluster_access import forget as forget_access
from odradek.operator.data_movement import MovementStep, Progress, move_data
from odradek.operator.kafka_admin import Unsupported
from odradek.operator.kube import KubeClient
from odradek.operator.models import (
    DEFAULT_IMAGE,
    GROUP,
    KafkaClusterSpec,
    Storage,
    parse_spec,
    spec_error_message,
)
from odradek.operator.orchestrator import KubernetesBrokerOrchestrator, broker_states
from odradek.operator.rolling import ClusterView, fetch_view, reconcile_brokers
from odradek.operator.status import Observation
from odradek.operator.storage import plan_resize
from odradek.operator.zookeeper_ensemble import MemberSource, admin_password, observe
from odradek.operator.zookeeper_ensemble import reconfig as zookeeper_reconfig
from odradek.operator.zookeeper_reconfig import MIN_SCALABLE, REFUSED, Ensemble, Member, Step, decide, settled_size

log = logging.getLogger(__name__)

ViewSource = Callable[[dict[str, Any]], Awaitable[ClusterView]]
ConfigApplier = Callable[[dict[str, Any], dict[str, str]], Awaitable[str | None]]
"""(resource, the spec's live broker keys) → the brokers' refusal, if any (broker_config)."""
DataMover = Callable[[dict[str, Any], ClusterView, int, int], Awaitable[MovementStep]]
"""(resource, view, broker count running, desired) → the data movement started (data_movement)."""


async def metadata_view(body: dict[str, Any]) -> ClusterView:
    """The cluster as its brokers report it, through the bootstrap Service (Kafka protocol);
    topics without a min.insync.replicas answer get the one the operator renders."""
    access = cached_access(body)
    rendered = builders.broker_properties(body, parse_spec(body.get("spec")))
    return await fetch_view(list(access.bootstrap), timeout=5.0,
                            default_min_insync=int(rendered.get("min.insync.replicas", 1)), security=access.security)


async def cluster_data_mover(body: dict[str, Any], view: ClusterView, current: int, desired: int) -> MovementStep:
    """Drain or spread partitions through the bootstrap Service (data_movement.move_data)."""
    access = cached_access(body)
    spec = parse_spec(body.get("spec"))
    return await move_data(list(access.bootstrap), view, current, desired, spec.brokers.auto_rebalance, timeout=5.0,
                           throttle=spec.brokers.rebalance.throttle_bytes_per_second,
                           previous=previous_movement(body),
                           rebalance_action=(body["metadata"].get("annotations") or {}).get(rebalance.ANNOTATION),
                           rebalance_status=(body.get("status") or {}).get("rebalance"),
                           security=access.security)


def previous_movement(body: dict[str, Any]) -> Progress | None:
    """The move the last pass recorded in the status (its throttles are removed once it is done)."""
    return Progress.from_status((body.get("status") or {}).get("dataMovement"))


async def cluster_config_applier(body: dict[str, Any], desired: dict[str, str]) -> str | None:
    """The spec's live broker keys into the cluster-wide dynamic defaults, through the bootstrap
    Service (broker_config.apply_dynamic_defaults)."""
    access = cached_access(body)
    return await apply_dynamic_config(body, list(access.bootstrap), desired, access.security)


async def apply_dynamic_config(body: dict[str, Any], bootstrap: list[tuple[str, int]], desired: dict[str, str],
                               security: ClientSecurity = PLAINTEXT) -> str | None:
    meta = body["metadata"]
    try:
        change, refused = await apply_dynamic_defaults(bootstrap, desired, timeout=5.0, security=security)
    except Unsupported as e:
        return str(e)
    if refused is None and not change.empty:
        log.info("%s/%s: dynamic broker configs set %s, deleted %s (no restart)", meta["namespace"], meta["name"],
                 change.set, list(change.delete))
    return None if refused is None else f"dynamic broker configs {sorted(change.set)}: {refused}"


def ready_replicas(obj: dict[str, Any] | None) -> int:
    """Pods Ready per the workload controller (Deployment or StatefulSet status)."""
    return int(((obj or {}).get("status") or {}).get("readyReplicas") or 0)


async def support_readiness(client: KubeClient, body: dict[str, Any], spec: KafkaClusterSpec) -> dict[str, Any]:
    """Observation fields for what the brokers need: controller pods and the managed ensemble."""
    meta = body["metadata"]
    n = builders.names(meta["name"])
    found = {"desired_controllers": spec.controller.replicas,
             "ready_controllers": ready_replicas(await client.get("Deployment", meta["namespace"], n["controller"]))}
    if spec.zookeeper.managed:
        found["desired_zookeeper"] = spec.zookeeper.replicas
        found["ready_zookeeper"] = ready_replicas(await client.get("StatefulSet", meta["namespace"], n["zookeeper"]))
    return found


DEFAULT_CLASS = "storageclass.kubernetes.io/is-default-class"
OWNED_KINDS = ["StatefulSet", "Deployment", "Service", "ConfigMap", "PodDisruptionBudget",
               "NetworkPolicy"]  # what builders and cluster_security render


def operator_image() -> str:
    """The operator's own image (its Deployment sets ODRADEK_IMAGE), for clusters naming none."""
    return os.environ.get("ODRADEK_IMAGE") or DEFAULT_IMAGE


def claim_template(sts: dict[str, Any] | None) -> dict[str, Any] | None:
    templates = ((sts or {}).get("spec") or {}).get("volumeClaimTemplates") or []
    return next((t for t in templates if (t.get("metadata") or {}).get("name") == "data"), None)


@dataclass(frozen=True)
class ZooKeeperPlan:
    """This pass's part of a managed ensemble's scale (zookeeper_reconfig.decide)."""
    replicas: int | None = None
    """The StatefulSet's replica count to render (None: the spec's)."""
    progress: tuple[str, str] | None = None
    refused: tuple[str, str] | None = None
    reconfig: Step | None = None
    members: dict[int, Member] = field(default_factory=dict)
    serving: frozenset[int] = frozenset()
    voters: int | None = None
    """The committed voters 1..k as this pass knows them (ZOOKEEPER_VOTERS on the StatefulSet)."""
    observed: bool = False
    """The ensemble was asked this pass (no scale is known to be settled)."""


ZOOKEEPER_VOTERS = f"{GROUP}/zookeeper-voters"
"""The StatefulSet's annotation: the ensemble's voters were 1..k when the StatefulSet was last
rendered. Written with the replica count in one apply, so it survives an operator restart at any
point of a scale; a pass where it equals both the spec's and the StatefulSet's size asks the
ensemble nothing (a reconfig since the render leaves it stale, so the next pass asks again)."""


def recorded_voters(sts: dict[str, Any] | None) -> int | None:
    value = (((sts or {}).get("metadata") or {}).get("annotations") or {}).get(ZOOKEEPER_VOTERS)
    return int(value) if isinstance(value, str) and value.isdigit() else None


def with_voters(obj: dict[str, Any], voters: int | None) -> dict[str, Any]:
    """The rendered ZooKeeper StatefulSet carrying ZOOKEEPER_VOTERS (dropped when unknown)."""
    annotations = {k: v for k, v in (obj["metadata"].get("annotations") or {}).items() if k != ZOOKEEPER_VOTERS}
    if voters is not None:
        annotations[ZOOKEEPER_VOTERS] = str(voters)
    return {**obj, "metadata": {**obj["metadata"], "annotations": annotations}}


async def zookeeper_plan(body: dict[str, Any], spec: KafkaClusterSpec, live: dict[str, Any] | None,
                         member_source: MemberSource) -> ZooKeeperPlan:
    """The ensemble size to render this pass and the reconfiguration to run after the render.

    A managed ensemble scales one member at a time by dynamic reconfiguration (see
    zookeeper_reconfig): each pass observes the members (`srvr`, the leader's `conf`) and takes
    one step, so the scale resumes after an operator restart. A settled ensemble (ZOOKEEPER_VOTERS
    equal to the spec's and the StatefulSet's size) is not asked: no connection per pass. Brokers and controllers keep their
    `zookeeper.connect`: it names the client Service, which follows the Ready members (a new
    member joins it once it serves; a removed one still answers until the next pass stops its
    pod, seen on a real ensemble, and a client session there moves on when it does), so no
    broker or controller restarts for a scale. Refused: scales through fewer than MIN_SCALABLE members
    (decided without asking the ensemble); an existing ensemble is never scaled."""
    if not spec.zookeeper.managed or live is None:
        return ZooKeeperPlan()
    current, desired = int((live.get("spec") or {}).get("replicas") or 0), spec.zookeeper.replicas
    if current < 1:
        return ZooKeeperPlan()
    if current != desired and (current < MIN_SCALABLE or desired < MIN_SCALABLE):
        return ZooKeeperPlan(current, refused=(REFUSED, (
            f"zookeeper.replicas {current} → {desired}: an ensemble of fewer than {MIN_SCALABLE} members has "
            f"none to spare, so a scale through one would stop at the first failure; it stays at {current}")))
    if current == desired == (recorded := recorded_voters(live)):
        return ZooKeeperPlan(voters=recorded)
    members = member_source(body, max(current, desired))
    seen = await observe(members)
    d = decide(Ensemble(desired, current, seen.members, seen.serving))
    return ZooKeeperPlan(None if d.replicas == desired and current == desired else d.replicas,
                         d.progress, d.refused, d.reconfig, members, seen.serving, settled_size(seen.members), True)


async def run_zookeeper_step(client: KubeClient, body: dict[str, Any], plan: ZooKeeperPlan) -> tuple[str, str] | None:
    """The plan's reconfiguration, after the render; the progress to report."""
    if plan.reconfig is None:
        return plan.progress
    meta = body["metadata"]
    failed = await zookeeper_reconfig(plan.members, plan.serving, await admin_password(client, body), plan.reconfig)
    if failed is not None:
        log.warning("%s/%s ZooKeeper %s; retrying at the next pass", meta["namespace"], meta["name"], failed)
        reason, message = plan.progress or ("ZooKeeperScaling", "")
        return reason, f"{message} ({failed}; retrying)"
    log.info("%s/%s ZooKeeper: %s done", meta["namespace"], meta["name"], (plan.progress or ("", ""))[1])
    return plan.progress


ZOOKEEPER_MIGRATED = f"{GROUP}/zookeeper-migrated-to"
"""The annotation that allows a zookeeper.connect switch: its value is the new connect string
(so it approves that one switch, not a later one), set once the data was copied there."""


def live_zookeeper_connect(config_map: dict[str, Any] | None) -> str | None:
    """The zookeeper.connect the running brokers were given (their ConfigMap's server.properties)."""
    text = ((config_map or {}).get("data") or {}).get("server.properties") or ""
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() == "zookeeper.connect":
            return value.strip()
    return None


def same_ensemble(a: str, b: str) -> bool:
    """Two connect strings of one ensemble and chroot: the same chroot and a host in common (a
    member added to or removed from the list is not a switch)."""
    def parts(connect: str) -> tuple[set[str], str]:
        hosts, _, chroot = connect.partition("/")
        return {h.strip() for h in hosts.split(",") if h.strip()}, chroot.rstrip("/")
    (hosts_a, root_a), (hosts_b, root_b) = parts(a), parts(b)
    return root_a == root_b and bool(hosts_a & hosts_b)


def zookeeper_switch(body: dict[str, Any], spec: KafkaClusterSpec, live_connect: str | None
                     ) -> tuple[KafkaClusterSpec, tuple[str, str] | None]:
    """The spec to render and the refusal when it moves the brokers to another ensemble. The
    cluster's metadata (topics, configs, ACLs, SCRAM users) lives in the ensemble the brokers use:
    a switch (to an existing ensemble, which also deletes the managed one, or back) starts them on
    one without it. Refused, keeping the live ensemble, unless the annotation names the new
    connect string."""
    desired = builders.zookeeper_connect(body, spec)
    if live_connect is None or same_ensemble(live_connect, desired):
        return spec, None
    if (body["metadata"].get("annotations") or {}).get(ZOOKEEPER_MIGRATED) == desired:
        return spec, None
    managed = live_connect == builders.zookeeper_connect(body, spec.model_copy(
        update={"zookeeper": spec.zookeeper.model_copy(update={"connect": None})}))
    kept = spec.model_copy(update={"zookeeper": spec.zookeeper.model_copy(
        update={"connect": None if managed else live_connect})})
    where = "the managed ensemble" if managed else live_connect
    return kept, ("ZooKeeperSwitchRefused",
                  f"zookeeper.connect {desired}: the cluster's metadata lives in {where}, which stays in use "
                  f"(nothing deleted); copy the data there, then annotate {ZOOKEEPER_MIGRATED}={desired}")


async def storage_class_expandable(client: KubeClient, name: str) -> bool:
    """Whether claims of this class (name "" = the cluster's default class) may grow."""
    if name:
        found = await client.get("StorageClass", None, name)
    else:
        classes = await client.list("StorageClass", None, {})
        found = next((c for c in classes
                      if (c["metadata"].get("annotations") or {}).get(DEFAULT_CLASS) == "true"), None)
    return bool((found or {}).get("allowVolumeExpansion"))


async def resize_claims(client: KubeClient, namespace: str, sts: dict[str, Any] | None,
                        storage: Storage) -> tuple[str, str] | None:
    """Grow the StatefulSet's claims to the desired size (see odradek.operator.storage); the
    refusal when that cannot be done."""
    template = claim_template(sts)
    if sts is None or template is None:
        return None
    name = sts["metadata"]["name"]
    count = int(sts["spec"].get("replicas") or 0)
    claims = [c for i in range(count) if (c := await client.get("PersistentVolumeClaim", namespace, f"data-{name}-{i}"))]
    plan = plan_resize(storage.size, storage.storage_class, template, claims)
    if plan.needs_class is not None:
        plan = plan_resize(storage.size, storage.storage_class, template, claims,
                           expandable=await storage_class_expandable(client, plan.needs_class))
    for claim in plan.expand:
        await client.patch("PersistentVolumeClaim", namespace, claim,
                           {"spec": {"resources": {"requests": {"storage": storage.size}}}})
        log.info("PersistentVolumeClaim %s/%s resized to %s", namespace, claim, storage.size)
    return plan.refused


def _decoded(secret: dict[str, Any] | None) -> dict[str, str] | None:
    if secret is None:
        return None
    return {k: base64.b64decode(v).decode() for k, v in (secret.get("data") or {}).items()}


async def external_services(client: KubeClient, body: dict[str, Any], spec: KafkaClusterSpec,
                            brokers: int) -> dict[str, dict[str, Any] | None]:
    """The per-broker Services of the nodeport/loadbalancer listeners, by name (None: not yet)."""
    meta = body["metadata"]
    n = builders.names(meta["name"])
    names = [f"{n['broker']}-{i}-{lst.name}" for lst in spec.listeners if lst.type != "internal"
             for i in range(brokers)]
    return {name: await client.get("Service", meta["namespace"], name) for name in names}


async def external_addresses(client: KubeClient, body: dict[str, Any], spec: KafkaClusterSpec,
                             brokers: int, services: dict[str, dict[str, Any] | None]) -> dict[int, tuple[str, ...]]:
    """Each broker's names outside the pod network, for its certificate: its per-broker
    Services, their load balancer addresses once the cloud assigned them, and, with a nodeport
    listener, its node's addresses (a new address renews the certificate; the broker reloads it)."""
    meta = body["metadata"]
    namespace, n = meta["namespace"], builders.names(meta["name"])
    out: dict[int, list[str]] = {}
    for listener in spec.listeners:
        if listener.type == "internal":
            continue
        for i in range(brokers):
            name = f"{n['broker']}-{i}-{listener.name}"
            hosts = out.setdefault(i, [])
            hosts += [f"{name}.{namespace}.svc", f"{name}.{namespace}.svc.cluster.local"]
            service = services.get(name)
            for ingress in (((service or {}).get("status") or {}).get("loadBalancer") or {}).get("ingress") or []:
                hosts += [str(v) for v in (ingress.get("ip"), ingress.get("hostname")) if v]
    if any(lst.type == "nodeport" for lst in spec.listeners):
        nodes = {(node.get("metadata") or {}).get("name"): node for node in await client.list("Node", None, {})}
        for pod in await client.list("Pod", namespace, builders.selector(meta["name"], "broker")):
            i = int(pod["metadata"]["name"].rsplit("-", 1)[1])
            node = nodes.get((pod.get("spec") or {}).get("nodeName")) or {}
            found = [a.get("address") for a in (node.get("status") or {}).get("addresses") or []]
            found.append((pod.get("status") or {}).get("hostIP"))
            out.setdefault(i, []).extend(str(a) for a in found if a)
    return {i: tuple(dict.fromkeys(hosts)) for i, hosts in out.items()}


async def write_certificates(client: KubeClient, body: dict[str, Any], spec: KafkaClusterSpec, brokers: int,
                             now: datetime.datetime) -> str | None:
    """Issue, keep or renew the cluster's certificates (certificates.plan) and write the Secrets
    that changed; the mounted files follow and the processes reload them. A user-supplied CA's
    Secrets are read, never written. Returns why nothing could be issued, if so."""
    meta = body["metadata"]
    n = builders.names(meta["name"])
    wanted = ("cluster_ca", "cluster_ca_cert", "clients_ca", "clients_ca_cert", "broker_certs", "controller_certs",
              "operator_certs", "zookeeper_client")
    found = {n[k]: _decoded(await client.get("Secret", meta["namespace"], n[k])) for k in wanted}
    external = await external_addresses(client, body, spec, brokers, await external_services(client, body, spec, brokers))
    plan = certificates.plan(meta["name"], meta["namespace"], spec, brokers, found, now, external)
    if plan.missing_ca is not None:
        return plan.missing_ca
    user_supplied = {n[k] for k, ca in (("cluster_ca", spec.cluster_ca), ("cluster_ca_cert", spec.cluster_ca),
                                        ("clients_ca", spec.clients_ca), ("clients_ca_cert", spec.clients_ca))
                     if not ca.generate_certificate_authority}
    for name, data in plan.secrets.items():
        if name in user_supplied or found.get(name) == data:
            continue
        secret = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                  "metadata": builders.object_meta(body, name, "certificates"),
                  "data": {k: base64.b64encode(v.encode()).decode() for k, v in sorted(data.items())}}
        await apply(client, secret)
    if plan.renewed:
        log.info("%s/%s certificates: %s", meta["namespace"], meta["name"], "; ".join(plan.renewed))
        forget_access(meta["namespace"], meta["name"])
    return None


def keep_claim_templates(obj: dict[str, Any], live: dict[str, Any] | None) -> dict[str, Any]:
    """A StatefulSet's volumeClaimTemplates cannot change: render the live ones."""
    if obj["kind"] != "StatefulSet" or live is None or "volumeClaimTemplates" not in live.get("spec", {}):
        return obj
    return {**obj, "spec": {**obj["spec"], "volumeClaimTemplates": live["spec"]["volumeClaimTemplates"]}}


async def reconcile(client: KubeClient, body: dict[str, Any], view_source: ViewSource = metadata_view,
                    data_mover: DataMover | None = cluster_data_mover, clock: Clock = now_ms,
                    config_applier: ConfigApplier | None = cluster_config_applier,
                    zookeeper_members: MemberSource = builders.zookeeper_members) -> Observation:
    """`clock` decides certificate renewal (tests move it past renewalDays); `zookeeper_members`
    is where the operator reaches the managed ensemble's members (tests: local ports)."""
    meta = body["metadata"]
    generation = meta.get("generation")
    try:
        spec = parse_spec(body.get("spec"))
    except ValidationError as e:
        return Observation(generation, invalid=spec_error_message(e))
    if spec.image is None:
        spec = spec.model_copy(update={"image": operator_image()})
    if (problem := startup_problem(cluster_security.broker_properties(body, spec))) is not None:
        return Observation(generation, invalid=f"spec.brokers.config: {problem}")
    namespace, name = meta["namespace"], meta["name"]
    orchestrator = KubernetesBrokerOrchestrator(client, namespace, name)

    # The broker count is orchestrated (a scale-down may be refused), so the apply keeps the
    # live count; a new StatefulSet starts at the desired count.
    n = builders.names(name)
    live_sts = {k: await client.get("StatefulSet", namespace, n[k]) for k in ("broker", "zookeeper")}
    current = await orchestrator.replicas()
    spec, switch_refused = zookeeper_switch(
        body, spec, live_zookeeper_connect(await client.get("ConfigMap", namespace, n["broker"])))
    zk_plan = await zookeeper_plan(body, spec, live_sts["zookeeper"], zookeeper_members)
    zk_replicas = zk_plan.replicas
    stalled = [r for r in (switch_refused, zk_plan.refused) if r is not None]
    # Before the pods that read its digest: at creation, during a scale, and while a member's pod
    # is not Ready (it may be waiting for a deleted Secret); a settled, Ready ensemble's is not read.
    if spec.zookeeper.managed and (zk_plan.observed or live_sts["zookeeper"] is None or zk_plan.voters is None
                                   or ready_replicas(live_sts["zookeeper"]) < zk_plan.voters):
        await admin_password(client, body)
    racks = None
    if spec.brokers.rack:  # nodes are cluster-scoped: the chart grants listing them
        racks = builders.rack_map(await client.list("Node", None, {}), spec.brokers.rack.topology_key)
    if spec.secured and (missing := await write_certificates(client, body, spec, max(current or 0, spec.brokers.replicas),
                                                             certificates.clock_now(clock))):
        stalled.append(("CertificateAuthorityMissing", missing))
    addresses = cluster_security.advertised_addresses(
        name, spec, max(current or 0, spec.brokers.replicas),
        await external_services(client, body, spec, max(current or 0, spec.brokers.replicas)))
    desired = cluster_security.desired_objects(body, spec, broker_replicas=current, zookeeper_replicas=zk_replicas,
                                               racks=racks, addresses=addresses)
    for obj in desired:
        live = live_sts.get("broker") if obj["metadata"]["name"] == n["broker"] else (
            live_sts.get("zookeeper") if obj["metadata"]["name"] == n["zookeeper"] else None)
        if obj["kind"] == "StatefulSet" and obj["metadata"]["name"] == n["zookeeper"]:
            obj = with_voters(obj, zk_plan.voters)
        outcome = await apply(client, keep_claim_templates(obj, live))
        if outcome != "unchanged":
            log.info("%s %s/%s %s", obj["kind"], namespace, obj["metadata"]["name"], outcome)
    owned = {"app.kubernetes.io/instance": name, "app.kubernetes.io/managed-by": "odradek-operator"}
    for kind, gone in await prune(client, namespace, owned, OWNED_KINDS, desired, meta["uid"]):
        log.info("%s %s/%s deleted: no longer part of the cluster", kind, namespace, gone)
    for key, storage in (("broker", spec.brokers.storage),
                         ("zookeeper", spec.zookeeper.storage if spec.zookeeper.managed else None)):
        if storage is not None and (refused := await resize_claims(client, namespace, live_sts[key], storage)):
            stalled.append((refused[0], f"{n[key]}: {refused[1]}"))

    support = {**await support_readiness(client, body, spec),
               "zookeeper_scaling": await run_zookeeper_step(client, body, zk_plan)}
    desired_hash = cluster_security.broker_config_hash(body, spec, addresses)
    desired_count = spec.brokers.replicas
    try:
        await cluster_access(client, body)  # read once per pass: the view and the data mover use it
        view = await view_source(body)
    except (OSError, ConnectionError, TimeoutError) as e:
        # Without the cluster's word nothing is restarted or removed.
        states = await orchestrator.brokers()
        return Observation(
            generation, desired_brokers=desired_count, running_brokers=len(states),
            ready_broker_ids=tuple(s.broker_id for s in states if s.running),
            bootstrap_servers=builders.bootstrap_servers(body),
            # A broker whose pod does not exist yet is being created, not waiting for a restart.
            pending_restarts=tuple(s.broker_id for s in states if s.config_hash not in (None, desired_hash)),
            unreachable=f"no broker answered Metadata: {e}", stalled=tuple(stalled),
            data_movement=(body.get("status") or {}).get("dataMovement"),
            rebalance=(body.get("status") or {}).get("rebalance"), **support)

    if config_applier is not None:  # live keys: no restart (the rest is in desired_hash)
        try:
            if (config_refused := await config_applier(body, builders.dynamic_broker_config(body, spec))):
                stalled.append(("DynamicConfigRefused", config_refused))
        except (OSError, ConnectionError, TimeoutError, ValueError) as e:
            log.warning("%s/%s: dynamic broker configs not applied this pass: %s", namespace, name, e)
    # what the status recorded stays until a pass decides otherwise (its throttles are still set)
    movement = MovementStep(progress=previous_movement(body), rebalance=(body.get("status") or {}).get("rebalance"))
    if data_mover is not None:
        try:
            movement = await data_mover(body, view, current or 0, desired_count)
        except (OSError, ConnectionError, TimeoutError) as e:
            log.warning("%s/%s: no data movement this pass: %s", namespace, name, e)
    if movement.annotation is not None:
        await client.patch("KafkaCluster", namespace, name, {"metadata": {"annotations": {
            rebalance.ANNOTATION: movement.annotation or None}}})
    step = await reconcile_brokers(orchestrator, desired_hash, desired_count, view)
    if step.restarted is not None:
        log.info("broker %d of %s/%s restarted for the new configuration", step.restarted, namespace, name)
    if step.count is not None:
        log.info("%s/%s broker count set to %d", namespace, name, step.count)
    count = await orchestrator.replicas() or 0
    states = broker_states(count, await orchestrator.pods(), orchestrator.statefulset)
    # A broker whose pod does not exist yet is being created, not waiting for a restart.
    stale = tuple(s.broker_id for s in states if s.config_hash not in (None, desired_hash))
    ready = tuple(s.broker_id for s in states if s.running and s.broker_id in view.registered)
    return Observation(
        generation, desired_brokers=desired_count, running_brokers=count, ready_broker_ids=ready,
        bootstrap_servers=builders.bootstrap_servers(body),
        waiting=step.waiting,
        # a drain under way is progress, not a refusal; a blocked one names what blocks it
        refused=movement.blocked or (None if movement.draining is not None else step.refused),
        moving=movement.waiting, pending_restarts=stale, stalled=tuple(stalled),
        data_movement=movement.progress.to_status() if movement.progress else None,
        rebalance=movement.rebalance, **support)

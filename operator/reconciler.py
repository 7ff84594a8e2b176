"""One reconcile pass of a KafkaCluster: apply the desired objects, take one broker step, observe.

Every pass decides from scratch (the live objects, the pods, one Metadata answer), so the
operator can be killed anywhere and the next pass continues; each pass makes at most one
disruptive change (one pod deleted or one count change, by rolling.reconcile_brokers).
"""

import logging
from collections.abc import Awaitable, Callable

from pydantic import ValidationError

from odradek.operator import builders
from odradek.operator.apply import apply
from odradek.operator.kube import KubeClient
from odradek.operator.models import parse_spec, spec_error_message
from odradek.operator.orchestrator import KubernetesBrokerOrchestrator, broker_states
from odradek.operator.rolling import ClusterView, fetch_view, reconcile_brokers
from odradek.operator.status import Observation

log = logging.getLogger(__name__)

ViewSource = Callable[[dict], Awaitable[ClusterView]]


async def metadata_view(body: dict) -> ClusterView:
    """The cluster as its brokers report it, through the bootstrap Service (Kafka protocol);
    topics without a min.insync.replicas answer get the one the operator renders."""
    host, port = builders.bootstrap_servers(body).rsplit(":", 1)
    rendered = builders.broker_properties(body, parse_spec(body.get("spec")))
    return await fetch_view([(host, int(port))], timeout=5.0,
                            default_min_insync=int(rendered.get("min.insync.replicas", 1)))


def ready_replicas(obj: dict | None) -> int:
    """Pods Ready per the workload controller (Deployment or StatefulSet status)."""
    return int(((obj or {}).get("status") or {}).get("readyReplicas") or 0)


async def support_readiness(client: KubeClient, body: dict, spec) -> dict:
    """Observation fields for what the brokers need: controller pods and the managed ensemble."""
    meta = body["metadata"]
    n = builders.names(meta["name"])
    found = {"desired_controllers": spec.controller.replicas,
             "ready_controllers": ready_replicas(await client.get("Deployment", meta["namespace"], n["controller"]))}
    if spec.zookeeper.managed:
        found["desired_zookeeper"] = spec.zookeeper.replicas
        found["ready_zookeeper"] = ready_replicas(await client.get("StatefulSet", meta["namespace"], n["zookeeper"]))
    return found


async def reconcile(client: KubeClient, body: dict, view_source: ViewSource = metadata_view) -> Observation:
    meta = body["metadata"]
    generation = meta.get("generation")
    try:
        spec = parse_spec(body.get("spec"))
    except ValidationError as e:
        return Observation(generation, invalid=spec_error_message(e))
    namespace, name = meta["namespace"], meta["name"]
    orchestrator = KubernetesBrokerOrchestrator(client, namespace, name)

    # The broker count is orchestrated (a scale-down may be refused), so the apply keeps the
    # live count; a new StatefulSet starts at the desired count.
    current = await orchestrator.replicas()
    for obj in builders.desired_objects(body, spec, broker_replicas=current):
        outcome = await apply(client, obj)
        if outcome != "unchanged":
            log.info("%s %s/%s %s", obj["kind"], namespace, obj["metadata"]["name"], outcome)

    desired_hash = builders.broker_config_hash(body, spec)
    desired_count = spec.brokers.replicas
    support = await support_readiness(client, body, spec)
    try:
        view = await view_source(body)
    except (OSError, ConnectionError, TimeoutError) as e:
        # Without the cluster's word nothing is restarted or removed.
        states = await orchestrator.brokers()
        return Observation(
            generation, desired_brokers=desired_count, running_brokers=len(states),
            ready_broker_ids=tuple(s.broker_id for s in states if s.running),
            bootstrap_servers=builders.bootstrap_servers(body),
            pending_restarts=tuple(s.broker_id for s in states if s.config_hash != desired_hash),
            unreachable=f"no broker answered Metadata: {e}", **support)

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
        waiting=step.waiting, refused=step.refused, pending_restarts=stale, **support)

"""The Topic controller: watch events in, Kafka admin calls and status writes out.

kopf delivers the watch events of Topics and KafkaClusters (`register`); this module keeps the
latest body of each, queues the Topic keys that need a look (work_queue), and a fixed set of
workers reconciles them: topic_reconciler decides, the batched admin client (kafka_admin through
batching) acts, and the status is written only when it changed. A periodic resync queues every
Topic again, which is what reverts changes made directly in the cluster.

Events only (no kopf change handlers) keeps kopf from writing its own progress annotations and
finalizer on thousands of Topics: the finalizer here is the operator's own (FINALIZER), written
with the resourceVersion it was decided on. Before the workers start, every Topic is listed once,
so the older of two resources naming one topic is known before either is acted on.
"""

import asyncio
import logging
from typing import Any, cast

import kopf

from odradek.operator.cluster_access import ClusterAccess
from odradek.operator.kube import ApiError, KubeClient
from odradek.operator.metrics import ReconcileStats
from odradek.operator.models import GROUP, VERSION
from odradek.operator.models import PLURAL as CLUSTER_PLURAL
from odradek.operator.resource_controller import DEFAULT_RESYNC as DEFAULT_RESYNC
from odradek.operator.resource_controller import DEFAULT_WORKERS as DEFAULT_WORKERS
from odradek.operator.resource_controller import BatchedAdmin, ResourceController, batcher, older
from odradek.operator.resource_controller import BootstrapSource as BootstrapSource
from odradek.operator.resource_controller import Tuning as Tuning
from odradek.operator.resource_controller import service_bootstrap as service_bootstrap
from odradek.operator.topic_models import FINALIZER, PLURAL
from odradek.operator.topic_reconciler import (
    Action,
    ActionResult,
    AlterConfigs,
    ChangeReplicationFactor,
    CreatePartitions,
    CreateTopic,
    Outcome,
    Phase,
    Step,
    TopicResource,
    gate,
    kept_overrides,
    outcome,
    owner_of,
    plan,
    resource_from_body,
    status,
    status_changed,
    status_patch,
    topic_name_of,
    unreachable,
)

log = logging.getLogger("odradek.operator.topics")

class ClusterAdmin(BatchedAdmin):
    """The Topic controller's admin connection to one cluster and its batchers."""

    @classmethod
    def open(cls, access: ClusterAccess, tuning: Tuning) -> "ClusterAdmin":
        admin = access.admin(request_timeout=tuning.request_timeout, client_id="odradek-topic-operator")
        t = tuning.request_timeout
        return cls(access, admin, {
            "describe": batcher(tuning, "describe", admin.describe_topics, lambda n: n, share=True),
            "create": batcher(tuning, "create", lambda a: admin.create_topics(a, t), lambda a: a.topic),
            "partitions": batcher(tuning, "partitions", lambda a: admin.create_partitions(a, t), lambda a: a.topic),
            "configs": batcher(tuning, "configs", admin.alter_configs, lambda a: a.topic),
            "replicas": batcher(tuning, "replicas", admin.change_replication_factors, lambda a: a.topic),
            "delete": batcher(tuning, "delete", lambda n: admin.delete_topics(n, t), lambda n: n),
        })

    async def act(self, action: Action) -> ActionResult:
        name = {CreateTopic: "create", CreatePartitions: "partitions", AlterConfigs: "configs",
                ChangeReplicationFactor: "replicas"}[type(action)]
        result: ActionResult = await self.batchers[name].submit(action)
        return result


class TopicController(ResourceController[TopicResource, ClusterAdmin]):
    kind, kinds, task_prefix = "Topic", "Topics", "topics"

    def __init__(self, client: KubeClient, *, namespaces: list[str], clusterwide: bool,
                 bootstrap_source: BootstrapSource = service_bootstrap, tuning: Tuning | None = None,
                 stats: ReconcileStats | None = None):
        super().__init__(client, namespaces=namespaces, clusterwide=clusterwide,
                         bootstrap_source=bootstrap_source, tuning=tuning, stats=stats)
        self.topics = self.resources
        self.claims: dict[tuple[str, str | None, str], set[tuple[str, str]]] = {}

    def _open_admin(self, access: ClusterAccess) -> ClusterAdmin:
        return ClusterAdmin.open(access, self.tuning)

    # --- the store, fed by watch events --------------------------------------------------------

    def _store(self, body: dict[str, Any]) -> TopicResource:
        r = resource_from_body(body)
        old = self.topics.get(r.key)
        if old is not None and old.claim != r.claim:
            self._unclaim(old)
        self.topics[r.key], self.bodies[r.key] = r, body
        self.claims.setdefault(r.claim, set()).add(r.key)
        return r

    def _unclaim(self, r: TopicResource) -> None:
        keys = self.claims.get(r.claim)
        if keys is not None:
            keys.discard(r.key)
            if not keys:
                del self.claims[r.claim]

    def _forget(self, key: tuple[str, str]) -> TopicResource | None:
        r = self.topics.pop(key, None)
        self.bodies.pop(key, None)
        if r is not None:
            self._unclaim(r)
        return r

    async def topic_event(self, kind: str | None, body: dict[str, Any]) -> None:
        meta: dict[str, Any] = body.get("metadata") or {}
        key = cast(tuple[str, str], (meta.get("namespace"), meta.get("name")))  # watch events carry both
        if kind == "DELETED":
            gone = self._forget(key)
            if gone is not None:
                for sibling in list(self.claims.get(gone.claim, ())):
                    await self.queue.add(sibling)  # the next in line may take the topic over
            return
        old = self.topics.get(key)
        if old is not None and older(body, self.bodies[key]):
            return  # our own write's answer is stored already; this event predates it
        r = self._store(body)
        if old is None or _wants_look(old, r):
            await self.queue.add(key)
            if old is not None and old.claim != r.claim:
                for sibling in self.claims.get(old.claim, ()):
                    await self.queue.add(sibling)

    def owner_name(self, r: TopicResource) -> str | None:
        """The older resource's name when another Topic claims the same topic first."""
        claimants = [self.topics[k] for k in self.claims.get(r.claim, ()) if k in self.topics]
        owner = owner_of(claimants) if claimants else r
        return None if owner.key == r.key else owner.name

    async def reconcile(self, key: tuple[str, str]) -> bool:
        """One pass for one Topic; True when it should be retried soon (with backoff)."""
        r = self.topics.get(key)
        if r is None:
            return False
        g = gate(r, self.cluster_of(r), self.owner_name(r))
        if g.step is Step.NONE:
            return False
        if g.step is Step.RELEASE:
            await self._set_finalizer(r, False)
            return False
        if g.step is Step.DELETE:
            return await self._delete(r)
        if g.finalizer is not None:
            r = await self._set_finalizer(r, g.finalizer)
            if r is None:
                return False
        if g.step is Step.STATUS:
            if g.outcome is None:
                raise RuntimeError("a STATUS gate without an outcome")
            await self._write_status(r, g.outcome)
            return g.outcome.phase is Phase.PROGRESSING
        return await self._observe_and_act(r)

    async def _observe_and_act(self, r: TopicResource) -> bool:
        topic = topic_name_of(r)
        if r.spec is None:
            raise RuntimeError("gate() lets no invalid spec through to observe")
        spec = r.spec
        try:
            admin = await self.admin_for(r)
            live = await admin.batchers["describe"].submit(topic)
            keep = kept_overrides(spec, live, r.kept_config, r.adopting)
            p = plan(spec, topic, live, keep)
            results = list(zip(p.actions, await asyncio.gather(*(admin.act(a) for a in p.actions))))
        except (OSError, ConnectionError, TimeoutError, ValueError) as e:
            await self._write_status(r, unreachable(r, f"cluster {r.cluster_ref!r}: {e}"))
            return True
        o = outcome(r, topic, live, p, results, keep)
        repeated = _ready_reason(r) == o.reason  # a refusal met again at every resync: logged once
        for action, result in results:
            if result.error is None:
                log.info("Topic %s/%s: %s", r.namespace, r.name, action)
            else:
                log.log(logging.DEBUG if repeated else logging.WARNING, "Topic %s/%s: %s failed: %s %s",
                        r.namespace, r.name, action, result.error, result.message or "")
        await self._write_status(r, o)
        return o.phase is Phase.PROGRESSING

    async def _delete(self, r: TopicResource) -> bool:
        try:
            result = await (await self.admin_for(r)).batchers["delete"].submit(r.topic)
        except (OSError, ConnectionError, TimeoutError, ValueError) as e:
            await self._write_status(r, unreachable(r, f"deleting topic {r.topic!r}: {e}"))
            return True
        if result.error is not None:
            await self._write_status(r, Outcome(r, Phase.PROGRESSING, "DeleteFailed",
                                                f"DeleteTopics: {result.error} {result.message or ''}".strip()))
            return True
        log.info("Topic %s/%s: deleted topic %s", r.namespace, r.name, r.topic)
        await self._set_finalizer(r, False)
        return False

    async def _set_finalizer(self, r: TopicResource, present: bool) -> TopicResource | None:
        """Add or remove FINALIZER (compare-and-set on the resourceVersion it was decided on);
        returns the resource as now stored (None when it is gone)."""
        if r.has_finalizer == present:
            return r
        body = self.bodies[r.key]
        meta = body["metadata"]
        finalizers = [f for f in meta.get("finalizers") or [] if f != FINALIZER]
        if present:
            finalizers.append(FINALIZER)
        try:
            new = await self.client.patch("Topic", r.namespace, r.name, {"metadata": {
                "finalizers": finalizers, "resourceVersion": meta.get("resourceVersion")}})
        except ApiError as e:
            if e.status == 404:
                return None
            raise
        if not present and meta.get("deletionTimestamp"):
            return None  # released: the object goes away
        if self.topics.get(r.key) is r:
            return self._store(new)
        return resource_from_body(new)

    async def _write_status(self, r: TopicResource, o: Outcome) -> None:
        body = self.bodies.get(r.key)
        if body is None:
            return
        previous = body.get("status") or {}
        new = status(o, previous)
        if not status_changed(previous, new):
            return
        try:
            written = await self.client.patch("Topic", r.namespace, r.name, {"status": status_patch(previous, new)},
                                              subresource="status")
        except ApiError as e:
            if e.status == 404:
                return
            raise
        if self.bodies.get(r.key) is body:
            self._store(written)


def _ready_reason(r: TopicResource) -> str | None:
    return next((c.get("reason") for c in r.previous_conditions if c.get("type") == "Ready"), None)


def _wants_look(old: TopicResource, new: TopicResource) -> bool:
    """Whether an update needs a pass: the spec, the managed annotation, deletion or the claim
    changed (not our own status and finalizer writes)."""
    return (old.generation != new.generation or old.managed != new.managed or old.deleting != new.deleting
            or old.claim != new.claim or (not new.has_finalizer and old.has_finalizer))


def register(registry: kopf.OperatorRegistry) -> None:
    """The Topic controller's kopf handlers. The memo (main.OperatorMemo) brings the Kubernetes
    client, the watched namespaces and the tuning, and holds the controller."""

    @kopf.on.startup(registry=registry)
    async def start_topics(memo: Any, **_: Any) -> None:  # memo: main.OperatorMemo
        memo.topic_controller = TopicController(
            memo.client, namespaces=memo.namespaces, clusterwide=memo.clusterwide,
            bootstrap_source=memo.topic_bootstrap, tuning=memo.topic_tuning, stats=memo.stats)
        await memo.topic_controller.start()

    @kopf.on.cleanup(registry=registry)
    async def stop_topics(memo: Any, **_: Any) -> None:
        if memo.topic_controller is not None:
            await memo.topic_controller.stop()

    @kopf.on.event(GROUP, VERSION, PLURAL, registry=registry)
    async def topic_event(event: kopf.RawEvent, memo: Any, **_: Any) -> None:
        await memo.topic_controller.topic_event(event.get("type"), event["object"])

    @kopf.on.event(GROUP, VERSION, CLUSTER_PLURAL, registry=registry)
    async def cluster_event(event: kopf.RawEvent, memo: Any, **_: Any) -> None:
        await memo.topic_controller.cluster_event(event.get("type"), event["object"])

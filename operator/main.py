"""`odradek operator`: the kopf process that turns KafkaCluster resources into running clusters.

Create, update and resume events and a periodic timer all run the same idempotent pass
(reconciler.reconcile) under a per-resource lock, then write the status only when it changed.
The timer is what advances rolling restarts (one broker per pass, once the cluster is healthy)
and keeps the status current. Deletion needs no handler: every object carries an owner
reference, so Kubernetes' garbage collector removes them with the resource.
"""

import argparse
import asyncio
import logging
import threading
from dataclasses import dataclass, field

import kopf

from odradek.common import process_logging
from odradek.operator import status as status_mod
from odradek.operator import topics
from odradek.operator.kube import ApiError, KubeClient
from odradek.operator.models import GROUP, PLURAL, VERSION
from odradek.operator.reconciler import ViewSource, metadata_view, reconcile

log = logging.getLogger("odradek.operator")

DEFAULT_INTERVAL = 10.0
ANNOTATION_PREFIX = GROUP  # annotations kopf keeps on the resource (progress, last handled spec)


@dataclass
class OperatorMemo:
    """What every handler shares; `connection` None = log in as kopf would (in-cluster account,
    then kubeconfig)."""
    connection: kopf.ConnectionInfo | None = None
    view_source: ViewSource = metadata_view
    client: KubeClient | None = None
    locks: dict = field(default_factory=dict)
    namespaces: list[str] = field(default_factory=list)
    clusterwide: bool = False
    topic_bootstrap: topics.BootstrapSource = topics.service_bootstrap
    topic_tuning: topics.Tuning = field(default_factory=topics.Tuning)
    topic_controller: topics.TopicController | None = None

    def lock(self, uid: str) -> asyncio.Lock:
        return self.locks.setdefault(uid, asyncio.Lock())


def build_registry(interval: float = DEFAULT_INTERVAL) -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()
    resource = dict(group=GROUP, version=VERSION, plural=PLURAL, registry=registry)

    @kopf.on.startup(registry=registry)
    async def configure(settings: kopf.OperatorSettings, memo: OperatorMemo, logger, **_):
        settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=ANNOTATION_PREFIX)
        settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
            prefix=ANNOTATION_PREFIX, key="last-handled-configuration")
        settings.posting.level = logging.WARNING
        settings.peering.standalone = True
        settings.watching.server_timeout = 300
        if memo.connection is None:
            memo.connection = (kopf.login_with_service_account(settings=settings)
                               or kopf.login_with_kubeconfig(settings=settings))
        if memo.connection is None:
            raise kopf.PermanentError("no Kubernetes credentials: neither a service account nor a kubeconfig")
        memo.client = KubeClient.from_connection(memo.connection)

    topics.register(registry)  # after `configure` (it needs the client), before `close`

    @kopf.on.cleanup(registry=registry)
    async def close(memo: OperatorMemo, **_):
        if memo.client is not None:
            await memo.client.close()

    @kopf.on.login(registry=registry)
    def login(memo: OperatorMemo, **_):
        return memo.connection

    @kopf.on.create(**resource)
    @kopf.on.update(**resource, field="spec")
    @kopf.on.resume(**resource)
    async def on_change(body, memo: OperatorMemo, logger, **_):
        await run_pass(body, memo, logger)

    @kopf.timer(**resource, interval=interval, initial_delay=interval)
    async def on_timer(body, memo: OperatorMemo, logger, **_):
        await run_pass(body, memo, logger)

    @kopf.on.delete(**resource, optional=True)
    async def on_delete(name, namespace, logger, **_):
        logger.info("KafkaCluster %s/%s deleted; owned objects go with it (ownerReferences)", namespace, name)

    return registry


async def run_pass(body, memo: OperatorMemo, logger) -> dict:
    """One locked reconcile pass; API errors retry later (kopf backoff), never crash the process."""
    body = {"metadata": dict(body["metadata"]), "spec": dict(body.get("spec") or {}),
            "status": dict(body.get("status") or {})}
    meta = body["metadata"]
    async with memo.lock(meta["uid"]):
        try:
            observation = await reconcile(memo.client, body, memo.view_source)
            new = status_mod.status(observation, body["status"])
            if status_mod.changed(body["status"], new):
                await memo.client.patch("KafkaCluster", meta["namespace"], meta["name"], {"status": new},
                                        subresource="status")
        except ApiError as e:
            raise kopf.TemporaryError(f"Kubernetes API: {e}", delay=5) from e
    if observation.invalid:
        logger.warning("invalid spec: %s", observation.invalid)
    return new


def run(namespaces: list[str], clusterwide: bool, *, connection: kopf.ConnectionInfo | None = None,
        view_source: ViewSource = metadata_view, interval: float = DEFAULT_INTERVAL,
        liveness: str | None = None, stop_flag: threading.Event | None = None,
        ready_flag: threading.Event | None = None,
        topic_bootstrap: topics.BootstrapSource = topics.service_bootstrap,
        topic_tuning: topics.Tuning | None = None) -> None:
    """Run the operator until stopped (SIGTERM/SIGINT, or stop_flag in tests)."""
    memo = OperatorMemo(connection=connection, view_source=view_source, namespaces=list(namespaces),
                        clusterwide=clusterwide, topic_bootstrap=topic_bootstrap,
                        topic_tuning=topic_tuning or topics.Tuning())
    asyncio.run(kopf.operator(
        registry=build_registry(interval), clusterwide=clusterwide, namespaces=namespaces,
        memo=memo, standalone=True,
        liveness_endpoint=liveness, stop_flag=stop_flag, ready_flag=ready_flag))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="odradek operator", description=__doc__.splitlines()[0])
    scope = p.add_mutually_exclusive_group(required=True)
    scope.add_argument("--namespace", action="append", help="watch this namespace (repeatable)")
    scope.add_argument("--all-namespaces", action="store_true", help="watch every namespace")
    process_logging.add_arguments(p)
    p.add_argument("--liveness", default="http://0.0.0.0:8080/healthz",
                   help="kopf's liveness endpoint (empty to disable)")
    p.add_argument("--interval", type=float, default=DEFAULT_INTERVAL,
                   help="seconds between reconcile passes of each cluster (rolls advance per pass)")
    p.add_argument("--topic-resync", type=float, default=topics.DEFAULT_RESYNC,
                   help="seconds between looks at every Topic (reverts changes made in the cluster)")
    p.add_argument("--topic-workers", type=int, default=topics.DEFAULT_WORKERS,
                   help="Topics reconciled at once (their admin calls are batched)")
    args = p.parse_args(argv)
    process_logging.configure(args, "operator")
    run(args.namespace or [], args.all_namespaces, interval=args.interval, liveness=args.liveness or None,
        topic_tuning=topics.Tuning(workers=args.topic_workers, resync=args.topic_resync))
    return 0

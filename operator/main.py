"""`odradek operator`: the kopf process that turns KafkaCluster resources into running clusters.

Create, update and resume events and a periodic resync all run the same idempotent pass
(reconciler.reconcile) under a per-resource lock, then write the status only when it changed.
The resync is what advances rolling restarts (one broker per pass, once the cluster is healthy)
and keeps the status current. Deletion needs no handler: every object carries an owner
reference, so Kubernetes' garbage collector removes them with the resource.

The resync is the operator's own task, not a kopf timer: kopf puts a finalizer on every resource
that has a timer or daemon, so deleting a KafkaCluster waited for a running pass (and for its
60 s re-check), and a resource deleted while the operator was gone (`helm uninstall` removes
both) stayed Terminating. Without a timer, daemon or mandatory deletion handler kopf adds no
finalizer and removes the one an older version added.
"""

import argparse
import asyncio
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import kopf

from odradek.common import process_logging
from odradek.common.clock import Clock, now_ms
from odradek.common.metrics import MetricsServer, Registry
from odradek.operator import builders, topics, users
from odradek.operator import status as status_mod
from odradek.operator.crd_install import ensure_crds
from odradek.operator.kube import ApiError, KubeClient
from odradek.operator.metrics import ReconcileStats
from odradek.operator.models import GROUP, PLURAL, VERSION
from odradek.operator.reconciler import (
    ConfigApplier,
    DataMover,
    ViewSource,
    cluster_config_applier,
    cluster_data_mover,
    metadata_view,
    reconcile,
)
from odradek.operator.zookeeper_ensemble import MemberSource

log = logging.getLogger("odradek.operator")

DEFAULT_INTERVAL = 10.0
ANNOTATION_PREFIX = GROUP  # annotations kopf keeps on the resource (progress, last handled spec)


@dataclass
class OperatorMemo:
    """What every handler shares; `connection` None = log in as kopf would (in-cluster account,
    then kubeconfig)."""
    connection: kopf.ConnectionInfo | None = None
    view_source: ViewSource = metadata_view
    data_mover: DataMover | None = cluster_data_mover
    config_applier: ConfigApplier | None = cluster_config_applier
    client: KubeClient | None = None
    locks: dict[str, asyncio.Lock] = field(default_factory=dict)
    namespaces: list[str] = field(default_factory=list)
    clusterwide: bool = False
    topic_bootstrap: topics.BootstrapSource = topics.service_bootstrap
    topic_tuning: topics.Tuning = field(default_factory=topics.Tuning)
    topic_controller: topics.TopicController | None = None
    user_tuning: topics.Tuning = field(default_factory=topics.Tuning)
    user_controller: users.UserController | None = None
    resync_task: asyncio.Task[None] | None = None
    relogin: Callable[[], kopf.ConnectionInfo | None] | None = None
    install_crds: bool = False
    metrics_port: int = -1
    metrics_host: str = "0.0.0.0"
    stats: ReconcileStats = field(default_factory=lambda: ReconcileStats())
    metrics_server: MetricsServer | None = None
    clock: Clock = now_ms
    """The process clock (certificate renewal); tests move it."""
    zookeeper_members: MemberSource = builders.zookeeper_members
    """Where the managed ensembles' members are reached (tests: local ports)."""

    def lock(self, uid: str) -> asyncio.Lock:
        lock: asyncio.Lock = self.locks.setdefault(uid, asyncio.Lock())
        return lock

    def kube(self) -> KubeClient:
        """The API client `configure` made at start-up."""
        if self.client is None:
            raise RuntimeError("the operator has not started: no Kubernetes client yet")
        return self.client


def build_registry(interval: float = DEFAULT_INTERVAL) -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()

    @kopf.on.startup(registry=registry)
    async def configure(settings: kopf.OperatorSettings, memo: OperatorMemo, **_: Any) -> None:
        settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=ANNOTATION_PREFIX)
        settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
            prefix=ANNOTATION_PREFIX, key="last-handled-configuration")
        settings.posting.level = logging.WARNING
        settings.peering.standalone = True
        settings.watching.server_timeout = 300
        if memo.connection is None:
            # Logged in again whenever the API answers 401 (a bound service-account token expires;
            # the kubelet rotates the file): by kopf through `login`, by KubeClient through relogin.
            def fresh_login() -> kopf.ConnectionInfo | None:
                return (kopf.login_with_service_account(settings=settings)
                        or kopf.login_with_kubeconfig(settings=settings))
            memo.relogin = fresh_login
            memo.connection = fresh_login()
        if memo.connection is None:
            raise kopf.PermanentError("no Kubernetes credentials: neither a service account nor a kubeconfig")
        memo.client = KubeClient.from_connection(memo.connection, relogin=memo.relogin)
        if memo.install_crds:
            await ensure_crds(memo.client)

    topics.register(registry)  # after `configure` (it needs the client), before `close`
    users.register(registry)

    @kopf.on.startup(registry=registry)
    async def start_resync(memo: OperatorMemo, **_: Any) -> None:
        memo.resync_task = asyncio.get_running_loop().create_task(resync(memo, interval), name="kafkacluster-resync")
        if memo.metrics_port >= 0:
            metrics = Registry()
            metrics.register(memo.stats.families)
            memo.metrics_server = MetricsServer(metrics, memo.metrics_host, memo.metrics_port)
            await memo.metrics_server.start()
            log.info("metrics on %s", memo.metrics_server.url)

    @kopf.on.cleanup(registry=registry)
    async def close(memo: OperatorMemo, **_: Any) -> None:
        if memo.resync_task is not None:
            memo.resync_task.cancel()
            await asyncio.gather(memo.resync_task, return_exceptions=True)
        if memo.metrics_server is not None:
            await memo.metrics_server.stop()
        if memo.client is not None:
            await memo.client.close()

    @kopf.on.login(registry=registry)
    def login(memo: OperatorMemo, **_: Any) -> kopf.ConnectionInfo | None:
        if memo.relogin is not None:  # re-read each time kopf asks (after a 401), not once
            memo.connection = memo.relogin() or memo.connection
        return memo.connection

    @kopf.on.create(group=GROUP, version=VERSION, plural=PLURAL, registry=registry)
    @kopf.on.update(group=GROUP, version=VERSION, plural=PLURAL, registry=registry, field="spec")
    @kopf.on.resume(group=GROUP, version=VERSION, plural=PLURAL, registry=registry)
    async def on_change(body: kopf.Body, memo: OperatorMemo, logger: kopf.Logger, **_: Any) -> None:
        await run_pass(body, memo, logger)

    return registry


async def resync(memo: OperatorMemo, interval: float) -> None:
    """Every `interval` seconds, one pass over every KafkaCluster in the watched namespaces (all
    clusters at once; each pass holds its resource's lock). A failing pass or list is logged and
    retried at the next round; only cancellation ends the loop."""
    scopes: list[str | None] = [None] if memo.clusterwide else list(memo.namespaces)
    while True:
        await asyncio.sleep(interval)
        bodies: list[dict[str, Any]] = []
        for namespace in scopes:
            try:
                bodies += await memo.kube().list("KafkaCluster", namespace, {})
            except (ApiError, OSError, TimeoutError) as e:
                log.warning("listing KafkaClusters in %s failed: %s", namespace or "every namespace", e)
        bodies = [b for b in bodies if not (b.get("metadata") or {}).get("deletionTimestamp")]
        results = await asyncio.gather(*(run_pass(b, memo, log) for b in bodies), return_exceptions=True)
        for body, result in zip(bodies, results):
            if isinstance(result, Exception):
                meta = body["metadata"]
                log.warning("reconcile of %s/%s failed: %s", meta.get("namespace"), meta.get("name"), result)


async def run_pass(body: Mapping[str, Any], memo: OperatorMemo, logger: kopf.Logger | logging.Logger
                   ) -> dict[str, Any]:
    """One locked reconcile pass; API errors retry later (kopf backoff), never crash the process."""
    copy: dict[str, Any] = {"metadata": dict(body["metadata"]), "spec": dict(body.get("spec") or {}),
                            "status": dict(body.get("status") or {})}
    meta = copy["metadata"]
    client = memo.kube()
    key = (("kind", "KafkaCluster"), ("namespace", meta["namespace"]), ("name", meta["name"]))
    async with memo.lock(meta["uid"]):
        with memo.stats.timed(key):
            try:
                observation = await reconcile(client, copy, memo.view_source, memo.data_mover, memo.clock,
                                              config_applier=memo.config_applier,
                                              zookeeper_members=memo.zookeeper_members)
                new = status_mod.status(observation, copy["status"])
                if status_mod.changed(copy["status"], new):
                    await client.patch("KafkaCluster", meta["namespace"], meta["name"], {"status": new},
                                            subresource="status")
            except ApiError as e:
                # The status says why nothing moved (a stale status would keep `kubectl wait` waiting).
                failed = status_mod.error_status(copy["status"], meta.get("generation"), f"Kubernetes API: {e}",
                                                 permanent=status_mod.permanent_api_error(e.status))
                try:
                    if status_mod.changed(copy["status"], failed):
                        await client.patch("KafkaCluster", meta["namespace"], meta["name"], {"status": failed},
                                                subresource="status")
                except ApiError as again:
                    logger.warning("status not written either: %s", again)
                raise kopf.TemporaryError(f"Kubernetes API: {e}", delay=5) from e
    if observation.invalid:
        logger.warning("invalid spec: %s", observation.invalid)
    return new


def run(namespaces: list[str], clusterwide: bool, *, connection: kopf.ConnectionInfo | None = None,
        view_source: ViewSource = metadata_view, data_mover: DataMover | None = cluster_data_mover,
        config_applier: ConfigApplier | None = cluster_config_applier,
        interval: float = DEFAULT_INTERVAL,
        liveness: str | None = None, metrics_port: int = -1, metrics_host: str = "0.0.0.0",
        install_crds: bool = False, stop_flag: threading.Event | None = None,
        ready_flag: threading.Event | None = None,
        topic_bootstrap: topics.BootstrapSource = topics.service_bootstrap,
        topic_tuning: topics.Tuning | None = None, user_tuning: topics.Tuning | None = None,
        clock: Clock = now_ms, zookeeper_members: MemberSource = builders.zookeeper_members) -> None:
    """Run the operator until stopped (SIGTERM/SIGINT, or stop_flag in tests)."""
    memo = OperatorMemo(connection=connection, view_source=view_source, data_mover=data_mover,
                        config_applier=config_applier,
                        namespaces=list(namespaces),
                        clusterwide=clusterwide, topic_bootstrap=topic_bootstrap,
                        topic_tuning=topic_tuning or topics.Tuning(), metrics_port=metrics_port,
                        user_tuning=user_tuning or topics.Tuning(),
                        metrics_host=metrics_host, install_crds=install_crds, clock=clock,
                        zookeeper_members=zookeeper_members)
    asyncio.run(kopf.operator(
        registry=build_registry(interval), clusterwide=clusterwide, namespaces=namespaces,
        memo=memo, standalone=True,
        liveness_endpoint=liveness, stop_flag=stop_flag, ready_flag=ready_flag))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="odradek operator", description=__doc__.splitlines()[0])
    scope = p.add_mutually_exclusive_group(required=True)
    scope.add_argument("--namespace", action="append", help="watch this namespace (repeatable)")
    scope.add_argument("--all-namespaces", action="store_true", help="watch every namespace")
    scope.add_argument("--render", metavar="FILE",
                       help="print, as YAML, every object the operator would apply for the KafkaClusters "
                            "in FILE ('-': standard input), then exit; no cluster needed")
    process_logging.add_arguments(p)
    p.add_argument("--liveness", default="http://0.0.0.0:8080/healthz",
                   help="kopf's liveness endpoint (empty to disable)")
    p.add_argument("--metrics-port", type=int, default=9404,
                   help="port of the Prometheus endpoint (GET /metrics; -1 to disable)")
    p.add_argument("--install-crds", action="store_true",
                   help="create or update the KafkaCluster, Topic and KafkaUser CRDs at start-up (helm upgrade never does)")
    p.add_argument("--interval", type=float, default=DEFAULT_INTERVAL,
                   help="seconds between reconcile passes of each cluster (rolls advance per pass)")
    p.add_argument("--topic-resync", type=float, default=topics.DEFAULT_RESYNC,
                   help="seconds between looks at every Topic (reverts changes made in the cluster)")
    p.add_argument("--user-resync", type=float, default=topics.DEFAULT_RESYNC,
                   help="seconds between looks at every KafkaUser (reverts ACL, quota and credential changes)")
    p.add_argument("--topic-workers", type=int, default=topics.DEFAULT_WORKERS,
                   help="Topics reconciled at once (their admin calls are batched)")
    args = p.parse_args(argv)
    if args.render:
        from odradek.operator import render
        from odradek.operator.reconciler import operator_image

        return render.main(args.render, operator_image())
    process_logging.configure(args, "operator")
    run(args.namespace or [], args.all_namespaces, interval=args.interval, liveness=args.liveness or None,
        metrics_port=args.metrics_port, install_crds=args.install_crds,
        topic_tuning=topics.Tuning(workers=args.topic_workers, resync=args.topic_resync),
        user_tuning=topics.Tuning(workers=args.topic_workers, resync=args.user_resync))
    return 0

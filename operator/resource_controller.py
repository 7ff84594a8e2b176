"""The part every resource controller (Topic, KafkaUser) shares: the store of latest bodies, the
KafkaCluster index, the work queue and its workers, the resync loop, start and stop.

A kind's controller (topics.py, users.py) adds only what differs: how a body becomes a resource
(`_store`), which watch events need a pass, one pass (`reconcile`) and its admin connection
(`_open_admin`). Every resource and KafkaCluster is listed once before the workers start, so the
first decisions see the whole picture (the older of two Topics naming one topic, for instance).
"""

import asyncio
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar, cast

from odradek.operator import builders
from odradek.operator.batching import Batcher
from odradek.operator.cluster_access import ClusterAccess, cluster_access
from odradek.operator.kafka_admin import KafkaAdmin
from odradek.operator.kube import ApiError, KubeClient
from odradek.operator.metrics import ReconcileStats, kind_key
from odradek.operator.topic_reconciler import Cluster
from odradek.operator.work_queue import ShutDown, WorkQueue

log = logging.getLogger("odradek.operator.resource_controller")

BootstrapSource = Callable[[dict[str, Any]], list[tuple[str, int]]]

DEFAULT_RESYNC = 60.0
DEFAULT_WORKERS = 64

ResourceKey = tuple[str, str]
"""(namespace, name) of a Topic or KafkaUser."""

ClusterKey = tuple[str, str | None]
"""(namespace, name) of a KafkaCluster; a resource whose spec is invalid refers to (namespace, None)."""


def service_bootstrap(cluster: dict[str, Any]) -> list[tuple[str, int]]:
    """The cluster's bootstrap Service (the operator runs inside Kubernetes)."""
    host, port = builders.bootstrap_servers(cluster).rsplit(":", 1)
    return [(host, int(port))]


@dataclass
class Tuning:
    """Scale knobs: concurrent reconciles, admin batching, resync period."""
    workers: int = DEFAULT_WORKERS
    queue_size: int = 10000
    resync: float = DEFAULT_RESYNC
    linger: float = 0.05
    max_batch: int = 500
    request_timeout: float = 30.0


@dataclass
class BatchedAdmin:
    """One cluster's admin connection and the batchers in front of it; a kind's subclass opens
    the batchers it needs (`batcher`) and maps its actions onto them."""
    access: ClusterAccess
    admin: KafkaAdmin
    batchers: dict[str, Batcher[Any, Any]] = field(default_factory=dict)

    async def close(self) -> None:
        for b in self.batchers.values():
            await b.close()
        await self.admin.close()


def batcher(tuning: Tuning, name: str, send: Callable[[list[Any]], Any], key: Callable[[Any], Hashable],
            share: bool = False) -> Batcher[Any, Any]:
    """A batcher sized by `tuning`: at most max_batch per request, room for every worker's call."""
    return Batcher(name, send, key, linger=tuning.linger, max_batch=tuning.max_batch,
                   max_pending=max(tuning.max_batch, tuning.workers * 2), share=share)


class Resource(Protocol):
    @property
    def key(self) -> ResourceKey: ...
    @property
    def namespace(self) -> str: ...
    @property
    def cluster_ref(self) -> str | None: ...


class Admin(Protocol):
    @property
    def access(self) -> ClusterAccess: ...
    async def close(self) -> None: ...


R = TypeVar("R", bound=Resource)
A = TypeVar("A", bound=Admin)


class ResourceController(ABC, Generic[R, A]):
    kind: str  # the resource's Kubernetes kind: "Topic", "KafkaUser"
    kinds: str  # its plural as the log says it
    task_prefix: str  # asyncio task names: "<prefix>-worker-3"

    def __init__(self, client: KubeClient, *, namespaces: list[str], clusterwide: bool,
                 bootstrap_source: BootstrapSource = service_bootstrap, tuning: Tuning | None = None,
                 stats: ReconcileStats | None = None):
        self.client = client
        self.stats = stats or ReconcileStats()  # the operator's: passes, their duration, failures
        self.namespaces, self.clusterwide = list(namespaces), clusterwide
        self.bootstrap_source = bootstrap_source
        self.tuning = tuning or Tuning()
        self.resources: dict[ResourceKey, R] = {}
        self.bodies: dict[ResourceKey, dict[str, Any]] = {}
        self.clusters: dict[ClusterKey, dict[str, Any]] = {}
        self.admins: dict[ClusterKey, A] = {}
        self.queue = WorkQueue(self.tuning.queue_size)
        self.seeded = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    # --- what a kind adds ----------------------------------------------------------------------

    @abstractmethod
    def _store(self, body: dict[str, Any]) -> R:
        """Keep `body` (and the resource made of it) as the latest of its key."""

    @abstractmethod
    async def reconcile(self, key: ResourceKey) -> bool:
        """One pass for one resource; True when it should be retried soon (with backoff)."""

    @abstractmethod
    def _open_admin(self, access: ClusterAccess) -> A:
        """A new admin connection to a cluster reached through `access`."""

    # --- the store, fed by watch events --------------------------------------------------------

    async def cluster_event(self, kind: str | None, body: dict[str, Any]) -> None:
        meta: dict[str, Any] = body.get("metadata") or {}
        key = cast(ClusterKey, (meta.get("namespace"), meta.get("name")))
        old = self.clusters.get(key)
        if kind == "DELETED":
            self.clusters.pop(key, None)
        else:
            self.clusters[key] = body
        if kind == "DELETED" or old is None or cluster_state(old) != cluster_state(body):
            admin = self.admins.pop(key, None)
            if admin is not None:
                await admin.close()
            for resource_key, r in list(self.resources.items()):
                if (r.namespace, r.cluster_ref) == key:
                    await self.queue.add(resource_key)

    # --- running -------------------------------------------------------------------------------

    async def start(self) -> None:
        self._tasks = [asyncio.create_task(self._seed_then_run(), name=f"{self.task_prefix}-seed")]

    async def stop(self) -> None:
        await self.queue.shutdown()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for admin in list(self.admins.values()):
            await admin.close()
        self.admins.clear()

    async def _list(self, kind: str) -> list[dict[str, Any]]:
        items = []
        for namespace in [None] if self.clusterwide else self.namespaces:
            items.extend(await self.client.list(kind, namespace, {}))
        return items

    async def _seed(self) -> None:
        """Every resource and KafkaCluster once, before any decision (see the module docstring)."""
        delay = 1.0
        for _attempt in range(1_000_000):  # bounded; in practice until the API server answers
            try:
                clusters = await self._list("KafkaCluster")
                bodies = await self._list(self.kind)
                break
            except (TimeoutError, ApiError, OSError) as e:
                log.warning("listing %s and KafkaClusters failed (%s); retrying in %.0fs", self.kinds, e, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 60.0)
        for body in clusters:
            meta = body["metadata"]
            self.clusters.setdefault((meta["namespace"], meta["name"]), body)
        for body in bodies:
            key = (body["metadata"]["namespace"], body["metadata"]["name"])
            if key not in self.resources:
                self._store(body)
        for key in list(self.resources):
            await self.queue.add(key)
        self.seeded.set()
        log.info("%s controller started: %d %s, %d KafkaClusters", self.kind, len(self.resources), self.kinds,
                 len(self.clusters))

    async def _seed_then_run(self) -> None:
        await self._seed()
        workers = [asyncio.create_task(self._worker(i), name=f"{self.task_prefix}-worker-{i}")
                   for i in range(self.tuning.workers)]
        resync = asyncio.create_task(self._resync(), name=f"{self.task_prefix}-resync")
        try:
            await asyncio.gather(*workers, resync)
        finally:
            for task in [*workers, resync]:
                task.cancel()
            await asyncio.gather(*workers, resync, return_exceptions=True)

    async def _resync(self) -> None:
        while True:
            await asyncio.sleep(self.tuning.resync)
            for key in list(self.resources):
                await self.queue.add(key)

    async def _worker(self, index: int) -> None:
        while True:
            try:
                key = cast(ResourceKey, await self.queue.get())  # only resource keys are queued
            except ShutDown:
                return
            try:
                with self.stats.timed(kind_key(self.kind, key[0])):
                    retry = await self.reconcile(key)
            except asyncio.CancelledError:
                raise
            except ApiError as e:
                log.info("%s %s/%s: Kubernetes API answered %s; retrying", self.kind, *key, e)
                retry = True
            except Exception:  # one resource's failure must not stop the worker
                log.exception("%s %s/%s: reconcile failed; retrying", self.kind, *key)
                retry = True
            finally:
                await self.queue.done(key)
            if retry:
                self.queue.add_rate_limited(key)
            else:
                self.queue.forget(key)

    # --- the cluster a resource names ----------------------------------------------------------

    def cluster_of(self, r: R) -> Cluster:
        body = self.clusters.get((r.namespace, r.cluster_ref))
        if body is None:
            return Cluster.MISSING
        return Cluster.DELETING if body["metadata"].get("deletionTimestamp") else Cluster.PRESENT

    async def access_of(self, cluster: dict[str, Any]) -> ClusterAccess:
        """The bootstrap source's addresses when one was given (tests, benchmarks), else how the
        operator reaches the cluster (cluster_access: TLS and its certificate when secured)."""
        if self.bootstrap_source is not service_bootstrap:
            return ClusterAccess(tuple(self.bootstrap_source(cluster)))
        return await cluster_access(self.client, cluster)

    async def admin_for(self, r: R) -> A:
        key = (r.namespace, r.cluster_ref)
        access = await self.access_of(self.clusters[key])
        admin = self.admins.get(key)
        if admin is None or admin.access != access:
            if admin is not None:
                asyncio.get_running_loop().create_task(admin.close())
            admin = self.admins[key] = self._open_admin(access)
        return admin


def older(new: dict[str, Any], stored: dict[str, Any]) -> bool:
    """Whether `new` is an older version than `stored`. Resource versions are opaque to clients,
    but where both are integers (etcd revisions, as every API server has them) they order writes,
    and an event can arrive after the answer to a later write of ours."""
    a, b = new["metadata"].get("resourceVersion"), stored["metadata"].get("resourceVersion")
    return isinstance(a, str) and isinstance(b, str) and a.isdigit() and b.isdigit() and int(a) < int(b)


def cluster_state(body: dict[str, Any]) -> tuple[bool, str | None]:
    """What of a KafkaCluster makes its resources need a look: being deleted, or recreated."""
    return bool(body["metadata"].get("deletionTimestamp")), body["metadata"].get("uid")

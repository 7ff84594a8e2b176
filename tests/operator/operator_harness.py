"""Flow-test harness: the emulated API server, a stand-in for the StatefulSet controller and
kubelet (pods from the template, Ready a few operator requests later), a scripted cluster view, and
the operator running in its own thread (kopf must not share pytest-asyncio's loop).

Nothing here sleeps: `wait_for` wakes on every request the API server handles, every object the
kubelet stores and every look at the scripted view (`changed()`), and the kubelet acts on the
operator's requests rather than on a timer."""

import asyncio
import copy
import threading
from dataclasses import replace

import aiohttp
import kmock
from kube_emulator import KubernetesServer

from odradek.operator import builders
from odradek.operator.rolling import ClusterView

NS = "kafka"
KC = "odradek.io/v1alpha1/kafkaclusters"
TOPICS = "odradek.io/v1alpha1/topics"
USERS = "odradek.io/v1alpha1/kafkausers"
SECRETS = "v1/secrets"
NETPOL = "networking.k8s.io/v1/networkpolicies"
STS = "apps/v1/statefulsets"
PODS = "v1/pods"
NODES = "v1/nodes"
WRITES = ("create", "update", "delete")
TEST_CLIENT = "odradek-tests"  # the User-Agent of the tests' own API calls (not the operator's)


_waiters: dict[asyncio.Future, object] = {}  # each waiting `wait_for`: its predicate


def changed(_request=None) -> None:
    """Something a test may wait on changed (from any thread): each `wait_for` checks its
    predicate again, at once when on its own loop's thread (so it sees every state a request
    leaves behind, however brief), else on its loop's next turn."""
    for waiter in list(_waiters):
        loop = waiter.get_loop()
        try:
            here = asyncio.get_running_loop() is loop
        except RuntimeError:
            here = False
        if here:
            _check(waiter)
        else:
            try:
                loop.call_soon_threadsafe(_check, waiter)
            except RuntimeError:  # its loop is closed
                _waiters.pop(waiter, None)


def _check(waiter: asyncio.Future) -> None:
    predicate = _waiters.get(waiter)
    if predicate is None or waiter.done():
        return
    try:
        value = predicate()
    except Exception:  # a state the predicate does not expect (an object mid-replacement): not yet
        return
    if value:
        waiter.set_result(value)


def new_server() -> KubernetesServer:
    server = KubernetesServer()
    server.listeners.append(changed)
    server.resources[KC] = kmock.ResourceInfo(
        kind="KafkaCluster", singular="kafkacluster", namespaced=True, shortnames={"kc"},
        subresources={"status"}, verbs={"get", "list", "watch", "create", "update", "patch", "delete"})
    server.resources[TOPICS] = kmock.ResourceInfo(
        kind="Topic", singular="topic", namespaced=True,
        subresources={"status"}, verbs={"get", "list", "watch", "create", "update", "patch", "delete"})
    server.resources[USERS] = kmock.ResourceInfo(
        kind="KafkaUser", singular="kafkauser", namespaced=True, shortnames={"ku"},
        subresources={"status"}, verbs={"get", "list", "watch", "create", "update", "patch", "delete"})
    # kopf's backbone: it waits for these resources before serving anything.
    server.resources["apiextensions.k8s.io/v1/customresourcedefinitions"] = kmock.ResourceInfo(
        kind="CustomResourceDefinition", namespaced=False, verbs={"get", "list", "watch"})
    server.resources["v1/namespaces"] = kmock.ResourceInfo(kind="Namespace", namespaced=False,
                                                           verbs={"get", "list", "watch"})
    server.objects[kmock.resource("v1/namespaces"), None, NS] = {
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS, "uid": "ns-" + NS}}
    for res, kind in ((STS, "StatefulSet"), ("apps/v1/deployments", "Deployment"), (PODS, "Pod"),
                      ("v1/services", "Service"), ("v1/configmaps", "ConfigMap"), ("v1/events", "Event"),
                      ("policy/v1/poddisruptionbudgets", "PodDisruptionBudget"),
                      ("v1/persistentvolumeclaims", "PersistentVolumeClaim"), (SECRETS, "Secret"),
                      (NETPOL, "NetworkPolicy")):
        server.resources[res] = kmock.ResourceInfo(kind=kind, namespaced=True,
                                                   verbs={"get", "list", "create", "patch", "delete"})
    server.resources["storage.k8s.io/v1/storageclasses"] = kmock.ResourceInfo(
        kind="StorageClass", namespaced=False, verbs={"get", "list"})
    server.resources[NODES] = kmock.ResourceInfo(kind="Node", namespaced=False, verbs={"get", "list"})
    return server


def put_node(server, name: str, labels: dict[str, str]) -> None:
    server.put_raw(NODES, None, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}})


class ScriptedView:
    """The cluster's Metadata answer as the test scripts it; `registered` follows ready pods."""

    def __init__(self):
        self.view = ClusterView(registered=frozenset())
        self.calls = 0

    async def __call__(self, body) -> ClusterView:
        self.calls += 1
        changed()
        return self.view

    def set(self, **changes) -> None:
        self.view = replace(self.view, **changes)

    async def passes(self, n: int, timeout: float = 20.0) -> None:
        """Wait until the operator has taken n more looks at the cluster."""
        target = self.calls + n
        await wait_for(lambda: self.calls >= target, timeout, f"{n} more reconcile passes")


async def wait_for(predicate, timeout: float, what: str, step: float | None = None):
    """`predicate()` once it is true: checked now and again on every `changed()`; `step`
    (seconds) also re-checks that often, for a predicate on state outside the harness (a real
    broker's answer). A predicate that raises is not true yet (a status key not written yet);
    a timeout names its last error."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        try:
            value = predicate()
            failed = None
        except Exception as e:  # as in _check: a state the predicate does not expect yet (a key not written)
            value, failed = None, e
        if value:
            return value
        remaining = deadline - loop.time()
        if remaining <= 0:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}"
                                 + ("" if failed is None else f" (last check raised {failed!r})")) from failed
        waiter = loop.create_future()
        _waiters[waiter] = predicate
        try:
            return await asyncio.wait_for(waiter, remaining if step is None else min(step, remaining))
        except TimeoutError:
            pass
        finally:
            _waiters.pop(waiter, None)


class Kubelet:
    """Plays the StatefulSet controller and kubelet for the broker StatefulSet: pods 0..n-1 from
    the current template (OnDelete: a pod keeps its template until deleted), Ready at the
    `ready_after`-th resync round of the operator after it was created (a moment later, on the
    operator's own clock rather than a timer; at most one round begins during a pass, as the
    resync waits for the pass's lock, so with 2 a pod is never Ready within the pass that made
    it); records the worst number of brokers down at once.
    It ticks after each request the operator makes; a tick ages pods when a resync round (a list
    of every KafkaCluster) began since the last one. A subclass changes what a deleted pod means
    and when a pod is Ready (`pod_deleted`, `pod_ready`)."""

    def __init__(self, server: KubernetesServer, view: ScriptedView | None, name: str = "demo", ready_after: int = 2):
        self.server, self.view, self.ready_after = server, view, ready_after
        self.sts_name = builders.names(name)["broker"]
        self.ages: dict[str, int] = {}
        self.max_down = 0  # most brokers not ready at once, counted once all were ready
        self.all_ready_once = False
        self.recreated: list[int] = []
        self.loop: asyncio.AbstractEventLoop | None = None
        self.scheduled = False
        self.round_began = False  # a resync round began since the last tick: pods age
        self.cluster = name
        # Ready pods the Deployment/StatefulSet controllers report; None = every desired pod.
        self.ready_controllers: int | None = None
        self.ready_zookeeper: int | None = None
        # Config hashes a broker cannot start with (a broken config or image): never Ready.
        self.broken: set[str] = set()

    def _report_ready(self, resource: str, name: str, ready: int | None) -> None:
        obj = self.server.live(resource, NS, name)
        if obj is None:
            return
        want = obj["spec"]["replicas"] if ready is None else min(ready, obj["spec"]["replicas"])
        if (obj.get("status") or {}).get("readyReplicas") != want:
            self.server.put_raw(resource, NS, {**copy.deepcopy(obj), "status": {"readyReplicas": want}})

    def tick(self, age: bool = True) -> None:
        n = builders.names(self.cluster)
        self._report_ready("apps/v1/deployments", n["controller"], self.ready_controllers)
        self._report_ready(STS, n["zookeeper"], self.ready_zookeeper)
        sts = self.server.live(STS, NS, self.sts_name)
        if sts is None:
            return
        n = sts["spec"]["replicas"]
        template = sts["spec"]["template"]
        ready = set()
        for i in range(n):
            name = f"{self.sts_name}-{i}"
            pod = self.server.live(PODS, NS, name)
            if pod is None:
                if name in self.ages:
                    self.recreated.append(i)
                    self.pod_deleted(i)
                self.ages[name] = 0
                self.server.put_raw(PODS, NS, {
                    "apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": name, **copy.deepcopy(template["metadata"])},
                    "spec": {}, "status": {"conditions": [{"type": "Ready", "status": "False"}]}})
                continue
            self.ages[name] = self.ages.get(name, 0) + (1 if age else 0)
            make_ready, counts = self.pod_ready(i, pod)
            if make_ready:
                pod = copy.deepcopy(pod)
                pod["status"] = {"conditions": [{"type": "Ready", "status": "True"}]}
                self.server.put_raw(PODS, NS, pod)
            if counts:
                ready.add(i)
        pods = kmock.resource(PODS)
        for key, obj in list(self.server.objects.items()):
            if key[0] != pods or obj.deleted:
                continue
            name = obj.raw["metadata"]["name"]
            if name.startswith(self.sts_name + "-") and int(name.rsplit("-", 1)[1]) >= n:
                obj.delete()  # scaled down
        if self.all_ready_once:
            self.max_down = max(self.max_down, n - len(ready))
        elif len(ready) == n:
            self.all_ready_once = True
        if self.view is not None:
            self.view.set(registered=frozenset(ready))

    def pod_deleted(self, index: int) -> None:
        """Broker pod `index` was deleted (by the operator) and is being recreated."""

    def pod_ready(self, index: int, pod: dict) -> tuple[bool, bool]:
        """(mark the pod Ready now, count it as a registered broker): `ready_after` ticks after
        it was created, never with a broken config hash."""
        if pod["metadata"].get("annotations", {}).get(builders.CONFIG_HASH) in self.broken:
            return False, False
        age = self.ages[pod["metadata"]["name"]]
        return age == self.ready_after, age >= self.ready_after

    def _on_request(self, request) -> None:
        """After each of the operator's requests (not the tests' own, not a put_raw): one tick,
        on the next loop turn, so the request is answered first."""
        if request is None or (request.headers or {}).get("User-Agent") == TEST_CLIENT:
            return
        self.round_began |= _is_resync_list(request)
        if not self.scheduled:
            self.scheduled = True
            self.loop.call_soon(self._scheduled_tick)

    def _scheduled_tick(self) -> None:
        self.scheduled = False
        if self.loop is not None:
            age, self.round_began = self.round_began, False
            self.tick(age)
            changed()

    def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.tick()
        self.server.listeners.append(self._on_request)

    async def stop(self) -> None:
        self.server.listeners.remove(self._on_request)
        self.loop = None


class OperatorThread:
    """`odradek.operator.main.run` in a thread, against the emulator, until stop()."""

    def __init__(self, url: str, view, interval: float = 0.1, data_mover=None, config_applier=None, **run_kwargs):
        import kopf

        from odradek.operator.main import run

        self.stop_flag, self.ready_flag = threading.Event(), threading.Event()
        self.errors: list[BaseException] = []

        def target():
            try:
                run([NS], False, connection=kopf.ConnectionInfo(server=url, insecure=True),
                    view_source=view, data_mover=data_mover, config_applier=config_applier, interval=interval,
                    stop_flag=self.stop_flag,
                    ready_flag=self.ready_flag,
                    **run_kwargs)
            except BaseException as e:
                self.errors.append(e)

        self.thread = threading.Thread(target=target, name="operator", daemon=True)
        self.thread.start()

    async def stop(self, timeout: float = 15.0) -> None:
        self.stop_flag.set()
        await asyncio.get_running_loop().run_in_executor(None, self.thread.join, timeout)
        assert not self.thread.is_alive(), "operator thread did not stop"
        assert not self.errors, self.errors


class Api:
    """The test's own client: writes KafkaClusters through HTTP so the metadata layer applies."""

    def __init__(self, url: str):
        self.url = url.rstrip("/")
        self.session = aiohttp.ClientSession(headers={"User-Agent": TEST_CLIENT})

    async def call(self, method, path, body=None, content_type="application/json"):
        async with self.session.request(method, self.url + path, json=body,
                                        headers={"Content-Type": content_type}) as r:
            return r.status, await r.json()

    async def create_cluster(self, spec: dict, name="demo") -> dict:
        status, body = await self.call("POST", f"/apis/odradek.io/v1alpha1/namespaces/{NS}/kafkaclusters", {
            "apiVersion": "odradek.io/v1alpha1", "kind": "KafkaCluster",
            "metadata": {"name": name, "namespace": NS}, "spec": spec})
        assert status in (200, 201), body
        return body

    async def patch_spec(self, spec: dict, name="demo") -> dict:
        status, body = await self.call("PATCH", f"/apis/odradek.io/v1alpha1/namespaces/{NS}/kafkaclusters/{name}",
                                       {"spec": spec}, "application/merge-patch+json")
        assert status == 200, body
        return body

    async def delete_cluster(self, name="demo"):
        return await self.call("DELETE", f"/apis/odradek.io/v1alpha1/namespaces/{NS}/kafkaclusters/{name}")

    async def close(self):
        await self.session.close()


def _is_resync_list(r) -> bool:
    return (r.action is not None and r.action.name == "LIST" and r.resource is not None
            and r.resource.plural == "kafkaclusters" and (r.headers or {}).get("User-Agent") != TEST_CLIENT)


def resync_lists(server: KubernetesServer) -> int:
    """How many times the operator listed KafkaClusters: one per resync round (after kopf's one
    initial list), so a test can wait for rounds instead of sleeping through them."""
    return sum(1 for r in list(server) if _is_resync_list(r))


async def resync_rounds(server: KubernetesServer, n: int, timeout: float = 20.0) -> None:
    """Wait until the operator has started n more resync rounds (each lists every KafkaCluster)."""
    target = resync_lists(server) + n
    await wait_for(lambda: resync_lists(server) >= target, timeout, f"{n} more resync rounds")


def writes(server: KubernetesServer, since: int = 0, exclude=("kafkaclusters", "events")) -> list:
    """(action, plural, name) of every write the API received after request number `since`."""
    out = []
    for r in list(server)[since:]:
        if r.action is None or r.action.name.lower() not in WRITES or r.resource is None:
            continue
        if r.resource.plural in exclude:
            continue
        name = r.name or (r.data or {}).get("metadata", {}).get("name")
        out.append((r.action.name.lower(), r.resource.plural, name))
    return out


def changes(server: KubernetesServer, since: int = 0, exclude=("kafkaclusters", "events")) -> list:
    """(change, plural, name) of every write that changed an object after request number `since`
    (an apply that matches the object already is no change)."""
    return [c[1:] for c in server.changes if c[0] >= since and c[2] not in exclude]


def object_path(kind: str, namespace: str) -> str:
    """The collection URL of a kind the builders render."""
    prefix, plural = {"ConfigMap": ("api/v1", "configmaps"), "Service": ("api/v1", "services"),
                      "StatefulSet": ("apis/apps/v1", "statefulsets"), "Deployment": ("apis/apps/v1", "deployments"),
                      "PodDisruptionBudget": ("apis/policy/v1", "poddisruptionbudgets"),
                      "NetworkPolicy": ("apis/networking.k8s.io/v1", "networkpolicies")}[kind]
    return f"/{prefix}/namespaces/{namespace}/{plural}"


def condition(cluster: dict | None, type_: str) -> dict:
    for c in ((cluster or {}).get("status") or {}).get("conditions", []):
        if c["type"] == type_:
            return c
    return {}

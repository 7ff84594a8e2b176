"""RBAC least privilege: the chart grants every verb the operator's KafkaCluster reconciler uses on
the kinds it manages, and none it never uses. The verbs are taken from what the operator did to
the emulated API server over a scenario through its code paths (create with a managed ensemble,
roll, resize the claims, switch to an existing ZooKeeper, CRDs at start-up)."""

import kmock
import pytest
import pytest_asyncio
from operator_harness import (
    NETPOL,
    NS,
    PODS,
    STS,
    TEST_CLIENT,
    Api,
    Kubelet,
    OperatorThread,
    ScriptedView,
    condition,
    new_server,
    put_node,
    wait_for,
)
from test_operator_chart import helm, render  # noqa: F401  (helm is a fixture)

pytestmark = [pytest.mark.timeout(120), pytest.mark.asyncio]

# Kinds the KafkaCluster reconciler alone manages (the odradek.io kinds are kopf's and the
# Topic controller's too, exercised by their own tests).
MANAGED = {"configmaps", "services", "statefulsets", "deployments", "poddisruptionbudgets", "pods", "networkpolicies",
           "persistentvolumeclaims", "storageclasses", "customresourcedefinitions", "nodes"}
PVCS = "v1/persistentvolumeclaims"
APPLIED = {"configmaps", "services", "statefulsets", "deployments", "poddisruptionbudgets", "networkpolicies"}
# Code paths the scenario cannot take all at once, each the same code as one it takes.
EXPLAINED = {
    # apply() patches whichever rendered object differs; the scenario patches some of the kinds
    **{(kind, "patch"): "apply" for kind in APPLIED},
    # prune() deletes any rendered kind the cluster no longer needs; the scenario prunes an ensemble
    **{(kind, "delete"): "prune" for kind in APPLIED},
    # claims naming no class: the default class is found by listing (the scenario's name theirs)
    ("storageclasses", "list"): "default class",
}


def verb(request) -> str | None:
    method = str(request.method.value if hasattr(request.method, "value") else request.method).upper()
    if method == "GET":
        if (request.params or {}).get("watch") in ("true", "1"):
            return "watch"
        return "get" if request.name else "list"
    return {"POST": "create", "PATCH": "patch", "PUT": "update", "DELETE": "delete"}.get(method)


def used(server) -> set[tuple[str, str]]:
    out = set()
    requests = list(server)
    for r in requests:
        if r.resource is None or not r.resource.plural or (r.headers or {}).get("User-Agent") == TEST_CLIENT:
            continue
        v = verb(r)
        if v is not None:
            plural = r.resource.plural + (f"/{r.subresource}" if r.subresource else "")
            out.add((plural, v))
    # A server-side apply that creates its object is authorized as a create too (Kubernetes'
    # api-concepts, "Patch and apply"): count the creates by what they did, not by method.
    for request_id, change, plural, _ in server.changes:
        if change == "create" and (requests[request_id].headers or {}).get("User-Agent") != TEST_CLIENT:
            out.add((plural, "create"))
    return out


def granted(docs) -> set[tuple[str, str]]:
    return {(res, v) for d in docs if d["kind"] in ("Role", "ClusterRole")
            for rule in d["rules"] for res in rule["resources"] for v in rule["verbs"]}


@pytest_asyncio.fixture
async def scenario():
    """Run the operator through its code paths; the (resource, verb) pairs it used."""
    server = new_server()
    async with server, kmock.Server(server) as http:
        url = str(http.url)
        view, api = ScriptedView(), Api(url)
        kubelet = Kubelet(server, view)
        kubelet.start()
        server.put_raw("storage.k8s.io/v1/storageclasses", None, {
            "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "allowVolumeExpansion": True,
            "metadata": {"name": "standard", "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}}})
        from odradek.operator.crd import crd

        stale = crd()
        stale["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"].pop("metrics")
        server.put_raw("apiextensions.k8s.io/v1/customresourcedefinitions", None, stale)  # an older chart's
        operator = OperatorThread(url, view, install_crds=True)
        try:
            def cluster():
                return server.live("odradek.io/v1alpha1/kafkaclusters", NS, "demo")

            async def ready():
                await wait_for(lambda: condition(cluster(), "Ready").get("status") == "True", 30, "Ready")

            await api.create_cluster({})
            await ready()
            for i in range(3):  # claims as the StatefulSet controller makes them, default class filled in
                server.put_raw(PVCS, NS, {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                                          "metadata": {"name": f"data-demo-broker-{i}"},
                                          "spec": {"storageClassName": "standard",
                                                   "resources": {"requests": {"storage": "10Gi"}}}})
            put_node(server, "node-a", {"topology.kubernetes.io/zone": "zone-a"})
            await api.patch_spec({"brokers": {"config": {"num.partitions": 3}, "storage": {"size": "20Gi"},
                                              "rack": {"topologyKey": "topology.kubernetes.io/zone"}}})
            await wait_for(lambda: all((server.live(PODS, NS, f"demo-broker-{i}") or {}).get("metadata", {})
                                       .get("annotations", {}).get("odradek.io/config-hash")
                                       == server.live(STS, NS, "demo-broker")["spec"]["template"]["metadata"]
                                       ["annotations"]["odradek.io/config-hash"] for i in range(3)), 40, "rolled")
            await wait_for(lambda: server.live(PVCS, NS, "data-demo-broker-2")["spec"]["resources"]["requests"]
                           ["storage"] == "20Gi", 20, "claims resized")
            # secured: certificates in Secrets, NetworkPolicies (the switch below prunes ZooKeeper's)
            await api.patch_spec({"authorization": {"superUsers": ["User:ops"]}})
            await wait_for(lambda: server.live(NETPOL, NS, "demo-zookeeper") is not None, 20, "network policies")
            await api.call("PATCH", f"/apis/odradek.io/v1alpha1/namespaces/{NS}/kafkaclusters/demo",
                           {"metadata": {"annotations": {"odradek.io/zookeeper-migrated-to": "zk:2181/odradek"}}},
                           "application/merge-patch+json")
            await api.patch_spec({"zookeeper": {"connect": "zk:2181/odradek"}})
            await wait_for(lambda: server.live(STS, NS, "demo-zookeeper") is None, 20, "ensemble removed")
            await ready()
            yield used(server)
        finally:
            await operator.stop()
            await kubelet.stop()
            await api.close()


async def test_the_chart_grants_exactly_the_verbs_the_reconciler_uses(scenario, helm):  # noqa: F811
    # the explained paths are the scenario's own code: it took them for some kinds
    assert {("statefulsets", "patch"), ("services", "delete"), ("storageclasses", "get"), ("nodes", "list")} <= scenario
    for values in ((), ("operator.watchAllNamespaces=true",)):
        grants = granted(render(helm, *values))
        missing = sorted(p for p in scenario if p not in grants and p[0] not in ("namespaces",)
                         and not (p[0] == "customresourcedefinitions" and p[1] in ("list", "watch")))
        assert missing == [], f"used but not granted ({values}): {missing}"
        unused = sorted(p for p in grants if p[0] in MANAGED and p not in scenario and p not in EXPLAINED)
        assert unused == [], f"granted but never used ({values}): {unused}"

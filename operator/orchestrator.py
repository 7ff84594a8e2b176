"""The Kubernetes side of rolling.BrokerOrchestrator: brokers are the pods of one StatefulSet.

The StatefulSet has `updateStrategy: OnDelete`, so a pod keeps its old template until deleted:
restarting broker N = deleting pod `<name>-broker-N` (the StatefulSet recreates it from the
current template, with the new config-hash annotation); the broker count is the StatefulSet's
`spec.replicas`.
"""

from typing import Any

from odradek.operator.builders import CONFIG_HASH, names, selector
from odradek.operator.kube import KubeClient
from odradek.operator.rolling import BrokerState


def pod_ready(pod: dict[str, Any]) -> bool:
    """Ready per its readiness probe and not on its way out."""
    if pod.get("metadata", {}).get("deletionTimestamp"):
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in pod.get("status", {}).get("conditions", []))


# Container states in which a broker cannot be serving (Strimzi's KafkaRoller restarts such a
# pod without an availability check): the process is not running, so it holds no ISR place a
# restart could take away.
CANNOT_SERVE_REASONS = frozenset({"CrashLoopBackOff", "ImagePullBackOff", "ErrImagePull", "ContainerCreating",
                                  "CreateContainerConfigError", "CreateContainerError", "InvalidImageName"})


def cannot_serve(pod: dict[str, Any]) -> bool:
    """Whether the pod's broker cannot be serving: the pod Pending, a container waiting (crash
    loop, image pull, being created) or terminated, or not started (its startup probe not yet
    passed). A running, started container that is merely not Ready (a probe flap, a paused
    process) may still be an in-sync replica: False."""
    status = pod.get("status") or {}
    if status.get("phase") == "Pending":
        return True
    for c in status.get("containerStatuses") or []:
        state = c.get("state") or {}
        if (state.get("waiting") or {}).get("reason") in CANNOT_SERVE_REASONS or "terminated" in state:
            return True
        if "running" not in state or c.get("started") is False:
            return True
    return False


def broker_states(count: int, pods: list[dict[str, Any]], broker_name: str) -> list[BrokerState]:
    """One state per ordinal 0..count-1; a missing pod is a broker that is down."""
    by_name = {p["metadata"]["name"]: p for p in pods}
    states = []
    for i in range(count):
        pod = by_name.get(f"{broker_name}-{i}")
        if pod is None:
            states.append(BrokerState(i, None, running=False))
        else:
            annotations = pod["metadata"].get("annotations") or {}
            states.append(BrokerState(i, annotations.get(CONFIG_HASH), running=pod_ready(pod),
                                      cannot_serve=cannot_serve(pod)))
    return states


class KubernetesBrokerOrchestrator:
    def __init__(self, client: KubeClient, namespace: str, cluster_name: str):
        self.client, self.namespace, self.cluster = client, namespace, cluster_name
        self.statefulset = names(cluster_name)["broker"]

    async def replicas(self) -> int | None:
        sts = await self.client.get("StatefulSet", self.namespace, self.statefulset)
        return None if sts is None else int(sts.get("spec", {}).get("replicas", 1))

    async def pods(self) -> list[dict[str, Any]]:
        return await self.client.list("Pod", self.namespace, selector(self.cluster, "broker"))

    async def brokers(self) -> list[BrokerState]:
        return broker_states(await self.replicas() or 0, await self.pods(), self.statefulset)

    async def restart_broker(self, broker_id: int) -> None:
        await self.client.delete("Pod", self.namespace, f"{self.statefulset}-{broker_id}")

    async def set_broker_count(self, count: int) -> None:
        await self.client.patch("StatefulSet", self.namespace, self.statefulset, {"spec": {"replicas": count}})

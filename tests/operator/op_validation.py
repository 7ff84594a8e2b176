"""Offline validation of manifests: built-in kinds against Kubernetes' schemas (strict), custom
resources against the CRD's own openAPIV3Schema."""

import jsonschema
import kubernetes_validate

from odradek.operator import crd

K8S_VERSION = "1.30"


def validate(obj: dict) -> None:
    if obj["apiVersion"].startswith("odradek.io/"):
        build = {"Topic": crd.topic_crd, "KafkaUser": crd.user_crd}.get(obj["kind"], crd.crd)
        schema = build()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        jsonschema.validate(obj, schema)
        return
    kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


ALLOWED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
                   "projected", "secret"}


def restricted_violations(pod_spec: dict) -> list[str]:
    """What keeps a pod from Pod Security "restricted" (the Kubernetes Pod Security Standards)."""
    out = []
    pod_sc = pod_spec.get("securityContext") or {}
    for host in ("hostNetwork", "hostPID", "hostIPC"):
        if pod_spec.get(host):
            out.append(host)
    for volume in pod_spec.get("volumes") or []:
        kinds = set(volume) - {"name"}
        if not kinds <= ALLOWED_VOLUMES:
            out.append(f"volume {volume['name']}: {sorted(kinds - ALLOWED_VOLUMES)}")
    for c in [*(pod_spec.get("initContainers") or []), *pod_spec["containers"]]:
        sc = c.get("securityContext") or {}
        name = c["name"]
        if sc.get("privileged"):
            out.append(f"{name}: privileged")
        if sc.get("allowPrivilegeEscalation") is not False:
            out.append(f"{name}: allowPrivilegeEscalation not false")
        caps = sc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            out.append(f"{name}: capabilities not dropped (ALL)")
        if set(caps.get("add") or []) - {"NET_BIND_SERVICE"}:
            out.append(f"{name}: capabilities added")
        if not sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")):
            out.append(f"{name}: runAsNonRoot not true")
        if sc.get("runAsUser", pod_sc.get("runAsUser")) == 0:
            out.append(f"{name}: runs as root")
        seccomp = (sc.get("seccompProfile") or pod_sc.get("seccompProfile") or {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            out.append(f"{name}: seccompProfile {seccomp}")
        if any(p.get("hostPort") for p in c.get("ports") or []):
            out.append(f"{name}: hostPort")
    return out

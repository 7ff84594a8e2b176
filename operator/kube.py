"""A thin asyncio client for the few Kubernetes REST calls the operator makes.

kopf watches the KafkaCluster resources; the objects the operator owns (StatefulSets, Services,
pods, ...) are read and written through this client with the same credentials kopf logs in with
(a `kopf.ConnectionInfo`), so one login serves both.
"""

import asyncio
import base64
import json
import os
import ssl
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp

MERGE_PATCH = "application/merge-patch+json"

# kind → (API path prefix, plural); only the kinds the builders render, plus pods.
KINDS = {
    "ConfigMap": ("api/v1", "configmaps"),
    "Service": ("api/v1", "services"),
    "Pod": ("api/v1", "pods"),
    "StatefulSet": ("apis/apps/v1", "statefulsets"),
    "Deployment": ("apis/apps/v1", "deployments"),
    "PodDisruptionBudget": ("apis/policy/v1", "poddisruptionbudgets"),
    "PersistentVolumeClaim": ("api/v1", "persistentvolumeclaims"),
    "StorageClass": ("apis/storage.k8s.io/v1", "storageclasses"),  # cluster-scoped
    "Node": ("api/v1", "nodes"),  # cluster-scoped
    "CustomResourceDefinition": ("apis/apiextensions.k8s.io/v1", "customresourcedefinitions"),  # cluster-scoped
    "KafkaCluster": ("apis/odradek.io/v1alpha1", "kafkaclusters"),
    "Topic": ("apis/odradek.io/v1alpha1", "topics"),
}


class ApiError(Exception):
    def __init__(self, status: int, reason: str, message: str = ""):
        super().__init__(f"{status} {reason}: {message}")
        self.status, self.reason, self.message = status, reason, message


def object_path(kind: str, namespace: str | None, name: str | None = None, subresource: str | None = None) -> str:
    """The object's URL path; namespace None: the kind in every namespace (for lists)."""
    prefix, plural = KINDS[kind]
    path = f"/{prefix}/{plural}" if namespace is None else f"/{prefix}/namespaces/{namespace}/{plural}"
    if name is not None:
        path += f"/{name}"
    if subresource is not None:
        path += f"/{subresource}"
    return path


def authorization(info) -> dict[str, str]:
    """The Authorization header a kopf ConnectionInfo carries (none for a client certificate)."""
    if info.token:
        return {"Authorization": f"{info.scheme or 'Bearer'} {info.token}"}
    if info.username and info.password:
        basic = base64.b64encode(f"{info.username}:{info.password}".encode()).decode()
        return {"Authorization": f"Basic {basic}"}
    return {}


@dataclass
class KubeClient:
    """Holds one aiohttp session; `from_connection(info)` takes kopf's ConnectionInfo.

    `relogin` (kopf's login, again) is asked for fresh credentials when the server answers 401:
    a service account's bound token expires and the kubelet rotates the file it is read from."""
    server: str
    session: aiohttp.ClientSession
    relogin: Callable[[], Any] | None = None

    @classmethod
    def from_connection(cls, info, relogin: Callable[[], Any] | None = None) -> "KubeClient":
        headers = authorization(info)
        if info.insecure:
            ssl_context: ssl.SSLContext | bool = False
        else:
            ssl_context = ssl.create_default_context(
                cafile=info.ca_path or None,
                cadata=info.ca_data.decode() if isinstance(info.ca_data, bytes) else info.ca_data)
            _load_client_certificate(ssl_context, info)
        session = aiohttp.ClientSession(
            headers=headers, connector=aiohttp.TCPConnector(ssl=ssl_context),
            timeout=aiohttp.ClientTimeout(total=30))
        return cls(info.server.rstrip("/"), session, relogin)

    async def close(self) -> None:
        await self.session.close()


    async def _call(self, method: str, path: str, body=None, params=None, content_type=None) -> dict:
        headers = {"Content-Type": content_type or "application/json"}
        data = None if body is None else json.dumps(body)
        for attempt in range(2):
            async with self.session.request(method, self.server + path, data=data, params=params,
                                            headers=headers) as response:
                text = await response.text()
                status, reason = response.status, response.reason
            if status == 401 and attempt == 0 and self.relogin is not None:
                info = await asyncio.to_thread(self.relogin)
                fresh = authorization(info) if info is not None else {}
                if fresh and fresh != {k: v for k, v in self.session.headers.items() if k == "Authorization"}:
                    self.session.headers.update(fresh)
                    continue  # once, with the new credentials
            break
        if status >= 400:
            try:
                answer = json.loads(text)
            except ValueError:
                answer = {}
            if not isinstance(answer, dict):
                answer = {}
            raise ApiError(status, answer.get("reason", reason or ""), answer.get("message", text[:200]))
        return json.loads(text) if text else {}

    async def get(self, kind: str, namespace: str | None, name: str) -> dict | None:
        """The object (namespace None: a cluster-scoped kind), or None when it does not exist."""
        try:
            return await self._call("GET", object_path(kind, namespace, name))
        except ApiError as e:
            if e.status == 404:
                return None
            raise

    async def list(self, kind: str, namespace: str | None, labels: dict[str, str]) -> list[dict]:
        selector = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
        found = await self._call("GET", object_path(kind, namespace), params={"labelSelector": selector})
        # Filter here too: a server (or emulator) that ignores the selector must not widen the set.
        return [item for item in found.get("items", [])
                if all(item.get("metadata", {}).get("labels", {}).get(k) == v for k, v in labels.items())]

    async def create(self, obj: dict) -> dict:
        meta = obj["metadata"]
        return await self._call("POST", object_path(obj["kind"], meta.get("namespace")), obj)

    async def patch(self, kind: str, namespace: str | None, name: str, patch: dict,
                    subresource: str | None = None) -> dict:
        return await self._call("PATCH", object_path(kind, namespace, name, subresource), patch,
                                content_type=MERGE_PATCH)

    async def delete(self, kind: str, namespace: str, name: str) -> bool:
        """True when this call deleted it, False when it was already gone."""
        try:
            await self._call("DELETE", object_path(kind, namespace, name))
            return True
        except ApiError as e:
            if e.status == 404:
                return False
            raise


def _load_client_certificate(context: ssl.SSLContext, info) -> None:
    """Client-certificate login (a kubeconfig's client-certificate[-data], as kind's admin user
    has). ssl only loads certificates from files, so inline data goes through a private temp file
    that is removed at once."""
    cert_path, key_path = info.certificate_path, info.private_key_path
    if not (cert_path or info.certificate_data):
        return
    made = []
    try:
        if not cert_path:
            cert_path = _private_file(info.certificate_data, made)
        if not key_path and info.private_key_data:
            key_path = _private_file(info.private_key_data, made)
        context.load_cert_chain(cert_path, key_path or None)
    finally:
        for path in made:
            os.unlink(path)


def _private_file(data: bytes | str, made: list[str]) -> str:
    fd, path = tempfile.mkstemp(prefix="odradek-kube-")
    made.append(path)
    with os.fdopen(fd, "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)
    return path

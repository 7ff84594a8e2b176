"""The operator's Kubernetes API client: kubernetes_asyncio's typed APIs, logged in with kopf's
credentials, answering plain dicts.

kopf watches the KafkaCluster resources; the objects the operator owns (StatefulSets, Services,
pods, ...) are read and written through this client with the same credentials kopf logs in with
(a `kopf.ConnectionInfo`), so one login serves both. Answers are read as the JSON the server sent
(`_preload_content=False`), not as the package's model classes: those drop fields newer than the
package, and the operator compares and re-sends whole objects.
"""

from __future__ import annotations

import asyncio
import base64
import builtins
import json
import os
import tempfile
from collections.abc import Callable
from typing import Any

import kopf
from kubernetes_asyncio import client as k8s

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
USER_AGENT = "odradek-operator"
"""The API server names the field manager of a write without one after the agent's first word."""
REQUEST_TIMEOUT = 30

# kind → (typed API, the kind's snake_case name in its method names, namespaced); only the kinds
# the builders render, plus what the reconcilers read.
BUILTIN: dict[str, tuple[type, str, bool]] = {
    "ConfigMap": (k8s.CoreV1Api, "config_map", True),
    "Secret": (k8s.CoreV1Api, "secret", True),
    "NetworkPolicy": (k8s.NetworkingV1Api, "network_policy", True),
    "Service": (k8s.CoreV1Api, "service", True),
    "Pod": (k8s.CoreV1Api, "pod", True),
    "PersistentVolumeClaim": (k8s.CoreV1Api, "persistent_volume_claim", True),
    "Node": (k8s.CoreV1Api, "node", False),
    "StatefulSet": (k8s.AppsV1Api, "stateful_set", True),
    "Deployment": (k8s.AppsV1Api, "deployment", True),
    "PodDisruptionBudget": (k8s.PolicyV1Api, "pod_disruption_budget", True),
    "StorageClass": (k8s.StorageV1Api, "storage_class", False),
    "CustomResourceDefinition": (k8s.ApiextensionsV1Api, "custom_resource_definition", False),
}
# kind → (group, version, plural): the odradek.io kinds, through CustomObjectsApi.
CUSTOM = {
    "KafkaCluster": ("odradek.io", "v1alpha1", "kafkaclusters"),
    "Topic": ("odradek.io", "v1alpha1", "topics"),
    "KafkaUser": ("odradek.io", "v1alpha1", "kafkausers"),
}


class ApiError(Exception):
    def __init__(self, status: int, reason: str, message: str = ""):
        super().__init__(f"{status} {reason}: {message}")
        self.status, self.reason, self.message = status, reason, message


def authorization(info: kopf.ConnectionInfo) -> str | None:
    """The Authorization header a kopf ConnectionInfo carries (none for a client certificate)."""
    if info.token:
        return f"{info.scheme or 'Bearer'} {info.token}"
    if info.username and info.password:
        return "Basic " + base64.b64encode(f"{info.username}:{info.password}".encode()).decode()
    return None


def configuration(info: kopf.ConnectionInfo, files: list[str]) -> k8s.Configuration:
    """kubernetes_asyncio's Configuration for kopf's ConnectionInfo. The package loads
    certificates from files only: inline data goes to private temp files (listed in `files`,
    removed by the caller once the client has loaded them)."""
    c = k8s.Configuration(host=info.server.rstrip("/"))
    header = authorization(info)
    if header is not None:
        c.api_key = {"BearerToken": header}  # the whole header value: no prefix added
    if info.insecure:
        c.verify_ssl = False
    else:
        c.ssl_ca_cert = _file(info.ca_path, info.ca_data, files)
    cert_file = _file(info.certificate_path, info.certificate_data, files)
    if cert_file is not None:
        c.cert_file = cert_file
        c.key_file = _file(info.private_key_path, info.private_key_data, files)
    return c


def _file(path: str | bytes | os.PathLike[str] | os.PathLike[bytes] | None, data: bytes | str | None,
          made: list[str]) -> str | None:
    """The path of a certificate or key kopf gives as a path or as inline data (None: neither)."""
    if path:
        return os.fsdecode(path)
    return _private_file(data, made) if data else None


def _private_file(data: bytes | str, made: list[str]) -> str:
    fd, path = tempfile.mkstemp(prefix="odradek-kube-")
    made.append(path)
    with os.fdopen(fd, "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)
    return path


class KubeClient:
    """One kubernetes_asyncio ApiClient; `from_connection(info)` takes kopf's ConnectionInfo.

    `relogin` (kopf's login, again) is asked for fresh credentials when the server answers 401:
    a service account's bound token expires and the kubelet rotates the file it is read from."""

    def __init__(self, api: k8s.ApiClient, relogin: Callable[[], Any] | None = None):
        self.api = api
        self.relogin = relogin

    @classmethod
    def from_connection(cls, info: kopf.ConnectionInfo, relogin: Callable[[], Any] | None = None) -> KubeClient:
        files: list[str] = []
        try:
            api = k8s.ApiClient(configuration(info, files))  # loads the certificates now
        finally:
            for path in files:
                os.unlink(path)
        api.user_agent = USER_AGENT
        return cls(api, relogin)

    async def close(self) -> None:
        await self.api.close()

    # --- the calls ---------------------------------------------------------------------------------

    def _method(self, kind: str, verb: str, namespace: str | None, name: str | None,
                subresource: str | None) -> tuple[Callable[..., Any], tuple[Any, ...]]:
        """The typed API method for `verb` ("read", "list", "create", "patch", "delete") on `kind`,
        with its leading positional arguments (the body, when there is one, comes last)."""
        sub = f"_{subresource}" if subresource else ""
        named = (name,) if verb in ("read", "patch", "delete") else ()
        if kind in CUSTOM:
            group, version, plural = CUSTOM[kind]
            api = k8s.CustomObjectsApi(self.api)
            word = "get" if verb == "read" else verb
            if namespace is None:  # every namespace: lists only
                return api.list_custom_object_for_all_namespaces, (group, version, plural)
            return getattr(api, f"{word}_namespaced_custom_object{sub}"), (group, version, namespace, plural, *named)
        api_class, snake, namespaced = BUILTIN[kind]
        api = api_class(self.api)
        if not namespaced:
            return getattr(api, f"{verb}_{snake}{sub}"), named
        if namespace is None:  # every namespace: lists only
            return getattr(api, f"{verb}_{snake}_for_all_namespaces"), ()
        return getattr(api, f"{verb}_namespaced_{snake}{sub}"), (*named, namespace)

    async def _call(self, kind: str, verb: str, namespace: str | None, name: str | None = None,
                    body: dict[str, Any] | list[Any] | None = None, subresource: str | None = None,
                    **kwargs: Any) -> dict[str, Any]:
        method, args = self._method(kind, verb, namespace, name, subresource)
        if body is not None:
            args = (*args, body)
        for attempt in range(2):
            response = await method(*args, _preload_content=False, _request_timeout=REQUEST_TIMEOUT, **kwargs)
            try:
                text = (await response.read()).decode()
                status, reason = response.status, response.reason
            finally:
                response.release()
            if status == 401 and attempt == 0 and await self._fresh_credentials():
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

    async def _fresh_credentials(self) -> bool:
        """Log in again; True when that gave other credentials than the ones refused."""
        if self.relogin is None:
            return False
        info = await asyncio.to_thread(self.relogin)
        header = authorization(info) if info is not None else None
        if header is None or header == self.api.configuration.api_key.get("BearerToken"):
            return False
        self.api.configuration.api_key = {"BearerToken": header}
        return True

    async def get(self, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        """The object (namespace None: a cluster-scoped kind), or None when it does not exist."""
        try:
            return await self._call(kind, "read", namespace, name)
        except ApiError as e:
            if e.status == 404:
                return None
            raise

    async def list(self, kind: str, namespace: str | None, labels: dict[str, str]) -> list[dict[str, Any]]:
        selector = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
        found = await self._call(kind, "list", namespace, label_selector=selector)
        # Filter here too: a server (or emulator) that ignores the selector must not widen the set.
        return [item for item in found.get("items", [])
                if all(item.get("metadata", {}).get("labels", {}).get(k) == v for k, v in labels.items())]

    async def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        return await self._call(obj["kind"], "create", obj["metadata"].get("namespace"), body=obj)

    async def patch(self, kind: str, namespace: str | None, name: str, patch: dict[str, Any] | builtins.list[Any],
                    subresource: str | None = None, field_manager: str | None = None) -> dict[str, Any]:
        """A merge patch (a list: a JSON patch) of the object or its `subresource` ("status")."""
        extra = {} if field_manager is None else {"field_manager": field_manager}
        return await self._call(kind, "patch", namespace, name, patch, subresource,
                                _content_type=JSON_PATCH if isinstance(patch, list) else MERGE_PATCH, **extra)

    async def apply(self, obj: dict[str, Any], field_manager: str, force: bool = True) -> dict[str, Any]:
        """Server-side apply: `obj` is everything `field_manager` wants set; what it set before
        and no longer sends is removed by the server. `force` takes over fields another manager
        set to other values (the operator's rendering wins, as an operator's must)."""
        meta = obj["metadata"]
        return await self._call(obj["kind"], "patch", meta.get("namespace"), meta["name"], obj,
                                _content_type=APPLY_PATCH, field_manager=field_manager, force=force)

    async def delete(self, kind: str, namespace: str, name: str) -> bool:
        """True when this call deleted it, False when it was already gone."""
        try:
            await self._call(kind, "delete", namespace, name)
            return True
        except ApiError as e:
            if e.status == 404:
                return False
            raise


"""kmock's Kubernetes emulator plus the server-side metadata kopf and the operator rely on.

kmock stores bodies as posted; a real API server also assigns uid, resourceVersion (and answers
409 to a write carrying a stale one), namespace from the URL, generation (bumped on spec
changes), names from generateName, keeps status behind the /status subresource, skips no-op
writes, and garbage-collects objects whose owner is gone. This layer does exactly that, no more.
"""

import copy
import datetime
import itertools
import uuid

import attrs
import jsonpatch
import kmock
from kmock._internal import apps, enums, k8s, parsing

_parse_path = parsing.parse_path


def _parse_path_with_namespaces(path: str) -> parsing.ParsedPath:
    """kmock reads `/api/v1/namespaces[/name]` as a namespace prefix with nothing after it (and
    fails); kopf lists namespaces, so read it as the cluster-scoped resource it is."""
    parts = path.strip("/").split("/")
    if parts[:3] == ["api", "v1", "namespaces"] and len(parts) <= 4:
        return parsing.ParsedPath("", "v1", "namespaces", None, parts[3] if len(parts) == 4 else None)
    return _parse_path(path)


parsing.parse_path = _parse_path_with_namespaces


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _error(status: int, reason: str, message: str) -> k8s.KubernetesError:
    return k8s.KubernetesError(status=status, reason=reason, message=message, details={})


def _merge(target, patch):
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = _merge(result.get(key), value)
    return result


@attrs.define(kw_only=True)
class KubernetesServer(kmock.KubernetesEmulator):
    _versions: itertools.count = attrs.field(factory=lambda: itertools.count(1), init=False)

    def live(self, resource: str, namespace: str, name: str) -> dict | None:
        key = (kmock.resource(resource), namespace, name)
        if key not in self.objects or self.objects[key].deleted:
            return None
        return self.objects[key].raw

    def put_raw(self, resource: str, namespace: str, obj: dict) -> None:
        """Store an object as a controller would (test-side kubelet/StatefulSet); no watch event."""
        key = (kmock.resource(resource), namespace, obj["metadata"]["name"])
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        meta.setdefault("uid", str(uuid.uuid4()))
        meta["namespace"] = namespace
        meta["resourceVersion"] = str(next(self._versions))
        if key in self.objects:
            self.objects[key].create(obj)
        else:
            self.objects[key] = obj

    async def _handle(self, request):
        if request.resource is None or request.action not in (
                enums.action.CREATE, enums.action.UPDATE, enums.action.DELETE):
            return await super()._handle(request)
        async with self._lock:
            if request.action == enums.action.CREATE:
                await self._create(request)
            elif request.action == enums.action.UPDATE:
                await self._update(request)
            else:
                await self._delete(request)
        # Skip KubernetesEmulator's own state changes: answer from the stored state.
        return await apps.RawHandler._handle(self, request)

    def _key(self, request, name=None):
        return (request.resource, request.namespace, name or request.name)

    async def _emit(self, resource, type_: str, raw: dict) -> None:
        await self._buses[resource].put({"type": type_, "object": copy.deepcopy(raw)})

    async def _create(self, request) -> None:
        obj = copy.deepcopy(request.data)
        meta = obj.setdefault("metadata", {})
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
        if request.namespace:
            meta["namespace"] = request.namespace
        key = self._key(request, meta.get("name"))
        if key in self.objects and not self.objects[key].deleted:
            raise _error(409, "AlreadyExists", f"{meta.get('name')} already exists")
        meta.update(uid=str(uuid.uuid4()), resourceVersion=str(next(self._versions)), generation=1,
                    creationTimestamp=_now())
        obj.pop("status", None)
        if key in self.objects:
            self.objects[key].create(obj)
        else:
            self.objects[key] = obj
        request.data.setdefault("metadata", {})["name"] = meta["name"]  # so the answer finds it
        await self._emit(request.resource, "ADDED", obj)

    async def _update(self, request) -> None:
        key = self._key(request)
        if key not in self.objects or self.objects[key].deleted:
            raise _error(404, "NotFound", f"{request.name} not found")
        current = copy.deepcopy(self.objects[key].raw)
        patch = request.data
        try:
            patched = jsonpatch.apply_patch(current, patch) if isinstance(patch, list) else _merge(current, patch)
        except jsonpatch.JsonPatchTestFailed as e:
            raise _error(422, "Invalid", f"JSON patch test failed: {e}") from e
        sent_version = patch.get("metadata", {}).get("resourceVersion") if isinstance(patch, dict) else None
        if sent_version is not None and sent_version != current["metadata"]["resourceVersion"]:
            raise _error(409, "Conflict", "the object has been modified; apply your changes to the latest version")
        if request.subresource == "status":
            new = {**current, "status": patched.get("status", {})}
        else:
            new = {k: v for k, v in patched.items() if k != "status"}
            if "status" in current:
                new["status"] = current["status"]
            for fixed in ("uid", "namespace", "name", "creationTimestamp", "generation", "resourceVersion"):
                if fixed in current["metadata"]:
                    new["metadata"][fixed] = current["metadata"][fixed]
            if new.get("spec") != current.get("spec"):
                new["metadata"]["generation"] = current["metadata"].get("generation", 1) + 1
        if new == current:
            return  # a no-op write changes nothing, not even the resourceVersion
        new["metadata"]["resourceVersion"] = str(next(self._versions))
        self.objects[key].create(new)
        if new["metadata"].get("deletionTimestamp") and not new["metadata"].get("finalizers"):
            await self._remove(key)
        else:
            await self._emit(request.resource, "MODIFIED", new)

    async def _delete(self, request) -> None:
        key = self._key(request)
        if key not in self.objects or self.objects[key].deleted:
            raise _error(404, "NotFound", f"{request.name} not found")
        obj = copy.deepcopy(self.objects[key].raw)
        meta = obj["metadata"]
        if meta.get("finalizers"):
            if not meta.get("deletionTimestamp"):
                meta.update(deletionTimestamp=_now(), resourceVersion=str(next(self._versions)))
                self.objects[key].create(obj)
                await self._emit(request.resource, "MODIFIED", obj)
            return
        await self._remove(key)

    async def _remove(self, key) -> None:
        """Delete, then garbage-collect dependents (foreground enough for tests)."""
        raw = self.objects[key].raw
        self.objects[key].delete()
        await self._emit(key[0], "DELETED", raw)
        uid = raw["metadata"].get("uid")
        for other_key, obj in list(self.objects.items()):
            if obj.deleted:
                continue
            owners = obj.raw.get("metadata", {}).get("ownerReferences") or []
            if any(o.get("uid") == uid for o in owners):
                await self._remove(other_key)

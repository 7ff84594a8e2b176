"""kmock's Kubernetes emulator plus the server-side metadata kopf and the operator rely on.

kmock stores bodies as posted; a real API server also assigns uid, resourceVersion (and answers
409 to a write carrying a stale one), namespace from the URL, generation (bumped on spec
changes), names from generateName, keeps status behind the /status subresource, skips no-op
writes, and garbage-collects objects whose owner is gone. This layer does exactly that, no more.

kmock finds the answer to a request by matching it against its whole request log (O(requests)
per request: 10,000 objects took minutes); requests for the emulated resources go straight to
the emulator's own handlers instead, so the benchmark's thousands of objects are served as fast
as the few of a test.
"""

import copy
import datetime
import itertools
import uuid

import attrs
import jsonpatch
import kmock
from kmock._internal import dsl, enums, k8s, parsing

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
    _direct: dict = attrs.field(factory=dict, init=False)
    # Plurals whose writes a test wants refused (403), as an API server missing an RBAC rule does.
    forbidden_writes: set = attrs.field(factory=set, init=False)

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        # Reactions kmock does not register: answering through them skips the log matching.
        self._direct = {action: dsl.Reaction(self) << serve for action, serve in (
            (enums.action.LIST, self._serve_list), (enums.action.WATCH, self._serve_watch),
            (enums.action.FETCH, self._serve_object), (enums.action.CREATE, self._serve_object),
            (enums.action.UPDATE, self._serve_object), (enums.action.DELETE, self._serve_object))}

    async def _serve_object(self, request):
        """One object by its key (kmock's own answers scan every stored object): the stored state,
        or for a write that just removed it, its last state."""
        name = request.name or ((request.data or {}).get("metadata") or {}).get("name")
        key = (request.resource, request.namespace, name)
        if key not in self.objects or (request.action == enums.action.FETCH and self.objects[key].deleted):
            raise _error(404, "NotFound", f"{name} not found")
        obj = self.objects[key]
        return obj.raw if request.action in (enums.action.FETCH, enums.action.CREATE) else obj.last.raw

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
        # Discovery (/apis/<group>/<version>) also parses as a LIST, of a resource without a plural.
        direct = self._direct.get(request.action) if request.resource is not None and request.resource.plural else None
        if direct is None:
            return await super()._handle(request)
        if request.action in (enums.action.CREATE, enums.action.UPDATE, enums.action.DELETE):
            if request.resource.plural in self.forbidden_writes:
                raise _error(403, "Forbidden", f"{request.resource.plural} is forbidden")
            async with self._lock:
                if request.action == enums.action.CREATE:
                    await self._create(request)
                elif request.action == enums.action.UPDATE:
                    await self._update(request)
                else:
                    await self._delete(request)
        # Skip KubernetesEmulator's own state changes: answer from the stored state.
        return await direct(request)

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

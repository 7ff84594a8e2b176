"""kmock's Kubernetes emulator plus the server-side metadata kopf and the operator rely on.

kmock stores bodies as posted; a real API server also assigns uid, resourceVersion (and answers
409 to a write carrying a stale one), namespace from the URL, generation (bumped on spec
changes), names from generateName, keeps status behind the /status subresource, skips no-op
writes, and garbage-collects objects whose owner is gone. This layer does exactly that, no more.

Server-side apply, as the operator uses it: an apply patch (application/apply-patch+yaml, a
fieldManager required) creates a missing object or merges the applied configuration in; the
fields a manager applied before and applies no longer are removed unless another manager owns
them; a field another manager owns with another value is a 409 conflict unless force=true, which
takes it over. Ownership is kept in metadata.managedFields as FieldsV1 (creates and merge patches
record "Update" entries, named after fieldManager or the user agent's first word, as the API
server does). One simplification: every list is atomic (owned and replaced whole), where the
API server merges lists with merge keys (containers by name) item by item; the operator renders
whole lists, so the two agree for it.

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


APPLY_PATCH = "application/apply-patch+yaml"
SYSTEM_METADATA = ("name", "namespace", "uid", "resourceVersion", "generation", "creationTimestamp",
                   "managedFields", "deletionTimestamp", "generateName")


def _field_paths(obj: dict) -> set[tuple]:
    """The leaf fields of a configuration: mappings recurse, anything else (lists too) is one."""
    return _merge_patch_paths(obj)[0]


def _fields_v1(paths: set[tuple]) -> dict:
    out: dict = {}
    for path in sorted(paths):
        node = out
        for key in path:
            node = node.setdefault(f"f:{key}", {})
    return out


def _paths_of(fields: dict, prefix: tuple = ()) -> set[tuple]:
    out = set()
    for key, sub in (fields or {}).items():
        if not key.startswith("f:"):
            continue
        path = (*prefix, key[2:])
        out |= _paths_of(sub, path) if sub else {path}
    return out


_MISSING = object()


def _value(obj, path: tuple):
    for key in path:
        if not isinstance(obj, dict) or key not in obj:
            return _MISSING
        obj = obj[key]
    return obj


def _remove(obj: dict, path: tuple) -> None:
    """Remove the field, and mappings it leaves empty below the top level."""
    parents = []
    node = obj
    for key in path[:-1]:
        if not isinstance(node.get(key), dict):
            return
        parents.append((node, key))
        node = node[key]
    node.pop(path[-1], None)
    for parent, key in reversed(parents[1:]):
        if parent[key]:
            break
        del parent[key]


def _related(a: tuple, b: tuple) -> bool:
    """One field is the other or inside it."""
    n = min(len(a), len(b))
    return a[:n] == b[:n]


def _manager(request) -> str:
    return request.params.get("fieldManager") or (request.headers.get("User-Agent") or "unknown").split("/")[0]


def _entry(manager: str, operation: str, api_version: str, paths: set[tuple], subresource: str | None = None) -> dict:
    entry = {"manager": manager, "operation": operation, "apiVersion": api_version, "time": _now(),
             "fieldsType": "FieldsV1", "fieldsV1": _fields_v1(paths)}
    if subresource:
        entry["subresource"] = subresource
    return entry


def _record_update(obj: dict, manager: str, set_paths: set[tuple], cleared: set[tuple]) -> None:
    """Ownership after a non-apply write: `manager`'s Update entry gains the fields it set;
    fields it removed leave every entry."""
    entries = []
    mine = set(set_paths)
    for e in obj["metadata"].get("managedFields") or []:
        paths = {p for p in _paths_of(e.get("fieldsV1")) if not any(_related(p, c) for c in cleared)}
        if e.get("manager") == manager and e.get("operation") == "Update" and not e.get("subresource"):
            mine |= paths
            continue
        if paths:
            entries.append({**e, "fieldsV1": _fields_v1(paths)})
    if mine:
        entries.append(_entry(manager, "Update", obj.get("apiVersion", ""), mine))
    obj["metadata"]["managedFields"] = entries


def _merge_patch_paths(patch: dict, prefix: tuple = ()) -> tuple[set[tuple], set[tuple]]:
    """(fields a merge patch sets, fields it removes)."""
    set_paths, cleared = set(), set()
    for key, value in patch.items():
        if not prefix and key in ("apiVersion", "kind", "status"):
            continue
        if prefix == ("metadata",) and key in SYSTEM_METADATA:
            continue
        path = (*prefix, key)
        if value is None:
            cleared.add(path)
        elif isinstance(value, dict) and value:
            s, c = _merge_patch_paths(value, path)
            set_paths |= s
            cleared |= c
        else:
            set_paths.add(path)
    return set_paths, cleared


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
    # Plurals whose writes fail with 503, as an API server under load or restarting answers.
    unavailable_writes: set = attrs.field(factory=set, init=False)
    # (request id, "create" | "update" | "delete", plural, name) of every request that changed
    # its object: an apply that changes nothing is a request, not a write.
    changes: list = attrs.field(factory=list, init=False)
    # Called with every request once it is handled, and after every put_raw with None: what the
    # tests' waits and the harness's kubelet wake on instead of polling.
    listeners: list = attrs.field(factory=list, init=False)

    def _tell(self, request) -> None:
        for listener in list(self.listeners):
            listener(request)

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
        self._tell(None)

    async def _handle(self, request):
        try:
            return await self._answer(request)
        finally:
            self._tell(request)

    async def _answer(self, request):
        # Discovery (/apis/<group>/<version>) also parses as a LIST, of a resource without a plural.
        direct = self._direct.get(request.action) if request.resource is not None and request.resource.plural else None
        if direct is None:
            return await super()._handle(request)
        if request.action in (enums.action.CREATE, enums.action.UPDATE, enums.action.DELETE):
            if request.resource.plural in self.forbidden_writes:
                raise _error(403, "Forbidden", f"{request.resource.plural} is forbidden")
            if request.resource.plural in self.unavailable_writes:
                raise _error(503, "ServiceUnavailable", "the server is currently unable to handle the request")
            async with self._lock:
                name = request.name or ((request.data or {}).get("metadata") or {}).get("name")
                before = self._version_of(self._key(request, name))
                if request.action == enums.action.CREATE:
                    await self._create(request)
                elif request.action == enums.action.UPDATE:
                    await self._update(request)
                else:
                    await self._delete(request)
                name = name or ((request.data or {}).get("metadata") or {}).get("name")  # generateName
                after = self._version_of(self._key(request, name))
                if before != after:
                    change = "create" if before is None else "delete" if after is None else "update"
                    self.changes.append((request.id, change, request.resource.plural, name))
        # Skip KubernetesEmulator's own state changes: answer from the stored state.
        return await direct(request)

    def _version_of(self, key) -> str | None:
        if key not in self.objects or self.objects[key].deleted:
            return None
        return self.objects[key].raw["metadata"].get("resourceVersion")

    def _key(self, request, name=None):
        return (request.resource, request.namespace, name or request.name)

    async def _emit(self, resource, type_: str, raw: dict) -> None:
        await self._buses[resource].put({"type": type_, "object": copy.deepcopy(raw)})

    async def _create(self, request, body: dict | None = None, operation: str = "Update") -> None:
        obj = copy.deepcopy(request.data if body is None else body)
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
        meta["managedFields"] = [_entry(_manager(request), operation, obj.get("apiVersion", ""), _field_paths(obj))]
        if key in self.objects:
            self.objects[key].create(obj)
        else:
            self.objects[key] = obj
        request.data.setdefault("metadata", {})["name"] = meta["name"]  # so the answer finds it
        await self._emit(request.resource, "ADDED", obj)

    async def _update(self, request) -> None:
        key = self._key(request)
        if (request.headers.get("Content-Type") or "").startswith(APPLY_PATCH):
            await self._apply(request, key)
            return
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
            return  # a no-op write changes nothing, not even the resourceVersion or ownership
        if isinstance(patch, dict) and request.subresource is None:
            _record_update(new, _manager(request), *_merge_patch_paths(patch))
        await self._store(request, key, new)

    async def _apply(self, request, key) -> None:
        """Server-side apply (see the module docstring)."""
        manager = request.params.get("fieldManager")
        config = request.data
        if not manager:
            raise _error(400, "BadRequest", "fieldManager is required for apply requests")
        if not isinstance(config, dict) or not config.get("apiVersion") or not config.get("kind"):
            raise _error(400, "BadRequest", "an applied configuration names its apiVersion and kind")
        if (config.get("metadata") or {}).get("name") != request.name:
            raise _error(400, "BadRequest", "the applied configuration's name is not the request's")
        force = request.params.get("force") in ("true", "True", "1")
        applied = _field_paths(config)
        if key not in self.objects or self.objects[key].deleted:
            await self._create(request, {k: v for k, v in config.items() if k != "status"}, operation="Apply")
            return
        current = copy.deepcopy(self.objects[key].raw)
        others, before = [], set()
        conflicts = []
        for e in current["metadata"].get("managedFields") or []:
            paths = _paths_of(e.get("fieldsV1"))
            if e.get("manager") == manager and e.get("operation") == "Apply":
                before = paths
                continue
            clash = {p for p in paths if any(_related(p, q) for q in applied)
                     and _value(current, p) != _value(config, p)}
            conflicts += [(e.get("manager"), p) for p in sorted(clash)]
            others.append((e, paths - clash))
        if conflicts and not force:
            listed = "; ".join(f'conflict with "{m}": .{".".join(p)}' for m, p in conflicts)
            raise _error(409, "Conflict", f"Apply failed with {len(conflicts)} conflicts: {listed}")
        still_owned = set().union(*(paths for _, paths in others)) if others else set()
        new = copy.deepcopy(current)
        for path in sorted(before - applied, key=len, reverse=True):
            if not any(_related(path, q) for q in applied | still_owned):
                _remove(new, path)
        new = _merge(new, {k: v for k, v in config.items() if k != "status"})
        for fixed in ("uid", "namespace", "name", "creationTimestamp", "generation", "resourceVersion"):
            if fixed in current["metadata"]:
                new["metadata"][fixed] = current["metadata"][fixed]
        mine = _entry(manager, "Apply", config["apiVersion"], applied)
        entries, placed = [], False
        remaining = iter(others)
        for e in current["metadata"].get("managedFields") or []:  # in their order: no change is no change
            if e.get("manager") == manager and e.get("operation") == "Apply":
                entries.append(e if before == applied else mine)
                placed = True
                continue
            other, paths = next(remaining)
            if paths:
                entries.append(other if paths == _paths_of(other.get("fieldsV1")) else {**other, "fieldsV1": _fields_v1(paths)})
        if not placed:
            entries.append(mine)
        new["metadata"]["managedFields"] = entries
        if new.get("spec") != current.get("spec"):
            new["metadata"]["generation"] = current["metadata"].get("generation", 1) + 1
        if new == current:
            return
        await self._store(request, key, new)

    async def _store(self, request, key, new: dict) -> None:
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

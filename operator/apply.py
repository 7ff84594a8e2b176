"""Apply of desired objects by server-side apply, and removal of what the operator no longer
renders.

Each object is sent whole as an apply patch under the operator's field manager: the API server
sets what differs, leaves server defaults and other controllers' fields alone, and removes a
field the operator applied before but sends no longer. An apply that changes nothing writes
nothing, so a new operator version rendering the same objects restarts nothing.

Objects written by operator versions before server-side apply carry what they rendered in the
LAST_APPLIED annotation, and their fields are owned by those writes ("Update" entries in
managedFields, under the old client's agent name). Left so, a field a later version stops
rendering would stay forever, still owned by the old writes. `apply` migrates such an object
once: a last three-way merge patch removes what is no longer rendered (and the annotation), the
object is applied, and the old writers' ownership entries are dropped (as kubectl's csaupgrade
does), leaving the operator's apply entry the owner.
"""

import json
from typing import Any

from odradek.operator.kube import USER_AGENT, ApiError, KubeClient
from odradek.operator.models import GROUP

FIELD_MANAGER = "odradek-operator"
LAST_APPLIED = f"{GROUP}/last-applied-configuration"
CLIENT_SIDE_MANAGERS = frozenset({"Python", FIELD_MANAGER, USER_AGENT})
"""Who owned the fields the operator wrote before it applied server-side: the API server names
a write without a field manager after its user agent's first word (aiohttp's "Python/3.x ...")."""


def contains(actual: object, desired: object) -> bool:
    """True when every field of `desired` has the same value in `actual` (extra fields allowed
    in mappings; lists must match element by element)."""
    if isinstance(desired, dict):
        return isinstance(actual, dict) and all(
            k in actual and contains(actual[k], v) for k, v in desired.items())
    if isinstance(desired, list):
        return (isinstance(actual, list) and len(actual) == len(desired)
                and all(contains(a, d) for a, d in zip(actual, desired)))
    return bool(actual == desired)


def patch_for(desired: dict[str, Any]) -> dict[str, Any]:
    """Everything the operator renders except the identity fields."""
    patch = {k: v for k, v in desired.items() if k not in ("apiVersion", "kind")}
    patch["metadata"] = {k: v for k, v in desired["metadata"].items() if k not in ("name", "namespace")}
    return patch


def last_applied(live: dict[str, Any]) -> dict[str, Any]:
    """What an operator before server-side apply rendered when it last wrote `live` ({} when
    unknown or unreadable)."""
    text = ((live.get("metadata") or {}).get("annotations") or {}).get(LAST_APPLIED)
    try:
        found = json.loads(text) if text else {}
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


def three_way_patch(last: dict[str, Any], desired: dict[str, Any], live: dict[str, Any]) -> dict[str, Any]:
    """The merge patch that makes `live` hold `desired`: fields that differ, and null for keys in
    `last` that `desired` dropped (mappings recurse; lists, as in any merge patch, are whole
    values). Empty when nothing needs writing."""
    patch: dict[str, Any] = {}
    for key, value in desired.items():
        current = live.get(key)
        if isinstance(value, dict) and isinstance(current, dict):
            before = last.get(key)
            sub = three_way_patch(before if isinstance(before, dict) else {}, value, current)
            if sub:
                patch[key] = sub
        elif key not in live or not contains(current, value):
            patch[key] = value
    for key in last:
        if key not in desired and key in live:
            patch[key] = None
    return patch


def migration_patch(live: dict[str, Any], desired: dict[str, Any]) -> dict[str, Any] | None:
    """The merge patch that ends client-side apply on `live` (None: it never had it): the
    three-way patch, and the LAST_APPLIED annotation removed."""
    annotations = (live.get("metadata") or {}).get("annotations") or {}
    if LAST_APPLIED not in annotations:
        return None
    patch = three_way_patch(last_applied(live), patch_for(desired), live)
    patch.setdefault("metadata", {}).setdefault("annotations", {})[LAST_APPLIED] = None
    return patch


def without_client_side_owners(managed_fields: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """managedFields without the entries of the operator's writes before server-side apply; None
    when there is nothing to drop (or nothing would be left: the server refills an empty list)."""
    kept = [e for e in managed_fields
            if not (e.get("operation") == "Update" and e.get("manager") in CLIENT_SIDE_MANAGERS
                    and not e.get("subresource"))]
    if len(kept) == len(managed_fields) or not kept:
        return None
    return kept


async def apply(client: KubeClient, desired: dict[str, Any]) -> str:
    """Make one object match; returns "created", "migrated", "patched" or "unchanged"."""
    kind, meta = desired["kind"], desired["metadata"]
    live = await client.get(kind, meta.get("namespace"), meta["name"])
    migration = migration_patch(live, desired) if live is not None else None
    if migration is not None:
        await client.patch(kind, meta.get("namespace"), meta["name"], migration, field_manager=FIELD_MANAGER)
    applied = await client.apply(desired, FIELD_MANAGER)
    if migration is not None:
        await _release_client_side_owners(client, kind, applied)
        return "migrated"
    if live is None:
        return "created"
    return "unchanged" if _version(applied) == _version(live) else "patched"


def _version(obj: dict[str, Any]) -> str | None:
    return (obj.get("metadata") or {}).get("resourceVersion")


async def _release_client_side_owners(client: KubeClient, kind: str, applied: dict[str, Any], attempts: int = 3) -> None:
    """Drop the old writers' managedFields entries. The JSON patch is guarded by the
    resourceVersion so that a write in between (another controller's) is never undone; then the
    object is read again and the drop retried, a bounded number of times."""
    obj: dict[str, Any] | None = applied
    for _ in range(attempts):
        if obj is None:
            return
        meta = obj["metadata"]
        kept = without_client_side_owners(meta.get("managedFields") or [])
        if kept is None:
            return
        try:
            await client.patch(kind, meta.get("namespace"), meta["name"], [
                {"op": "test", "path": "/metadata/resourceVersion", "value": meta["resourceVersion"]},
                {"op": "replace", "path": "/metadata/managedFields", "value": kept}])
            return
        except ApiError as e:
            if e.status not in (409, 422):  # 422: the test failed, the object changed meanwhile
                raise
        obj = await client.get(kind, meta.get("namespace"), meta["name"])


def orphans(live: list[dict[str, Any]], desired: list[dict[str, Any]], owner_uid: str) -> list[tuple[str, str]]:
    """(kind, name) of the live objects this resource owns that are no longer rendered (a managed
    ZooKeeper ensemble after a switch to an existing one). Only objects whose controller owner is
    this resource qualify: a same-named object of anyone else is never touched."""
    wanted = {(o["kind"], o["metadata"]["name"]) for o in desired}
    out = []
    for obj in live:
        meta = obj.get("metadata") or {}
        owned = any(ref.get("uid") == owner_uid and ref.get("controller") for ref in meta.get("ownerReferences") or [])
        if owned and (obj["kind"], meta.get("name")) not in wanted and not meta.get("deletionTimestamp"):
            out.append((obj["kind"], meta["name"]))
    return sorted(out)


async def prune(client: KubeClient, namespace: str, labels: dict[str, str], kinds: list[str],
                desired: list[dict[str, Any]], owner_uid: str) -> list[tuple[str, str]]:
    """Delete what `orphans` finds among the objects of `kinds` carrying `labels`."""
    live = []
    for kind in kinds:
        live += [{**o, "kind": kind} for o in await client.list(kind, namespace, labels)]
    gone = orphans(live, desired, owner_uid)
    for kind, name in gone:
        await client.delete(kind, namespace, name)
    return gone

"""Idempotent apply of desired objects: create what is missing, patch only what differs, and
remove what the operator no longer renders.

The API server adds defaults and metadata to every object, so "differs" means: some field the
operator renders has another value in the live object. Comparing before writing is what lets a
new operator version (same desired objects) start without touching, let alone restarting,
anything.

Removal works as `kubectl apply` does: each object carries what the operator last rendered
(LAST_APPLIED annotation), and a key that was rendered then but is not now is set to null in
the merge patch. Keys the operator never rendered (server defaults, other controllers' fields)
are left alone. An object without the annotation (written by an operator before it existed)
gets it on the first pass, a metadata-only patch that restarts nothing.
"""

import json

from odradek.operator.kube import ApiError, KubeClient
from odradek.operator.models import GROUP

LAST_APPLIED = f"{GROUP}/last-applied-configuration"


def contains(actual, desired) -> bool:
    """True when every field of `desired` has the same value in `actual` (extra fields allowed
    in mappings; lists must match element by element)."""
    if isinstance(desired, dict):
        return isinstance(actual, dict) and all(
            k in actual and contains(actual[k], v) for k, v in desired.items())
    if isinstance(desired, list):
        return (isinstance(actual, list) and len(actual) == len(desired)
                and all(contains(a, d) for a, d in zip(actual, desired)))
    return actual == desired


def patch_for(desired: dict) -> dict:
    """Everything the operator renders except the identity fields."""
    patch = {k: v for k, v in desired.items() if k not in ("apiVersion", "kind")}
    patch["metadata"] = {k: v for k, v in desired["metadata"].items() if k not in ("name", "namespace")}
    return patch


def with_last_applied(desired: dict) -> dict:
    """`desired` carrying its own rendering (without the annotation itself) as LAST_APPLIED."""
    rendered = patch_for(desired)
    annotations = {k: v for k, v in (rendered["metadata"].get("annotations") or {}).items() if k != LAST_APPLIED}
    rendered["metadata"] = {**rendered["metadata"], "annotations": annotations}
    if not annotations:
        del rendered["metadata"]["annotations"]
    text = json.dumps(rendered, sort_keys=True, separators=(",", ":"))
    meta = {**desired["metadata"], "annotations": {**annotations, LAST_APPLIED: text}}
    return {**desired, "metadata": meta}


def last_applied(live: dict) -> dict:
    """What the operator rendered when it last wrote `live` ({} when unknown or unreadable)."""
    text = ((live.get("metadata") or {}).get("annotations") or {}).get(LAST_APPLIED)
    try:
        found = json.loads(text) if text else {}
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


def three_way_patch(last: dict, desired: dict, live: dict) -> dict:
    """The merge patch that makes `live` hold `desired`: fields that differ, and null for keys in
    `last` that `desired` dropped (mappings recurse; lists, as in any merge patch, are whole
    values). Empty when nothing needs writing."""
    patch = {}
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


async def apply(client: KubeClient, desired: dict) -> str:
    """Make one object match; returns "created", "patched" or "unchanged"."""
    desired = with_last_applied(desired)
    meta = desired["metadata"]
    live = await client.get(desired["kind"], meta["namespace"], meta["name"])
    if live is None:
        try:
            await client.create(desired)
            return "created"
        except ApiError as e:
            if e.status != 409:  # created meanwhile (an operator restarted mid-apply): compare it
                raise
            live = await client.get(desired["kind"], meta["namespace"], meta["name"])
            if live is None:
                raise
    patch = three_way_patch(last_applied(live), patch_for(desired), live)
    if not patch:
        return "unchanged"
    await client.patch(desired["kind"], meta["namespace"], meta["name"], patch)
    return "patched"


def orphans(live: list[dict], desired: list[dict], owner_uid: str) -> list[tuple[str, str]]:
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
                desired: list[dict], owner_uid: str) -> list[tuple[str, str]]:
    """Delete what `orphans` finds among the objects of `kinds` carrying `labels`."""
    live = []
    for kind in kinds:
        live += [{**o, "kind": kind} for o in await client.list(kind, namespace, labels)]
    gone = orphans(live, desired, owner_uid)
    for kind, name in gone:
        await client.delete(kind, namespace, name)
    return gone

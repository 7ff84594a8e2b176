"""Idempotent apply of desired objects: create what is missing, patch only what differs.

The API server adds defaults and metadata to every object, so "differs" means: some field the
operator renders has another value in the live object. Comparing before writing is what lets a
new operator version (same desired objects) start without touching, let alone restarting,
anything.
"""

from odradek.operator.kube import ApiError, KubeClient


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
    """The merge patch that makes a live object match: everything the operator renders except
    the identity fields."""
    patch = {k: v for k, v in desired.items() if k not in ("apiVersion", "kind")}
    patch["metadata"] = {k: v for k, v in desired["metadata"].items() if k not in ("name", "namespace")}
    return patch


async def apply(client: KubeClient, desired: dict) -> str:
    """Make one object match; returns "created", "patched" or "unchanged"."""
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
    if contains(live, patch_for(desired)):
        return "unchanged"
    await client.patch(desired["kind"], meta["namespace"], meta["name"], patch_for(desired))
    return "patched"

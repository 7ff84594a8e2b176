"""Storage changes of a StatefulSet's volumes: pure decisions over the live claims.

A StatefulSet's `volumeClaimTemplates` cannot be changed (the API server refuses the patch), so
the operator keeps the live templates and changes the claims themselves, as Strimzi does: a
larger size is written to each PersistentVolumeClaim when its StorageClass allows expansion; a
smaller size or another class is refused with a condition (neither can be done in place).
Claims created later from the old template (a scale-up) are expanded on the next pass.
"""

import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

_SUFFIXES: dict[str, int | Decimal] = {
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": 1,
    "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$")


def parse_quantity(text: str | int | float) -> Decimal:
    """A Kubernetes resource quantity ("10Gi", "500M", "1e3") as a number; ValueError if malformed."""
    match = _QUANTITY.match(str(text).strip())
    if match is None:
        raise ValueError(f"not a Kubernetes quantity: {text!r}")
    number, suffix = match.groups()
    if "e" in number.lower() and suffix == "E":
        raise ValueError(f"ambiguous quantity: {text!r}")
    try:
        return Decimal(number) * Decimal(_SUFFIXES[suffix or ""])
    except ArithmeticError as e:  # InvalidOperation ("1.2.3"), Overflow ("1e99999999")
        raise ValueError(f"not a Kubernetes quantity: {text!r}") from e


@dataclass(frozen=True)
class ResizePlan:
    expand: tuple[str, ...] = ()  # claims to patch to the desired size
    refused: tuple[str, str] | None = None  # (reason, message) when the change cannot be made
    needs_class: str | None = None  # expansion wanted: is this StorageClass expandable? (ask, then decide)


def claim_size(claim: dict[str, Any]) -> Decimal | None:
    try:
        return parse_quantity(claim["spec"]["resources"]["requests"]["storage"])
    except (KeyError, TypeError, ValueError):
        return None


def plan_resize(desired_size: str, desired_class: str | None, template: dict[str, Any], claims: list[dict[str, Any]],
                expandable: bool | None = None) -> ResizePlan:
    """What to do about the claims of one StatefulSet. `template` is its live claim template;
    `claims` the live claims; `expandable` what the class answered (None: not asked yet)."""
    live_class = (template.get("spec") or {}).get("storageClassName")
    if desired_class != live_class:
        return ResizePlan(refused=("StorageClassChangeRefused",
                                   f"storage class {live_class or '(default)'} cannot be changed to "
                                   f"{desired_class or '(default)'} in place; the volumes keep their class"))
    want = parse_quantity(desired_size)
    sizes = {c["metadata"]["name"]: claim_size(c) for c in claims}
    smaller = sorted(n for n, s in sizes.items() if s is not None and s > want)
    template_size = claim_size(template)
    if smaller or (template_size is not None and template_size > want and not claims):
        return ResizePlan(refused=("StorageShrinkRefused",
                                   f"volumes cannot shrink to {desired_size}: {', '.join(smaller) or 'template'} "
                                   "are larger"))
    grow = tuple(sorted(n for n, s in sizes.items() if s is not None and s < want))
    if not grow:
        return ResizePlan()
    storage_class = live_class or next(
        (c["spec"].get("storageClassName") for c in claims if c["spec"].get("storageClassName")), None)
    if expandable is None:
        return ResizePlan(needs_class=storage_class or "")
    if not expandable:
        return ResizePlan(refused=("StorageNotExpandable",
                                   f"storage class {storage_class or '(default)'} does not allow volume expansion "
                                   f"(allowVolumeExpansion); {', '.join(grow)} stay at their size"))
    return ResizePlan(expand=grow)

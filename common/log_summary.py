"""Summary log lines: a count and a few names instead of one line per item.

A leadership change moves thousands of partitions at once; a line each cost seconds (Kafka 1.1 cut
this logging too). The callers log each item at DEBUG.
"""

from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")

NAMES_SHOWN = 3
"""How many items a summary line names."""


def a_few(items: Sequence[T], name: Callable[[T], str] = str, shown: int = NAMES_SHOWN) -> str:
    """`a, b, c and 17 more`: the names of the first `shown` items and how many were left out
    (only those few are named: the rest may be thousands)."""
    listed = ", ".join(name(item) for item in items[:shown])
    return listed + (f" and {len(items) - shown} more" if len(items) > shown else "")

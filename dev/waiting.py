"""Bounded waiting for tests and tools: poll a condition until it holds or the time is up."""

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(predicate: Callable[[], T], what: str, timeout: float = 30.0, interval: float = 0.1) -> T:
    """Returns the first truthy value of `predicate()`; TimeoutError naming `what` (and the last
    value seen) once `timeout` seconds have passed."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not reached within {timeout}s (last: {value!r})")
        time.sleep(interval)

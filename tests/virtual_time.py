"""Virtual time for unit tests: an event loop whose clock jumps to the next timer whenever
nothing is ready, so `asyncio.sleep(60)` and a 60 s timeout take no wall time and land exactly.
tests/conftest.py lets unit tests sleep on such a loop (and only on such a loop)."""

import asyncio
import selectors
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


class VirtualClock:
    """Seconds of virtual time, readable in milliseconds for code that takes a `clock_ms`."""

    def __init__(self, now: float = 1_000_000.0):
        self.now = now

    def ms(self) -> int:
        return round(self.now * 1000)


class VirtualTimeSelector(selectors.DefaultSelector):
    """Polls without blocking; when nothing is ready, moves the clock by the loop's timeout."""

    def __init__(self, clock: VirtualClock):
        super().__init__()
        self.clock = clock

    def select(self, timeout=None):
        events = super().select(0)
        if not events and timeout:
            self.clock.now += timeout
        return events


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    virtual_time = True  # tests/conftest.py: sleeping here moves the clock, not the wall clock

    def __init__(self, clock: VirtualClock | None = None):
        self.clock = clock or VirtualClock()
        super().__init__(VirtualTimeSelector(self.clock))

    def time(self) -> float:
        return self.clock.now


def run_virtual(coro_fn: Callable[[], Awaitable[T]], clock: VirtualClock | None = None, timeout: float = 3600) -> T:
    """Run a scenario on a loop driven by `clock` (bounded by `timeout` virtual seconds)."""
    loop = VirtualTimeLoop(clock)
    try:
        return loop.run_until_complete(asyncio.wait_for(coro_fn(), timeout))
    finally:
        loop.close()


async def turns(n: int = 20) -> None:
    """Let the loop run everything already ready, n rounds deep (no timer fires on a real clock)."""
    for _ in range(n):
        await asyncio.sleep(0)


async def until(predicate: Callable[[], object], what: str, rounds: int = 10_000) -> None:
    """Yield to the loop until `predicate` holds, failing after `rounds` turns without it."""
    for _ in range(rounds):
        if predicate():
            return
        await asyncio.sleep(0)
    raise AssertionError(f"{what} did not happen within {rounds} loop turns")


async def quiescent(probe: Callable[[], object], quiet: int = 50, rounds: int = 100_000) -> None:
    """Yield to the loop until `probe()` has stayed the same for `quiet` turns in a row: the code
    under test (on this loop, no threads) has done all it can without news from outside."""
    last, same = probe(), 0
    for _ in range(rounds):
        await asyncio.sleep(0)
        now = probe()
        same = same + 1 if now == last else 0
        if same >= quiet:
            return
        last = now
    raise AssertionError(f"still changing after {rounds} loop turns")

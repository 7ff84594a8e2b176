"""How much of the broker's request-handling time one request used (Kafka's
RequestChannel.Request.requestThreadTimeNanos), for the `request_percentage` quota.

Kafka charges a request the time its handler thread spent on it, not the time it waited (a long
poll in purgatory, a ZooKeeper round trip). This broker has one event loop instead of
`num.io.threads` handler threads, so the equivalent is the time the handler's coroutine ran on the
loop: `RequestTime.run` drives the handler and adds up each step between two awaits, measured by
the process's duration timer (`common.clock.monotonic_ns`). Time spent in awaited I/O, in other
requests' steps or framing the answer is not charged (Kafka charges network-thread time too, with
recordNoThrottle; ours is the same loop and left out). A client using 10 ms of the loop per
second uses 10 % (Kafka's nanosToPercentage: 100 % is one thread busy all the time).

The handler of the request being timed finds its RequestTime in `CURRENT` (a context variable:
each connection's requests run in its own task), so Produce and Fetch can charge the time spent so
far and combine the throttle with their byte-rate quota's, as Kafka's handlers do.
"""

from __future__ import annotations

from collections.abc import Awaitable, Generator
from contextvars import ContextVar
from typing import Any

from odradek.common.clock import Timer

NANOS_TO_PERCENTAGE = 100.0 / 1e9
"""Kafka's NanosToPercentagePerSecond: a nanosecond of one handler thread per second, in percent."""


class RequestTime:
    """One request's time on the loop; `recorded` once a quota manager was charged (or the
    request found exempt), so it is charged at most once."""

    __slots__ = ("_step_start", "nanos", "recorded", "timer")

    def __init__(self, timer: Timer):
        self.timer = timer
        self.nanos = 0
        self.recorded = False
        self._step_start: int | None = None

    def elapsed_nanos(self) -> int:
        """Time so far, the running step included (a handler asking mid-step)."""
        running = self.timer() - self._step_start if self._step_start is not None else 0
        return self.nanos + running

    def percentage(self) -> float:
        return self.elapsed_nanos() * NANOS_TO_PERCENTAGE

    def run(self, coro: Awaitable[Any]) -> _Timed:
        """Await this instead of `coro`: the same result, each step of `coro` timed."""
        return _Timed(self, coro)


class _Timed:
    __slots__ = ("coro", "time")

    def __init__(self, time: RequestTime, coro: Awaitable[Any]):
        self.time = time
        self.coro = coro

    def __await__(self) -> Generator[Any, Any, Any]:
        time, inner = self.time, self.coro.__await__()
        value: Any = None
        error: BaseException | None = None
        while True:
            token = CURRENT.set(time)  # set and reset within one step: always the same context
            start = time._step_start = time.timer()
            try:
                out = inner.send(value) if error is None else inner.throw(error)
            except StopIteration as stop:
                return stop.value
            finally:
                time.nanos += time.timer() - start
                time._step_start = None
                CURRENT.reset(token)
            try:
                value, error = (yield out), None
            except BaseException as e:  # cancellation and the like go to the handler
                value, error = None, e


CURRENT: ContextVar[RequestTime | None] = ContextVar("odradek_request_time", default=None)
"""The RequestTime of the request whose handler is running, None outside one."""

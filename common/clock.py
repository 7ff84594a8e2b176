"""The process's clock: the one place broker, controller and operator code reads the time.

Kafka passes one `Time` down from KafkaServer so that timestamps, expiry and back-offs can be
moved by tests. Here a clock is a `Clock`, a callable giving wall-clock milliseconds (the unit of
every timestamp and deadline the broker keeps: logs, groups, replication, fetch sessions); the
process's entry point makes one (`KafkaServer(clock=...)`) and hands it to every component it
builds. `now_ms` is the system's, the default of the components' `clock` parameters; `ManualClock`
moves only when told, for tests. `monotonic_s` measures elapsed time for log lines and throttles,
where nothing needs to move time by hand.

`make lint` (tools/check_clock.py) rejects `time.time()`, `time.monotonic()` and `now_ms()` calls
in broker/, controller/ and operator/: read the clock you were given.
"""

import time
from collections.abc import Callable

Clock = Callable[[], int]
"""Wall-clock milliseconds since the epoch (Kafka's Time.milliseconds)."""


def now_ms() -> int:
    """The system clock, in milliseconds."""
    return int(time.time() * 1000)


def monotonic_s() -> float:
    """Seconds from an arbitrary start that never goes back: for measuring how long something took."""
    return time.monotonic()


def monotonic_ns() -> int:
    """Nanoseconds from an arbitrary start that never goes back: the timer of short durations
    (a request's handling time, for the request quota)."""
    return time.perf_counter_ns()


Timer = Callable[[], int]
"""Nanoseconds from an arbitrary start (`monotonic_ns`); tests pass a stand-in."""


class ManualClock:
    """A Clock that moves only by `advance` (or `set`): tests move time without sleeping."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self.ms = start_ms

    def __call__(self) -> int:
        return self.ms

    def advance(self, ms: int) -> int:
        self.ms += ms
        return self.ms

    def set(self, ms: int) -> None:
        self.ms = ms

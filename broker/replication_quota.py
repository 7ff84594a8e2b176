"""Replication throttles (Kafka's ReplicationQuotaManager): moving data must not starve producers
or in-sync followers.

A replica is throttled when its topic's `leader.replication.throttled.replicas` (on the leader)
or `follower.replication.throttled.replicas` (on the follower) names `partition:broker` for it,
or is `*`. While the bytes of throttled replicas over the last window exceed
`leader.replication.throttled.rate` / `follower.replication.throttled.rate` (dynamic broker
configs, read at every check), throttled replicas that are not in the ISR are left out of the
next fetch; in-sync followers are never throttled, as in Kafka.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

SAMPLES = 11
SAMPLE_S = 1.0
"""Kafka's replication.quota.window.num and replication.quota.window.size.seconds defaults."""


def is_throttled(replicas: str, partition: int, broker: int) -> bool:
    """Whether a `[partition]:[broker],...` (or `*`) list names this replica."""
    value = replicas.strip()
    if not value:
        return False
    if value == "*":
        return True
    wanted = f"{partition}:{broker}"
    return any(item.strip() == wanted for item in value.split(","))


class ReplicationQuota:
    """Bytes of throttled replicas per second over a sliding window of SAMPLES samples."""

    def __init__(self, rate_of: Callable[[], int], clock: Callable[[], float] = time.monotonic):
        self.rate_of = rate_of
        self.clock = clock
        self._samples: deque[list[float]] = deque()  # [start, bytes], oldest first

    def _current(self, now: float) -> list[float]:
        if not self._samples or now - self._samples[-1][0] >= SAMPLE_S:
            self._samples.append([now, 0.0])
        while len(self._samples) > SAMPLES or now - self._samples[0][0] > SAMPLES * SAMPLE_S:
            self._samples.popleft()
        return self._samples[-1]

    def record(self, n_bytes: int) -> None:
        if n_bytes > 0:
            self._current(self.clock())[1] += n_bytes

    def rate(self) -> float:
        now = self.clock()
        self._current(now)
        elapsed = max(SAMPLE_S, now - self._samples[0][0])  # a young window counts as one sample long
        return sum(b for _, b in self._samples) / elapsed

    def is_exceeded(self) -> bool:
        bound = self.rate_of()
        return bound >= 0 and self.rate() > bound

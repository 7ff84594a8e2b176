"""Kafka's purgatory: requests that wait for a condition (HW movement, new data) or a timeout.

A DelayedOperation is watched under keys (topic-partitions); whoever changes a partition calls
`check_and_complete(key)`, which re-evaluates the operations watching it. Completion is decided by
the operation's `try_complete()`; the waiting request handler simply awaits `op.wait()`. There are no
threads: everything runs on the broker's event loop, so no locks are needed and completion happens
exactly once.
"""

import asyncio
import logging
from collections.abc import Hashable, Iterable

log = logging.getLogger(__name__)


class DelayedOperation:
    """An operation that completes when `try_complete` says so, or at `delay_ms` (then expired)."""

    def __init__(self, delay_ms: float):
        self.delay_ms = max(0.0, float(delay_ms))
        self.completed = False
        self.expired = False
        self._done = asyncio.get_running_loop().create_future()
        self._timer: asyncio.TimerHandle | None = None

    # --- subclass hooks -------------------------------------------------------------------------

    def try_complete(self) -> bool:
        """Checks the condition; if met, calls `force_complete()` and returns its result."""
        raise NotImplementedError

    def try_complete_for(self, key: Hashable) -> bool:
        """`check_and_complete(key)`'s check: only `key` changed. By default the whole condition;
        an operation watching thousands of keys checks just that one (no O(keys) per change)."""
        return self.try_complete()

    def on_complete(self) -> None:
        """Runs exactly once, when the operation completes (met, expired or forced); `expired`
        tells a timeout apart."""

    # --- machinery ------------------------------------------------------------------------------

    def force_complete(self) -> bool:
        if self.completed:
            return False
        self.completed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        try:
            self.on_complete()
        finally:
            if not self._done.done():
                self._done.set_result(None)
        return True

    def _expire(self) -> None:
        self._timer = None
        if not self.completed:
            self.expired = True
            self.force_complete()

    async def wait(self) -> None:
        """Until completed. One waiter per operation (its request's handler): a cancelled waiter
        cancels the inner future, which completion then leaves alone (no shield: one future and
        two callbacks fewer on every acks=all produce and every parked fetch)."""
        await self._done


class DelayedOperationPurgatory:
    """Watch lists of delayed operations by key (Kafka's DelayedOperationPurgatory)."""

    def __init__(self, name: str, purge_interval: int = 1000):
        self.name = name
        self._watchers: dict[Hashable, list[DelayedOperation]] = {}
        self._purge_interval = purge_interval
        self._added_since_purge = 0

    def try_complete_else_watch(self, op: DelayedOperation, keys: Iterable[Hashable]) -> bool:
        """Completes `op` now if it can; otherwise watches it under `keys` and starts its timer.

        Returns True when it completed at once.
        """
        if op.try_complete():
            return True
        for key in keys:
            self._watchers.setdefault(key, []).append(op)
        op._timer = asyncio.get_running_loop().call_later(op.delay_ms / 1000.0, op._expire)
        self._added_since_purge += 1
        if self._added_since_purge >= self._purge_interval:
            self.purge_completed()
        return False

    def check_and_complete(self, key: Hashable) -> int:
        """Re-evaluates the operations watching `key`; returns how many completed."""
        ops = self._watchers.get(key)
        if not ops:
            return 0
        completed = 0
        remaining = []
        for op in ops:
            if op.completed:
                continue
            if op.try_complete_for(key):
                completed += 1
            else:
                remaining.append(op)
        if remaining:
            self._watchers[key] = remaining
        else:
            del self._watchers[key]
        return completed

    def purge_completed(self) -> None:
        self._added_since_purge = 0
        for key in list(self._watchers):
            ops = [op for op in self._watchers[key] if not op.completed]
            if ops:
                self._watchers[key] = ops
            else:
                del self._watchers[key]

    def watched(self) -> int:
        """Number of operations still waiting (each counted once)."""
        return len({id(op) for ops in self._watchers.values() for op in ops if not op.completed})

    def shutdown(self) -> None:
        """Completes every waiting operation (their handlers answer with what they have)."""
        for ops in list(self._watchers.values()):
            for op in ops:
                op.force_complete()
        self._watchers.clear()

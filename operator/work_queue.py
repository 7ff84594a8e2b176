"""A work queue of resource keys, as Kubernetes controllers keep one (client-go's workqueue).

A key waits in the queue at most once however many events name it, and is handed to one worker
at a time: an event for a key being reconciled marks it dirty and it comes back once the worker
is done, so the latest state is always looked at and never by two workers at once. Keys can
come back later (`add_after`: retries with per-key exponential backoff, resyncs). The queue is
bounded: `add` waits while `maxsize` keys are waiting, which slows whoever feeds it (the
watch-event handlers) instead of letting the backlog grow.
"""

import asyncio
import heapq
import itertools
from collections import deque
from collections.abc import Hashable


class ShutDown(Exception):
    """The queue was shut down: workers stop."""


class WorkQueue:
    def __init__(self, maxsize: int = 10000, *, backoff_base: float = 0.5, backoff_max: float = 60.0):
        if maxsize < 1:
            raise ValueError("maxsize must be at least 1")
        self.maxsize = maxsize
        self.backoff_base, self.backoff_max = backoff_base, backoff_max
        self._queue: deque[Hashable] = deque()
        self._dirty: set[Hashable] = set()
        self._processing: set[Hashable] = set()
        self._failures: dict[Hashable, int] = {}
        self._delayed: list[tuple[float, int, Hashable]] = []
        self._delayed_due: dict[Hashable, float] = {}
        self._order = itertools.count()
        self._changed = asyncio.Condition()
        self._timer: asyncio.TimerHandle | None = None
        self._shutdown = False

    def __len__(self) -> int:
        """Keys waiting (not counting those being processed or due later)."""
        return len(self._dirty)

    @property
    def processing(self) -> int:
        return len(self._processing)

    def _put(self, key: Hashable) -> bool:
        if key in self._dirty:
            return False
        self._dirty.add(key)
        if key not in self._processing:
            self._queue.append(key)
        return True

    async def add(self, key: Hashable) -> None:
        """Queue `key` (no-op when it is already waiting); waits while the queue is full."""
        async with self._changed:
            if key in self._dirty or self._shutdown:
                return
            await self._changed.wait_for(lambda: len(self._dirty) < self.maxsize or self._shutdown)
            if not self._shutdown and self._put(key):
                self._changed.notify_all()

    def add_after(self, key: Hashable, delay: float) -> None:
        """Queue `key` after `delay` seconds (an earlier due time wins over a later one). Past the
        bound the key still comes back: it is due, and dropping it would lose the retry."""
        if self._shutdown:
            return
        loop = asyncio.get_running_loop()
        due = loop.time() + max(0.0, delay)
        if self._delayed_due.get(key, float("inf")) <= due:
            return
        self._delayed_due[key] = due
        heapq.heappush(self._delayed, (due, next(self._order), key))
        self._arm(loop)

    def add_rate_limited(self, key: Hashable) -> float:
        """Retry `key` after its backoff (doubling per failure since `forget`); returns the delay."""
        failures = self._failures.get(key, 0)
        self._failures[key] = failures + 1
        delay = float(min(self.backoff_max, self.backoff_base * (2 ** min(failures, 30))))
        self.add_after(key, delay)
        return delay

    def forget(self, key: Hashable) -> None:
        """`key` succeeded: its next failure starts the backoff over."""
        self._failures.pop(key, None)

    def _arm(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self._delayed:
            self._timer = loop.call_at(self._delayed[0][0], lambda: loop.create_task(self._release_due()))

    async def _release_due(self) -> None:
        loop = asyncio.get_running_loop()
        now = loop.time()
        async with self._changed:
            while self._delayed and self._delayed[0][0] <= now:
                due, _, key = heapq.heappop(self._delayed)
                if self._delayed_due.get(key) == due:
                    del self._delayed_due[key]
                    self._put(key)
            self._changed.notify_all()
        self._arm(loop)

    async def get(self) -> Hashable:
        """The next key to work on; call `done(key)` when finished. Raises ShutDown."""
        async with self._changed:
            await self._changed.wait_for(lambda: self._queue or self._shutdown)
            if self._shutdown:
                raise ShutDown()
            key = self._queue.popleft()
            self._processing.add(key)
            self._dirty.discard(key)
            self._changed.notify_all()
            return key

    async def done(self, key: Hashable) -> None:
        async with self._changed:
            self._processing.discard(key)
            if key in self._dirty:
                self._queue.append(key)
            self._changed.notify_all()

    async def shutdown(self) -> None:
        self._shutdown = True
        if self._timer is not None:
            self._timer.cancel()
        async with self._changed:
            self._changed.notify_all()

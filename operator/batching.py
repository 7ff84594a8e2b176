"""Many callers, one request: a Batcher gathers what concurrent reconciles ask for and sends it
together, after a short linger or as soon as a batch is full.

Thousands of Topic resources applied at once must not become thousands of CreateTopics requests
(Strimzi's topic operator batches the same way). Each caller awaits only its own result. The
number of waiting items is bounded: past `max_pending`, `submit` waits (back-pressure reaches
the reconcile workers, and through them the work queue) instead of the backlog growing.
"""

import asyncio
import logging
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")


class Batcher(Generic[T, R]):
    """`send(items) -> {key: result}` is called with at most `max_batch` items whose keys are
    distinct; `max_in_flight` sends run at once. Items with the key of one already waiting share
    its result when `share` (reads), otherwise wait for the next batch (writes must not be sent
    twice in one request: Kafka refuses duplicate names)."""

    def __init__(self, name: str, send: Callable[[list[T]], Awaitable[dict[Hashable, R]]],
                 key: Callable[[T], Hashable], *, linger: float = 0.05, max_batch: int = 500,
                 max_pending: int = 5000, max_in_flight: int = 1, share: bool = False):
        if max_batch < 1 or max_pending < max_batch or max_in_flight < 1:
            raise ValueError("need max_pending >= max_batch >= 1 and max_in_flight >= 1")
        self.name, self._send, self._key = name, send, key
        self.linger, self.max_batch, self.max_pending = linger, max_batch, max_pending
        self.share = share
        self._waiting: list[tuple[T, asyncio.Future[R]]] = []
        self._keys: dict[Hashable, asyncio.Future[R]] = {}
        self._room = asyncio.Condition()
        self._slots = asyncio.Semaphore(max_in_flight)
        self._ready = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self.batches = 0  # requests sent (for tests and the benchmark)

    @property
    def pending(self) -> int:
        return len(self._waiting)

    async def submit(self, item: T) -> R:
        """The result for `item` (the exception its batch raised, if it failed as a whole)."""
        if self._closed:
            raise RuntimeError(f"batcher {self.name} is closed")
        key = self._key(item)
        if self.share and key in self._keys:
            return await asyncio.shield(self._keys[key])
        async with self._room:
            await self._room.wait_for(lambda: len(self._waiting) < self.max_pending or self._closed)
        if self._closed:
            raise RuntimeError(f"batcher {self.name} is closed")
        future: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self._waiting.append((item, future))
        if self.share:
            self._keys.setdefault(key, future)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name=f"batcher-{self.name}")
        self._ready.set()
        return await asyncio.shield(future)

    def _take(self) -> list[tuple[T, asyncio.Future[R]]]:
        """Up to max_batch waiting items with distinct keys, in arrival order."""
        batch: list[tuple[T, asyncio.Future[R]]] = []
        rest: list[tuple[T, asyncio.Future[R]]] = []
        seen: set[Hashable] = set()
        for entry in self._waiting:
            key = self._key(entry[0])
            if len(batch) < self.max_batch and key not in seen:
                seen.add(key)
                batch.append(entry)
            else:
                rest.append(entry)
        self._waiting = rest
        for item, future in batch:
            if self._keys.get(self._key(item)) is future:
                del self._keys[self._key(item)]
        return batch

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        tasks: set[asyncio.Task[None]] = set()
        try:
            while not self._closed:
                if not self._waiting:
                    self._ready.clear()
                    try:
                        await asyncio.wait_for(self._ready.wait(), timeout=30.0)
                    except TimeoutError:
                        if not self._waiting:
                            return  # idle: the next submit starts a new task
                    continue
                if len(self._waiting) < self.max_batch:
                    await asyncio.sleep(self.linger)  # let concurrent callers join this batch
                await self._slots.acquire()
                batch = self._take()
                async with self._room:
                    self._room.notify_all()
                if not batch:
                    self._slots.release()
                    continue
                task = loop.create_task(self._deliver(batch))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
        finally:
            if tasks:
                await asyncio.gather(*tasks, return_exceptions=True)

    async def _deliver(self, batch: list[tuple[T, asyncio.Future[R]]]) -> None:
        try:
            self.batches += 1
            results = await self._send([item for item, _ in batch])
        except Exception as e:  # the whole request failed: every caller learns why
            for _, future in batch:
                if not future.done():
                    future.set_exception(e)
            return
        except asyncio.CancelledError:
            for _, future in batch:
                if not future.done():
                    future.cancel()
            raise
        finally:
            self._slots.release()
        for item, future in batch:
            if future.done():
                continue
            key = self._key(item)
            if key in results:
                future.set_result(results[key])
            else:
                future.set_exception(KeyError(f"{self.name}: no result for {key!r}"))

    async def close(self) -> None:
        self._closed = True
        self._ready.set()
        async with self._room:
            self._room.notify_all()
        for _, future in self._waiting:
            if not future.done():
                future.set_exception(RuntimeError(f"batcher {self.name} is closed"))
        self._waiting = []
        self._keys.clear()
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass

"""Dedicated, bounded worker threads for one kind of blocking work.

asyncio's default executor is one pool (min(32, cpus + 4) threads) shared by every
`asyncio.to_thread` of a process: slow log disk jobs (fsyncs) holding all its threads left
ZooKeeper calls and the session close queued behind them. Kafka gives each kind of blocking work
threads of its own (the ZooKeeper client's, the log recovery and flush threads); a
`BlockingExecutor` is that, owned and shut down by the component that owns the work.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")

POLL_S = 0.05
"""How often `aclose` looks whether the running jobs have ended."""


class BlockingExecutor:
    def __init__(self, name: str, threads: int):
        self.name = name
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix=name, initializer=self._joined)
        self._closed = False

    def _joined(self) -> None:
        with self._lock:
            self._threads.append(threading.current_thread())

    async def run(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """`fn(*args, **kwargs)` on one of these threads (with the caller's context variables, as
        `asyncio.to_thread`). ConnectionError once closed: the owner is stopping."""
        if self._closed:
            raise ConnectionError(f"{self.name} threads are stopped")
        call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
        try:
            future = asyncio.get_running_loop().run_in_executor(self._pool, call)
        except RuntimeError as e:  # shut down meanwhile
            raise ConnectionError(f"{self.name} threads are stopped") from e
        return await future

    def alive(self) -> int:
        """Threads not ended (idle ones included until `aclose`)."""
        with self._lock:
            return sum(t.is_alive() for t in self._threads)

    async def aclose(self, timeout_s: float) -> bool:
        """Take no more jobs, drop the queued ones (their callers get CancelledError) and wait at
        most `timeout_s` for the running ones; True when every thread ended. The owner makes its
        jobs give up first (ZooKeeper calls: the abort event), so this wait is short."""
        self._closed = True
        self._pool.shutdown(wait=False, cancel_futures=True)
        deadline = time.monotonic() + timeout_s
        while self.alive():
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(POLL_S)
        return True


async def run_blocking(threads: BlockingExecutor | None, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """`fn` on `threads`; without them (a part built on its own, as tests do) on asyncio's default
    executor."""
    if threads is None:
        return await asyncio.to_thread(fn, *args, **kwargs)
    return await threads.run(fn, *args, **kwargs)

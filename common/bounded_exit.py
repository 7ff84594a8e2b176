"""Ending a process's asyncio work in bounded time, whatever its tasks do.

Two traps made SIGTERM hang: `asyncio.wait_for` on timeout cancels its inner task and then waits
for it to end, so a task that misses the cancellation (Python 3.11's wait_for swallows one that
races with its own inner wait finishing) holds the caller forever; and `asyncio.run` cancels the
tasks still alive at exit and waits for every one of them, the same way. `within` waits without
that second wait, and `end_leftover_tasks` gives what is left a bounded time, then ends the
process itself, saying which tasks refused.
"""

from __future__ import annotations

import asyncio
import io
import logging
import os
import sys
import threading
import time
from collections.abc import Awaitable

LEFTOVER_EXIT_CODE = 3
"""Exit code of a process whose tasks would not end: a bug, made visible."""
SLOW_STEP_S = 1.0
"""A step of `within` that takes this long is logged with its time: where a slow stop went."""


async def within(awaitable: Awaitable[object], timeout_s: float, what: str, log: logging.Logger) -> bool:
    """Await `awaitable` for at most `timeout_s` seconds; on timeout cancel it and go on without
    waiting for it to end (logged). False when it did not finish, or failed (logged)."""
    task = asyncio.ensure_future(awaitable)
    started = time.monotonic()
    done, _ = await asyncio.wait({task}, timeout=timeout_s)
    if not done:
        task.cancel()
        log.warning("%s did not finish within %.0fs; going on without it", what, timeout_s)
        return False
    took = time.monotonic() - started
    if took >= SLOW_STEP_S:
        log.info("%s took %.1fs", what, took)
    if task.cancelled():
        return False
    error = task.exception()
    if error is not None:
        log.error("%s failed", what, exc_info=error)
        return False
    return True


async def end_leftover_tasks(timeout_s: float, log: logging.Logger) -> None:
    """Cancel every task but the caller's and wait up to `timeout_s` for them; if any is still
    running, log its stack and end the process now (exit code LEFTOVER_EXIT_CODE) instead of
    letting `asyncio.run` wait for it forever."""
    me = asyncio.current_task()
    others = [t for t in asyncio.all_tasks() if t is not me and not t.done()]
    for t in others:
        t.cancel()
    if not others:
        return
    _, pending = await asyncio.wait(others, timeout=timeout_s)
    if not pending:
        return
    for t in pending:
        stack = io.StringIO()
        t.print_stack(file=stack)
        log.error("task %s would not end within %.0fs of being cancelled:\n%s", t.get_name(), timeout_s,
                  stack.getvalue())
    logging.shutdown()
    os._exit(LEFTOVER_EXIT_CODE)


def exit_after_clean_shutdown(code: int) -> None:
    """End the process once its shutdown has closed everything it wrote to (logs flushed and
    closed, checkpoints written, ZooKeeper session closed, worker threads joined by asyncio.run):
    flush the log handlers and the standard streams, then leave without the interpreter's
    teardown, which only frees memory. With thousands of partitions that teardown (collecting
    a heap of a few hundred MB, object by object) took 3 s after the broker's last line; the JVM
    does not walk its heap at exit either. A non-daemon thread still alive may be writing: then
    the interpreter's ordinary exit joins it (and this returns)."""
    busy = [t.name for t in threading.enumerate() if t is not threading.current_thread() and not t.daemon]
    if busy:
        logging.getLogger(__name__).info("exiting after threads %s end", ", ".join(busy))
        return
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)

"""common/executors: jobs run on the pool's own threads; closing drops the queue and is bounded."""

import asyncio
import contextvars
import threading

import pytest

from odradek.common.executors import BlockingExecutor

pytestmark = pytest.mark.asyncio

where: contextvars.ContextVar[str] = contextvars.ContextVar("where", default="")


async def test_jobs_run_on_named_threads_with_the_callers_context():
    pool = BlockingExecutor("disk", 2)
    where.set("caller")
    name, seen = await pool.run(lambda: (threading.current_thread().name, where.get()))
    assert name.startswith("disk") and seen == "caller"
    assert await pool.aclose(5)
    with pytest.raises(ConnectionError):
        await pool.run(lambda: None)


async def test_close_drops_queued_jobs_and_gives_up_on_a_stuck_one_in_time():
    pool = BlockingExecutor("slow", 1)
    release, loop, running = threading.Event(), asyncio.get_running_loop(), asyncio.Event()

    def stuck():
        loop.call_soon_threadsafe(running.set)
        release.wait(10)

    first = asyncio.ensure_future(pool.run(stuck))
    queued = asyncio.ensure_future(pool.run(lambda: "never"))
    await running.wait()
    assert not await pool.aclose(0.1)  # bounded: the stuck job still runs
    with pytest.raises(asyncio.CancelledError):
        await queued
    release.set()
    await first
    assert await pool.aclose(5)

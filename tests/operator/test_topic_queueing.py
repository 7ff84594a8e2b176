"""The Batcher (many callers, one request) and the WorkQueue (one key once, one worker at a time,
bounded), driven by real asyncio tasks on virtual time (tests/virtual_time.py): lingers, delays
and backoffs are exact and take no wall time."""

import asyncio

import pytest
from virtual_time import run_virtual

from odradek.operator.batching import Batcher
from odradek.operator.work_queue import ShutDown, WorkQueue

pytestmark = pytest.mark.timeout(30)


def virtual(test):
    """Run the async test on a fresh virtual-time loop."""

    def run():
        run_virtual(test, timeout=600)

    run.__doc__ = test.__doc__
    return run


class Recorder:
    def __init__(self, delay=0.0, fail=None):
        self.batches: list[list] = []
        self.delay, self.fail = delay, fail
        self.in_flight = self.most_in_flight = 0

    async def __call__(self, items):
        self.batches.append(list(items))
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await asyncio.sleep(self.delay)
            if self.fail:
                raise self.fail
            return {i: f"r-{i}" for i in items}
        finally:
            self.in_flight -= 1


@virtual
async def test_concurrent_callers_share_one_request_and_each_gets_its_own_result():
    send = Recorder()
    b = Batcher("t", send, lambda i: i, linger=0.05, max_batch=100)
    results = await asyncio.gather(*(b.submit(i) for i in range(50)))
    assert results == [f"r-{i}" for i in range(50)]
    assert len(send.batches) == 1 and sorted(send.batches[0]) == list(range(50))
    await b.close()


@virtual
async def test_batches_are_capped_and_keys_in_one_batch_are_distinct():
    batches = []

    async def send(items):
        batches.append(list(items))
        await asyncio.sleep(0.01)
        return {key: (key, n) for key, n in items}

    b = Batcher("t", send, lambda item: item[0], linger=0.01, max_batch=4, max_pending=100)
    items = [(i % 10, i) for i in range(20)]  # every key twice: a write must not go out twice at once
    assert await asyncio.gather(*(b.submit(item) for item in items)) == items
    for batch in batches:
        keys = [key for key, _ in batch]
        assert len(batch) <= 4 and len(keys) == len(set(keys))
    assert sorted(n for batch in batches for _, n in batch) == list(range(20)), "every item sent once"
    await b.close()


@virtual
async def test_shared_reads_of_one_key_are_sent_once():
    send = Recorder()
    b = Batcher("t", send, lambda i: i, linger=0.05, share=True)
    assert await asyncio.gather(b.submit("x"), b.submit("x"), b.submit("y")) == ["r-x", "r-x", "r-y"]
    assert send.batches == [["x", "y"]]
    await b.close()


@virtual
async def test_a_failed_request_fails_its_callers_only():
    send = Recorder(fail=ConnectionError("down"))
    b = Batcher("t", send, lambda i: i, linger=0.01)
    results = await asyncio.gather(b.submit(1), b.submit(2), return_exceptions=True)
    assert all(isinstance(r, ConnectionError) for r in results)
    send.fail = None
    assert await b.submit(3) == "r-3", "the next batch goes out again"
    await b.close()


@virtual
async def test_back_pressure_bounds_what_waits_and_in_flight_requests():
    send = Recorder(delay=0.05)
    b = Batcher("t", send, lambda i: i, linger=0.0, max_batch=5, max_pending=10, max_in_flight=1)
    most_waiting = 0

    async def watch():
        nonlocal most_waiting
        while True:
            most_waiting = max(most_waiting, b.pending)
            await asyncio.sleep(0.001)

    watcher = asyncio.create_task(watch())
    results = await asyncio.gather(*(b.submit(i) for i in range(60)))
    watcher.cancel()
    assert results == [f"r-{i}" for i in range(60)]
    assert most_waiting <= 10 and send.most_in_flight == 1
    await b.close()


@virtual
async def test_queue_holds_a_key_once_and_requeues_one_updated_while_processed():
    q = WorkQueue()
    for _ in range(3):
        await q.add("a")
    await q.add("b")
    assert len(q) == 2
    key = await q.get()
    assert key == "a"
    await q.add("a")  # an event while "a" is being reconciled
    assert await q.get() == "b", "not handed to a second worker meanwhile"
    await q.done("b")
    await q.done("a")
    assert await asyncio.wait_for(q.get(), 1) == "a", "comes back once the first pass is done"


@virtual
async def test_queue_add_waits_while_full():
    q = WorkQueue(maxsize=2)
    await q.add(1)
    await q.add(2)
    blocked = asyncio.create_task(q.add(3))
    await asyncio.sleep(0.05)
    assert not blocked.done() and len(q) == 2
    await q.add(1)  # already waiting: never blocks
    assert await q.get() == 1
    await asyncio.wait_for(blocked, 1)
    assert len(q) == 2


@virtual
async def test_delayed_and_rate_limited_adds():
    q = WorkQueue(backoff_base=0.05, backoff_max=0.2)
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert q.add_rate_limited("k") == 0.05
    assert await asyncio.wait_for(q.get(), 1) == "k" and loop.time() - started >= 0.04
    await q.done("k")
    assert [q.add_rate_limited("k") for _ in range(4)] == [0.1, 0.2, 0.2, 0.2]
    q.forget("k")
    assert q.add_rate_limited("k") == 0.05


@virtual
async def test_shutdown_stops_waiting_workers():
    q = WorkQueue()
    worker = asyncio.create_task(q.get())
    await asyncio.sleep(0.01)
    await q.shutdown()
    with pytest.raises(ShutDown):
        await asyncio.wait_for(worker, 1)

"""Blocking work of one kind never queues behind another's: slow log disk jobs (fsyncs of
checkpoints and segments) filling their threads leave ZooKeeper calls and the session close free
to run (the two CI stalls: a broker whose disk jobs held every thread of asyncio's shared
default executor could not reach ZooKeeper nor close its session while stopping)."""

import asyncio
import os
import threading
import time
from types import SimpleNamespace

import pytest

from odradek.broker.log import leader_epoch
from odradek.broker.zk_client import BrokerZkClient
from odradek.common.config import BrokerConfig

pytestmark = pytest.mark.asyncio


class FakeZk:
    client_id = (1, b"")

    def stop(self):
        pass

    def close(self):
        pass


def zk_client() -> BrokerZkClient:
    zk = BrokerZkClient(BrokerConfig.from_properties({"broker.id": "0", "zookeeper.connect": "127.0.0.1:1"}))
    zk.zk = FakeZk()
    zk.calls = SimpleNamespace(exists=lambda path: object())
    return zk


async def test_zookeeper_calls_and_the_session_close_do_not_wait_behind_log_disk_jobs(tmp_path, monkeypatch):
    disk = threading.Event()  # the disk answers once set
    started = []
    loop, busy = asyncio.get_running_loop(), asyncio.Event()

    def slow_checkpoint(path, lines):
        started.append(path)
        loop.call_soon_threadsafe(busy.set)
        disk.wait(30)

    monkeypatch.setattr(leader_epoch, "write_checkpoint", slow_checkpoint)
    # more slow disk jobs than asyncio's default executor has threads (min(32, cpus + 4))
    jobs = 2 * min(32, (os.cpu_count() or 1) + 4)
    caches = [leader_epoch.LeaderEpochFileCache(tmp_path / f"p{i}" / "leader-epoch-checkpoint", lambda: 0)
              for i in range(jobs)]
    for i, cache in enumerate(caches):
        (tmp_path / f"p{i}").mkdir()
        cache.assign(1, 0)
    writes = [asyncio.create_task(leader_epoch.write_in_worker([c])) for c in caches]
    zk = zk_client()
    try:
        await asyncio.wait_for(busy.wait(), 5)  # the disk jobs hold their threads
        began = time.monotonic()
        assert await asyncio.wait_for(zk.topic_exists("orders"), 5)
        await asyncio.wait_for(zk.stop(), 5)
        assert time.monotonic() - began < 5
        assert not disk.is_set() and len(started) < jobs  # the disk jobs were still queued throughout
    finally:
        disk.set()
        assert all(not failed for failed in await asyncio.gather(*writes))


async def test_log_disk_jobs_on_the_log_managers_threads_leave_the_default_executor_free(tmp_path, monkeypatch):
    from odradek.broker.log.log_manager import LOG_IO_THREADS, LogManager

    disk = threading.Event()
    loop, busy = asyncio.get_running_loop(), asyncio.Event()

    def slow_checkpoint(path, lines):
        loop.call_soon_threadsafe(busy.set)
        disk.wait(30)

    monkeypatch.setattr(leader_epoch, "write_checkpoint", slow_checkpoint)
    manager = LogManager([tmp_path / "logs"], BrokerConfig.from_properties({"broker.id": "0",
                                                                           "zookeeper.connect": "127.0.0.1:1"}))
    caches = []
    for i in range(2 * LOG_IO_THREADS):
        (tmp_path / f"p{i}").mkdir()
        cache = leader_epoch.LeaderEpochFileCache(tmp_path / f"p{i}" / "leader-epoch-checkpoint", lambda: 0)
        cache.assign(1, 0)
        caches.append(cache)
    writes = [asyncio.create_task(leader_epoch.write_in_worker([c], manager.io_threads)) for c in caches]
    try:
        await asyncio.wait_for(busy.wait(), 5)
        assert await asyncio.wait_for(asyncio.to_thread(lambda: "free"), 5) == "free"
    finally:
        disk.set()
        await asyncio.gather(*writes)
        assert await manager.io_threads.aclose(5)

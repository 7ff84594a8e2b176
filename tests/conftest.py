"""Shared fixtures: a real ZooKeeper server per test session, a fresh chroot per test.

Every test is marked `unit` or `integration` at collection: `integration` when it starts a process
(ZooKeeper, a broker, a controller, a client binary, helm), `unit` otherwise, so `make unit` runs
the fast loop. Everything under tests/integration/ is `integration`, and so is a test that uses one
of PROCESS_FIXTURES (directly or through another fixture); a module elsewhere that starts processes
itself says so with `pytestmark`. A `unit` test that
starts a process anyway fails, so the split cannot rot.

A `unit` test synchronises on events, futures, conditions the code under test signals, or virtual
time, never on wall-clock sleeps: a positive `time.sleep` or `asyncio.sleep` called from test code
(any file under tests/) fails the test, except `asyncio.sleep` on a loop whose clock is virtual
(`virtual_time.VirtualTimeLoop`), where it moves that clock and takes no wall time.
"""

import asyncio
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from odradek.dev.zookeeper import ZooKeeperServer

PROCESS_FIXTURES = frozenset({"zookeeper", "helm"})


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("integration") or item.get_closest_marker("unit"):
            continue
        starts_process = ("integration" in item.path.parent.parts
                          or not PROCESS_FIXTURES.isdisjoint(getattr(item, "fixturenames", ())))
        item.add_marker(pytest.mark.integration if starts_process else pytest.mark.unit)


@pytest.fixture(autouse=True)
def _unit_tests_start_no_process(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    if request.node.get_closest_marker("unit") is None:
        return

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"{request.node.nodeid} is marked unit but starts a process: mark it integration")

    monkeypatch.setattr(subprocess.Popen, "__init__", refuse)


TESTS_DIR = str(Path(__file__).parent) + "/"


def _refuse_a_test_sleep(nodeid: str, name: str, delay: float, caller) -> None:
    if delay > 0 and caller.f_code.co_filename.startswith(TESTS_DIR):
        raise AssertionError(
            f"{nodeid} is marked unit but its code sleeps ({name}({delay}) at "
            f"{caller.f_code.co_filename}:{caller.f_lineno}): wait on an event or use virtual time")


@pytest.fixture(autouse=True)
def _unit_tests_never_sleep(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail a unit test whose own code (a file under tests/) sleeps a positive delay on the wall clock.
    The code under test may sleep (backoffs, lingers); the test may not wait on it by sleeping."""
    if request.node.get_closest_marker("unit") is None:
        return
    nodeid = request.node.nodeid
    time_sleep, asyncio_sleep = time.sleep, asyncio.sleep

    def guarded_time_sleep(delay: float) -> None:
        _refuse_a_test_sleep(nodeid, "time.sleep", delay, sys._getframe(1))
        time_sleep(delay)

    def guarded_asyncio_sleep(delay: float, result: object = None):
        try:
            virtual = getattr(asyncio.get_running_loop(), "virtual_time", False)
        except RuntimeError:
            virtual = False
        if not virtual:
            _refuse_a_test_sleep(nodeid, "asyncio.sleep", delay, sys._getframe(1))
        return asyncio_sleep(delay, result)

    monkeypatch.setattr(time, "sleep", guarded_time_sleep)
    monkeypatch.setattr(asyncio, "sleep", guarded_asyncio_sleep)


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory):
    server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper"))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def zk_connect(zookeeper) -> str:
    """`zookeeper.connect` with a chroot of its own, so tests never see each other's znodes."""
    return f"{zookeeper.connect}/odradek-{uuid.uuid4().hex[:8]}"

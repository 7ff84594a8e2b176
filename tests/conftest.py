"""Shared fixtures: a real ZooKeeper server per test session, a fresh chroot per test.

Every test is marked `unit` or `integration` at collection: `integration` when it starts a process
(ZooKeeper, a broker, a controller, a client binary, helm), `unit` otherwise, so `make unit` runs
the fast loop. Everything under tests/integration/ is `integration`, and so is a test that uses one
of PROCESS_FIXTURES (directly or through another fixture); a module elsewhere that starts processes
itself says so with `pytestmark`. A `unit` test that
starts a process anyway fails, so the split cannot rot.
"""

import subprocess
import uuid

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

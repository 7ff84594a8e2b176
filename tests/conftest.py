"""Shared fixtures: a real ZooKeeper server per test session, a fresh chroot per test."""

import uuid

import pytest

from odradek.dev.zookeeper import ZooKeeperServer


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

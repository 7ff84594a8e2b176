"""Fixtures for the acceptance tests: real clusters (LocalCluster, the code `odradek dev` runs)
on the session's ZooKeeper, each in a chroot of its own, on free loopback ports."""

import uuid

import pytest

from odradek.dev.cluster import LocalCluster
from odradek.dev.zookeeper import free_ports

BROKER_DEFAULTS = {
    # A killed broker's registration vanishes after this; keeps crash tests short.
    "zookeeper.session.timeout.ms": 6000,
}
CONTROLLER_DEFAULTS = {"zookeeper.session.timeout.ms": 6000}


def new_cluster(zookeeper, data_dir, brokers=1, controllers=1, broker_overrides=None, controller_overrides=None):
    return LocalCluster(
        data_dir,
        brokers=brokers,
        controllers=controllers,
        broker_ports=free_ports(brokers),
        zookeeper_connect=f"{zookeeper.connect}/odradek-{uuid.uuid4().hex[:8]}",
        broker_overrides={**BROKER_DEFAULTS, **(broker_overrides or {})},
        controller_overrides={**CONTROLLER_DEFAULTS, **(controller_overrides or {})},
    )


@pytest.fixture
def cluster_factory(zookeeper, tmp_path):
    """`cluster_factory(brokers=..., controllers=..., broker_overrides=...)` → a started cluster,
    stopped (every process) at the end of the test."""
    started: list[LocalCluster] = []

    def make(**kwargs) -> LocalCluster:
        cluster = new_cluster(zookeeper, tmp_path / f"cluster-{len(started)}", **kwargs)
        started.append(cluster)
        return cluster.start()

    yield make
    for cluster in started:
        cluster.stop()


@pytest.fixture(scope="package")
def shared_cluster(zookeeper, tmp_path_factory):
    """Two brokers and one controller shared by the tests that only read and write topics of
    their own (client round trips, kcat, ListOffsets), to save start-ups on a small machine."""
    cluster = new_cluster(zookeeper, tmp_path_factory.mktemp("shared-cluster"), brokers=2)
    cluster.start()
    yield cluster
    cluster.stop()



@pytest.fixture(scope="package")
def spark():
    """One local-mode SparkSession for every PySpark test (JVM start-up costs tens of seconds on a
    busy machine), with `format("odradek")` registered."""
    from .spark_driver import spark_session

    session = spark_session("odradek-tests")
    yield session
    session.stop()

"""The nemesis runner's own decisions."""

from .runner import refused_start


def test_only_a_brokers_designed_start_up_refusal_while_zookeeper_is_away_is_not_a_crash():
    tail = ("ERROR [broker] odradek.broker.server: broker start-up failed\nTraceback ...\n"
            "ConnectionError: ZooKeeper 10.0.0.2:2181/odradek unreachable\nINFO broker 2 stopped")
    assert refused_start("broker-2", 1, tail, zookeeper_away=True)
    assert not refused_start("broker-2", 1, tail, zookeeper_away=False)  # ZooKeeper was there: a crash
    assert not refused_start("broker-2", -9, tail, zookeeper_away=True)
    assert not refused_start("controller-0", 1, tail, zookeeper_away=True)
    assert not refused_start("broker-2", 1, "Traceback ...\nMemoryError", zookeeper_away=True)

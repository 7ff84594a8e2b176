"""broker/control_plane: which controller requests a broker acts on, decided without a cluster."""

import asyncio
from types import SimpleNamespace

from kio.schema.errors import ErrorCode

from odradek.broker.control_plane import ACCEPT, CONFIRM, STALE, ControlPlaneGuard, confirmed, epoch_verdict


def request(epoch: int, controller_id: int = 1000, broker_epoch: int = 42):
    return SimpleNamespace(controller_epoch=epoch, controller_id=controller_id, broker_epoch=broker_epoch)


class ZooKeeper:
    """What ZooKeeper says: (epoch, controller id), counted reads."""

    def __init__(self, state):
        self.state = state
        self.reads = 0

    async def __call__(self):
        self.reads += 1
        if isinstance(self.state, Exception):
            raise self.state
        return self.state


def guard(zk: ZooKeeper, broker_epoch: int = 42) -> ControlPlaneGuard:
    return ControlPlaneGuard("CONTROLLER", lambda: broker_epoch, zk, registration_wait_s=0.05)


def admit(g: ControlPlaneGuard, req, listener="CONTROLLER") -> ErrorCode:
    return asyncio.run(g.admit(req, listener))


def test_epoch_verdicts():
    assert epoch_verdict(None, 5, 1000) == CONFIRM
    assert epoch_verdict((5, 1000), 5, 1000) == ACCEPT
    assert epoch_verdict((5, 1000), 4, 1000) == STALE
    assert epoch_verdict((5, 1000), 5, 1001) == CONFIRM  # same epoch, another controller: ask
    assert epoch_verdict((5, 1000), 6, 1000) == CONFIRM
    assert confirmed((6, 1000), 6, 1000)
    assert not confirmed((6, 1000), 999999, 1000)
    assert not confirmed(None, 1, 1000)


def test_only_the_control_plane_listener():
    zk = ZooKeeper((1, 1000))
    assert admit(guard(zk), request(1), listener="PLAINTEXT") == ErrorCode.cluster_authorization_failed
    assert admit(guard(zk), request(1), listener=None) == ErrorCode.cluster_authorization_failed
    assert zk.reads == 0


def test_only_this_brokers_own_epoch():
    zk = ZooKeeper((1, 1000))
    for other in (-1, 41, 43):
        assert admit(guard(zk), request(1, broker_epoch=other)) == ErrorCode.stale_broker_epoch
    assert admit(guard(zk, broker_epoch=-1), request(1, broker_epoch=-1)) == ErrorCode.stale_broker_epoch


def test_an_epoch_zookeeper_does_not_confirm_is_never_adopted():
    zk = ZooKeeper((3, 1000))
    g = guard(zk)
    assert admit(g, request(3)) == ErrorCode.none
    assert g.adopted == (3, 1000)
    assert admit(g, request(999999)) == ErrorCode.stale_controller_epoch
    assert g.adopted == (3, 1000)
    assert admit(g, request(3)) == ErrorCode.none  # the real controller is still heard
    assert zk.reads == 2  # the adopted epoch needs no second look


def test_a_new_controller_is_adopted_once_zookeeper_names_it_and_the_old_one_is_fenced():
    zk = ZooKeeper((3, 1000))
    g = guard(zk)
    assert admit(g, request(3)) == ErrorCode.none
    zk.state = (4, 1001)
    assert admit(g, request(4, controller_id=1001)) == ErrorCode.none
    assert admit(g, request(3)) == ErrorCode.stale_controller_epoch
    assert admit(g, request(4, controller_id=1000)) == ErrorCode.stale_controller_epoch


def test_zookeeper_unreachable_confirms_nothing():
    g = guard(ZooKeeper(ConnectionError("no session")))
    assert admit(g, request(1)) == ErrorCode.stale_controller_epoch
    assert g.adopted is None


def test_a_request_for_the_registration_in_progress_waits_for_it():
    """The controller can answer a registration before the broker has stored the epoch its create
    returned: the request waits (bounded) instead of being refused for good."""
    zk = ZooKeeper((1, 1000))
    epochs = {"own": -1}
    g = ControlPlaneGuard("CONTROLLER", lambda: epochs["own"], zk)

    async def scenario():
        waiting = asyncio.create_task(g.admit(request(1, broker_epoch=42), "CONTROLLER"))
        for _ in range(5):
            await asyncio.sleep(0)
        assert not waiting.done()
        epochs["own"] = 42
        g.registered(42)
        return await asyncio.wait_for(waiting, 5)

    assert asyncio.run(scenario()) == ErrorCode.none


def test_a_forged_newer_broker_epoch_is_refused_after_the_bounded_wait():
    assert admit(guard(ZooKeeper((1, 1000))), request(1, broker_epoch=10**9)) == ErrorCode.stale_broker_epoch

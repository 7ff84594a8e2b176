"""The controller answers a controlled shutdown once its state writes are in, and builds the
LeaderAndIsr and UpdateMetadata requests afterwards, off its event loop: the stopping broker waits
for nothing they carry, and at 18,000 partitions building them took 0.4-0.8 s."""

import asyncio
import threading

import pytest
from kio.static.primitive import i32, i64

from odradek.common import messages as m
from odradek.common.config import ControllerConfig
from odradek.common.zk_data import BrokerInfo, EndPoint, TopicAssignment
from odradek.common.zk_data import LeaderIsrAndControllerEpoch as State
from odradek.controller import state_machine as sm
from odradek.controller.context import ControllerContext
from odradek.controller.context import TopicPartition as TP
from odradek.controller.controller import KafkaController
from odradek.controller.zk_client import WriteResult

pytestmark = pytest.mark.unit


class Channels:
    def __init__(self):
        self.sent = []

    def update_brokers(self, live):
        pass

    def send(self, broker_id, payload):
        self.sent.append((broker_id, type(payload).__name__))


class Zk:
    def write_states(self, writes, epoch_zk_version):
        return WriteResult(applied=list(writes))


def test_a_controlled_shutdown_is_answered_before_its_requests_are_built(monkeypatch):
    controller = KafkaController(ControllerConfig.from_properties({
        "controller.id": "1000", "zookeeper.connect": "127.0.0.1:1", "listeners": "PLAINTEXT://127.0.0.1:0"}))
    live = {b: BrokerInfo(b, (EndPoint("127.0.0.1", 9000 + b),), None, 100 + b) for b in (0, 1, 2)}
    ctx = ControllerContext(controller_id=1000, epoch=5, epoch_zk_version=5, live_brokers=live)
    ctx.assignments["t"] = TopicAssignment({0: (0, 1, 2), 1: (1, 0, 2)})
    ctx.partition_states.update({TP("t", 0): State(0, 0, (0, 1, 2), 5, 0), TP("t", 1): State(1, 0, (1, 0, 2), 5, 0)})
    controller.context, controller.channels = ctx, Channels()
    release, building = threading.Event(), threading.Event()
    real_build = sm.RequestBatch.build

    def slow_build(batch):
        building.set()
        assert release.wait(10)
        return real_build(batch)

    monkeypatch.setattr(sm.RequestBatch, "build", slow_build)

    async def main():
        controller.active.set()
        asking = asyncio.create_task(controller.controlled_shutdown(
            m.ControlledShutdownRequest(broker_id=i32(0), broker_epoch=i64(100))))
        event = await asyncio.wait_for(controller._events.get(), 5)
        handling = asyncio.create_task(controller._handle_request(Zk(), event))
        answer = await asyncio.wait_for(asking, 5)  # answered while the build still waits
        assert building.is_set() and not handling.done() and controller.channels.sent == []
        release.set()
        await asyncio.wait_for(handling, 5)
        await controller.build_threads.aclose(5)
        return answer

    answer = asyncio.run(main())
    assert answer.error == 0 and answer.remaining == ()
    assert {b for b, name in controller.channels.sent if name == "LeaderAndIsrRequest"} == {0, 1, 2}
    assert ctx.partition_states[TP("t", 0)].leader == 1  # applied after the requests went out

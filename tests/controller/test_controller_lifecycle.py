"""KafkaController in-process: stopping is prompt even when ZooKeeper cannot be reached."""

import asyncio

from virtual_time import until

from odradek.common.config import ControllerConfig
from odradek.controller.controller import KafkaController
from odradek.dev.zookeeper import free_port


def test_stop_is_prompt_while_zookeeper_is_unreachable():
    config = ControllerConfig.from_properties({
        "controller.id": "1000",
        "zookeeper.connect": f"127.0.0.1:{free_port()}/nowhere",
        "zookeeper.connection.timeout.ms": "30000",
        "listeners": "PLAINTEXT://127.0.0.1:0",
    })

    async def main():
        controller = KafkaController(config, stop_grace=20)  # longer than the bound below
        run = asyncio.create_task(controller.run())
        await until(lambda: controller._generation == 1, "the first session's start")  # its thread dials ZooKeeper
        assert not run.done() and not controller.active.is_set()
        controller.stop()
        await asyncio.wait_for(run, 10)

    asyncio.run(main())  # also waits for the worker thread: it must give up its connection attempt

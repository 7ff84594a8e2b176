"""The controller's listener, end to end: real `odradek controller` processes on the real ZooKeeper,
stand-in brokers, and the requests a broker sends (AlterPartition v1, ControlledShutdown v2) over
the endpoint published in /controller."""

import asyncio
import re

from kio.schema.errors import ErrorCode
from kio.static.primitive import i32, i64

from odradek.common import messages as m
from odradek.common import zk_data as z
from odradek.common.network.client import NetworkClient

from .fake_broker import partition_states
from .test_controller_process import (  # noqa: F401  (fixtures)
    active_controller,
    create_topic,
    start_broker,
    start_controller,
    state,
    wait_until,
    zk,
)


def send(endpoint: tuple[str, int], payload):
    async def go():
        client = NetworkClient(endpoint[0], endpoint[1], client_id="test-broker", connect_attempts=3)
        try:
            return await client.send(payload, 20)
        finally:
            await client.close()

    return asyncio.run(go())


def alter(broker_id: int, broker_epoch: int, leader_epoch: int, isr, partition_epoch: int) -> m.AlterPartitionRequest:
    return m.AlterPartitionRequest(broker_id=i32(broker_id), broker_epoch=i64(broker_epoch), topics=(
        m.AlterPartitionRequestTopic(topic_name="t", partitions=(
            m.AlterPartitionRequestPartition(partition_index=i32(0), leader_epoch=i32(leader_epoch),
                                             new_isr=tuple(i32(b) for b in isr), partition_epoch=i32(partition_epoch)),
        )),
    ))


def only_partition(response: m.AlterPartitionResponse):
    assert response.error_code == ErrorCode.none, response
    [t] = response.topics
    [p] = t.partitions
    return p


def test_listener_serves_alter_partition_controlled_shutdown_and_rebalances(zk, start_controller, start_broker):  # noqa: F811
    brokers = [start_broker(b) for b in (0, 1, 2)]
    epoch = {b.broker_id: zk.get(z.broker_path(b.broker_id))[1].czxid for b in brokers}
    controllers = {c: start_controller(c, "leader.imbalance.check.interval.seconds=1") for c in (1000, 1001)}
    active = wait_until(lambda: active_controller(zk), 30, "active controller")
    info = z.decode_controller(zk.get(z.CONTROLLER)[0])
    assert info.controller_id == active and info.endpoint is not None
    endpoint = (info.endpoint.host, info.endpoint.port)

    # the standby listens too, and answers NOT_CONTROLLER
    standby = controllers[2001 - active]
    found = wait_until(lambda: re.search(r"listening on PLAINTEXT://127\.0\.0\.1:(\d+)", standby.log()), 20,
                       "standby's listener")
    answer = send(("127.0.0.1", int(found.group(1))), alter(0, epoch[0], 0, (0, 1), 0))
    assert answer.error_code == ErrorCode.not_controller
    answer = send(("127.0.0.1", int(found.group(1))), m.ControlledShutdownRequest(broker_id=i32(0), broker_epoch=i64(epoch[0])))
    assert answer.error_code == ErrorCode.not_controller

    create_topic(zk, "t", {0: (0, 1, 2)})
    wait_until(lambda: state(zk, "t", 0), 20, "state of t-0")
    assert state(zk, "t", 0) == z.LeaderIsrAndControllerEpoch(0, 0, (0, 1, 2), 1, 0)

    # the leader shrinks the ISR: written with CAS, answered with the new state, announced to all
    p = only_partition(send(endpoint, alter(0, epoch[0], 0, (0, 1), 0)))
    assert (p.error_code, p.leader_id, p.leader_epoch, tuple(p.isr), p.partition_epoch) == (ErrorCode.none, 0, 0, (0, 1), 1)
    assert state(zk, "t", 0) == z.LeaderIsrAndControllerEpoch(0, 0, (0, 1), 1, 1)
    for b in brokers:
        b.wait_for(lambda b: [r for r in b.requests(m.UpdateMetadataRequest)
                              if partition_states(r).get(("t", 0)) and partition_states(r)[("t", 0)].zk_version == 1],
                   what="UpdateMetadata with the shrunk ISR")
    # a change made from the old partition epoch loses; a stale broker epoch is refused
    p = only_partition(send(endpoint, alter(0, epoch[0], 0, (0, 2), 0)))
    assert (p.error_code, tuple(p.isr), p.partition_epoch) == (ErrorCode.invalid_update_version, (0, 1), 1)
    assert send(endpoint, alter(0, epoch[0] - 1, 0, (0,), 1)).error_code == ErrorCode.stale_broker_epoch
    assert state(zk, "t", 0).isr == (0, 1)

    # controlled shutdown of the leader: leadership moves to 1, 0 leaves the ISR
    answer = send(endpoint, m.ControlledShutdownRequest(broker_id=i32(0), broker_epoch=i64(epoch[0])))
    assert answer.error_code == ErrorCode.none and answer.remaining_partitions == ()
    assert state(zk, "t", 0) == z.LeaderIsrAndControllerEpoch(1, 1, (1,), 1, 2)
    brokers[1].wait_for(lambda b: [r for r in b.requests(m.LeaderAndIsrRequest)
                                   if partition_states(r).get(("t", 0)) and partition_states(r)[("t", 0)].leader == 1],
                        what="LeaderAndIsr making 1 the leader")

    # broker 0 restarts, catches up (the leader adds it back), and becomes preferred leader again
    brokers[0].unregister()
    brokers[0].register()
    epoch[0] = zk.get(z.broker_path(0))[1].czxid
    p = wait_until(lambda: (r := send(endpoint, alter(1, epoch[1], 1, (1, 0), 2))).error_code == ErrorCode.none
                   and only_partition(r).error_code == ErrorCode.none and only_partition(r), 20,
                   "ISR expansion accepted once 0 is registered again")
    assert tuple(p.isr) == (1, 0)
    wait_until(lambda: state(zk, "t", 0).leader == 0, 20, "preferred leader back")
    assert state(zk, "t", 0) == z.LeaderIsrAndControllerEpoch(0, 2, (1, 0), 1, 4)

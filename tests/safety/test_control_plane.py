"""Issue 11, finding 2: no client can change replica state; only the controller ZooKeeper names can.

A client sent StopReplica(controller_epoch=999999, delete_partitions=true) on the client port and
deleted a topic's records on every replica; the raised epoch made the brokers ignore the real
controller from then on. Now controller requests are refused on client listeners
(CLUSTER_AUTHORIZATION_FAILED), and on the control-plane listener a broker epoch that is not the
broker's own or a controller epoch that ZooKeeper does not confirm is refused too. The records stay,
and the real controller keeps managing the broker.
"""

from kio.schema.errors import ErrorCode

from odradek.common import zk_data
from odradek.common.messages import (
    LeaderAndIsrPartitionState,
    LeaderAndIsrRequest,
    LeaderAndIsrTopicState,
    StopReplicaRequest,
    StopReplicaTopic,
    UpdateMetadataRequest,
)

from .hostile import exchange

FORGED_EPOCH = 999999


def _stop_replica(topic: str, broker_epoch: int, controller_id: int = 1000) -> StopReplicaRequest:
    return StopReplicaRequest(
        controller_id=controller_id, controller_epoch=FORGED_EPOCH, broker_epoch=broker_epoch,
        delete_partitions=True, topics=(StopReplicaTopic(name=topic, partition_indexes=(0, 1)),),
    )


def _leader_and_isr(topic: str, broker_epoch: int) -> LeaderAndIsrRequest:
    state = LeaderAndIsrPartitionState(partition_index=0, controller_epoch=FORGED_EPOCH, leader=-1,
                                       leader_epoch=FORGED_EPOCH, isr=(), zk_version=0, replicas=(0,))
    return LeaderAndIsrRequest(
        controller_id=1000, controller_epoch=FORGED_EPOCH, broker_epoch=broker_epoch,
        topic_states=(LeaderAndIsrTopicState(topic_name=topic, partition_states=(state,)),), live_leaders=(),
    )


def _update_metadata(broker_epoch: int) -> UpdateMetadataRequest:
    return UpdateMetadataRequest(controller_id=1000, controller_epoch=FORGED_EPOCH, broker_epoch=broker_epoch,
                                 topic_states=(), live_brokers=())


def test_a_client_cannot_delete_replicas_and_the_real_controller_keeps_working(cluster_factory):
    from integration.kafka_helpers import confluent_consume, confluent_produce, create_topic, make_records

    cluster = cluster_factory(brokers=1, controllers=1)
    cluster.wait_ready()
    create_topic(cluster.bootstrap, "precious", 2)
    records = make_records(300, "precious")
    confluent_produce(cluster.bootstrap, "precious", records)
    zk = cluster.zk_client()
    try:
        data, stat = zk.get(zk_data.broker_path(0))
        real_controller_epoch = zk_data.decode_controller_epoch(zk.get(zk_data.CONTROLLER_EPOCH)[0])
    finally:
        zk.stop()
        zk.close()
    registration = zk_data.decode_broker(0, data, stat.czxid)
    broker_epoch = registration.epoch
    control_port = registration.endpoint("CONTROLLER").port
    client_port = cluster.broker_ports[0]
    assert control_port != client_port

    # 1. On the client listener: refused, whatever the epochs.
    for request in (_stop_replica("precious", -1), _stop_replica("precious", broker_epoch),
                    _leader_and_isr("precious", broker_epoch), _update_metadata(broker_epoch)):
        assert exchange(client_port, request).error_code == ErrorCode.cluster_authorization_failed

    # 2. On the control-plane listener: not this broker's epoch, or an epoch ZooKeeper does not confirm.
    assert exchange(control_port, _stop_replica("precious", -1)).error_code == ErrorCode.stale_broker_epoch
    assert exchange(control_port, _stop_replica("precious", broker_epoch + 1)).error_code == ErrorCode.stale_broker_epoch
    for request in (_stop_replica("precious", broker_epoch), _leader_and_isr("precious", broker_epoch),
                    _update_metadata(broker_epoch)):
        assert exchange(control_port, request).error_code == ErrorCode.stale_controller_epoch
    # the real controller's own epoch with another controller id is not confirmed either
    impostor = StopReplicaRequest(controller_id=1001, controller_epoch=real_controller_epoch, broker_epoch=broker_epoch,
                                  delete_partitions=True, topics=(StopReplicaTopic(name="precious", partition_indexes=(0,)),))
    assert exchange(control_port, impostor).error_code == ErrorCode.stale_controller_epoch

    # Nothing was deleted, and the real controller still manages the broker: a new topic gets its
    # LeaderAndIsr and UpdateMetadata accepted, and both topics are read back in full.
    consumed = confluent_consume(cluster.bootstrap, "precious", 2, len(records))
    assert sum(map(len, consumed.values())) == len(records)
    create_topic(cluster.bootstrap, "after", 1)
    confluent_produce(cluster.bootstrap, "after", records[:10])
    assert len(confluent_consume(cluster.bootstrap, "after", 1, 10)[0]) == 10
    assert cluster.broker(0).alive and cluster.controller(0).alive

"""Acceptance for the topic admin APIs of issue 12 with real clients on a real cluster:
CreatePartitions from confluent-kafka and kafka-python (the new partitions get leaders, producers
write to them and consumers read them back); DeleteRecords (the start offset moves on every
replica, segments below it go, and it survives restarts)."""

import asyncio

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions

from odradek.common.network.client import NetworkClient

from .kafka_helpers import (
    confluent_consume,
    create_topic,
    kafka_python_consume,
    wait_for_leaders,
)


def produce_to_each(bootstrap: str, topic: str, partitions: int, per_partition: int, tag: str,
                    padding: int = 0) -> None:
    """`per_partition` keyed records to every partition by number (a fresh producer: fresh
    metadata; keys, as a compacted topic requires); batches stay below 16 KiB, so topics with small
    segments take them."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": False,
                         "message.timeout.ms": 30_000, "batch.size": 16384})
    failed = []
    for p in range(partitions):
        for i in range(per_partition):
            producer.produce(topic, key=f"{tag}-{p}-{i}".encode(), value=f"{tag}-{p}-{i}".encode() + b"." * padding,
                             partition=p,
                             on_delivery=lambda err, msg: err is not None and failed.append(err))
    assert producer.flush(60) == 0
    assert not failed, failed[:3]


def test_confluent_create_partitions_then_produce_and_consume(shared_cluster):
    bootstrap = shared_cluster.bootstrap
    topic = "grow-confluent"
    create_topic(bootstrap, topic, 2, replication_factor=2)
    produce_to_each(bootstrap, topic, 2, 10, "before")
    client = AdminClient({"bootstrap.servers": bootstrap})

    futures = client.create_partitions([NewPartitions(topic, 5)], validate_only=True, operation_timeout=30)
    futures[topic].result(timeout=40)
    assert len(wait_for_leaders(bootstrap, topic, 2)) == 2  # validate_only changed nothing

    futures = client.create_partitions([NewPartitions(topic, 5)], operation_timeout=30)
    futures[topic].result(timeout=40)
    leaders = wait_for_leaders(bootstrap, topic, 5)
    assert set(leaders.values()) <= {0, 1}
    produce_to_each(bootstrap, topic, 5, 10, "after")
    consumed = confluent_consume(bootstrap, topic, 5, 70, timeout=60)
    assert {p: len(records) for p, records in consumed.items()} == {0: 20, 1: 20, 2: 10, 3: 10, 4: 10}
    assert {c.record.value for c in consumed[4]} == {f"after-4-{i}".encode() for i in range(10)}

    for count in (3, 5):  # a decrease, no change: INVALID_PARTITIONS
        futures = client.create_partitions([NewPartitions(topic, count)], operation_timeout=30)
        with pytest.raises(KafkaException) as e:
            futures[topic].result(timeout=40)
        assert e.value.args[0].code() == KafkaError.INVALID_PARTITIONS
    futures = client.create_partitions([NewPartitions("no-such-topic", 3)], operation_timeout=30)
    with pytest.raises(KafkaException) as e:
        futures["no-such-topic"].result(timeout=40)
    assert e.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_kafka_python_create_partitions_with_an_assignment(shared_cluster):
    from kafka import KafkaAdminClient, KafkaProducer
    from kafka.admin import NewPartitions as KpNewPartitions
    from kafka.errors import InvalidPartitionsError, InvalidReplicationAssignmentError

    bootstrap = shared_cluster.bootstrap
    topic = "grow-kafka-python"
    create_topic(bootstrap, topic, 1, replication_factor=2)
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_partitions({topic: KpNewPartitions(total_count=3, new_assignments=[[1, 0], [0, 1]])},
                                timeout_ms=30_000)
        leaders = wait_for_leaders(bootstrap, topic, 3)
        assert (leaders[1], leaders[2]) == (1, 0)  # the preferred leaders asked for
        with pytest.raises(InvalidPartitionsError):
            admin.create_partitions({topic: KpNewPartitions(total_count=2)}, timeout_ms=30_000)
        with pytest.raises(InvalidReplicationAssignmentError):
            admin.create_partitions({topic: KpNewPartitions(total_count=4, new_assignments=[[0]])},
                                    timeout_ms=30_000)
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    try:
        futures = [producer.send(topic, value=b"kp-%d-%d" % (p, i), partition=p) for p in range(3) for i in range(5)]
        producer.flush(30)
        assert sorted({f.get(timeout=10).partition for f in futures}) == [0, 1, 2]
    finally:
        producer.close(timeout=10)
    consumed = kafka_python_consume(bootstrap, topic, 3, 15, timeout=60)
    assert {p: sorted(c.record.value for c in records) for p, records in consumed.items()} == {
        p: sorted(b"kp-%d-%d" % (p, i) for i in range(5)) for p in range(3)}


# --- DeleteRecords ---------------------------------------------------------------------------------


def replica_start_offsets(cluster, topic: str, partition: int = 0) -> dict[int, int]:
    """Each broker's own log start offset of the partition: ListOffsets(earliest) as a debugging
    tool asks it (replica_id -2 may read a follower)."""
    from kio.schema.list_offsets.v4 import request as lo
    from kio.static.primitive import i8, i32, i64

    payload = lo.ListOffsetsRequest(replica_id=i32(-2), isolation_level=i8(0), topics=(lo.ListOffsetsTopic(
        name=topic, partitions=(lo.ListOffsetsPartition(partition_index=i32(partition), timestamp=i64(-2)),)),))

    async def ask(port: int) -> int:
        client = NetworkClient("127.0.0.1", port)
        try:
            response = await client.send(payload, timeout=10)
        finally:
            await client.close()
        answer = response.topics[0].partitions[0]
        assert answer.error_code == 0, answer
        return int(answer.offset)

    return {b: asyncio.run(ask(port)) for b, port in enumerate(cluster.broker_ports) if cluster.broker(b).alive}


def segment_count(cluster, broker: int, topic: str, partition: int = 0) -> int:
    return len(list(cluster.partition_dir(broker, topic, partition).glob("*.log")))


def test_delete_records_moves_the_start_on_every_replica_and_survives_restarts(cluster_factory):
    from kafka import KafkaAdminClient
    from kafka import TopicPartition as KpTopicPartition
    from kafka.errors import OffsetOutOfRangeError, PolicyViolationError

    cluster = cluster_factory(brokers=3)
    bootstrap = cluster.bootstrap
    create_topic(bootstrap, "trim", 1, {"segment.bytes": "20000"}, replication_factor=3, timeout=60)
    create_topic(bootstrap, "trim-kp", 1, replication_factor=3, timeout=60)
    create_topic(bootstrap, "compacted", 1, {"cleanup.policy": "compact"}, replication_factor=3, timeout=60)
    produce_to_each(bootstrap, "trim", 1, 400, "r", padding=200)  # ~100 KB: several 20 KB segments
    produce_to_each(bootstrap, "trim-kp", 1, 50, "k")
    produce_to_each(bootstrap, "compacted", 1, 5, "c")
    before = {b: segment_count(cluster, b, "trim") for b in range(3)}
    assert min(before.values()) >= 3

    # confluent-kafka: the low watermark answered is the new start on every live replica
    client = AdminClient({"bootstrap.servers": bootstrap})
    futures = client.delete_records([TopicPartition("trim", 0, 300)], operation_timeout=30)
    deleted = futures[TopicPartition("trim", 0, 300)].result(timeout=40)
    assert deleted.low_watermark == 300
    assert replica_start_offsets(cluster, "trim") == {0: 300, 1: 300, 2: 300}
    after = {b: segment_count(cluster, b, "trim") for b in range(3)}
    assert all(after[b] < before[b] for b in range(3)), (before, after)  # whole segments below it gone
    consumed = confluent_consume(bootstrap, "trim", 1, 100, timeout=60)
    assert [c.offset for c in consumed[0]][:1] == [300] and len(consumed[0]) == 100
    # beyond the high watermark: OFFSET_OUT_OF_RANGE, nothing moves
    futures = client.delete_records([TopicPartition("trim", 0, 10_000)], operation_timeout=30)
    with pytest.raises(KafkaException) as e:
        futures[TopicPartition("trim", 0, 10_000)].result(timeout=40)
    assert e.value.args[0].code() == KafkaError.OFFSET_OUT_OF_RANGE
    assert replica_start_offsets(cluster, "trim") == {0: 300, 1: 300, 2: 300}

    # kafka-python: -1 deletes everything below the high watermark; compacted topics refuse
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        result = admin.delete_records({KpTopicPartition("trim-kp", 0): -1}, timeout_ms=30_000)
        assert [v["low_watermark"] for v in result.values()] == [50]
        with pytest.raises(PolicyViolationError):
            admin.delete_records({KpTopicPartition("compacted", 0): 2}, timeout_ms=30_000)
        with pytest.raises(OffsetOutOfRangeError):
            admin.delete_records({KpTopicPartition("trim-kp", 0): 51}, timeout_ms=30_000)
    finally:
        admin.close()
    assert replica_start_offsets(cluster, "trim-kp") == {0: 50, 1: 50, 2: 50}

    # every broker restarts: the starts were checkpointed
    for b in cluster.brokers:
        b.stop(30)
    for i in range(3):
        cluster.wait_broker_gone(i)
    for b in cluster.brokers:
        b.start()
    cluster.wait_ready(timeout=60)
    wait_for_leaders(bootstrap, "trim", 1)
    assert replica_start_offsets(cluster, "trim") == {0: 300, 1: 300, 2: 300}
    assert replica_start_offsets(cluster, "trim-kp") == {0: 50, 1: 50, 2: 50}
    consumed = confluent_consume(bootstrap, "trim", 1, 100, timeout=60)
    assert consumed[0][0].offset == 300

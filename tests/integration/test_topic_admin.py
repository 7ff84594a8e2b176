"""Acceptance for the topic admin APIs of issue 12 with real clients on a real cluster:
CreatePartitions from confluent-kafka and kafka-python (the new partitions get leaders, producers
write to them and consumers read them back)."""

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewPartitions

from .kafka_helpers import (
    confluent_consume,
    create_topic,
    kafka_python_consume,
    wait_for_leaders,
)


def produce_to_each(bootstrap: str, topic: str, partitions: int, per_partition: int, tag: str) -> None:
    """`per_partition` records to every partition by number (a fresh producer: fresh metadata)."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": False,
                         "message.timeout.ms": 30_000})
    failed = []
    for p in range(partitions):
        for i in range(per_partition):
            producer.produce(topic, value=f"{tag}-{p}-{i}".encode(), partition=p,
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

"""Idempotent producers end to end: clients' defaults (kafka-python 3.x, and librdkafka with
enable.idempotence=true) get a producer id from InitProducerId, their batches carry sequences,
and a batch retried after a leader dies is not written twice: the new leader knows the producer's
sequences from the batches it replicated as a follower."""

import collections
import signal
import uuid

from .kafka_helpers import (
    ContinuousProducer,
    confluent_consume,
    end_offsets,
    leader_of,
    verify_acknowledged,
    wait_for_partitions,
)
from .test_replication import PARTITIONS, replicated_cluster


def values_by_partition(bootstrap: str, topic: str) -> dict[int, list[bytes]]:
    ends = end_offsets(bootstrap, topic, PARTITIONS)
    consumed = confluent_consume(bootstrap, topic, PARTITIONS, sum(ends.values()), timeout=120)
    return {p: [c.record.value for c in consumed[p]] for p in consumed}


def test_kafka_python_default_producer_is_idempotent_and_writes_each_record_once(cluster_factory):
    from kafka import KafkaProducer

    topic = f"idem-kp-{uuid.uuid4().hex[:6]}"
    cluster = replicated_cluster(cluster_factory, topic)
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, max_block_ms=60_000, request_timeout_ms=30_000)
    try:
        assert producer.config["enable_idempotence"]  # the client's default, not switched off
        futures = [producer.send(topic, value=b"kp-%06d" % i, partition=i % PARTITIONS) for i in range(3000)]
        producer.flush(timeout=120)
        offsets = [f.get(timeout=1) for f in futures]  # raises the delivery error, if any
        assert producer._transaction_manager.producer_id_and_epoch.producer_id >= 0
    finally:
        producer.close(timeout=10)
    assert len({(md.partition, md.offset) for md in offsets}) == 3000
    values = values_by_partition(cluster.bootstrap, topic)
    assert sorted(v for vs in values.values() for v in vs) == [b"kp-%06d" % i for i in range(3000)]
    for p, vs in values.items():  # in send order per partition
        assert vs == sorted(vs), f"partition {p} out of order"


def test_idempotent_retries_across_a_leader_failover_write_nothing_twice(cluster_factory):
    topic = f"idem-fo-{uuid.uuid4().hex[:6]}"
    cluster = replicated_cluster(cluster_factory, topic)
    bootstrap = cluster.bootstrap
    producer = ContinuousProducer(bootstrap, topic, PARTITIONS, tag="idem", rate=3000, config={
        "enable.idempotence": True, "max.in.flight.requests.per.connection": 5}).start()
    try:
        producer.wait_acked(3000)
        for _ in range(2):  # two failovers: partition 0's leader dies mid-stream each time
            victim = leader_of(bootstrap, topic, 0)
            cluster.broker(victim).kill(signal.SIGKILL)
            wait_for_partitions(bootstrap, topic,
                                lambda v, victim=victim: all(x.leader not in (-1, victim) for x in v.values()),
                                f"leaders other than the killed broker {victim}", timeout=60)
            producer.wait_acked(3000)
            cluster.wait_broker_gone(victim)
            cluster.broker(victim).start()
            cluster.wait_ready(timeout=60)
            producer.wait_acked(2000)
    finally:
        producer.stop()
    assert not producer.errors, f"{len(producer.errors)} failed deliveries, first: {producer.errors[:3]}"
    verify_acknowledged(bootstrap, producer)
    values = values_by_partition(bootstrap, topic)
    counts = collections.Counter(v for vs in values.values() for v in vs)
    twice = [v for v, n in counts.items() if n > 1]
    assert not twice, f"{len(twice)} records written more than once, first: {sorted(twice)[:5]}"
    assert len(counts) == producer.sent  # every record sent was written (retried until acknowledged)

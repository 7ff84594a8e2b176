"""Prometheus endpoints of a real cluster (brokers and controller) under a real client's load:
every endpoint answers, and the figures move as the load does."""

import time
import urllib.error
import urllib.request
import uuid

import pytest
from confluent_kafka import Consumer, TopicPartition

from odradek.dev.cluster import LocalCluster
from odradek.dev.zookeeper import free_ports

from .conftest import BROKER_DEFAULTS, CONTROLLER_DEFAULTS
from .kafka_helpers import confluent_produce, create_topic, make_records, wait_isr_full
from .metrics_scrape import scrape, value

pytestmark = pytest.mark.timeout(240)

TOPIC = "metered"
PARTITIONS = 2


def wait_until(check, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, f"timed out after {timeout}s waiting for {what}"
        time.sleep(0.2)


def test_metrics_follow_the_load(zookeeper, tmp_path):
    cluster = LocalCluster(tmp_path / "cluster", brokers=2, controllers=1, broker_ports=free_ports(2),
                           zookeeper_connect=f"{zookeeper.connect}/odradek-{uuid.uuid4().hex[:8]}",
                           broker_overrides=BROKER_DEFAULTS, controller_overrides=CONTROLLER_DEFAULTS, metrics=True)
    cluster.start()
    try:
        urls = cluster.metrics_urls
        assert set(urls) == {"broker-0", "broker-1", "controller-0"}
        brokers = [urls["broker-0"], urls["broker-1"]]

        def broker_total(name, **labels):
            return sum(value(scrape(u), name, **labels) for u in brokers)

        with pytest.raises(urllib.error.HTTPError) as not_found:
            urllib.request.urlopen(urls["broker-0"].replace("/metrics", "/other"), timeout=5)
        assert not_found.value.code == 404

        create_topic(cluster.bootstrap, TOPIC, PARTITIONS, {"min.insync.replicas": "2"}, replication_factor=2)
        wait_isr_full(cluster.bootstrap, TOPIC, PARTITIONS)
        assert broker_total("kafka_server_brokertopicmetrics_messagesin_total", topic=TOPIC) == 0
        controller = scrape(urls["controller-0"])
        assert value(controller, "kafka_controller_kafkacontroller_activecontrollercount") == 1
        assert value(controller, "kafka_controller_kafkacontroller_globalpartitioncount") == PARTITIONS
        assert value(controller, "kafka_controller_controllerstats_leaderelectionrateandtimems_count") >= PARTITIONS
        assert value(controller, "kafka_controller_kafkacontroller_offlinepartitionscount") == 0

        records = make_records(500, "m")
        delivered = confluent_produce(cluster.bootstrap, TOPIC, records, {"acks": "all"})
        total_bytes = sum(len(r.value) for r in records)
        assert broker_total("kafka_server_brokertopicmetrics_messagesin_total", topic=TOPIC) == 500
        assert broker_total("kafka_server_brokertopicmetrics_bytesin_total", topic=TOPIC) > total_bytes
        assert broker_total("kafka_network_requestmetrics_requests_total", request="Produce") > 0
        p99 = [v for u in brokers for n, ls, v in scrape(u)
               if n == "kafka_network_requestmetrics_totaltimems" and ls == {"request": "Produce", "quantile": "0.99"}]
        assert p99 and all(v > 0 for v in p99)
        # the follower fetches showed as replication bytes, not as bytes out to consumers
        assert broker_total("kafka_server_brokertopicmetrics_replicationbytesout_total", topic=TOPIC) > 0
        assert broker_total("kafka_server_brokertopicmetrics_bytesout_total", topic=TOPIC) == 0
        assert broker_total("kafka_log_log_size", topic=TOPIC) > 2 * total_bytes  # two replicas each

        # a consumer group 40 records behind on each partition: its lag, and bytes out
        ends = {p: max(d.offset for d in delivered if d.partition == p) + 1 for p in range(PARTITIONS)}
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "paused",
                             "enable.auto.commit": False, "auto.offset.reset": "earliest"})
        try:
            consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
            wait_until(lambda: consumer.poll(1.0) is not None, 30, "a record consumed")
            consumer.commit(offsets=[TopicPartition(TOPIC, p, ends[p] - 40) for p in range(PARTITIONS)],
                           asynchronous=False)
        finally:
            consumer.close()
        assert broker_total("kafka_server_brokertopicmetrics_bytesout_total", topic=TOPIC) > 0
        for p in range(PARTITIONS):
            wait_until(lambda p=p: broker_total("kafka_consumergroup_lag", consumergroup="paused", topic=TOPIC,
                                            partition=str(p)) == 40, 30, f"lag 40 on partition {p}")
        assert broker_total("kafka_server_replicamanager_underreplicatedpartitions") == 0

        # a broker stopped: the other leads every partition, each missing a replica
        cluster.broker(1).stop()
        # (__consumer_offsets has two replicas too, and min.insync.replicas 1)
        def every_led_partition_under_replicated():
            s = scrape(brokers[0])
            led = value(s, "kafka_server_replicamanager_leadercount")
            return (led >= PARTITIONS and value(s, "kafka_server_replicamanager_underreplicatedpartitions") == led
                    and value(s, "kafka_cluster_partition_underreplicated", topic=TOPIC) == PARTITIONS)
        wait_until(every_led_partition_under_replicated, 60, "under-replicated partitions on broker 0")
        samples = scrape(brokers[0])
        assert value(samples, "kafka_server_replicamanager_underminisrpartitioncount") == PARTITIONS
        # Kafka's per-partition gauges (Strimzi's dashboard sums them)
        assert value(samples, "kafka_cluster_partition_underminisr", topic=TOPIC) == PARTITIONS
        assert value(samples, "kafka_cluster_partition_underreplicated", topic=TOPIC) == PARTITIONS
        assert value(samples, "kafka_cluster_partition_atminisr", topic=TOPIC) == 0
    finally:
        cluster.stop()

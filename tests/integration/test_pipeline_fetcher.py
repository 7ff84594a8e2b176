"""An executor's range read (pipeline/fetcher.py) against a real cluster whose leader just died."""

import signal
import time
import uuid

from odradek.pipeline.fetcher import read_range
from odradek.pipeline.offsets import OffsetRange
from odradek.pipeline.options import read_options

from .kafka_helpers import confluent_produce, create_topic, leader_of, make_records, wait_isr_full


def test_a_range_started_while_its_leader_is_dead_is_read_from_the_new_leader(cluster_factory):
    """A consumer made between the leader's death and the election caches the dead leader and
    would ask it until its periodic metadata refresh (minutes): the read must still finish."""
    cluster = cluster_factory(brokers=3)
    topic = f"fetcher-{uuid.uuid4().hex[:8]}"
    create_topic(cluster.bootstrap, topic, 1, replication_factor=3, config={"min.insync.replicas": "2"})
    wait_isr_full(cluster.bootstrap, topic, 1)
    delivered = confluent_produce(cluster.bootstrap, topic, make_records(50, "f"), config={"acks": "all"})
    options = read_options({"kafka.bootstrap.servers": cluster.bootstrap, "subscribe": topic}, streaming=False)

    victim = leader_of(cluster.bootstrap, topic, 0)
    cluster.broker(victim).kill(signal.SIGKILL)
    start = time.monotonic()
    batches = list(read_range(options, OffsetRange(topic, 0, 0, len(delivered))))
    offsets = [o for b in batches for o in b.column("offset").to_pylist()]
    assert offsets == sorted(d.offset for d in delivered)
    assert leader_of(cluster.bootstrap, topic, 0) != victim
    assert time.monotonic() - start < 60

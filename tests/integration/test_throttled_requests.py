"""The throttled Fetch and the request quota against a real broker and real clients.

- A consumer over consumer_byte_rate gets empty, throttled Fetch answers (Kafka's
  getThrottledResponse) and fetches the same offsets again once unmuted: confluent-kafka and
  kafka-python read every record exactly once, in order, no faster than the quota allows.
- request_percentage: a client that keeps the broker busy gets throttle_time_ms in its answers and
  a muted connection; another client on the same broker is not throttled.
"""

import asyncio
import time

import pytest
from confluent_kafka import Consumer, Producer

from odradek.common import wire
from odradek.common.api_key import ApiKey
from odradek.common.network.client import NetworkClient

from .conftest import new_cluster
from .kafka_helpers import ask, create_topic, quota_loads, wait_quotas_loaded
from .test_client_quotas import alter_request

pytestmark = pytest.mark.integration

QUOTA = 256 * 1024
VALUE_SIZE = 8 * 1024
COUNT = 200  # 1.6 MB: with 3 windows of 1 s, ~0.5 MB may go at once, the rest at the quota


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory):
    """One broker for the three tests: each throttles a client id and a topic of its own, and the
    quotas are per client id, so none sees another's (and no cluster start-up each)."""
    c = new_cluster(zookeeper, tmp_path_factory.mktemp("throttled"), brokers=1,
                    broker_overrides={"quota.window.num": 3, "quota.window.size.seconds": 1})
    c.start()
    yield c
    c.stop()


def fill(bootstrap: str, topic: str) -> None:
    create_topic(bootstrap, topic, 1)
    # batches well below what the quota window lets through: a batch larger than that could never
    # be fetched (Kafka answers at least one whole batch, and would throttle it every time)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 64 * 1024})
    for i in range(COUNT):
        producer.produce(topic, i.to_bytes(4, "big") + bytes(VALUE_SIZE - 4))
        producer.poll(0)
    assert producer.flush(30) == 0


def set_quota(cluster, client_id: str, key: str, value: float) -> None:
    """Set a quota and wait until the broker applied it (through the change notification)."""
    loads = len(quota_loads(cluster.broker(0)))
    (answer,) = ask(cluster.broker_ports[0], [alter_request([([("client-id", client_id)], [(key, value, False)])])])
    assert answer.entries[0].error_code == 0
    wait_quotas_loaded(cluster.broker(0), after=loads)


def least_time_s() -> float:
    """The bytes beyond what the quota window lets through at once, at the quota."""
    return (COUNT * VALUE_SIZE - 2 * QUOTA) / QUOTA


def test_throttled_fetches_lose_nothing_confluent(cluster):
    bootstrap = cluster.bootstrap
    fill(bootstrap, "held")
    set_quota(cluster, "reader", "consumer_byte_rate", QUOTA)
    throttles: list[float] = []
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "held", "client.id": "reader",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "throttle_cb": lambda event: throttles.append(event.throttle_time)})
    consumer.subscribe(["held"])
    seen: list[int] = []
    start = time.monotonic()
    try:
        deadline = start + 90
        while len(seen) < COUNT and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None or msg.error():
                continue
            seen.append(int.from_bytes(msg.value()[:4], "big"))
            assert msg.offset() == len(seen) - 1
    finally:
        consumer.close()
    elapsed = time.monotonic() - start
    print(f"confluent-kafka: {COUNT} records in {elapsed:.1f} s (at least {least_time_s():.1f} s at the quota), "
          f"{len(throttles)} throttle callbacks")
    assert seen == list(range(COUNT))
    assert throttles
    assert elapsed >= 0.8 * least_time_s()


def test_throttled_fetches_lose_nothing_kafka_python(cluster):
    from kafka import KafkaConsumer

    bootstrap = cluster.bootstrap
    fill(bootstrap, "held2")
    set_quota(cluster, "reader2", "consumer_byte_rate", QUOTA)
    consumer = KafkaConsumer("held2", bootstrap_servers=bootstrap, group_id="held2", client_id="reader2",
                             auto_offset_reset="earliest", enable_auto_commit=False)
    seen: list[int] = []
    start = time.monotonic()
    try:
        deadline = start + 90
        while len(seen) < COUNT and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200).values():
                for record in records:
                    assert record.offset == len(seen)
                    seen.append(int.from_bytes(record.value[:4], "big"))
    finally:
        consumer.close()
    elapsed = time.monotonic() - start
    print(f"kafka-python: {COUNT} records in {elapsed:.1f} s (at least {least_time_s():.1f} s at the quota)")
    assert seen == list(range(COUNT))
    assert elapsed >= 0.8 * least_time_s()


def metadata_request():
    schema = wire.request_schema(ApiKey.METADATA, 9)
    return schema(topics=None, allow_auto_topic_creation=False, include_cluster_authorized_operations=False,
                  include_topic_authorized_operations=False)


def busy_client(port: int, client_id: str, seconds: float) -> tuple[int, list[int], float]:
    """Metadata requests back to back for `seconds`: (answers, throttle times seen, the longest
    wait for an answer in s)."""

    async def run():
        client = NetworkClient("127.0.0.1", port, client_id=client_id)
        throttles: list[int] = []
        longest, answers = 0.0, 0
        try:
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                t0 = time.monotonic()
                response = await client.send(metadata_request(), timeout=30)
                longest = max(longest, time.monotonic() - t0)
                answers += 1
                throttles.append(wire.ms(response.throttle_time))
        finally:
            await client.close()
        return answers, throttles, longest

    return asyncio.run(run())


def test_request_percentage_throttles_a_busy_client_only(cluster):
    port = cluster.broker_ports[0]
    create_topic(cluster.bootstrap, "some", 8)
    set_quota(cluster, "busy", "request_percentage", 0.5)  # 5 ms of handler time per second
    answers, throttles, longest = busy_client(port, "busy", 4.0)
    thrown = [t for t in throttles if t > 0]
    print(f"busy: {answers} answers, {len(thrown)} throttled (max {max(thrown, default=0)} ms), "
          f"longest wait {longest * 1000:.0f} ms")
    assert thrown and max(thrown) <= 1000  # at most one quota window (ClientRequestQuotaManager)
    assert longest >= 0.8 * max(thrown) / 1000  # muted: the next answer waited the throttle time out
    other_answers, other_throttles, _ = busy_client(port, "calm", 1.0)
    assert other_answers and not any(other_throttles)

"""InitProducerId (api 22) at real brokers: idempotent producers of the real clients (kafka-python's
default, librdkafka with enable.idempotence=true) get a producer id with epoch 0, ids are unique
across brokers (each claims its own block in ZooKeeper), and a transactional id is refused with the
same non-retriable TRANSACTIONAL_ID_AUTHORIZATION_FAILED that FindCoordinator answers for transaction
keys (test_client_conformance checks that the clients fail at once)."""

import asyncio
import datetime
import json
import time
import uuid

from confluent_kafka import Producer
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8, i16, i32Timedelta, i64

from odradek.broker.log.record_batch import iter_batches
from odradek.common import wire, zk_data
from odradek.common.api_key import ApiKey
from odradek.common.network.client import NetworkClient

from .kafka_helpers import create_topic, leader_of

TIMEOUT = i32Timedelta.parse(datetime.timedelta(seconds=60))


def init_producer_id(version: int, transactional_id: str | None, producer_id: int = -1, epoch: int = -1):
    cls = wire.request_schema(ApiKey.INIT_PRODUCER_ID, version)
    fields = {"transactional_id": transactional_id, "transaction_timeout": TIMEOUT}
    if version >= 3:
        fields.update(producer_id=i64(producer_id), producer_epoch=i16(epoch))
    return cls(**fields)


def ask(port: int, requests: list) -> list:
    """Send the requests in order on one connection (it must survive refusals); their responses."""

    async def run():
        client = NetworkClient("127.0.0.1", port)
        try:
            return [await client.send(r, timeout=30) for r in requests]
        finally:
            await client.close()

    return asyncio.run(run())


def batch_producer_ids(log: bytes) -> list[tuple[int, int, int]]:
    """(producer_id, producer_epoch, base_sequence) of each batch in a .log file's bytes."""
    return [(b.producer_id, b.producer_epoch, b.base_sequence) for b in iter_batches(log)]


def test_api_versions_advertise_init_producer_id_from_v0(shared_cluster):
    cls = wire.request_schema(ApiKey.API_VERSIONS, 0)
    (response,) = ask(shared_cluster.broker_ports[0], [cls()])
    versions = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in response.api_keys}
    assert versions[ApiKey.INIT_PRODUCER_ID] == (0, 5)  # librdkafka wants v0 exactly; Java/kafka-python newer


def test_idempotent_producer_ids_are_unique_across_brokers_with_epoch_zero(shared_cluster):
    got = {}
    for broker, port in enumerate(shared_cluster.broker_ports):
        # every version we advertise; v3+ also with the id/epoch of a producer bumping (KIP-360)
        requests = [init_producer_id(v, None) for v in range(6)] + [init_producer_id(4, None, 12, 3)]
        responses = ask(port, requests)
        for r in responses:
            assert (r.error_code, int(r.producer_epoch)) == (ErrorCode.none, 0), r
        got[broker] = [int(r.producer_id) for r in responses]
    ids = [pid for ids in got.values() for pid in ids]
    assert all(pid >= 0 for pid in ids) and len(set(ids)) == len(ids), got
    for broker_ids in got.values():  # handed out in order from the broker's own block
        assert broker_ids == sorted(broker_ids)
    zk = shared_cluster.zk_client()
    try:
        block = zk_data.decode_producer_id_block(zk.get(zk_data.LATEST_PRODUCER_ID_BLOCK)[0])
    finally:
        zk.stop()
        zk.close()
    assert block.size == zk_data.PRODUCER_ID_BLOCK_SIZE and block.last_producer_id >= max(ids)


def test_transactional_ids_are_refused_like_find_coordinator_refuses_them(shared_cluster):
    port = shared_cluster.broker_ports[0]
    find_v3 = wire.request_schema(ApiKey.FIND_COORDINATOR, 3)(key="tx-1", key_type=i8(1))
    find_v4 = wire.request_schema(ApiKey.FIND_COORDINATOR, 4)(key_type=i8(1), coordinator_keys=("tx-1",))
    responses = ask(port, [
        find_v3, find_v4,
        init_producer_id(0, "tx-1"), init_producer_id(4, "tx-1"),
        init_producer_id(1, ""),  # Kafka: an empty transactional id is an invalid request
        init_producer_id(3, None, producer_id=5, epoch=-1),  # an id without an epoch
        init_producer_id(0, None),  # and the connection still serves
    ])
    refused = ErrorCode.transactional_id_authorization_failed
    assert responses[0].error_code == refused and "transaction coordinator" in responses[0].error_message
    assert responses[1].coordinators[0].error_code == refused
    for r in responses[2:4]:
        assert (r.error_code, int(r.producer_id), int(r.producer_epoch)) == (refused, -1, -1)
    assert [r.error_code for r in responses[4:6]] == [ErrorCode.invalid_request] * 2
    assert responses[6].error_code == ErrorCode.none and int(responses[6].producer_id) >= 0


def test_confluent_idempotent_producer_gets_a_producer_id(shared_cluster):
    stats: list[dict] = []
    producer = Producer({
        "bootstrap.servers": shared_cluster.bootstrap, "enable.idempotence": True,
        "statistics.interval.ms": 100, "stats_cb": lambda s: stats.append(json.loads(s)),
    })
    eos = {}
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and eos.get("idemp_state") != "Assigned":
            producer.poll(0.1)
            eos = stats[-1].get("eos", {}) if stats else {}
    finally:
        producer.flush(5)
    assert eos.get("idemp_state") == "Assigned", eos  # librdkafka's state once InitProducerId succeeded
    assert eos["producer_id"] >= 0 and eos["producer_epoch"] == 0


def test_kafka_python_default_producer_completes_init_producer_id(shared_cluster):
    from kafka import KafkaProducer

    bootstrap = shared_cluster.bootstrap
    topic = f"pid-kp-{uuid.uuid4().hex[:6]}"
    create_topic(bootstrap, topic, 1)
    producer = KafkaProducer(bootstrap_servers=bootstrap, max_block_ms=30_000, request_timeout_ms=30_000)
    try:
        assert producer.config["enable_idempotence"]  # the client's default
        futures = [producer.send(topic, value=b"v-%d" % i, partition=0) for i in range(5)]
        producer.flush(timeout=60)
        pid_epoch = producer._transaction_manager.producer_id_and_epoch
        assert pid_epoch.producer_id >= 0 and pid_epoch.epoch == 0
        offsets = [f.get(timeout=1).offset for f in futures]
    finally:
        producer.close(timeout=10)
    assert offsets == list(range(5))
    # the batch on disk carries the producer id the broker gave, its epoch and sequence 0
    log = shared_cluster.log_bytes(leader_of(bootstrap, topic, 0), topic, 0)
    assert batch_producer_ids(log)[0] == (pid_epoch.producer_id, 0, 0)

"""InitProducerId (api 22) at real brokers: idempotent producers of the real clients (kafka-python's
default, librdkafka with enable.idempotence=true) get a producer id with epoch 0, ids are unique
across brokers (each claims its own block in ZooKeeper), and a transactional id is served by its
transaction coordinator."""

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

from .kafka_helpers import ask, create_topic, leader_of

TIMEOUT = i32Timedelta.parse(datetime.timedelta(seconds=60))


def init_producer_id(version: int, transactional_id: str | None, producer_id: int = -1, epoch: int = -1):
    cls = wire.request_schema(ApiKey.INIT_PRODUCER_ID, version)
    fields = {"transactional_id": transactional_id, "transaction_timeout": TIMEOUT}
    if version >= 3:
        fields.update(producer_id=i64(producer_id), producer_epoch=i16(epoch))
    return cls(**fields)



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


def test_transactional_ids_go_to_their_coordinator(shared_cluster):
    """FindCoordinator's transaction key names the leader of the id's __transaction_state
    partition (created on first use); InitProducerId there gives epoch 0, then 1; elsewhere it
    is NOT_COORDINATOR; an empty id is an invalid request."""
    port = shared_cluster.broker_ports[0]
    find_v4 = wire.request_schema(ApiKey.FIND_COORDINATOR, 4)(key_type=i8(1), coordinator_keys=("tx-1",))
    deadline = time.monotonic() + 60
    while True:
        (found,) = ask(port, [find_v4])[0].coordinators
        if found.error_code == ErrorCode.none:
            break
        assert found.error_code == ErrorCode.coordinator_not_available, found
        assert time.monotonic() < deadline, "no transaction coordinator within 60 s"
        time.sleep(0.2)
    coordinator = int(found.port)
    other = next(p for p in shared_cluster.broker_ports if p != coordinator)
    for _ in range(300):  # the coordinator may still be loading its partition
        first = ask(coordinator, [init_producer_id(4, "tx-1")])[0]
        if first.error_code != ErrorCode.coordinator_load_in_progress:
            break
        time.sleep(0.1)
    responses = ask(coordinator, [
        init_producer_id(0, "tx-1"),
        init_producer_id(1, ""),  # Kafka: an empty transactional id is an invalid request
        init_producer_id(3, None, producer_id=5, epoch=-1),  # an id without an epoch
        init_producer_id(0, None),  # and the connection still serves
    ])
    assert (first.error_code, int(first.producer_epoch)) == (ErrorCode.none, 0)
    second = responses[0]
    assert (second.error_code, int(second.producer_id), int(second.producer_epoch)) == (
        ErrorCode.none, int(first.producer_id), 1)
    assert [r.error_code for r in responses[1:3]] == [ErrorCode.invalid_request] * 2
    assert responses[3].error_code == ErrorCode.none and int(responses[3].producer_id) >= 0
    assert ask(other, [init_producer_id(4, "tx-1")])[0].error_code == ErrorCode.not_coordinator


def test_confluent_transactional_producer_initializes(shared_cluster):
    producer = Producer({"bootstrap.servers": shared_cluster.bootstrap, "transactional.id": "tx-" + uuid.uuid4().hex})
    try:
        producer.init_transactions(60)
    finally:
        producer.flush(5)


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

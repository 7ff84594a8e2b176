"""The partition side of transactions at a real broker: transactional produce, WriteTxnMarkers
(the test plays the transaction coordinator), the last stable offset in Fetch and ListOffsets,
the aborted-transaction list of read_committed fetches, and librdkafka reading it all back."""

import pytest
from confluent_kafka import Consumer, TopicPartition
from data_broker import BrokerProcess, FakeController, WireClient, fetch_request, list_offsets_request, produce_request
from kio.schema.errors import ErrorCode
from kio.schema.write_txn_markers.v1.request import WritableTxnMarker, WritableTxnMarkerTopic, WriteTxnMarkersRequest
from kio.static.primitive import i16, i32, i64

from odradek.broker.log.control_batch import TRANSACTIONAL_MASK
from odradek.broker.log.record_batch import build_batch

TOPIC = "txn-data"
READ_COMMITTED = 1


@pytest.fixture
def broker(zk_connect, tmp_path):
    # the test plays the coordinator: no coordinator to verify first appends with (KIP-890)
    b = BrokerProcess(zk_connect, tmp_path, overrides=["transaction.partition.verification.enable=false"]).start()
    yield b
    code = b.stop()
    assert code == 0, b.stderr_tail()


@pytest.fixture
def client(broker):
    controller = FakeController(broker.zk_connect, {broker.broker_id: broker.port})
    controller.create_topic(TOPIC, partitions=1)
    c = WireClient(broker.port)
    yield c
    c.close()
    controller.close()


def produce_txn(c, pid, values, seq, epoch=0):
    records = build_batch(values, producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                          attributes=TRANSACTIONAL_MASK)
    resp = c.request(produce_request(9, TOPIC, 0, records, transactional_id=f"tx-{pid}"))
    (p,) = resp.responses[0].partition_responses
    assert p.error_code == ErrorCode.none
    return int(p.base_offset)


def write_marker(c, pid, commit, epoch=0, coordinator_epoch=0, partitions=(0,), topic=TOPIC):
    marker = WritableTxnMarker(producer_id=i64(pid), producer_epoch=i16(epoch), transaction_result=commit,
                               topics=(WritableTxnMarkerTopic(name=topic, partition_indexes=tuple(map(i32, partitions))),),
                               coordinator_epoch=i32(coordinator_epoch))
    resp = c.request(WriteTxnMarkersRequest(markers=(marker,)))
    return {int(p.partition_index): p.error_code for p in resp.markers[0].topics[0].partitions}


def fetch(c, isolation_level, offset=0):
    resp = c.request(fetch_request(12, TOPIC, 0, offset, isolation_level=isolation_level))
    return resp.responses[0].partitions[0]


def latest(c, isolation_level):
    resp = c.request(list_offsets_request(6, TOPIC, 0, -1, isolation_level=isolation_level))
    return int(resp.topics[0].partitions[0].offset)


def consume(bootstrap, isolation, end_offset):
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{isolation}", "enable.auto.commit": False,
                         "isolation.level": isolation, "enable.partition.eof": True})
    try:
        consumer.assign([TopicPartition(TOPIC, 0, 0)])
        values = []
        for _ in range(200):
            msg = consumer.poll(0.25)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == -191:  # _PARTITION_EOF
                    if consumer.position([TopicPartition(TOPIC, 0)])[0].offset >= end_offset:
                        return values
                    continue
                raise AssertionError(msg.error())
            values.append(msg.value())
        raise AssertionError(f"{isolation} consumer did not reach offset {end_offset}: {values}")
    finally:
        consumer.close()


def test_open_transactions_hold_the_lso_and_aborts_are_listed(broker, client):
    c = client
    a_first = produce_txn(c, 1000, [b"a1", b"a2"], seq=0)  # 0-1
    b_first = produce_txn(c, 2000, [b"b1"], seq=0)  # 2
    produce_txn(c, 1000, [b"a3"], seq=2)  # 3
    assert (a_first, b_first) == (0, 2)

    uncommitted = fetch(c, 0)
    assert (uncommitted.high_watermark, uncommitted.last_stable_offset) == (4, 0)
    assert uncommitted.records and uncommitted.aborted_transactions is None
    committed = fetch(c, READ_COMMITTED)
    assert committed.last_stable_offset == 0 and not committed.records
    assert (latest(c, READ_COMMITTED), latest(c, 0)) == (0, 4)

    assert write_marker(c, 1000, commit=False) == {0: ErrorCode.none}  # 4: A aborted
    assert latest(c, READ_COMMITTED) == 2  # B still open
    assert write_marker(c, 2000, commit=True) == {0: ErrorCode.none}  # 5: B committed
    committed = fetch(c, READ_COMMITTED)
    assert committed.last_stable_offset == committed.high_watermark == 6
    assert [(t.producer_id, t.first_offset) for t in committed.aborted_transactions] == [(1000, 0)]
    assert fetch(c, READ_COMMITTED, offset=5).aborted_transactions == ()  # the abort ended before 5

    assert consume(broker.bootstrap, "read_committed", 6) == [b"b1"]
    assert consume(broker.bootstrap, "read_uncommitted", 6) == [b"a1", b"a2", b"b1", b"a3"]


def test_late_markers_and_bad_partitions_get_kafkas_errors(broker, client):
    c = client
    produce_txn(c, 3000, [b"x"], seq=0, epoch=5)
    assert write_marker(c, 3000, commit=True, epoch=4) == {0: ErrorCode.invalid_producer_epoch}
    assert write_marker(c, 3000, commit=False, epoch=6, coordinator_epoch=3) == {0: ErrorCode.none}
    assert write_marker(c, 3000, commit=True, epoch=6, coordinator_epoch=2) == {
        0: ErrorCode.transaction_coordinator_fenced}
    assert write_marker(c, 3000, commit=True, partitions=(7,)) == {7: ErrorCode.unknown_topic_or_partition}
    assert write_marker(c, 3000, commit=True, topic="nope") == {0: ErrorCode.unknown_topic_or_partition}
    # the zombie (epoch 5) can write no more; a plain batch of another producer is untouched
    records = build_batch([b"late"], producer_id=3000, producer_epoch=5, base_sequence=1,
                          attributes=TRANSACTIONAL_MASK)
    resp = c.request(produce_request(9, TOPIC, 0, records, transactional_id="tx-3000"))
    assert resp.responses[0].partition_responses[0].error_code == ErrorCode.invalid_producer_epoch
    assert latest(c, READ_COMMITTED) == latest(c, 0) == 2

"""The broker's data path end to end: a real `odradek broker` process, driven by the controller's
wire requests (sent by the test) and used by real clients: confluent-kafka, kafka-python, kcat."""

import os
import socket
import struct
import subprocess
import threading
import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from data_broker import BrokerProcess, FakeController, WireClient, fetch_request, list_offsets_request, produce_request
from kazoo.client import KazooClient
from kio.schema.errors import ErrorCode

from odradek.broker.log.record_batch import build_batch
from odradek.common import wire, zk_data
from odradek.dev.waiting import wait_until

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


@pytest.fixture
def broker(zk_connect, tmp_path):
    b = BrokerProcess(zk_connect, tmp_path).start()
    yield b
    code = b.stop()
    assert code == 0, b.stderr_tail()


@pytest.fixture
def controller(broker):
    c = FakeController(broker.zk_connect, {broker.broker_id: broker.port})
    yield c
    c.close()


# --- ApiVersions ------------------------------------------------------------------------------------


def test_api_versions_advertises_data_and_metadata_apis(broker):
    from kio.schema.api_versions.v0.request import ApiVersionsRequest as V0
    from kio.schema.api_versions.v3.request import ApiVersionsRequest as V3

    c = WireClient(broker.port)
    try:
        v0 = c.request(V0())
        v3 = c.request(V3(client_software_name="odradek-test", client_software_version="1"))
        for resp in (v0, v3):
            assert resp.error_code == ErrorCode.none
            versions = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
            assert versions[0] == (0, 11)  # Produce from 0: formats v0/v1 up-converted
            assert versions[1] == (0, 17)
            assert versions[2][0] == 0  # ListOffsets v0 (legacy_schemas)
            assert versions[18] == (0, 4)
            assert 3 in versions and 19 in versions  # broker-metadata's APIs merged in
        # A newer ApiVersions than ours: UNSUPPORTED_VERSION and the list, in v0 layout.
        c.send_raw(wire.SIZE.pack(10) + b"\x00\x12\x00\x63\x00\x00\x00\x07\xff\xff")
        body = c.recv_frame()
        from kio.schema.api_versions.v0.response import ApiVersionsResponse
        from kio.serial import entity_reader

        assert body[:4] == b"\x00\x00\x00\x07"
        resp, _ = entity_reader(ApiVersionsResponse)(body, 4)
        assert resp.error_code == ErrorCode.unsupported_version
        assert any(k.api_key == 18 for k in resp.api_keys)
    finally:
        c.close()


# --- Produce/Fetch with real clients ----------------------------------------------------------------


def _records(n, tag):
    return [
        (b"k%04d" % (i % 50), b"%s-%06d-" % (tag.encode(), i) + os.urandom(40).hex().encode(), [("seq", b"%d" % i)])
        for i in range(n)
    ]


def _consume_all(bootstrap, topic, partitions, expected_total, timeout=60.0):
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False, "fetch.wait.max.ms": 100}
    )
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        out = {p: [] for p in range(partitions)}
        deadline = time.monotonic() + timeout
        got = 0
        while got < expected_total and time.monotonic() < deadline:
            for msg in consumer.consume(1000, timeout=0.5):
                assert msg.error() is None, msg.error()
                out[msg.partition()].append((msg.offset(), msg.key(), msg.value(), msg.headers()))
                got += 1
        return out
    finally:
        consumer.close()


@pytest.mark.parametrize("codec", CODECS)
def test_confluent_kafka_round_trip_every_codec(broker, controller, codec):
    topic = f"cf-{codec}"
    controller.create_topic(topic, partitions=3)
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap, "compression.type": codec, "linger.ms": 5, "acks": "all"}
    )
    sent = _records(3000, codec)
    delivered = []
    for key, value, headers in sent:
        producer.produce(topic, value, key, headers=headers, on_delivery=lambda err, msg: delivered.append(
            (err, msg.partition(), msg.offset(), msg.key(), msg.value())))
        producer.poll(0)
    assert producer.flush(30) == 0
    assert all(err is None for err, *_ in delivered), [d for d in delivered if d[0]][:3]
    by_partition = {}
    for _, p, offset, key, value in delivered:
        by_partition.setdefault(p, []).append((offset, key, value))
    got = _consume_all(broker.bootstrap, topic, 3, len(sent))
    for p, items in by_partition.items():
        items.sort()
        assert [o for o, *_ in items] == list(range(len(items)))  # no gaps, no duplicates
        assert [(o, k, v) for o, k, v, _ in got[p]] == items
        assert all(h and h[0][0] == "seq" for *_, h in got[p])


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_round_trip_every_codec(broker, controller, codec):
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTP

    topic = f"kp-{codec}"
    controller.create_topic(topic, partitions=2)
    producer = KafkaProducer(
        bootstrap_servers=broker.bootstrap, compression_type=None if codec == "none" else codec, linger_ms=5, acks="all",
        enable_idempotence=False,  # needs InitProducerId (API 22), not implemented yet
    )
    sent = _records(1000, codec)
    futures = [producer.send(topic, key=k, value=v, headers=h) for k, v, h in sent]
    producer.flush(30)
    metas = [f.get(timeout=30) for f in futures]
    producer.close(10)
    expected = {}
    for meta, (k, v, h) in zip(metas, sent):
        expected.setdefault(meta.partition, []).append((meta.offset, k, v, h))
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False, consumer_timeout_ms=3000)
    try:
        consumer.assign([KTP(topic, p) for p in range(2)])
        consumer.seek_to_beginning()
        got = {}
        deadline = time.monotonic() + 60
        while sum(len(v) for v in got.values()) < len(sent) and time.monotonic() < deadline:
            for tp, msgs in consumer.poll(timeout_ms=500).items():
                for m in msgs:
                    got.setdefault(tp.partition, []).append((m.offset, m.key, m.value, [(hk, hv) for hk, hv in m.headers]))
    finally:
        consumer.close()
    for p, items in expected.items():
        items.sort(key=lambda x: x[0])
        assert [o for o, *_ in items] == list(range(len(items)))
        assert got[p] == [(o, k, v, list(h)) for o, k, v, h in items]


def test_kcat_produce_and_consume(broker, controller, tmp_path):
    topic = "kcat"
    controller.create_topic(topic, partitions=1)
    lines = [f"line-{i}-{'x' * 50}" for i in range(5000)]
    src = tmp_path / "in.txt"
    src.write_text("\n".join(lines) + "\n")
    subprocess.run(
        ["kcat", "-P", "-b", broker.bootstrap, "-t", topic, "-p", "0", "-z", "lz4", "-X", "linger.ms=5", "-l", str(src)],
        check=True, timeout=60, capture_output=True,
    )
    out = subprocess.run(
        ["kcat", "-C", "-b", broker.bootstrap, "-t", topic, "-p", "0", "-o", "beginning", "-e", "-q"],
        check=True, timeout=60, capture_output=True, text=True,
    )
    assert out.stdout.splitlines() == lines
    listing = subprocess.run(["kcat", "-L", "-b", broker.bootstrap], check=True, timeout=30, capture_output=True, text=True)
    assert f'topic "{topic}"' in listing.stdout


# --- ListOffsets ------------------------------------------------------------------------------------


def test_list_offsets_earliest_latest_and_by_timestamp(broker, controller):
    topic = "times"
    controller.create_topic(topic, partitions=1)
    base = 1_700_000_000_000
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0, "batch.num.messages": 1})
    for i in range(20):
        producer.produce(topic, b"v%d" % i, partition=0, timestamp=base + i * 1000)
        producer.flush(10)  # one batch per record, so batch-level lookups are exact
    assert producer.flush(10) == 0
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g"})
    try:
        for ts, expected in [(base, 0), (base + 5500, 6), (base + 19_000, 19), (base - 1, 0)]:
            (tp,) = consumer.offsets_for_times([TopicPartition(topic, 0, ts)], timeout=10)
            assert tp.offset == expected, (ts, tp)
        (tp,) = consumer.offsets_for_times([TopicPartition(topic, 0, base + 10**6)], timeout=10)
        assert tp.offset in (-1, 20)  # no such record: librdkafka reports end/unknown
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        assert (low, high) == (0, 20)
    finally:
        consumer.close()
    c = WireClient(broker.port)
    try:
        for version in (1, 4, 6):
            resp = c.request(list_offsets_request(version, topic, 0, -1))
            (p,) = resp.topics[0].partitions
            assert (p.error_code, p.offset) == (ErrorCode.none, 20)
            resp = c.request(list_offsets_request(version, topic, 0, base + 5500))
            assert resp.topics[0].partitions[0].offset == 6
            assert resp.topics[0].partitions[0].timestamp == base + 6000
            resp = c.request(list_offsets_request(version, "nope", 0, -2))
            assert resp.topics[0].partitions[0].error_code == ErrorCode.unknown_topic_or_partition
    finally:
        c.close()


# --- long poll --------------------------------------------------------------------------------------


def test_fetch_long_poll_is_completed_by_an_append(broker, controller):
    topic = "poll"
    controller.create_topic(topic, partitions=1)
    c = WireClient(broker.port)
    producer = WireClient(broker.port)
    try:
        # Nothing there: the fetch waits max_wait, then answers empty.
        start = time.monotonic()
        resp = c.request(fetch_request(12, topic, 0, 0, max_wait_ms=300))
        assert time.monotonic() - start >= 0.25
        part = resp.responses[0].partitions[0]
        assert part.error_code == ErrorCode.none and not part.records and part.high_watermark == 0

        # A long poll (20 s) answered by an append made while it waits.
        batch = build_batch([b"hello", b"world"])
        timer = threading.Timer(0.3, lambda: producer.request(produce_request(9, topic, 0, batch)))
        start = time.monotonic()
        timer.start()
        resp = c.request(fetch_request(12, topic, 0, 0, max_wait_ms=20_000))
        elapsed = time.monotonic() - start
        timer.join()
        part = resp.responses[0].partitions[0]
        assert part.high_watermark == 2
        assert part.records and len(part.records) == len(batch)
        assert elapsed < 15, "the fetch was answered by its timeout, not by the append"

        # min_bytes larger than what arrives: waits for more (answered by the second append).
        c.request(fetch_request(12, topic, 0, 2, max_wait_ms=0))
        timer = threading.Timer(
            0.3, lambda: [producer.request(produce_request(9, topic, 0, build_batch([b"x" * 200]))) for _ in range(2)])
        timer.start()
        resp = c.request(fetch_request(12, topic, 0, 2, max_wait_ms=20_000, min_bytes=400))
        timer.join()
        assert resp.responses[0].partitions[0].high_watermark == 4
    finally:
        c.close()
        producer.close()


# --- produce errors, versions, acks -----------------------------------------------------------------


def test_produce_errors_and_versions(broker, controller):
    controller.create_topic("known", partitions=1)
    c = WireClient(broker.port)
    try:
        batch = build_batch([b"a", b"b", b"c"])
        for version in (3, 5, 7, 8, 9):
            resp = c.request(produce_request(version, "known", 0, batch))
            (p,) = resp.responses[0].partition_responses
            assert p.error_code == ErrorCode.none
        assert p.base_offset == 12
        resp = c.request(produce_request(9, "unknown-topic", 0, batch))
        assert resp.responses[0].partition_responses[0].error_code == ErrorCode.unknown_topic_or_partition
        resp = c.request(produce_request(9, "known", 7, batch))
        assert resp.responses[0].partition_responses[0].error_code == ErrorCode.unknown_topic_or_partition
        resp = c.request(produce_request(9, "known", 0, batch, acks=-1))
        assert resp.responses[0].partition_responses[0].error_code == ErrorCode.none
        resp = c.request(produce_request(9, "known", 0, batch, acks=2))
        assert resp.responses[0].partition_responses[0].error_code == ErrorCode.invalid_required_acks
        # a transactional batch needs the request's transactional id (Kafka's answer)
        txn_batch = build_batch([b"t"], producer_id=5, producer_epoch=0, base_sequence=0, attributes=0x10)
        resp = c.request(produce_request(9, "known", 0, txn_batch))
        assert resp.responses[0].partition_responses[0].error_code == ErrorCode.transactional_id_authorization_failed
        corrupt = bytearray(batch)
        corrupt[-1] ^= 0xFF
        resp = c.request(produce_request(9, "known", 0, bytes(corrupt)))
        assert resp.responses[0].partition_responses[0].error_code == ErrorCode.corrupt_message

        # acks=0: no response at all; the next request's answer comes next.
        c.correlation_id += 1
        c.send_raw(wire.encode_request(produce_request(9, "known", 0, batch, acks=0), c.correlation_id, "t"))
        resp = c.request(list_offsets_request(6, "known", 0, -1))
        assert resp.topics[0].partitions[0].offset == 21

        # Produce v2 carries message format v1: up-converted and appended at the log end (21).
        from odradek.broker.log.legacy_records import _message

        message_set = _message(0, 1, 1000, b"k", b"old") + _message(1, 1, 1001, None, b"format")
        legacy = b"\x00\x00\x00\x02\x00\x00\x00\x63\x00\x01t" + b"\x00\x01\x00\x00\x03\xe8" + b"\x00\x00\x00\x01"
        legacy += b"\x00\x05known\x00\x00\x00\x01\x00\x00\x00\x00" + struct.pack(">i", len(message_set)) + message_set
        c.send_raw(wire.SIZE.pack(len(legacy)) + legacy)
        frame = c.recv_frame()
        assert frame[:4] == b"\x00\x00\x00\x63"
        # responses[1] "known" partitions[1]: index 0, error 0, base offset 21
        assert frame[4:8] == b"\x00\x00\x00\x01" and frame[8:15] == b"\x00\x05known"
        assert frame[19:23] == b"\x00\x00\x00\x00" and frame[23:25] == b"\x00\x00"
        assert struct.unpack_from(">q", frame, 25) == (21,)
    finally:
        c.close()


def test_follower_partition_answers_not_leader(zk_connect, tmp_path):
    b = BrokerProcess(zk_connect, tmp_path).start()
    try:
        ctl = FakeController(zk_connect, {0: b.port, 1: b.port + 1})
        try:
            assignment = {0: (1, 0)}
            resp = ctl.leader_and_isr(0, "f", assignment)
            assert resp.partition_errors[0].error_code == ErrorCode.none
            ctl.update_metadata(0, "f", assignment)
            c = WireClient(b.port)
            try:
                resp = c.request(produce_request(9, "f", 0, build_batch([b"x"])))
                assert resp.responses[0].partition_responses[0].error_code == ErrorCode.not_leader_or_follower
                resp = c.request(fetch_request(12, "f", 0, 0))
                assert resp.responses[0].partitions[0].error_code == ErrorCode.not_leader_or_follower
            finally:
                c.close()
            # The leader moves here (epoch bump): now it takes writes.
            resp = ctl.leader_and_isr(0, "f", {0: (0,)})
            assert resp.partition_errors[0].error_code == ErrorCode.none
            c = WireClient(b.port)
            try:
                resp = c.request(produce_request(9, "f", 0, build_batch([b"x"])))
                assert resp.responses[0].partition_responses[0].error_code == ErrorCode.none
            finally:
                c.close()
        finally:
            ctl.close()
    finally:
        assert b.stop() == 0


# --- controller requests: fencing, StopReplica ------------------------------------------------------


def test_leader_and_isr_fencing_and_stop_replica(broker, controller):
    controller.create_topic("fenced", partitions=2)
    # Same leader epoch again: ignored with STALE_CONTROLLER_EPOCH per partition.
    resp = controller.leader_and_isr(0, "fenced", {0: (0,)}, epoch_bump=0)
    assert resp.partition_errors[0].error_code == ErrorCode.stale_controller_epoch
    # A newer controller epoch is accepted, then the old one is fenced as a whole.
    controller.controller_epoch = 5
    resp = controller.leader_and_isr(0, "fenced", {0: (0,)})
    assert resp.error_code == ErrorCode.none
    resp = controller.leader_and_isr(0, "fenced", {0: (0,)}, controller_epoch=4)
    assert resp.error_code == ErrorCode.stale_controller_epoch
    resp = controller.stop_replica(0, "fenced", [0], delete=True, controller_epoch=4)
    assert resp.error_code == ErrorCode.stale_controller_epoch
    # Not a replica here: UNKNOWN_TOPIC_OR_PARTITION for that partition.
    resp = controller.leader_and_isr(0, "other", {0: (7,)})
    assert resp.partition_errors[0].error_code == ErrorCode.unknown_topic_or_partition

    c = WireClient(broker.port)
    try:
        resp = c.request(produce_request(9, "fenced", 1, build_batch([b"x"])))
        assert resp.responses[0].partition_responses[0].error_code == ErrorCode.none
    finally:
        c.close()
    part_dir = broker.log_dir / "fenced-1"
    assert part_dir.is_dir()
    resp = controller.stop_replica(0, "fenced", [1], delete=True)
    assert resp.error_code == ErrorCode.none and resp.partition_errors[0].error_code == ErrorCode.none
    assert not part_dir.exists()
    c = WireClient(broker.port)
    try:
        resp = c.request(fetch_request(12, "fenced", 1, 0))
        assert resp.responses[0].partitions[0].error_code in (
            ErrorCode.not_leader_or_follower, ErrorCode.unknown_topic_or_partition,
        )
        resp = c.request(fetch_request(12, "fenced", 0, 0))
        assert resp.responses[0].partitions[0].error_code == ErrorCode.none
        # StopReplica without deletion: the partition stops serving, its data stays.
        resp = controller.stop_replica(0, "fenced", [0], delete=False)
        assert resp.partition_errors[0].error_code == ErrorCode.none
        resp = c.request(fetch_request(12, "fenced", 0, 0))
        assert resp.responses[0].partitions[0].error_code == ErrorCode.not_leader_or_follower
        assert (broker.log_dir / "fenced-0").is_dir()
    finally:
        c.close()


def test_sigterm_deregisters_and_restart_keeps_data(zk_connect, tmp_path):
    b = BrokerProcess(zk_connect, tmp_path).start()
    ctl = FakeController(zk_connect, {0: b.port})
    ctl.create_topic("durable", partitions=1)
    ctl.close()
    c = WireClient(b.port)
    for _ in range(3):
        resp = c.request(produce_request(9, "durable", 0, build_batch([b"a", b"b"])))
        assert resp.responses[0].partition_responses[0].error_code == ErrorCode.none
    c.close()
    assert b.stop() == 0
    zk = KazooClient(hosts=zk_connect, timeout=10)
    zk.start(timeout=10)
    try:
        assert zk.exists(zk_data.broker_path(0)) is None
    finally:
        zk.stop()
        zk.close()
    b2 = BrokerProcess(zk_connect, tmp_path, port=b.port).start()
    try:
        ctl = FakeController(zk_connect, {0: b2.port})
        ctl.leader_epochs[("durable", 0)] = 0
        resp = ctl.leader_and_isr(0, "durable", {0: (0,)})
        assert resp.partition_errors[0].error_code == ErrorCode.none
        ctl.update_metadata(0, "durable", {0: (0,)})
        ctl.close()
        c = WireClient(b2.port)
        try:
            resp = c.request(list_offsets_request(6, "durable", 0, -1))
            assert resp.topics[0].partitions[0].offset == 6
            resp = c.request(fetch_request(12, "durable", 0, 0))
            assert len(resp.responses[0].partitions[0].records) == 3 * len(build_batch([b"a", b"b"]))
        finally:
            c.close()
    finally:
        assert b2.stop() == 0


def test_find_coordinator_answers_not_available_while_offsets_topic_has_no_leader(broker):
    """No controller here, so __consumer_offsets never gets leaders: every key must wait, at every
    version, and the broker keeps serving."""
    from kio.schema.find_coordinator.v0.request import FindCoordinatorRequest as V0
    from kio.schema.find_coordinator.v3.request import FindCoordinatorRequest as V3
    from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest as V4

    c = WireClient(broker.port)
    try:
        v0 = c.request(V0(key="g"))
        v3 = c.request(V3(key="g", key_type=0))
        v4 = c.request(V4(key_type=0, coordinator_keys=("g1", "g2")))
        assert (v0.error_code, v0.node_id) == (ErrorCode.coordinator_not_available, -1)
        assert (v3.error_code, v3.node_id) == (ErrorCode.coordinator_not_available, -1)
        assert [(x.key, x.error_code) for x in v4.coordinators] == [
            ("g1", ErrorCode.coordinator_not_available),
            ("g2", ErrorCode.coordinator_not_available),
        ]
        assert c.request(V0(key="g")).error_code == ErrorCode.coordinator_not_available  # still serving
    finally:
        c.close()


# --- start-up: clients wait for registration and the controller's metadata (issue 32) ---------------


def _refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


def test_clients_are_refused_until_registered_with_the_controllers_metadata(zk_connect, tmp_path):
    """Kafka serves its data plane only after registering: a broker whose previous registration
    (a killed process's live ZooKeeper session) still stands, or which has had no UpdateMetadata,
    refuses client connections (clients ask another broker) and never answers Metadata from an
    empty cache; its control-plane listener serves all along, since the controller uses it."""
    b = BrokerProcess(zk_connect, tmp_path)
    zk = KazooClient(hosts=zk_connect, timeout=10)
    zk.start(timeout=10)
    try:
        # the previous process's registration: its endpoints, held by a session that is still alive
        leftover = zk_data.BrokerInfo(b.broker_id, (zk_data.EndPoint("127.0.0.1", b.port, "PLAINTEXT"),
                                                    zk_data.EndPoint("127.0.0.1", b.control_port, "CONTROLLER")))
        zk.create(zk_data.broker_path(b.broker_id), zk_data.encode_broker(leftover), ephemeral=True, makepath=True)
        b.spawn()
        deadline = time.monotonic() + 60
        while _refused(b.control_port):  # the control plane listens before registering
            assert time.monotonic() < deadline and b.alive(), b.stderr_tail()
            time.sleep(0.05)
        assert _refused(b.port)
        wait_until(lambda: "waiting for the previous registration" in b.stderr_path.read_text(errors="replace"),
                   "the broker waiting for the previous registration", 30, 0.05)
        assert _refused(b.port)
        zk.delete(zk_data.broker_path(b.broker_id))  # the old session expires
        b.wait_registered(30)
        time.sleep(0.5)
        assert _refused(b.port), "registered, but no UpdateMetadata yet: still no clients"
        b.announce(30)  # the controller's UpdateMetadata: now clients are served
        c = WireClient(b.port)
        try:
            from kio.schema.metadata.v12.request import MetadataRequest
            response = c.request(MetadataRequest(topics=(), allow_auto_topic_creation=False,
                                                 include_topic_authorized_operations=False))
            assert [int(x.node_id) for x in response.brokers] == [b.broker_id]
        finally:
            c.close()
        assert "auto-creation" not in b.stderr_tail(200)
    finally:
        zk.stop()
        zk.close()
        assert b.stop() == 0, b.stderr_tail()

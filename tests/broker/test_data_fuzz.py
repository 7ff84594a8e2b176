"""Fuzzed frames against a live broker: random bytes, truncated and oversized frames, wrong API
versions, garbage bodies behind valid headers, corrupt record batches. The broker must keep serving
and its stored data must not change (byte for byte, and as read back by a real client)."""

import random
import socket
import struct
import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from data_broker import (
    BrokerProcess,
    FakeController,
    WireClient,
    dir_snapshot,
    fetch_request,
    list_offsets_request,
    produce_request,
)
from kio.schema.errors import ErrorCode

from odradek.broker.log.record_batch import build_batch
from odradek.common import wire

MAX_REQUEST = 1 << 20
KNOWN_APIS = [0, 1, 2, 3, 4, 5, 6, 18, 19, 20, 32, 60]


@pytest.fixture
def loaded_broker(zk_connect, tmp_path):
    b = BrokerProcess(zk_connect, tmp_path, overrides=[f"socket.request.max.bytes={MAX_REQUEST}"]).start()
    ctl = FakeController(zk_connect, {0: b.port})
    ctl.create_topic("precious", partitions=2)
    ctl.close()
    producer = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 5, "compression.type": "lz4"})
    for i in range(2000):
        producer.produce("precious", b"value-%d" % i, b"key-%d" % (i % 17), partition=i % 2)
    assert producer.flush(30) == 0
    yield b
    code = b.stop()
    assert code == 0, b.stderr_tail()


def _read_back(bootstrap):
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "fuzz", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition("precious", p, OFFSET_BEGINNING) for p in range(2)])
        out = []
        deadline = time.monotonic() + 30
        while len(out) < 2000 and time.monotonic() < deadline:
            for m in consumer.consume(500, timeout=0.5):
                assert m.error() is None
                out.append((m.partition(), m.offset(), m.key(), m.value()))
        return sorted(out)
    finally:
        consumer.close()


def _send_and_drop(port, data: bytes, wait_close: bool = True):
    """Sends `data`, then waits (bounded) for the broker to answer or close; never raises on close."""
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    try:
        try:
            s.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            return
        if not wait_close:
            return
        s.settimeout(0.5)
        try:
            for _ in range(64):
                if not s.recv(65536):
                    return
        except (TimeoutError, ConnectionResetError):
            return
    finally:
        s.close()


def _assert_serving(port):
    c = WireClient(port)
    try:
        from kio.schema.api_versions.v0.request import ApiVersionsRequest

        assert c.request(ApiVersionsRequest()).error_code == ErrorCode.none
        resp = c.request(list_offsets_request(6, "precious", 0, -1))
        assert resp.topics[0].partitions[0].error_code == ErrorCode.none
    finally:
        c.close()


def test_fuzzed_frames_do_not_crash_the_broker_or_touch_data(loaded_broker):
    b = loaded_broker
    rng = random.Random(20240611)
    before_files = dir_snapshot(b.log_dir)
    before = _read_back(b.bootstrap)
    assert len(before) == 2000

    # 1. Random bytes, raw (the size prefix is random too).
    for _ in range(40):
        _send_and_drop(b.port, rng.randbytes(rng.randint(1, 300)))
    # 2. Valid size prefix, random body.
    for _ in range(60):
        body = rng.randbytes(rng.randint(0, 400))
        _send_and_drop(b.port, wire.SIZE.pack(len(body)) + body)
    # 3. Known API keys with random versions and random/garbage bodies.
    for _ in range(150):
        api = rng.choice(KNOWN_APIS)
        version = rng.choice([rng.randint(-5, 30), rng.randint(0, 12)])
        body = struct.pack(">hhi", api, version, rng.randint(0, 1 << 30)) + rng.randbytes(rng.randint(0, 200))
        _send_and_drop(b.port, wire.SIZE.pack(len(body)) + body)
    # 4. Valid requests, truncated at a random point (the frame claims more than is sent).
    valid = [
        wire.encode_request(produce_request(9, "precious", 0, build_batch([b"never-stored"])), 1, "fuzz"),
        wire.encode_request(fetch_request(12, "precious", 0, 0), 2, "fuzz"),
        wire.encode_request(list_offsets_request(6, "precious", 0, -1), 3, "fuzz"),
    ]
    for _ in range(30):
        frame = rng.choice(valid)
        _send_and_drop(b.port, frame[: rng.randint(1, len(frame) - 1)], wait_close=False)
    # 5. Valid frames with the body cut short *inside* the frame (size prefix adjusted): malformed.
    for _ in range(30):
        frame = rng.choice(valid)[4:]
        cut = frame[: rng.randint(8, len(frame) - 1)]
        _send_and_drop(b.port, wire.SIZE.pack(len(cut)) + cut)
    # 6. Oversized and negative size prefixes.
    for size in (MAX_REQUEST + 1, 2**31 - 1, -1, -(2**31)):
        _send_and_drop(b.port, struct.pack(">i", size) + b"\0" * 64)
    # 7. Produce v0-v2 headers with garbage after them.
    for version in (0, 1, 2):
        body = struct.pack(">hhi", 0, version, 7) + rng.randbytes(50)
        _send_and_drop(b.port, wire.SIZE.pack(len(body)) + body)
    _assert_serving(b.port)

    # 8. Corrupt record batches in well-formed Produce requests get CORRUPT_MESSAGE, nothing stored.
    c = WireClient(b.port)
    try:
        for _ in range(30):
            batch = bytearray(build_batch([b"corrupt-%d" % i for i in range(5)]))
            pos = rng.randint(0, len(batch) - 1)
            if 8 <= pos < 12 or pos < 8:
                pos = 21 + rng.randint(0, len(batch) - 22)  # keep offset/length: flip CRC-covered bytes
            batch[pos] ^= 1 << rng.randint(0, 7)
            resp = c.request(produce_request(9, "precious", 1, bytes(batch)))
            code = resp.responses[0].partition_responses[0].error_code
            assert code in (ErrorCode.corrupt_message, ErrorCode.invalid_record), code
        for junk in (b"", b"\0" * 10, rng.randbytes(100)):
            resp = c.request(produce_request(9, "precious", 0, junk))
            assert resp.responses[0].partition_responses[0].error_code != ErrorCode.none
    finally:
        c.close()

    assert b.alive(), b.stderr_tail()
    _assert_serving(b.port)
    assert _read_back(b.bootstrap) == before
    after_files = dir_snapshot(b.log_dir)
    data_files = [k for k in before_files if k.endswith(".log")]
    assert data_files
    for k in data_files:
        assert after_files[k] == before_files[k], k

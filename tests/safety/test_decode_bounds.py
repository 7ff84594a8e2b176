"""Issue 11, finding 1: no request frame can abort a broker or a controller.

kio's native reader reserved a compact array's claimed element count up front, and a 24-byte
Metadata v12 frame aborted the process. common/message_bounds checks every length against the
frame first. These tests feed the hostile corpus (tests/safety/hostile.py) to the decoder in a
child process (an abort there fails the test instead of killing pytest), and to a real broker and
a real controller process, which must survive and keep serving.
"""

import dataclasses
import datetime
import random
import struct
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from kio.serial import entity_reader

from odradek.common import message_bounds, wire
from odradek.common.config import parse_listeners

from .hostile import (
    FUZZ_FOUND_KEYS,
    METADATA_V12_HUGE_TOPICS,
    array_count,
    encode_body,
    fuzz_frames,
    huge_count_frames,
    request_schemas,
    send_frames,
)

TESTS_DIR = Path(__file__).resolve().parents[1]


def test_the_walk_ends_where_kio_ends_for_every_request_schema():
    """No false refusals: a well-formed body of every API and version (one element in every
    array, every tagged field present) is accepted, and the walk ends exactly where kio's does."""
    schemas = request_schemas()
    assert len(schemas) > 250
    for key, version, cls in schemas:
        body = encode_body(cls)
        _, size = entity_reader(cls)(body, 0)
        assert size == len(body), (key, version)
        assert message_bounds.check(cls, body) == len(body), (key, version)


def test_every_huge_count_is_refused():
    refused = 0
    for _key, _version, cls in request_schemas():
        for k in range(array_count(cls)):
            with pytest.raises(message_bounds.MalformedMessage):
                message_bounds.check(cls, encode_body(cls, huge_at=k))
            refused += 1
    assert refused > 500


@pytest.mark.parametrize("ms", [2**63 - 1, -(2**63), (2**63 - 1) // 1000 + 1])
@pytest.mark.parametrize(("api_key", "version", "field"), [
    (8, 2, "retention_time"), (8, 4, "retention_time"), (38, 3, "max_lifetime"), (39, 2, "renew_period"),
    (40, 2, "expiry_time_period")])
def test_durations_beyond_what_kio_reads_are_clamped_not_refused(api_key, version, field, ms):
    """Kafka reads any int64 duration (a structured fuzz run sent Long.MAX_VALUE max_lifetime_ms);
    kio's reader overflows past MAX_DURATION_MS, which closed the connection as if the frame were
    malformed. The duration is clamped, keeping its sign, and the request decodes."""
    cls = wire.request_schema(api_key, version)
    marker = datetime.timedelta(milliseconds=0x5EED5EED5EED)
    value = dataclasses.replace(entity_reader(cls)(encode_body(cls), 0)[0], **{field: marker})
    frame = bytearray(wire.encode_request(value, 7, "t"))
    struct.pack_into(">q", frame, frame.index(struct.pack(">q", 0x5EED5EED5EED)), ms)
    _, decoded, _ = wire.decode_request(bytes(frame[4:]))
    clamped = message_bounds.MAX_DURATION_MS if ms > 0 else -message_bounds.MAX_DURATION_MS
    assert getattr(decoded, field) == datetime.timedelta(milliseconds=clamped)
    assert dataclasses.replace(decoded, **{field: marker}) == value


@pytest.mark.integration  # decodes in a child process, so an abort would not take pytest down
def test_decoding_the_hostile_corpus_never_aborts():
    """wire.decode_request on the FINDINGS frame, every huge-count frame of the fuzz-found keys
    and a seeded fuzz over every key and version: each either decodes or raises ValueError; the
    process running it exits normally (an abort shows as a negative return code)."""
    script = textwrap.dedent(f"""
        import random, sys
        sys.path.insert(0, {str(TESTS_DIR)!r})
        from safety.hostile import *
        from odradek.common import wire
        frames = [METADATA_V12_HUGE_TOPICS]
        frames += [f for k, v, cls in request_schemas() if k in {FUZZ_FOUND_KEYS!r} for f in huge_count_frames(cls)]
        frames += [f for _, _, f in fuzz_frames(random.Random(11), per_schema=20)]
        refused = 0
        for f in frames:
            try:
                wire.decode_request(f[4:])
            except (KeyError, ValueError):
                refused += 1
        print(len(frames), refused)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    total, refused = map(int, done.stdout.split())
    assert total > 6000 and refused > total // 2


def _listener_port(process) -> int:
    (_, _, port), *_ = parse_listeners(process.overrides["listeners"])
    return port


def _hostile_corpus(seed: int) -> list[bytes]:
    frames = [METADATA_V12_HUGE_TOPICS]
    for key, _, cls in request_schemas():
        if key in FUZZ_FOUND_KEYS or key in (3, 4, 5, 6, 7, 56):
            frames += huge_count_frames(cls)
    frames += [f for _, _, f in fuzz_frames(random.Random(seed), per_schema=2)]
    return frames


@pytest.mark.timeout(900)
def test_broker_and_controller_survive_hostile_frames_and_keep_serving(cluster_factory):
    from integration.kafka_helpers import confluent_consume, confluent_produce, create_topic, make_records

    cluster = cluster_factory(brokers=1, controllers=1)
    cluster.wait_ready()
    broker, controller = cluster.broker(0), cluster.controller(0)
    corpus = _hostile_corpus(seed=2024)
    for process in (broker, controller):
        started = time.monotonic()
        send_frames(_listener_port(process), corpus, answer_timeout=0.5)
        assert process.alive, f"{process.name} died:\n{process.log_tail(40)}"
        print(f"{process.name}: {len(corpus)} hostile frames in {time.monotonic() - started:.1f}s")

    # Both keep serving: a topic is created (broker → ZooKeeper → controller → LeaderAndIsr),
    # written and read back by a real client.
    create_topic(cluster.bootstrap, "after-the-storm", 2)
    records = make_records(200, "storm")
    delivered = confluent_produce(cluster.bootstrap, "after-the-storm", records)
    assert len(delivered) == len(records)
    consumed = confluent_consume(cluster.bootstrap, "after-the-storm", 2, len(records))
    assert sum(map(len, consumed.values())) == len(records)
    assert broker.alive and controller.alive

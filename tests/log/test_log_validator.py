"""broker/log/log_validator: batches whose records do not match their header are refused.

The lying batches of issue 11 (finding 3) each get the error Kafka answers; every codec a client
may use is read (gzip, raw and xerial snappy, lz4 frames, zstd); and the C walk agrees with a
Python reference walk (written here, from Kafka's DefaultRecord layout) on valid and mutated
record sets.
"""

import random
import struct

import cramjam
import pytest
from safety.hostile import batch, lying_batches, record, records

from odradek.broker.log import log_validator as lv
from odradek.broker.log._records import walk_records
from odradek.broker.log.compression import XERIAL_MAGIC
from odradek.broker.log.errors import CorruptRecordError, InvalidRecordError, RecordTooLargeError
from odradek.broker.log.record_batch import build_batch, check_batch


def validate(buf: bytearray) -> None:
    info = check_batch(buf, 0, len(buf))
    lv.validate_client_batch(buf, info)


# --- accepted -------------------------------------------------------------------------------------


def test_uncompressed_batches_from_build_batch_are_accepted():
    for n in (1, 2, 100):
        buf = bytearray(build_batch([(b"k%d" % i, b"v" * i, [("h", b"1")]) for i in range(n)]))
        validate(buf)


@pytest.mark.parametrize("codec", ["gzip", "lz4", "zstd"])
def test_compressed_batches_from_build_batch_are_accepted(codec):
    validate(bytearray(build_batch([b"value-%d" % i for i in range(500)], compression=codec)))


def test_snappy_raw_and_xerial_framing_are_both_read():
    plain = records(50)
    raw = bytes(cramjam.snappy.compress_raw(plain))
    validate(batch(raw, 50, compression=2))
    half = len(plain) // 2
    blocks = [bytes(cramjam.snappy.compress_raw(part)) for part in (plain[:half], plain[half:])]
    xerial = XERIAL_MAGIC + struct.pack(">ii", 1, 1) + b"".join(struct.pack(">i", len(b)) + b for b in blocks)
    validate(batch(xerial, 50, compression=2))


def test_null_keys_values_and_header_values_are_valid():
    validate(batch(record(0, key=None, value=None, headers=[(b"a", None)]) + record(1), 2))


# --- refused: what issue 11 found stored ----------------------------------------------------------


def test_a_batch_claiming_more_records_than_it_holds():
    with pytest.raises(InvalidRecordError, match="fewer records"):
        validate(batch(records(3), 10))


def test_a_batch_claiming_fewer_records_than_it_holds():
    with pytest.raises(InvalidRecordError, match="bytes remain"):
        validate(batch(records(3), 1))


def test_a_record_count_of_two_to_the_31_minus_one():
    with pytest.raises(InvalidRecordError):
        validate(batch(records(3), 2**31 - 1))


def test_offset_deltas_must_be_0_to_n_minus_1():
    with pytest.raises(lv.RecordValidationError, match="offset delta") as e:
        validate(batch(record(0) + record(0) + record(2), 3))
    assert e.value.batch_index == 1


def test_garbage_record_bodies():
    with pytest.raises(InvalidRecordError):
        validate(batch(random.Random(1).randbytes(300), 5))


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_corrupt_compressed_payloads_are_corrupt_message(codec):
    good = {1: cramjam.gzip, 2: None, 3: cramjam.lz4, 4: cramjam.zstd}[codec]
    payload = bytearray(bytes(good.compress(records(20))) if good else bytes(cramjam.snappy.compress_raw(records(20))))
    payload[len(payload) // 2 :] = b"\xa5" * (len(payload) - len(payload) // 2)
    with pytest.raises((CorruptRecordError, InvalidRecordError)):
        validate(batch(bytes(payload), 20, compression=codec))
    with pytest.raises(CorruptRecordError):
        validate(batch(b"not compressed at all", 20, compression=codec))


def test_a_compressed_batch_that_inflates_too_far_is_refused(monkeypatch):
    monkeypatch.setattr(lv, "MAX_DECOMPRESSED_BYTES", 1 << 16)
    monkeypatch.setattr(lv, "_scratch", None)
    bomb = bytes(cramjam.zstd.compress(b"\0" * (1 << 20)))
    with pytest.raises(RecordTooLargeError):
        validate(batch(bomb, 1, compression=4))
    monkeypatch.setattr(lv, "_scratch", None)


def test_a_compressed_batch_whose_records_lie_is_invalid():
    with pytest.raises(InvalidRecordError, match="fewer records"):
        validate(batch(bytes(cramjam.zstd.compress(records(3))), 10, compression=4))


def test_transactional_bit_without_producer_id():
    with pytest.raises(InvalidRecordError, match="no producer id"):
        validate(batch(records(2), 2, attributes=lv.TRANSACTIONAL_MASK))


def test_transactional_bit_with_a_producer_id_is_the_producer_states_question():
    # whether the transaction is open is checked by producer state and the coordinator (KIP-890)
    validate(batch(records(2), 2, attributes=lv.TRANSACTIONAL_MASK, producer_id=7))


def test_every_lying_batch_of_the_hostile_corpus_is_refused():
    for name, (buf, error) in lying_batches().items():
        with pytest.raises((InvalidRecordError, CorruptRecordError)) as e:
            validate(bytearray(buf))
        assert e.value.error_code.name == error, name


def test_control_batches_from_clients():
    with pytest.raises(InvalidRecordError, match="control"):
        validate(batch(records(1), 1, attributes=0x20))


# --- the C walk against a reference walk ----------------------------------------------------------


def _read_varint(buf: bytes, pos: int, max_bytes: int) -> tuple[int, int]:
    value = shift = 0
    for _ in range(max_bytes):
        if pos >= len(buf):
            raise ValueError("eof")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return (value >> 1) ^ -(value & 1), pos
        shift += 7
    raise ValueError("varint too long")


def reference_walk(buf: bytes, count: int) -> int | None:
    """The index of the first bad record (count: bytes left over), or None: Kafka's
    DefaultRecord.readFrom rules plus offset delta i for record i."""
    pos = 0
    for i in range(count):
        try:
            length, pos = _read_varint(buf, pos, 5)
            if length < 0 or length > len(buf) - pos:
                return i
            rec, pos = buf[pos : pos + length], pos + length
            p = 1
            if p > len(rec):
                return i
            _, p = _read_varint(rec, p, 10)
            delta, p = _read_varint(rec, p, 5)
            if delta != i:
                return i
            for nullable in (True, True):
                n, p = _read_varint(rec, p, 5)
                if n < -1 or (n == -1 and not nullable) or n > len(rec) - p:
                    return i
                p += max(n, 0)
            headers, p = _read_varint(rec, p, 5)
            if headers < 0 or headers > len(rec) - p:
                return i
            for _ in range(headers):
                n, p = _read_varint(rec, p, 5)
                if n < 0 or n > len(rec) - p:
                    return i
                p += n
                n, p = _read_varint(rec, p, 5)
                if n < -1 or n > len(rec) - p:
                    return i
                p += max(n, 0)
            if p != len(rec):
                return i
        except ValueError:
            return i
    return None if pos == len(buf) else count


def test_the_c_walk_agrees_with_the_reference_on_mutated_records():
    rng = random.Random(11)
    disagreements = []
    for trial in range(3000):
        n = rng.randint(1, 12)
        data = bytearray(records(n))
        for _ in range(rng.randint(0, 3)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        claimed = n if rng.random() < 0.7 else rng.randint(0, 20)
        expected = reference_walk(bytes(data), claimed)
        got = walk_records(data, 0, len(data), claimed)
        if (got[0] if got else None) != expected:
            disagreements.append((trial, expected, got))
    assert not disagreements, disagreements[:5]


def test_every_keyless_record_of_a_compacted_batch_is_named():
    """KIP-467: the producer fails only the keyless records (Kafka's validateKey, record by record)."""
    buf = bytearray(build_batch([(b"k", b"a"), (None, b"b"), (b"k", b"c"), (None, b"d")]))
    info = check_batch(buf, 0, len(buf))
    with pytest.raises(lv.RecordValidationError) as e:
        lv.validate_client_batch(buf, info, compacted=True, partition="t-0")
    message = "Compacted topic cannot accept message without key in topic partition t-0"
    assert e.value.record_errors == [(1, message), (3, message)]
    assert str(e.value).startswith("One or more records have been rejected due to 2 record errors in total")
    lv.validate_client_batch(buf, info, compacted=False)

"""Transaction markers: the COMMIT/ABORT control batches a partition leader appends for the
transaction coordinator (Kafka's EndTransactionMarker).

A marker is a batch with the transactional and control attribute bits, the producer's id and
epoch, no sequence, and one record: key = (version 0, type: 0 ABORT, 1 COMMIT), value = (version 0,
coordinator epoch). Control batches are never compressed, so the record is read straight from
the batch bytes.
"""

import struct
from typing import NamedTuple

from .errors import CorruptRecordError
from .record_batch import CONTROL_MASK, HEADER_SIZE, Buffer, _read_varint, build_batch

TRANSACTIONAL_MASK = 0x10
ABORT, COMMIT = 0, 1
_KEY = struct.Struct(">hh")  # version, type
_VALUE = struct.Struct(">hi")  # version, coordinator epoch
MARKER_ATTRIBUTES = TRANSACTIONAL_MASK | CONTROL_MASK


class Marker(NamedTuple):
    commit: bool
    coordinator_epoch: int


def build_marker(producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool,
                 timestamp: int) -> bytes:
    """One marker batch at offset 0 (the leader assigns the real one)."""
    key = _KEY.pack(0, COMMIT if commit else ABORT)
    value = _VALUE.pack(0, coordinator_epoch)
    return build_batch([(key, value)], base_timestamp=timestamp, producer_id=producer_id,
                       producer_epoch=producer_epoch, base_sequence=-1, attributes=MARKER_ATTRIBUTES)


def read_marker(buf: Buffer, position: int, size: int) -> Marker | None:
    """The marker of the control batch at `buf[position:position+size]`; None for another
    control type (Kafka skips unknown ones). CorruptRecordError when the record is malformed."""
    end = position + size
    try:
        pos = position + HEADER_SIZE
        length, pos = _read_varint(buf, pos)
        record_end = pos + length
        pos += 1  # attributes
        _, pos = _read_varint(buf, pos)  # timestamp delta
        _, pos = _read_varint(buf, pos)  # offset delta
        key_len, pos = _read_varint(buf, pos)
        if key_len < _KEY.size or record_end > end:
            raise CorruptRecordError("control record key too short")
        version, kind = _KEY.unpack_from(buf, pos)
        pos += key_len
        if version != 0 or kind not in (ABORT, COMMIT):
            return None
        value_len, pos = _read_varint(buf, pos)
        coordinator_epoch = _VALUE.unpack_from(buf, pos)[1] if value_len >= _VALUE.size else -1
        return Marker(kind == COMMIT, coordinator_epoch)
    except (IndexError, struct.error) as exc:
        raise CorruptRecordError(f"malformed control record: {exc}") from None

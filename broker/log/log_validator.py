"""Kafka's LogValidator for what clients produce: a batch's records must be what its header says.

A batch with a valid CRC can still lie: claim 10 records and hold 3, give two records the same
offset delta, carry garbage record bodies or an undecodable compressed payload, claim 2^31-1
records, or set the transactional bit without a producer id. Stored, such a batch shifts offsets
for consumers (two records at one offset) or makes them stall or fail (issue 11, finding 3).
Before a leader appends, every batch from a client is checked here:

- the header: record count == lastOffsetDelta + 1 (stored batches may hold fewer), attributes
  consistent (`check_transactional`, `check_control`);
- the records, decompressed first if the batch is compressed (broker/log/compression): exactly
  `count` records that parse to the end of the batch, record i with offset delta i, every length inside its record.

Errors follow Kafka: records that do not parse or do not match the header are INVALID_RECORD
(InvalidRecordError, with the record's index for Produce v8+'s record_errors); a compressed
payload that does not decompress is CORRUPT_MESSAGE. The per-record walk is C (_records.c): in
Python it cost as much as the rest of a produce.
"""

from __future__ import annotations

import mmap

from . import compression
from ._records import walk_records
from .control_batch import TRANSACTIONAL_MASK
from .errors import InvalidRecordError
from .record_batch import CONTROL_MASK, HEADER_SIZE, BatchInfo, Buffer

MAX_DECOMPRESSED_BYTES = 128 * 1024 * 1024
"""A compressed batch that inflates beyond this is refused (a decompression bomb would otherwise
take the broker's memory); Kafka's own clients cap a batch far lower (batch.size, 16 KiB to MBs)."""

KEEP_RESIDENT_BYTES = 8 * 1024 * 1024
"""After inflating more than this, the scratch pages go back to the system."""

_scratch: mmap.mmap | None = None
"""Where compressed batches are inflated: anonymous memory whose pages exist only once written,
reused by every validation (the event loop validates one batch at a time)."""


class RecordValidationError(InvalidRecordError):
    """Records of the batch are invalid (Kafka's RecordValidationException): `record_errors` are
    their (position, message) pairs for Produce v8+'s record_errors (KIP-467), and the message is
    Kafka's summary of them (the produce response's error_message)."""

    def __init__(self, record_errors: list[tuple[int, str]]):
        shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in record_errors[:3])
        super().__init__(f"One or more records have been rejected due to {len(record_errors)} record errors in "
                         f"total, and only showing the first three errors at most: [{shown}]")
        self.record_errors = record_errors

    @property
    def batch_index(self) -> int:
        return self.record_errors[0][0]


def check_transactional(info: BatchInfo) -> None:
    """The transactional bit: only with a producer id (Kafka's LogValidator rule). Whether the
    producer's transaction is open is producer state's question (and, for its first batch at a
    partition, the transaction coordinator's: broker/transaction/verification)."""
    if info.attributes & TRANSACTIONAL_MASK and info.producer_id < 0:
        raise InvalidRecordError(f"transactional record batch at position {info.position} has no producer id")


def check_control(info: BatchInfo) -> None:
    """Control batches (transaction markers) are the broker's to write, never a client's."""
    if info.attributes & CONTROL_MASK:
        raise InvalidRecordError("clients are not allowed to write control records")


def validate_client_batch(buf: Buffer, info: BatchInfo, compacted: bool = False, partition: str = "") -> None:
    """All checks of one whole batch at `info.position` in `buf` (CRC already checked); a
    compacted topic's records must have keys (Kafka's validateKey: every keyless record is named,
    so the producer fails only those; `partition` names the topic partition in the message)."""
    check_control(info)
    check_transactional(info)
    if info.records_count != info.last_offset_delta + 1:
        raise InvalidRecordError(f"record batch at position {info.position} has {info.records_count} records but "
                                 f"lastOffsetDelta {info.last_offset_delta}")
    start = info.position + HEADER_SIZE
    end = info.position + info.size
    if info.compression:
        data = _inflate(info.compression, memoryview(buf)[start:end])
        try:
            failure = walk_records(data, 0, len(data), info.records_count, compacted)
        finally:
            used = len(data)
            data.release()
            _release_scratch(used)
    else:
        failure = walk_records(buf, start, end, info.records_count, compacted)
    if isinstance(failure, list):
        message = f"Compacted topic cannot accept message without key in topic partition {partition}"
        raise RecordValidationError([(index, message) for index in failure])
    if failure is not None:
        index, message = failure
        raise RecordValidationError([(index, f"record batch at position {info.position} (record {index} of "
                                             f"{info.records_count}): {message}")])


def _inflate(codec: int, payload: Buffer) -> memoryview:
    """The inflated records of a batch payload, as a view of the scratch memory (valid until the
    next call); pages a large batch touched are handed back to the system afterwards."""
    out = _scratch_view()
    try:
        n = compression.decompress_into(codec, payload, out)
        return out[:n]
    finally:
        out.release()


def _scratch_view() -> memoryview:
    global _scratch
    if _scratch is None:
        _scratch = mmap.mmap(-1, MAX_DECOMPRESSED_BYTES)
    return memoryview(_scratch)


def _release_scratch(used: int) -> None:
    if used > KEEP_RESIDENT_BYTES and _scratch is not None:
        _scratch.madvise(mmap.MADV_DONTNEED, 0, used - used % mmap.PAGESIZE)

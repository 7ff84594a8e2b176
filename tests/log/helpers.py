"""Test helpers: batches with checkable contents and a reader that decodes a whole log."""

from odradek.broker.log import Log
from odradek.broker.log.record_batch import build_batch, decode_records, iter_batches


def batch(values, ts: int = 1_000, **kwargs) -> bytes:
    """A batch whose record values are the given ints (as ASCII), all at timestamp `ts`."""
    return build_batch([str(v).encode() for v in values], base_timestamp=ts, **kwargs)


def read_all(log: Log, start: int | None = None, max_bytes: int = 1 << 20):
    """Every record from `start` to the log end as (offset, value), read segment by segment."""
    offset = log.log_start_offset if start is None else start
    out = []
    for _ in range(100_000):
        if offset >= log.log_end_offset:
            return out
        data = log.read(offset, max_bytes).read_bytes()
        assert data, f"empty read at {offset} below the log end {log.log_end_offset}"
        for info in iter_batches(data):
            for record in decode_records(data[info.position : info.position + info.size]):
                if record.offset >= offset:
                    out.append((record.offset, int(record.value)))
            offset = info.next_offset
    raise AssertionError("read_all did not finish")


def batches_in(data: bytes):
    return list(iter_batches(data))

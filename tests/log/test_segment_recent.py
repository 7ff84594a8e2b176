"""A segment finds the batches appended last without the sparse index (LogSegment._recent)."""

import pytest

from odradek.broker.log import Log, LogConfig
from odradek.broker.log import segment as segment_module
from odradek.broker.log.record_batch import read_header

from .helpers import batch, read_all

SPARSE = LogConfig(segment_bytes=1 << 20, index_interval_bytes=1 << 20, file_delete_delay_ms=0)
"""One segment, no index entry: every lookup starts at position 0 unless the segment knows better."""


@pytest.fixture
def log(tmp_path):
    lg = Log(tmp_path / "topic-0", SPARSE)
    yield lg
    lg.close()


def headers_read(monkeypatch) -> list[int]:
    """Counts the batch headers the segment reads from here on."""
    count = [0]

    def counting(buf, off, pos):
        count[0] += 1
        return read_header(buf, off, pos)

    monkeypatch.setattr(segment_module, "read_header", counting)
    return count


def test_reads_at_every_offset_of_a_long_tail(log):
    for start in range(0, 300, 3):
        log.append_as_leader(batch(range(start, start + 3)), leader_epoch=0)
    for offset in range(300):  # every offset, inside batches and at their starts
        assert read_all(log, offset)[0] == (offset, offset)


def test_a_read_at_a_recent_offset_reads_one_header(log, monkeypatch):
    for start in range(0, 300, 3):
        log.append_as_leader(batch(range(start, start + 3)), leader_epoch=0)
    count = headers_read(monkeypatch)
    (seg,) = log.segments
    info = seg.translate_offset(297)
    assert (info.base_offset, count[0]) == (297, 1)
    info = seg.translate_offset(3)  # long past: from the index's start, header by header
    assert info.base_offset == 3 and count[0] > 2


def test_truncation_forgets_the_positions_past_it(log):
    for start in range(0, 30, 3):
        log.append_as_leader(batch(range(start, start + 3)), leader_epoch=0)
    log.truncate_to(12)
    log.append_as_leader(batch(range(100, 109)), leader_epoch=1)  # one larger batch where four were
    log.append_as_leader(batch([200]), leader_epoch=1)
    assert log.log_end_offset == 22
    assert read_all(log, 13)[:2] == [(13, 101), (14, 102)]
    assert read_all(log, 21) == [(21, 200)]

import asyncio
import os
import socket
import time

import pytest

from odradek.broker.log import Log, LogConfig
from odradek.broker.log.errors import (
    CorruptRecordError,
    InvalidRecordError,
    KafkaStorageError,
    OffsetOutOfRangeError,
    RecordBatchTooLargeError,
    UnexpectedAppendOffsetError,
)
from odradek.broker.log.record_batch import HEADER, build_batch, decode_records

from .helpers import batch, batches_in, read_all

SMALL = LogConfig(segment_bytes=1000, index_interval_bytes=150, file_delete_delay_ms=0)


@pytest.fixture
def log(tmp_path):
    lg = Log(tmp_path / "topic-0", SMALL)
    yield lg
    lg.close()


def fill(lg: Log, n_batches: int, per_batch: int = 3, ts0: int = 1_000, epoch: int = 0) -> None:
    for i in range(n_batches):
        start = lg.log_end_offset
        lg.append_as_leader(batch(range(start, start + per_batch), ts=ts0 + i), leader_epoch=epoch)


def test_append_assigns_offsets_and_reads_back_across_segment_rolls(log):
    fill(log, 60)
    assert log.log_end_offset == 180
    assert len(log.segments) > 5
    assert [s.base_offset for s in log.segments] == sorted({s.base_offset for s in log.segments})
    assert read_all(log) == [(i, i) for i in range(180)]
    assert sorted(p.name for p in log.dir.iterdir())[:3] == [
        "00000000000000000000.index", "00000000000000000000.log", "00000000000000000000.timeindex"
    ]


def test_append_info_and_leader_epoch_rewrite(log):
    info = log.append_as_leader(batch([0, 1, 2]), leader_epoch=7)
    assert (info.first_offset, info.last_offset, info.num_records) == (0, 2, 3)
    assert info.log_append_time == -1 and info.valid_bytes > 61
    info = log.append_as_leader(batch([3]) + batch([4, 5], ts=2_000), leader_epoch=8)
    assert (info.first_offset, info.last_offset, info.max_timestamp, info.offset_of_max_timestamp) == (3, 5, 2000, 4)
    headers = [HEADER.unpack_from(log.read(o, 10_000).read_bytes()) for o in (0, 3)]
    assert [(h[0], h[2]) for h in headers] == [(0, 7), (3, 8)]
    assert log.leader_epoch_cache.entries == [(7, 0), (8, 3)]


def test_append_is_all_or_nothing(log):
    fill(log, 2)
    bad = bytearray(batch([9]))
    bad[-1] ^= 1
    for records in (batch([1]) + bytes(bad), batch([1]) + batch([2])[:-5]):
        with pytest.raises(CorruptRecordError):
            log.append_as_leader(records, leader_epoch=0)
    assert log.log_end_offset == 6
    assert log.active_segment.size == sum(len(batch([0, 0, 0], ts=t)) for t in (0, 1))


def test_append_larger_than_a_segment_is_rejected(tmp_path):
    lg = Log(tmp_path / "t-0", LogConfig(segment_bytes=300))
    try:
        with pytest.raises(RecordBatchTooLargeError):
            lg.append_as_leader(b"".join(batch([i]) for i in range(6)), leader_epoch=0)
        assert lg.log_end_offset == 0
    finally:
        lg.close()


def test_follower_takes_a_fetch_larger_than_a_segment_in_several_segments(tmp_path):
    """A follower's fetch may bring more than segment.bytes, or (after segment.bytes was lowered)
    one batch larger than it: the leader holds them, so the follower must take them all."""
    lg = Log(tmp_path / "t-0", LogConfig(segment_bytes=300, index_interval_bytes=0))
    try:
        data = b"".join(batch([i], base_offset=i) for i in range(6))
        data += build_batch([b"9" * 500], base_offset=6, base_timestamp=1_000)
        data += batch([7], base_offset=7)
        info = lg.append_as_follower(data)
        assert (info.first_offset, info.last_offset, lg.log_end_offset) == (0, 7, 8)
        assert len(lg.segments) >= 3 and all(seg.size <= 300 for seg in lg.segments if seg.size < 500)
        assert [(o, v) for o, v in read_all(lg) if o != 6] == [(i, i) for i in range(6)] + [(7, 7)]
        assert lg.read(6, 1 << 20).read_bytes()[61:]  # the oversized batch is whole in its own segment
    finally:
        lg.close()


def test_caller_bytes_are_not_modified_but_bytearray_is_rewritten_in_place(log):
    fill(log, 1)
    data = batch([1])
    log.append_as_leader(data, leader_epoch=0)
    assert HEADER.unpack_from(data)[0] == 0
    buf = bytearray(batch([2]))
    log.append_as_leader(buf, leader_epoch=0)
    assert HEADER.unpack_from(buf)[0] == 4


def test_log_append_time_topic(tmp_path):
    lg = Log(tmp_path / "t-0", LogConfig(message_timestamp_type="LogAppendTime"))
    try:
        info = lg.append_as_leader(batch([0, 1], ts=5), leader_epoch=0, now=777_000)
        assert info.log_append_time == 777_000 and info.max_timestamp == 777_000
        records = decode_records(lg.read(0, 10_000).read_bytes())
        assert [r.timestamp for r in records] == [777_000, 777_000]
        assert lg.fetch_offset_by_timestamp(700_000) == (0, 777_000)
    finally:
        lg.close()


def test_read_out_of_range_and_empty_at_end(log):
    fill(log, 3)
    with pytest.raises(OffsetOutOfRangeError) as err:
        log.read(10, 1000)
    assert err.value.error_code == 1
    empty = log.read(9, 1000)
    assert (empty.regions, empty.size, empty.first_offset) == ([], 0, 9)
    assert log.read(3, 1000, max_offset=3).size == 0


def test_read_returns_whole_batches_within_max_bytes(log):
    fill(log, 10)
    one = len(batch([0, 1, 2], ts=1000))
    data = log.read(0, one * 2 + one // 2)
    assert data.size == 2 * one
    assert [b.base_offset for b in batches_in(data.read_bytes())] == [0, 3]
    # starting inside a batch returns that whole batch
    mid = log.read(4, one)
    assert mid.first_offset == 3 and [b.base_offset for b in batches_in(mid.read_bytes())] == [3]


def test_min_one_message(log):
    fill(log, 3)
    assert log.read(0, 10, min_one_message=True).size == len(batch([0, 1, 2], ts=1000))
    nothing = log.read(0, 10, min_one_message=False)
    assert nothing.size == 0 and nothing.regions == []


def test_max_offset_is_exclusive(log):
    fill(log, 6)
    data = log.read(0, 1 << 20, max_offset=9)
    assert [b.base_offset for b in batches_in(data.read_bytes())] == [0, 3, 6]
    data = log.read(3, 1 << 20, max_offset=4)  # the batch holding 4 holds 3 too: Kafka serves nothing
    assert data.size == 0


def test_every_offset_found_through_the_sparse_index(log):
    for i in range(40):
        start = log.log_end_offset
        log.append_as_leader(batch(range(start, start + 1 + i % 4)), leader_epoch=0)
    assert any(len(s.index) for s in log.segments)
    for offset in range(log.log_start_offset, log.log_end_offset):
        data = log.read(offset, 1)
        first = batches_in(data.read_bytes())[0]
        assert first.base_offset <= offset <= first.last_offset


def test_fetch_offset_by_timestamp(log):
    # batch i holds offsets 3i..3i+2 with timestamps 10_000 + 10 i + (0, 1, 2)
    for i in range(30):
        o = log.log_end_offset
        ts = 10_000 + 10 * i
        recs = [(None, str(o + k).encode(), (), ts + k) for k in range(3)]
        log.append_as_leader(build_batch(recs, base_timestamp=ts), leader_epoch=0)
    assert log.fetch_offset_by_timestamp(0) == (0, 10_000)
    assert log.fetch_offset_by_timestamp(10_000) == (0, 10_000)
    assert log.fetch_offset_by_timestamp(10_001) == (1, 10_001)
    assert log.fetch_offset_by_timestamp(10_150) == (45, 10_150)
    assert log.fetch_offset_by_timestamp(10_152) == (47, 10_152)
    assert log.fetch_offset_by_timestamp(10_153) == (48, 10_160)
    assert log.fetch_offset_by_timestamp(10_292) == (89, 10_292)
    assert log.fetch_offset_by_timestamp(10_293) is None


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_fetch_offset_by_timestamp_in_compressed_batch(log, codec):
    """The record's own offset, in every codec (snappy batches answered the batch's first)."""
    recs = [(None, b"x", (), 500 + k) for k in range(8)]
    log.append_as_leader(build_batch(recs, base_timestamp=500, compression=codec), leader_epoch=0)
    assert log.fetch_offset_by_timestamp(503) == (3, 503)
    assert log.fetch_offset_by_timestamp(505) == (5, 505)


def test_follower_append_keeps_offsets_and_epochs(log):
    data = build_batch([b"0", b"1"], base_offset=0, partition_leader_epoch=3)
    data += build_batch([b"2"], base_offset=2, partition_leader_epoch=5)
    data += build_batch([b"3"], base_offset=3, partition_leader_epoch=5)[:20]  # cut by the fetch size
    info = log.append_as_follower(data)
    assert (info.first_offset, info.last_offset, info.num_records) == (0, 2, 3)
    assert log.log_end_offset == 3
    assert log.leader_epoch_cache.entries == [(3, 0), (5, 2)]
    with pytest.raises(UnexpectedAppendOffsetError):
        log.append_as_follower(build_batch([b"x"], base_offset=1))
    bad = bytearray(build_batch([b"x"], base_offset=3))
    bad[-1] ^= 1
    with pytest.raises(CorruptRecordError):
        log.append_as_follower(bytes(bad))
    log.append_as_follower(build_batch([b"3"], base_offset=3, attributes=0x20))  # control batches allowed
    assert log.log_end_offset == 4
    with pytest.raises(InvalidRecordError):
        log.append_as_leader(build_batch([b"x"], attributes=0x20), leader_epoch=5)


def test_truncate_to(log):
    fill(log, 30, epoch=1)
    log.append_as_leader(batch([90, 91, 92]), leader_epoch=2)
    log.high_watermark = log.log_end_offset
    assert log.truncate_to(50)  # inside the batch 48..50: it goes whole
    assert log.log_end_offset == 48
    assert log.high_watermark == 48
    assert read_all(log) == [(i, i) for i in range(48)]
    assert log.leader_epoch_cache.entries == [(1, 0)]
    assert all(s.base_offset <= 48 for s in log.segments)
    fill(log, 4)
    assert read_all(log) == [(i, i) for i in range(60)]
    assert not log.truncate_to(100)


def test_truncate_fully_and_start_at(log):
    fill(log, 10)
    log.truncate_fully_and_start_at(500)
    assert (log.log_start_offset, log.log_end_offset, len(log.segments)) == (500, 500, 1)
    assert log.active_segment.base_offset == 500
    fill(log, 1)
    assert read_all(log) == [(500, 500), (501, 501), (502, 502)]
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 100)


def test_retention_by_time_deletes_old_segments_below_high_watermark(log):
    fill(log, 40, ts0=1_000)
    fill(log, 40, ts0=500_000)
    log.high_watermark = log.log_end_offset
    segments = len(log.segments)
    assert log.delete_old_segments(now=1_000 + SMALL.retention_ms + 100) > 0
    assert len(log.segments) < segments
    assert log.log_start_offset == log.segments[0].base_offset > 0
    assert read_all(log)[-1] == (239, 239)
    # everything expired: the log rolls and keeps an empty active segment at the end offset
    log.delete_old_segments(now=10**13)
    assert (log.log_start_offset, log.log_end_offset, log.size) == (240, 240, 0)


def test_log_start_offset_moves_up_to_the_high_watermark_and_whole_segments_go(log):
    """DeleteRecords: records below the new start are gone for readers at once, the segments
    wholly below it are deleted, the one holding it stays; never above the high watermark."""
    fill(log, 40)
    log.high_watermark = 100
    with pytest.raises(OffsetOutOfRangeError):
        log.maybe_increment_log_start_offset(101)
    segments = len(log.segments)
    assert log.maybe_increment_log_start_offset(61)
    assert log.log_start_offset == 61 and len(log.segments) < segments
    assert log.segments[0].base_offset <= 61 < (log.segments[1].base_offset if len(log.segments) > 1 else log.log_end_offset)
    assert read_all(log)[0] == (61, 61) and read_all(log)[-1] == (119, 119)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(60, 1000)
    assert not log.maybe_increment_log_start_offset(50)  # never backwards
    assert log.leader_epoch_cache.entries[0].start_offset == 61
    log.high_watermark = log.log_end_offset
    assert log.maybe_increment_log_start_offset(log.log_end_offset)  # everything
    assert read_all(log) == [] and log.log_start_offset == log.log_end_offset == 120
    fill(log, 1)
    assert read_all(log) == [(120, 120), (121, 121), (122, 122)]


def test_log_start_offset_is_checkpointed_and_survives_a_restart(tmp_path):
    from odradek.broker.log import LogManager
    from odradek.broker.log.log_manager import LOG_START_OFFSET_CHECKPOINT
    from odradek.common.config import BrokerConfig

    config = BrokerConfig.from_properties({"broker.id": "0", "zookeeper.connect": "127.0.0.1:1"})
    manager = LogManager([tmp_path], config)
    manager.startup()
    lg = manager.get_or_create_log("t", 0, SMALL)
    fill(lg, 40)
    lg.high_watermark = lg.log_end_offset
    lg.maybe_increment_log_start_offset(61)
    manager.checkpoint_log_start_offsets()
    assert "t 0 61" in (tmp_path / LOG_START_OFFSET_CHECKPOINT).read_text()
    for clean in (True, False):
        manager.shutdown()
        if not clean:
            (tmp_path / ".kafka_cleanshutdown").unlink()
        manager = LogManager([tmp_path], config)
        manager.startup()
        lg = manager.get_log("t", 0)
        assert lg.log_start_offset == 61 and read_all(lg)[0] == (61, 61)
    manager.shutdown()


def test_retention_respects_the_high_watermark(log):
    fill(log, 40)
    log.high_watermark = 0
    assert log.delete_old_segments(now=10**13) == 0


def test_retention_by_size(tmp_path):
    lg = Log(tmp_path / "t-0", LogConfig(segment_bytes=1000, retention_bytes=2500, file_delete_delay_ms=0))
    try:
        fill(lg, 60, ts0=int(time.time() * 1000))
        lg.high_watermark = lg.log_end_offset
        assert lg.delete_old_segments() > 0
        # Kafka keeps at least retention.bytes: the oldest segments go while the rest still exceeds it
        assert lg.size >= 2500 and lg.size - lg.segments[0].size < 2500
        assert read_all(lg)[-1] == (179, 179)
    finally:
        lg.close()


def test_deleted_segment_stays_readable_until_the_delete_delay(tmp_path):
    lg = Log(tmp_path / "t-0", LogConfig(segment_bytes=1000, file_delete_delay_ms=60_000))
    try:
        fill(lg, 40)
        lg.high_watermark = lg.log_end_offset
        region = lg.read(0, 1 << 20).regions[0]
        before = region.read_bytes()
        lg.delete_old_segments(now=10**13)
        assert not (lg.dir / "00000000000000000000.log").exists()
        assert (lg.dir / "00000000000000000000.log.deleted").exists()
        assert region.read_bytes() == before
        assert lg.delete_pending_files(now=10**13 + 59_000) == 0
        assert region.read_bytes() == before
        assert lg.delete_pending_files(now=10**13 + 60_001) > 0
        assert not list(lg.dir.glob("*.deleted"))
    finally:
        lg.close()


def test_file_region_works_with_loop_sendfile(log):
    fill(log, 20)
    data = log.read(3, 500)
    region = data.regions[0]

    async def send_and_receive() -> bytes:
        a, b = socket.socketpair()
        loop = asyncio.get_running_loop()
        transport, _ = await loop.connect_accepted_socket(asyncio.Protocol, a)
        try:
            sent = await loop.sendfile(transport, region.file, region.position, region.size)
            assert sent == region.size
            b.settimeout(5)
            got = b""
            while len(got) < region.size:
                got += b.recv(region.size - len(got))
            return got
        finally:
            transport.close()
            b.close()

    assert asyncio.run(send_and_receive()) == region.read_bytes()


def test_roll_by_segment_ms_uses_message_timestamps(tmp_path):
    lg = Log(tmp_path / "t-0", LogConfig(segment_ms=1_000))
    try:
        lg.append_as_leader(batch([0], ts=10_000), leader_epoch=0)
        lg.append_as_leader(batch([1], ts=10_500), leader_epoch=0)
        assert len(lg.segments) == 1
        lg.append_as_leader(batch([2], ts=11_001), leader_epoch=0)
        assert [s.base_offset for s in lg.segments] == [0, 2]
    finally:
        lg.close()


def test_roll_when_index_is_full(tmp_path):
    lg = Log(tmp_path / "t-0", LogConfig(segment_index_bytes=8 * 3, index_interval_bytes=0))
    try:
        fill(lg, 10)
        assert len(lg.segments) > 1
        assert all(len(s.index) <= 3 for s in lg.segments)
        assert read_all(lg) == [(i, i) for i in range(30)]
    finally:
        lg.close()


def test_flush_messages_moves_recovery_point(tmp_path):
    lg = Log(tmp_path / "t-0", LogConfig(flush_messages=5))
    try:
        fill(lg, 1)
        assert lg.recovery_point == 0
        fill(lg, 1)
        assert lg.recovery_point == 6
        lg.append_as_leader(batch([6]), leader_epoch=0)
        lg.flush()
        assert lg.recovery_point == 7
    finally:
        lg.close()


def test_flush_async_after_roll(log):
    fill(log, 20)
    target = log.active_segment.base_offset
    asyncio.run(log.flush_async(target))
    assert log.recovery_point == target
    assert os.path.getsize(log.segments[0].index.path) == 8 * len(log.segments[0].index)


def test_closed_log_answers_storage_error(tmp_path):
    lg = Log(tmp_path / "t-0", LogConfig())
    lg.close()
    with pytest.raises(KafkaStorageError) as err:
        lg.append_as_leader(batch([0]), leader_epoch=0)
    assert err.value.error_code == 56
    with pytest.raises(KafkaStorageError):
        lg.read(0, 100)


def test_new_log_creates_its_files_quietly(tmp_path, caplog):
    lg = Log(tmp_path / "t-3", LogConfig(), had_clean_shutdown=True)
    lg.close()
    assert (lg.topic, lg.partition) == ("t", 3)
    assert not [r for r in caplog.records if r.levelname == "WARNING"]
    assert sorted(p.name for p in lg.dir.iterdir()) == [
        "00000000000000000000.index", "00000000000000000000.log", "00000000000000000000.timeindex"
    ]


def test_scan_batches_reads_every_batch_to_the_end_in_chunks(tmp_path):
    """A coordinator's load: every batch from the start, chunk after chunk, each with its bytes."""
    log = Log(tmp_path / "t-0", LogConfig(segment_bytes=4096))
    for i in range(40):
        log.append_as_leader(build_batch([(b"k", b"v%03d" % i)] * 3), leader_epoch=0)
    scanned = list(log.scan_batches(chunk_bytes=300))
    assert [info.base_offset for info, _ in scanned] == list(range(0, 120, 3))
    assert all(len(data) == info.size for info, data in scanned)
    assert [r.value for _, data in scanned[-1:] for r in decode_records(data)] == [b"v039"] * 3
    log.close()

"""The log cleaner's core and its file shell, on real Logs in temporary directories."""

import os
from pathlib import Path

import pytest

from odradek.broker.log import Log
from odradek.broker.log.cleaner import (
    BatchContext,
    CleanedTransactions,
    OffsetMap,
    SegmentStats,
    clean_batch,
    cleanable_offsets,
    grab_filthiest,
    joins_group,
    log_to_clean,
    map_key,
)
from odradek.broker.log.config import LogConfig
from odradek.broker.log.control_batch import TRANSACTIONAL_MASK, build_marker
from odradek.broker.log.log_cleaner import clean_now
from odradek.broker.log.log_validator import RecordValidationError
from odradek.broker.log.producer_state import AppendOrigin, list_snapshots
from odradek.broker.log.record_batch import build_batch, check_batch, decode_records, iter_batches
from odradek.broker.log.transaction_index import AbortedTxn

COMPACT = LogConfig(cleanup_policy="compact", segment_bytes=2048, index_interval_bytes=256)


def keyed(pairs, ts=1_000, **kwargs) -> bytes:
    """A batch of (key, value) pairs, keys and values as text (value None: a tombstone)."""
    return build_batch([(k.encode(), None if v is None else v.encode()) for k, v in pairs], base_timestamp=ts,
                       **kwargs)


def records(log: Log) -> list[tuple[int, str, str | None]]:
    """(offset, key, value) of every record from the log start, segment by segment."""
    out, offset = [], log.log_start_offset
    for _ in range(10_000):
        if offset >= log.log_end_offset:
            return out
        data = log.read(offset, 1 << 20).read_bytes()
        assert data
        for info in iter_batches(data):
            for r in decode_records(data[info.position : info.position + info.size]):
                if r.offset >= offset and not info.is_control:
                    out.append((r.offset, r.key.decode(), None if r.value is None else r.value.decode()))
            offset = info.next_offset
    raise AssertionError("did not reach the log end")


def latest(rows) -> dict[str, str | None]:
    out = {}
    for _, k, v in rows:
        out[k] = v
    return out


def fill(log: Log, keys: int, versions: int, per_batch: int = 5, prefix: str = "k", **kwargs) -> None:
    pairs = [(f"{prefix}{k}", f"v{k}.{v}") for v in range(versions) for k in range(keys)]
    for i in range(0, len(pairs), per_batch):
        log.append_as_leader(keyed(pairs[i : i + per_batch], **kwargs), leader_epoch=0)
    log.high_watermark = log.log_end_offset


@pytest.fixture
def compacted(tmp_path):
    log = Log(tmp_path / "t-0", COMPACT)
    yield log
    log.close()


# --- the pure core ---------------------------------------------------------------------------


def seg(base, nxt, size=100, ts=1_000, first_ts=1_000, mtime=1_000):
    return SegmentStats(base, nxt, size, ts, first_ts, mtime)


def test_cleanable_range_stops_at_the_active_segment_the_lso_and_the_min_lag():
    segs = [seg(0, 10), seg(10, 20), seg(20, 30, ts=9_000), seg(30, 35)]
    assert cleanable_offsets(segs, 0, 35, now=10_000, min_compaction_lag_ms=0) == 30
    assert cleanable_offsets(segs, 0, 15, now=10_000, min_compaction_lag_ms=0) == 10  # an open transaction at 15
    assert cleanable_offsets(segs, 0, 35, now=10_000, min_compaction_lag_ms=5_000) == 20  # segment 20 is too young
    assert cleanable_offsets(segs, 20, 35, now=10_000, min_compaction_lag_ms=0) == 30


def test_the_dirtiest_log_above_its_ratio_is_chosen_and_max_lag_overrides_the_ratio():
    segs = [seg(0, 10), seg(10, 20), seg(20, 30), seg(30, 40)]
    half = log_to_clean(("a", 0), segs, 10, 0, 40, 40, 10_000, 0, 2**63 - 1)
    assert (half.first_dirty_offset, half.first_uncleanable_offset, half.cleanable_ratio) == (10, 30, 2 / 3)
    full = log_to_clean(("b", 0), segs, None, 0, 40, 40, 10_000, 0, 2**63 - 1)
    assert full.cleanable_ratio == 1.0
    assert grab_filthiest([half, full], {}) == full
    assert grab_filthiest([half], {("a", 0): 0.9}) is None
    due = log_to_clean(("a", 0), segs, 10, 0, 40, 40, 10_000, 0, 5_000)
    assert due.needs_compaction_now and grab_filthiest([due], {("a", 0): 0.9}) == due
    clean = log_to_clean(("c", 0), segs, 30, 0, 40, 40, 10_000, 0, 2**63 - 1)
    assert grab_filthiest([clean], {}) is None


def test_groups_stay_within_segment_bytes_counting_what_was_written():
    nxt = seg(10, 20, 600)
    assert joins_group(0, 600, nxt, 1300, 1000, 4096)  # 600 written + 600 to come
    assert not joins_group(0, 800, nxt, 1300, 1000, 4096)
    assert joins_group(0, 0, nxt, 1200, 1000, 4096)  # everything before was removed
    assert not joins_group(0, 0, nxt, 1300, 1, 100)  # the index would overflow
    assert not joins_group(0, 0, seg(2**31, 2**31 + 5, 10), 1300, 1000, 4096)  # offsets beyond 31 bits


def _ctx(offsets: dict[str, int], end: int, retain_deletes=True, last=None) -> BatchContext:
    m = OffsetMap(100, {map_key(k.encode()): o for k, o in offsets.items()}, end)
    return BatchContext(m, retain_deletes, last or {})


def _info(batch: bytes, base: int):
    data = bytearray(batch)
    data[0:8] = base.to_bytes(8, "big")
    info = check_batch(data, 0, len(data))
    return bytes(data), info


@pytest.mark.parametrize("compression", [None, "gzip", "lz4", "zstd", "snappy"])
def test_a_batch_keeps_the_latest_record_of_each_key_with_its_codec_and_offsets(compression):
    data, info = _info(keyed([("a", "1"), ("b", "1"), ("a", "2"), ("c", "1")], compression=compression), 10)
    out = clean_batch(data, info, _ctx({"a": 12, "b": 20, "c": 13}, 30), CleanedTransactions([]), False)
    assert (out.kept_records, out.removed_records) == (2, 2)
    kept = check_batch(out.data, 0, len(out.data))
    assert (kept.base_offset, kept.last_offset, kept.records_count, kept.compression) == (10, 13, 2, info.compression)
    assert [(r.offset, r.key, r.value) for r in decode_records(out.data)] == [(12, b"a", b"2"), (13, b"c", b"1")]


def test_tombstones_go_past_the_delete_horizon_and_keyless_records_always():
    data, info = _info(build_batch([(b"a", None), (None, b"x"), (b"b", b"1")]), 0)
    kept = clean_batch(data, info, _ctx({"a": 0, "b": 2}, 3, retain_deletes=True), CleanedTransactions([]), False)
    assert [r.key for r in decode_records(kept.data)] == [b"a", b"b"]
    gone = clean_batch(data, info, _ctx({"a": 0, "b": 2}, 3, retain_deletes=False), CleanedTransactions([]), False)
    assert [r.key for r in decode_records(gone.data)] == [b"b"]


def test_records_past_the_map_end_are_untouched():
    data, info = _info(keyed([("a", "1"), ("a", "2")]), 5)
    assert clean_batch(data, info, _ctx({"a": 99}, 5), CleanedTransactions([]), False).data is data


def test_a_producers_last_batch_is_kept_empty_so_its_sequence_survives():
    data, info = _info(keyed([("a", "1")], producer_id=7, producer_epoch=1, base_sequence=41), 3)
    out = clean_batch(data, info, _ctx({"a": 9}, 10, last={7: 3}), CleanedTransactions([]), False)
    empty = check_batch(out.data, 0, len(out.data))
    assert (empty.records_count, empty.last_offset, empty.producer_id, empty.base_sequence) == (0, 3, 7, 41)
    assert clean_batch(data, info, _ctx({"a": 9}, 10, last={7: 2}), CleanedTransactions([]), False).data is None


def test_aborted_data_goes_and_markers_go_once_their_data_is_gone():
    txn = keyed([("a", "x")], producer_id=5, producer_epoch=0, base_sequence=0, attributes=TRANSACTIONAL_MASK)
    aborted_data, aborted_info = _info(txn, 0)
    abort, abort_info = _info(build_marker(5, 0, 0, commit=False, timestamp=1), 1)
    committed_data, committed_info = _info(txn, 2)
    commit, commit_info = _info(build_marker(5, 0, 0, commit=True, timestamp=1), 3)
    ctx = _ctx({"a": 2}, 4, retain_deletes=False)
    walk = CleanedTransactions([AbortedTxn(5, 0, 1, 2)])
    assert clean_batch(aborted_data, aborted_info, ctx, walk, True).data is None
    assert clean_batch(abort, abort_info, ctx, walk, False).data is abort  # its data was there in this walk
    assert clean_batch(committed_data, committed_info, ctx, walk, True).data is committed_data
    assert clean_batch(commit, commit_info, ctx, walk, False).data is commit
    second = CleanedTransactions([AbortedTxn(5, 0, 1, 2)])  # the next cleaning: the aborted data is gone
    assert clean_batch(abort, abort_info, ctx, second, False).data is None
    retained = CleanedTransactions([AbortedTxn(5, 0, 1, 2)])  # within delete.retention.ms: kept
    assert clean_batch(abort, abort_info, _ctx({"a": 2}, 4, retain_deletes=True), retained, False).data is abort
    # a COMMIT whose records were all superseded goes (past the horizon)
    third = CleanedTransactions([])
    assert clean_batch(commit, commit_info, ctx, third, False).data is None


# --- whole logs ------------------------------------------------------------------------------


def test_cleaning_keeps_each_keys_latest_value_in_offset_order(compacted):
    fill(compacted, keys=20, versions=15)
    active_base = compacted.active_segment.base_offset
    before = records(compacted)
    segments_before = compacted.size
    result = clean_now(compacted)
    assert result is not None and result.end_offset == active_base
    after = records(compacted)
    assert latest(after) == latest(before)
    assert [o for o, _, _ in after] == sorted(o for o, _, _ in after)
    cleaned = [r for r in after if r[0] < active_base]
    assert len({k for _, k, _ in cleaned}) == len(cleaned)  # one record per key below the active segment
    assert [r for r in after if r[0] >= active_base] == [r for r in before if r[0] >= active_base]
    assert compacted.size < segments_before
    assert compacted.log_end_offset == 300
    assert clean_now(compacted, checkpoint=result.end_offset) is None  # nothing dirty any more


def test_a_cleaned_log_reloads_and_serves_the_same(tmp_path):
    log = Log(tmp_path / "t-0", COMPACT)
    fill(log, keys=10, versions=20)
    clean_now(log)
    rows = records(log)
    log.close()
    for clean_shutdown in (True, False):
        again = Log(tmp_path / "t-0", COMPACT, had_clean_shutdown=clean_shutdown)
        again.high_watermark = again.log_end_offset
        assert records(again) == rows
        again.close()


def test_the_snapshots_of_merged_segments_go_with_them(compacted):
    """A producer snapshot is written at every roll. A compacted log's start never moves, so
    retention never removes them: cleaning removes those of the segments it merges (Kafka deletes
    a segment's snapshot with it), and cycle after cycle there are no more than segments."""
    rolled, checkpoint = 0, 0
    for cycle in range(4):
        before = {o for o, _ in list_snapshots(compacted.dir)}
        fill(compacted, keys=20, versions=15, prefix=f"c{cycle}-")
        rolled += len({o for o, _ in list_snapshots(compacted.dir)} - before)
        checkpoint = clean_now(compacted, checkpoint=checkpoint).end_offset
        offsets = {o for o, _ in list_snapshots(compacted.dir)}
        assert offsets <= {s.base_offset for s in compacted.segments}, (cycle, sorted(offsets))
    assert len(offsets) < rolled / 2


def test_a_second_cleaning_only_maps_the_new_dirty_section(compacted):
    fill(compacted, keys=10, versions=10)
    first = clean_now(compacted)
    fill(compacted, keys=10, versions=10)
    second = clean_now(compacted, checkpoint=first.end_offset)
    assert second.map_size == 10
    rows = records(compacted)
    assert latest(rows) == {f"k{k}": f"v{k}.9" for k in range(10)}


def test_the_survivor_bitmap_only_spares_reading_records(tmp_path, monkeypatch):
    """A batch the offset map saw whole is dropped or kept whole by counting its surviving
    offsets: the cleaned logs are byte for byte those of a cleaning that reads every record (long
    keys, hashed in the map, and tombstones included), first and second cleaning alike."""
    from odradek.broker.log import cleaner

    def fill_and_clean(directory: Path) -> list[bytes]:
        log = Log(directory, COMPACT)
        checkpoint = 0
        for cycle in range(2):
            fill(log, keys=12, versions=6, prefix=f"a-rather-long-key-{cycle}-")
            log.append_as_leader(keyed([(f"a-rather-long-key-{cycle}-3", None), ("k1", None)]), leader_epoch=0)
            fill(log, keys=7, versions=5)
            checkpoint = clean_now(log, checkpoint=checkpoint).end_offset
        files = [s.log_path.read_bytes() for s in log.segments]
        log.close()
        return files

    counted = []
    count_latest = cleaner.count_latest
    monkeypatch.setattr(cleaner, "count_latest", lambda *args: counted.append(count_latest(*args)) or counted[-1])
    with_bitmap = fill_and_clean(tmp_path / "bitmap-0")
    assert 0 in counted and max(counted) > 0  # batches dropped and kept whole by their count
    monkeypatch.setattr(cleaner, "LATEST_MAX_BYTES", 0)
    assert fill_and_clean(tmp_path / "reading-0") == with_bitmap


def test_tombstones_disappear_after_delete_retention(tmp_path):
    config = LogConfig(cleanup_policy="compact", segment_bytes=1024, delete_retention_ms=0)
    log = Log(tmp_path / "t-0", config)
    fill(log, keys=10, versions=3)
    log.append_as_leader(keyed([("k3", None), ("k4", None)]), leader_epoch=0)
    fill(log, keys=5, versions=4, prefix="other")  # more segments after the tombstones
    log.high_watermark = log.log_end_offset
    first = clean_now(log)
    assert latest(records(log))["k3"] is None  # the first cleaning keeps it: nothing was clean before
    _age(log, seconds=10)
    fill(log, keys=2, versions=60, prefix="more")
    clean_now(log, checkpoint=first.end_offset)
    assert "k3" not in latest(records(log)) and "k4" not in latest(records(log))
    log.close()


def _age(log: Log, seconds: int) -> None:
    """Segments' mtimes `seconds` in the past (what delete.retention.ms is measured by)."""
    for s in log.segments[:-1]:
        st = os.stat(s.log_path)
        os.utime(s.log_path, (st.st_atime - seconds, st.st_mtime - seconds))


def test_the_cleaner_never_passes_an_open_transaction(compacted):
    fill(compacted, keys=5, versions=40)
    txn = keyed([("k1", "open")], producer_id=9, producer_epoch=0, base_sequence=0, attributes=TRANSACTIONAL_MASK)
    compacted.append_as_leader(txn, leader_epoch=0)
    open_at = compacted.log_end_offset - 1
    fill(compacted, keys=5, versions=20)
    result = clean_now(compacted)
    assert result.end_offset <= open_at
    assert (open_at, "k1", "open") in records(compacted)


def test_aborted_transactions_are_removed_and_idempotent_producers_keep_their_state(compacted):
    fill(compacted, keys=5, versions=4)
    txn = keyed([("k1", "aborted")], producer_id=9, producer_epoch=0, base_sequence=0,
                attributes=TRANSACTIONAL_MASK)
    compacted.append_as_leader(txn, leader_epoch=0)
    compacted.append_as_leader(build_marker(9, 0, 0, commit=False, timestamp=1_000), leader_epoch=0,
                               origin=AppendOrigin.COORDINATOR)
    idem = keyed([("k2", "idem")], producer_id=11, producer_epoch=0, base_sequence=0)
    compacted.append_as_leader(idem, leader_epoch=0)
    fill(compacted, keys=5, versions=20)
    clean_now(compacted)
    rows = records(compacted)
    assert not [r for r in rows if r[2] in ("aborted", "idem")]
    # a retry of the idempotent batch is still a duplicate: its producer's last batch stayed
    info = compacted.append_as_leader(keyed([("k2", "idem")], producer_id=11, producer_epoch=0, base_sequence=0),
                                      leader_epoch=0)
    assert info.duplicate


def test_keyless_records_are_refused_by_compacted_topics(tmp_path):
    log = Log(tmp_path / "t-0", COMPACT)
    with pytest.raises(RecordValidationError, match="without key"):
        log.append_as_leader(build_batch([b"no key"]), leader_epoch=0)
    log.close()
    plain = Log(tmp_path / "u-0", LogConfig())
    plain.append_as_leader(build_batch([b"no key"]), leader_epoch=0)
    plain.close()


def test_a_truncation_meanwhile_throws_the_cleaning_away(compacted):
    from odradek.broker.log.cleaner_worker import clean
    from odradek.broker.log.log_cleaner import CleanerConfig, apply_result, make_task, plan

    fill(compacted, keys=10, versions=10)
    before = records(compacted)
    to_clean = plan(compacted, None, 10_000)
    truncations = compacted.truncation_count
    result = clean(make_task(compacted, to_clean, CleanerConfig()))
    compacted.truncate_to(compacted.log_end_offset - 5)  # one batch
    assert not apply_result(compacted, result, truncations)
    assert records(compacted) == before[:-5]
    assert not [p for p in Path(compacted.dir).iterdir() if p.name.endswith(".cleaned")]


# --- the background cleaner ------------------------------------------------------------------


@pytest.mark.integration  # the cleaner works in a worker process
def test_the_log_managers_cleaner_cleans_in_a_worker_process_and_checkpoints(tmp_path):
    import asyncio

    from odradek.broker.log import LogManager
    from odradek.broker.log.checkpoint import read_offsets
    from odradek.broker.log.log_cleaner import CLEANER_OFFSET_CHECKPOINT
    from odradek.common.config import BrokerConfig

    config = BrokerConfig.from_properties({"broker.id": "0", "zookeeper.connect": "127.0.0.1:1",
                                           "log.cleaner.backoff.ms": "50"})
    manager = LogManager([tmp_path], config)
    manager.startup()
    log = manager.get_or_create_log("t", 0, COMPACT)
    plain = manager.get_or_create_log("u", 0, LogConfig(segment_bytes=2048))
    fill(log, keys=20, versions=15)
    for i in range(30):
        plain.append_as_leader(keyed([("a", str(i))] * 5), leader_epoch=0)
    plain.high_watermark = plain.log_end_offset
    plain_rows = records(plain)

    async def run() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(manager.cleaner.run(stop))
        try:
            for _ in range(600):
                if manager.cleaner.cleanings:
                    break
                await asyncio.sleep(0.05)
        finally:
            stop.set()
            await asyncio.wait_for(task, 10)

    asyncio.run(run())
    assert manager.cleaner.cleanings >= 1
    end = log.active_segment.base_offset
    cleaned = [k for o, k, _ in records(log) if o < end]
    assert sorted(cleaned) == sorted(f"k{k}" for k in range(20))
    assert records(plain) == plain_rows  # cleanup.policy=delete: never compacted
    assert read_offsets(tmp_path / CLEANER_OFFSET_CHECKPOINT) == {("t", 0): end}
    manager.shutdown()
    again = LogManager([tmp_path], config)
    again.startup()
    assert again.cleaner.checkpoint(tmp_path, ("t", 0)) == end
    again.shutdown()


def test_cleaner_settings_are_dynamic_from_the_next_cleaning(tmp_path):
    from odradek.broker.dynamic_config import DYNAMIC_CONFIGS
    from odradek.broker.log import LogManager
    from odradek.common.config import BrokerConfig

    props = {"broker.id": "0", "zookeeper.connect": "127.0.0.1:1"}
    manager = LogManager([tmp_path], BrokerConfig.from_properties(props))
    assert manager.cleaner.config.io_max_bytes_per_second > 1e300
    assert {"log.cleaner.io.max.bytes.per.second", "log.cleaner.threads"} <= DYNAMIC_CONFIGS
    manager.reconfigure(BrokerConfig.from_properties({**props, "log.cleaner.io.max.bytes.per.second": "1000000"}))
    assert manager.cleaner.config.io_max_bytes_per_second == 1_000_000


def test_the_thread_count_changes_at_most_twofold_and_never_below_one():
    from odradek.broker.dynamic_config import DynamicBrokerConfig
    from odradek.common.config_def import ConfigException

    dynamic = DynamicBrokerConfig({"broker.id": "0", "zookeeper.connect": "127.0.0.1:1", "log.cleaner.threads": "2"})
    for accepted in ("1", "2", "3", "4"):
        dynamic.validate({"log.cleaner.threads": accepted}, per_broker=True)
    for refused, reason in (("5", "more than double the current value 2"), ("0", "at least 1")):
        with pytest.raises(ConfigException, match=reason):
            dynamic.validate({"log.cleaner.threads": refused}, per_broker=False)
    dynamic.update(broker={"log.cleaner.threads": "4"})
    with pytest.raises(ConfigException, match="less than half the current value 4"):
        dynamic.validate({"log.cleaner.threads": "1"}, per_broker=True)


def test_a_new_thread_count_starts_and_retires_cleaner_loops_without_a_restart(tmp_path):
    """Kafka's log.cleaner.threads is dynamic: the running cleaner grows to the new count at once
    and retires the extra loops after their current cleaning (or backoff)."""
    import asyncio
    from dataclasses import replace

    from virtual_time import run_virtual

    from odradek.broker.log.log_cleaner import CleanerConfig, LogCleaner

    cleaner = LogCleaner(list, CleanerConfig(threads=1, backoff_ms=20))

    async def until(count: int) -> bool:
        for _ in range(200):
            if cleaner.threads_running == count:
                return True
            await asyncio.sleep(0.01)  # virtual time: the loops' 20 ms backoffs pass at once
        return False

    async def run() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(cleaner.run(stop))
        try:
            assert await until(1)
            cleaner.reconfigure(replace(cleaner.config, threads=2))
            assert await until(2)
            cleaner.reconfigure(replace(cleaner.config, threads=1))
            assert await until(1)
        finally:
            stop.set()
            await asyncio.wait_for(task, 10)
        assert cleaner.threads_running == 0

    run_virtual(run)

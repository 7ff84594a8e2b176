"""The pure offset arithmetic of the data source against Spark's Kafka source behaviour."""

import itertools

import pytest

from odradek.pipeline.offsets import (
    EARLIEST,
    LATEST,
    OffsetRange,
    from_json_dict,
    incorrect_latest,
    offsets_behind_latest,
    parse_assign,
    parse_partition_offsets,
    rate_limit,
    split_ranges,
    stream_ranges,
    to_json_dict,
)

A0, A1, B0 = ("a", 0), ("a", 1), ("b", 0)


def test_offsets_json_round_trips_with_string_partitions():
    offsets = {A0: 23, A1: -1, B0: -2}
    doc = to_json_dict(offsets)
    assert doc == {"a": {"0": 23, "1": -1}, "b": {"0": -2}}
    assert from_json_dict(doc) == offsets
    assert parse_partition_offsets('{"a":{"0":23,"1":-1},"b":{"0":-2}}') == offsets


@pytest.mark.parametrize("text", ["[1]", '{"a": [0]}', '{"a": {"x": 1}}', '{"a": {"0": "1"}}', '{"a": {"0": true}}', "{"])
def test_bad_offsets_json_is_refused(text):
    with pytest.raises(ValueError):
        parse_partition_offsets(text)


def test_assign_json():
    assert parse_assign('{"a":[0,1],"b":[0]}') == [A0, A1, B0]
    with pytest.raises(ValueError):
        parse_assign('{"a":["0"]}')


def test_split_ranges_without_min_partitions_keeps_one_task_per_partition_and_drops_empty():
    ranges = [OffsetRange("a", 0, 0, 10), OffsetRange("a", 1, 5, 5)]
    assert split_ranges(ranges, None) == [OffsetRange("a", 0, 0, 10)]
    assert split_ranges(ranges, 1) == [OffsetRange("a", 0, 0, 10)]


def test_split_ranges_follows_sparks_calculator():
    # Spark's KafkaOffsetRangeCalculatorSuite: ranges of sizes 1 and 10, minPartitions 3
    ranges = [OffsetRange("t1", 1, 1, 2), OffsetRange("t2", 1, 1, 11)]
    assert split_ranges(ranges, 3) == [
        OffsetRange("t1", 1, 1, 2),
        OffsetRange("t2", 1, 1, 6),
        OffsetRange("t2", 1, 6, 11),
    ]
    # one range split evenly; the last part takes the rest
    assert split_ranges([OffsetRange("t", 0, 1, 5)], 3) == [
        OffsetRange("t", 0, 1, 2), OffsetRange("t", 0, 2, 3), OffsetRange("t", 0, 3, 5)]


def test_split_ranges_covers_each_range_exactly():
    ranges = [OffsetRange("t", p, 100 * p, 100 * p + 17 * (p + 1)) for p in range(5)]
    out = split_ranges(ranges, 23)
    for r in ranges:
        parts = [x for x in out if x.partition == r.partition]
        assert parts[0].from_offset == r.from_offset and parts[-1].until_offset == r.until_offset
        assert all(x.until_offset == y.from_offset for x, y in itertools.pairwise(parts))


def test_rate_limit_spreads_in_proportion_and_never_starves():
    start = {A0: 0, A1: 0}
    latest = {A0: 1000, A1: 10}
    out = rate_limit(101, start, latest, {})
    assert out == {A0: 100, A1: 1}  # 101*1000/1010 = 100.0, 101*10/1010 = 1.0
    out = rate_limit(10, start, {A0: 1000, A1: 1}, {})
    assert out[A1] == 1  # 10/1001 < 1 rounds up
    assert rate_limit(10, {A0: 5}, {A0: 5}, {}) == {A0: 5}


def test_rate_limit_starts_new_partitions_at_their_earliest():
    out = rate_limit(100, {A0: 0}, {A0: 100, A1: 100}, {A1: 0})
    assert out == {A0: 50, A1: 50}


def test_stream_ranges_reads_new_partitions_from_earliest_and_pins_latest():
    lost = []
    ranges = stream_ranges({A0: 5, A1: LATEST}, {A0: 9, A1: 30, B0: 4}, {B0: 0}, lost.append)
    assert ranges == [OffsetRange("a", 0, 5, 9), OffsetRange("a", 1, 30, 30), OffsetRange("b", 0, 0, 4)]
    assert lost == []


def test_stream_ranges_reports_data_loss_as_spark_does():
    lost = []
    stream_ranges({A0: 50, A1: 3}, {A0: 40, B0: 4}, {B0: 2}, lost.append)
    assert any("Added partition b-0 starts from 2 instead of 0" in m for m in lost)
    assert any("a-1" in m and "are gone" in m for m in lost)
    assert any("a-0's offset was changed from 50 to 40" in m for m in lost)
    lost.clear()
    stream_ranges({}, {B0: 4}, {}, lost.append)
    assert lost and "Cannot find earliest offsets" in lost[0]


def test_incorrect_latest_finds_offsets_that_went_backwards():
    assert incorrect_latest({A0: 10, A1: 5}, {A0: 9, A1: 5, B0: 0}) == [(A0, 10, 9)]


def test_offsets_behind_latest_is_sparks_metric():
    m = offsets_behind_latest({A0: 10, A1: 20}, {A0: 15, A1: 20})
    assert m == {"minOffsetsBehindLatest": "0", "maxOffsetsBehindLatest": "5", "avgOffsetsBehindLatest": "2.5"}
    assert offsets_behind_latest({}, {A0: 1}) == {}


def test_sentinels_are_sparks():
    assert (EARLIEST, LATEST) == (-2, -1)

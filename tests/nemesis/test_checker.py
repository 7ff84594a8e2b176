"""The nemesis checker's verdicts, on hand-made logs."""

from .checker import check_stream
from .workload import Stream

STREAM = Stream("t", 2, idempotent=True)


def log_of(*partitions: list[int]) -> dict:
    """Partition p holds the given ids at offsets 0, 1, ..."""
    return {("t", p): [(o, STREAM.value(i)) for o, i in enumerate(ids)] for p, ids in enumerate(partitions)}


def test_a_record_at_its_acknowledged_offset_is_kept():
    verdict = check_stream(STREAM, {0: (0, 0), 2: (0, 1), 1: (1, 0)}, log_of([0, 2], [1]))
    assert verdict.ok and verdict.lost == []


def test_a_record_elsewhere_than_acknowledged_is_lost():
    verdict = check_stream(STREAM, {0: (0, 0), 2: (0, 5)}, log_of([0, 2], []))
    assert verdict.lost == [2] and not verdict.ok
    assert verdict.lost_detail == ["2 acked at (0, 5), stored at [(0, 1)]"]


def test_an_ack_without_offset_needs_the_record_in_its_partition():
    """librdkafka's implicit ack (a timed-out request's records acknowledged by a later success)
    and DUPLICATE_SEQUENCE_NUMBER report offset -1001: present anywhere in the partition is kept,
    absent or only in another partition is lost."""
    log = log_of([0, 2], [1])
    assert check_stream(STREAM, {2: (0, -1001)}, log).lost == []
    assert check_stream(STREAM, {4: (0, -1001)}, log).lost == [4]
    assert check_stream(STREAM, {2: (1, -1001)}, log).lost == [2]


def test_an_idempotent_duplicate_fails_the_run():
    verdict = check_stream(STREAM, {0: (0, 0), 2: (0, 1)}, log_of([0, 2, 2], []))
    assert verdict.duplicates == [2] and not verdict.ok


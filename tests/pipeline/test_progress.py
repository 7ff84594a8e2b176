"""The exactly-once sink's progress marker: which batch a task already wrote."""

import pytest

from odradek.pipeline.progress import already_written, last_written_batch, marker_offset, transactional_id

NONE_COMMITTED = -1001  # Kafka's offset for a partition the group never committed


def test_ids_name_the_query_and_the_task_partition():
    assert transactional_id("q-1", 0) == "spark-odradek-q-1-0"
    assert transactional_id("q-1", 0) != transactional_id("q-1", 1) != transactional_id("q-2", 1)


def test_the_marker_is_the_next_batch_so_that_nothing_committed_means_nothing_written():
    assert marker_offset(0) == 1
    assert last_written_batch([marker_offset(0)]) == 0
    assert last_written_batch([]) is None
    assert last_written_batch([NONE_COMMITTED]) is None
    with pytest.raises(ValueError):
        marker_offset(-1)


@pytest.mark.parametrize(("committed", "batch", "written"), [
    ([], 0, False),                        # the task's first write
    ([NONE_COMMITTED], 0, False),
    ([marker_offset(4)], 4, True),         # a retried task, or the batch re-run after a restart
    ([marker_offset(4)], 5, False),        # the next batch
    ([marker_offset(4)], 3, True),         # an older batch replayed: written long ago
    ([marker_offset(2), marker_offset(7), NONE_COMMITTED], 7, True),  # markers on several topics: the newest
    ([marker_offset(2), marker_offset(7)], 8, False),
])
def test_a_batch_is_written_once(committed, batch, written):
    assert already_written(committed, batch) is written

"""The at-least-once sink's idle producers: a Python worker's next task reuses the producer of its
last one only when that task's every record was acknowledged; a failed task's producer is gone."""

import pyarrow as pa
import pytest

from odradek.pipeline import sink
from odradek.pipeline.options import write_options

# nothing listens there: these tests produce nothing, or fail before any flush (and librdkafka
# keeps its "connection refused" to itself)
BASE = {"kafka.bootstrap.servers": "127.0.0.1:9", "topic": "t", "kafka.log_level": "0"}
OPTIONS = write_options(BASE)


@pytest.fixture(autouse=True)
def _no_idle_producers():
    sink._idle.clear()
    yield
    sink._idle.clear()


def _pooled():
    return [p.producer for p in sink._idle.values()]


def test_a_task_that_delivered_everything_hands_its_producer_to_the_next_task():
    assert sink.write_at_least_once(OPTIONS, [], 0).rows == 0
    first = _pooled()
    assert len(first) == 1
    sink.write_at_least_once(OPTIONS, [], 1)
    assert _pooled() == first  # the same producer, not a second one


def test_another_configuration_gets_its_own_producer_and_the_idle_ones_are_bounded():
    for i in range(sink.IDLE_PRODUCERS + 2):
        sink.write_at_least_once(write_options({**BASE, "kafka.client.id": f"c{i}"}), [], 0)
    assert len(sink._idle) == sink.IDLE_PRODUCERS


def test_a_failed_task_does_not_give_its_producer_back(monkeypatch):
    sink.write_at_least_once(OPTIONS, [], 0)
    (idle,) = _pooled()

    def failing(producer, batches, topic):
        raise RuntimeError("the task failed")

    monkeypatch.setattr(sink, "_produce_all", failing)
    with pytest.raises(RuntimeError, match="the task failed"):
        sink.write_at_least_once(OPTIONS, [], 1)
    assert _pooled() == []  # the failed task had taken it; nobody gets it again
    monkeypatch.undo()
    sink.write_at_least_once(OPTIONS, [], 2)
    assert _pooled() != [idle]


def test_a_task_whose_records_failed_fails_and_drops_its_producer(monkeypatch):
    def undelivered(producer, batches, topic):
        producer_errors[0](err="MSG_TIMED_OUT", msg=None)  # what librdkafka reports in flush()
        return 1

    producer_errors = []
    real_take = sink._take_producer

    def take(conf):
        key, pooled = real_take(conf)
        producer_errors.append(pooled.errors)
        return key, pooled

    monkeypatch.setattr(sink, "_take_producer", take)
    monkeypatch.setattr(sink, "_produce_all", undelivered)
    with pytest.raises(RuntimeError, match="1 records were not delivered"):
        sink.write_at_least_once(OPTIONS, [], 0)
    assert _pooled() == []


def test_rows_of_a_batch_go_to_produce_with_their_key_and_value():
    calls = []

    class Recorder:
        def produce(self, topic, value=None, key=None, partition=-1, headers=None):
            calls.append((topic, value, key, partition, headers))

        def poll(self, timeout):
            return 0

    batch = pa.RecordBatch.from_pydict({"key": [b"k", None], "value": [b"v", b"w"]})
    assert sink._produce_all(Recorder(), [batch], "t") == 2
    assert calls == [("t", b"v", b"k", -1, None), ("t", b"w", None, -1, None)]
    calls.clear()
    routed = pa.RecordBatch.from_pydict({
        "topic": ["a", "b"], "value": [b"v", b"w"], "partition": [2, None],
        "headers": [[{"key": "h", "value": b"1"}], []]})
    assert sink._produce_all(Recorder(), [routed], None) == 2
    assert calls == [("a", b"v", None, 2, [("h", b"1")]), ("b", b"w", None, -1, None)]
    with pytest.raises(ValueError, match="Null topic"):
        sink._produce_all(Recorder(), [pa.RecordBatch.from_pydict({"topic": [None], "value": [b"v"]})], None)

"""`odradek reassign`'s pure parts: Kafka's plan JSON, --verify's wording and progress."""

import json

import pytest

from odradek.reassign import ToolError, format_plan, parse_plan, parse_topics, partition_status, progress_line, propose

KAFKA_PLAN = ('{"version":1,"partitions":[{"topic":"foo","partition":1,"replicas":[2,3],"log_dirs":["any","any"]},'
              '{"topic":"foo","partition":0,"replicas":[1,2]}]}')


def test_kafka_plans_round_trip():
    plan = parse_plan(KAFKA_PLAN)
    assert plan == {("foo", 1): (2, 3), ("foo", 0): (1, 2)}
    assert parse_plan(format_plan(plan)) == plan
    assert json.loads(format_plan(plan))["partitions"][0] == {
        "topic": "foo", "partition": 0, "replicas": [1, 2], "log_dirs": ["any", "any"]}


@pytest.mark.parametrize("text", [
    "", "[]", '{"partitions":[{"topic":"t","partition":0}]}',
    '{"partitions":[{"topic":"t","partition":0,"replicas":[]}]}',
    '{"partitions":[{"topic":"t","partition":0,"replicas":[1,1]}]}',
    '{"partitions":[{"topic":"t","partition":true,"replicas":[1]}]}',
    '{"partitions":[{"topic":"t","partition":0,"replicas":[1]},{"topic":"t","partition":0,"replicas":[2]}]}',
])
def test_bad_plans_are_refused(text):
    with pytest.raises(ToolError):
        parse_plan(text)


def test_topics_file_and_proposal():
    assert parse_topics('{"topics":[{"topic":"a"},{"topic":"b"}],"version":1}') == ["a", "b"]
    with pytest.raises(ToolError):
        parse_topics('{"topics":[{"name":"a"}]}')
    proposed = propose({("a", 0): (0, 1), ("a", 1): (1, 0)}, [2, 3])
    assert {frozenset(r) for r in proposed.values()} == {frozenset({2, 3})}
    with pytest.raises(ToolError, match="topic a"):
        propose({("a", 0): (0, 1, 2)}, [0, 1])


def test_verify_wording_and_progress():
    tp = ("t", 0)
    moving = partition_status(tp, (1, 2, 3), (1, 2, 3, 0), {"adding": (3,)}, {1: 1000, 2: 1000, 3: 250})
    assert not moving.done and "still in progress" in moving.line and (moving.bytes_moved, moving.bytes_total) == (250, 1000)
    assert partition_status(tp, (1, 2, 3), (1, 2, 3), None, {}).line == "Reassignment of partition t-0 is completed."
    assert "rather than [1, 2, 3]" in partition_status(tp, (1, 2, 3), (0, 1), None, {}).line
    assert not partition_status(tp, (1,), None, None, {}).done
    assert progress_line(1, 2, 512, 2048, 512.0) == "1/2 partitions done, 512 B of 2.0 KiB copied, 512 B/s, about 3s left"


def test_throttles_name_current_replicas_as_leaders_and_added_ones_as_followers():
    from odradek.common.reassignment_throttle import throttled_replicas

    current = {("t", 0): (0, 1), ("t", 1): (1, 2), ("u", 0): (2,), ("u", 1): (0, 1)}
    plan = {("t", 0): (1, 3), ("t", 1): (1, 2), ("u", 0): (0, 2), ("u", 1): (1, 0)}  # u-1: a reorder moves no data
    settings = throttled_replicas(current, plan)
    topics, brokers = settings.topics, settings.brokers
    assert topics == {
        "t": {"leader.replication.throttled.replicas": "0:0,0:1", "follower.replication.throttled.replicas": "0:3"},
        "u": {"leader.replication.throttled.replicas": "0:2", "follower.replication.throttled.replicas": "0:0"},
    }
    assert brokers == {0, 1, 2, 3}

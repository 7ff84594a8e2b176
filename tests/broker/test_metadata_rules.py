"""Pure rules of the broker's metadata side: topic names, replica assignment, the MetadataCache."""

import asyncio
import random
from collections import Counter

import pytest
from kio.schema.errors import ErrorCode
from virtual_time import turns

from odradek.broker.admin_manager import (
    MAX_PARTITIONS,
    ApiError,
    PartitionsSpec,
    TopicSpec,
    assign_replicas_to_brokers,
    colliding_topics,
    plan_new_partitions,
    plan_topic,
    rack_alternated_brokers,
    topic_name_error,
    validate_manual_assignment,
)
from odradek.broker.metadata_cache import MetadataCache, StaleControllerEpochError
from odradek.broker.zk_client import base64_to_uuid, new_base64_uuid, split_connect
from odradek.common.messages import (
    LEADER_DURING_DELETE,
    UpdateMetadataBroker,
    UpdateMetadataEndpoint,
    UpdateMetadataPartitionState,
    UpdateMetadataRequest,
    UpdateMetadataTopicState,
)
from odradek.common.zk_data import TopicAssignment

# --- topic names ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["a", "orders", "a.b_c-D9", "x" * 249, "__consumer_offsets", "..."])
def test_legal_topic_names(name):
    assert topic_name_error(name) is None


@pytest.mark.parametrize("name", ["", ".", "..", "x" * 250, "a b", "a/b", "ä", "a:b", "t*", None])
def test_illegal_topic_names(name):
    assert topic_name_error(name) is not None


# --- replica assignment (Kafka's AdminUtils, checked against Kafka's own expected values) -------


def test_rack_unaware_assignment_matches_kafka():
    brokers = [(b, None) for b in range(5)]
    assert assign_replicas_to_brokers(brokers, 10, 3, fixed_start_index=0) == {
        0: (0, 1, 2), 1: (1, 2, 3), 2: (2, 3, 4), 3: (3, 4, 0), 4: (4, 0, 1),
        5: (0, 2, 3), 6: (1, 3, 4), 7: (2, 4, 0), 8: (3, 0, 1), 9: (4, 1, 2),
    }


def test_rack_aware_assignment_matches_kafka():
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    assert rack_alternated_brokers(racks) == [0, 3, 1, 5, 4, 2]
    assert rack_alternated_brokers({b: r for b, r in racks.items() if b != 5}) == [0, 3, 1, 4, 2]
    assignment = assign_replicas_to_brokers(list(racks.items()), 7, 3, fixed_start_index=0, start_partition_id=0)
    assert assignment == {
        0: (0, 3, 1), 1: (3, 1, 5), 2: (1, 5, 4), 3: (5, 4, 2), 4: (4, 2, 0), 5: (2, 0, 3), 6: (0, 4, 2),
    }


@pytest.mark.parametrize("seed", range(5))
def test_random_assignment_spreads_leaders_and_replicas(seed):
    brokers = [(b, None) for b in (3, 7, 11, 20)]
    assignment = assign_replicas_to_brokers(brokers, 12, 3, rng=random.Random(seed))
    assert sorted(assignment) == list(range(12))
    for replicas in assignment.values():
        assert len(set(replicas)) == 3 and set(replicas) <= {3, 7, 11, 20}
    assert set(Counter(r[0] for r in assignment.values()).values()) == {3}
    assert set(Counter(b for r in assignment.values() for b in r).values()) == {9}


@pytest.mark.parametrize("seed", range(5))
def test_rack_aware_assignment_puts_replicas_in_distinct_racks(seed):
    brokers = [(0, "a"), (1, "a"), (2, "b"), (3, "b"), (4, "c"), (5, "c")]
    racks = dict(brokers)
    assignment = assign_replicas_to_brokers(brokers, 9, 3, rng=random.Random(seed))
    for replicas in assignment.values():
        assert len({racks[b] for b in replicas}) == 3


def test_mixed_racks_fall_back_to_rack_unaware():
    assignment = assign_replicas_to_brokers([(0, "a"), (1, None)], 2, 2, fixed_start_index=0)
    assert assignment == {0: (0, 1), 1: (1, 0)}


@pytest.mark.parametrize(
    ("partitions", "rf", "code"),
    [(0, 1, ErrorCode.invalid_partitions), (1, 0, ErrorCode.invalid_replication_factor),
     (1, 3, ErrorCode.invalid_replication_factor)],
)
def test_assignment_rejects_bad_counts(partitions, rf, code):
    with pytest.raises(ApiError) as e:
        assign_replicas_to_brokers([(0, None), (1, None)], partitions, rf)
    assert e.value.error_code == code


def test_manual_assignment_validation():
    assert validate_manual_assignment({1: [2, 1], 0: [1, 2]}, {1, 2}) == {0: (1, 2), 1: (2, 1)}
    for bad in ({1: [1]}, {0: [1, 1]}, {0: [1], 1: [1, 2]}, {0: [9]}, {0: []}, {}):
        with pytest.raises(ApiError) as e:
            validate_manual_assignment(bad, {1, 2})
        assert e.value.error_code == ErrorCode.invalid_replica_assignment


def _plan(spec, **kw):
    args = dict(
        default_partitions=3, default_replication_factor=1,
        live_brokers=[(0, None), (1, None)], validate_config=lambda c: None,
    )
    args.update(kw)
    return plan_topic(spec, **args)


def test_plan_topic_defaults_and_rules():
    plan = _plan(TopicSpec("t"), rng=random.Random(1))
    assert plan.num_partitions == 3 and plan.replication_factor == 1
    assert base64_to_uuid(plan.topic_id).int != 0
    assert _plan(TopicSpec("t", 2, 2)).replication_factor == 2
    assert _plan(TopicSpec("t", assignments={0: (1,), 1: (0,)})).assignment == {0: (1,), 1: (0,)}

    def code(spec, **kw):
        with pytest.raises(ApiError) as e:
            _plan(spec, **kw)
        return e.value.error_code

    assert code(TopicSpec("bad name")) == ErrorCode.invalid_topic_exception
    assert code(TopicSpec("t"), existing=True) == ErrorCode.topic_already_exists
    assert code(TopicSpec("t", 0, 1)) == ErrorCode.invalid_partitions
    assert code(TopicSpec("t", -5, 1)) == ErrorCode.invalid_partitions
    assert code(TopicSpec("t", 1, 3)) == ErrorCode.invalid_replication_factor
    assert code(TopicSpec("t", 1, 1), live_brokers=[]) == ErrorCode.invalid_replication_factor
    assert code(TopicSpec("t", 1, -1, assignments={0: (0,)})) == ErrorCode.invalid_request
    assert code(TopicSpec("t", configs={"retention.ms": None})) == ErrorCode.invalid_config

    def reject(config):
        raise ValueError(f"bad {config}")

    assert code(TopicSpec("t", configs={"x": "y"}), validate_config=reject) == ErrorCode.invalid_config
    assert code(TopicSpec("t", 2**31 - 1, 1)) == ErrorCode.invalid_partitions  # refused, not computed
    assert code(TopicSpec("a.b"), colliding=["a_b"]) == ErrorCode.invalid_topic_exception


def test_only_names_differing_by_dot_versus_underscore_collide():
    existing = ["a_b", "a.c", "x", "a-b", "my.topic_1"]
    assert colliding_topics("a.b", existing) == ["a_b"]
    assert colliding_topics("a_c", existing) == ["a.c"]
    assert colliding_topics("my_topic.1", existing) == ["my.topic_1"]
    assert colliding_topics("a_b", existing) == []  # the topic itself is no collision
    assert colliding_topics("x", existing) == colliding_topics("a-b.c", existing) == []


def test_new_partitions_continue_the_assignment_as_kafka_does():
    """Kafka's createNewPartitionsAssignment: round-robin continues from the broker that holds
    partition 0's first replica, at the partition ids after the existing ones."""
    brokers = [(b, None) for b in range(5)]
    existing = TopicAssignment({0: (2, 3, 4), 1: (3, 4, 0)})
    added = plan_new_partitions(PartitionsSpec("t", 5), existing, brokers)
    assert added == assign_replicas_to_brokers(brokers, 3, 3, fixed_start_index=2, start_partition_id=2)
    assert sorted(added) == [2, 3, 4] and all(len(set(r)) == 3 for r in added.values())
    gone = TopicAssignment({0: (7, 8)})  # partition 0's leader gone: the first broker above it, else 0
    assert sorted(plan_new_partitions(PartitionsSpec("t", 2), gone, brokers)) == [1]
    manual = plan_new_partitions(PartitionsSpec("t", 4, ((0, 1, 2), (4, 3, 2))), existing, brokers)
    assert manual == {2: (0, 1, 2), 3: (4, 3, 2)}


@pytest.mark.parametrize(("spec", "existing", "code"), [
    (PartitionsSpec("t", 1), {0: (0,), 1: (1,)}, ErrorCode.invalid_partitions),          # a decrease
    (PartitionsSpec("t", 2), {0: (0,), 1: (1,)}, ErrorCode.invalid_partitions),          # no change
    (PartitionsSpec("t", MAX_PARTITIONS + 1), {0: (0,)}, ErrorCode.invalid_partitions),  # absurd
    (PartitionsSpec("t", 2**31 - 1), {0: (0,)}, ErrorCode.invalid_partitions),
    (PartitionsSpec("t", 3, ((0,),)), {0: (0,)}, ErrorCode.invalid_replica_assignment),  # 1 of 2
    (PartitionsSpec("t", 2, ((9,),)), {0: (0,)}, ErrorCode.invalid_replica_assignment),  # unknown broker
    (PartitionsSpec("t", 2, ((),)), {0: (0,)}, ErrorCode.invalid_replica_assignment),
    (PartitionsSpec("t", 2, ((1, 1),)), {0: (0, 1)}, ErrorCode.invalid_replica_assignment),
    (PartitionsSpec("t", 2, ((1,),)), {0: (0, 1)}, ErrorCode.invalid_replica_assignment),  # rf 1 vs 2
    (PartitionsSpec("t", 2), {0: (0, 1, 2, 3)}, ErrorCode.invalid_replication_factor),   # rf > brokers
])
def test_new_partitions_refused_as_kafka_refuses_them(spec, existing, code):
    with pytest.raises(ApiError) as e:
        plan_new_partitions(spec, TopicAssignment(existing), [(0, None), (1, None), (2, None)])
    assert e.value.error_code == code and e.value.message


def test_no_new_partitions_during_a_reassignment():
    busy = TopicAssignment({0: (0, 1)}, adding_replicas={0: (1,)})
    with pytest.raises(ApiError) as e:
        plan_new_partitions(PartitionsSpec("t", 2), busy, [(0, None), (1, None)])
    assert e.value.error_code == ErrorCode.reassignment_in_progress


def test_topic_ids_and_connect_strings():
    text = new_base64_uuid()
    assert len(text) == 22 and "=" not in text and not text.startswith("-")
    assert base64_to_uuid(text).int != 0
    assert split_connect("h:1,h:2/odradek/x") == ("h:1,h:2", "/odradek/x")
    assert split_connect("h:1") == ("h:1", "")
    assert split_connect("h:1/") == ("h:1", "")


# --- MetadataCache -------------------------------------------------------------------------------


def broker(i: int, rack: str | None = None) -> UpdateMetadataBroker:
    endpoint = UpdateMetadataEndpoint(port=9092 + i, host="127.0.0.1", listener="PLAINTEXT", security_protocol=0)
    return UpdateMetadataBroker(id=i, endpoints=(endpoint,), rack=rack)


def pstate(p: int, leader: int, epoch: int = 0, replicas=(0,), controller_epoch: int = 1):
    return UpdateMetadataPartitionState(
        partition_index=p, controller_epoch=controller_epoch, leader=leader, leader_epoch=epoch,
        isr=tuple(replicas), zk_version=0, replicas=tuple(replicas), offline_replicas=(),
    )


def update(controller_epoch: int, topics: dict, brokers=(0,)) -> UpdateMetadataRequest:
    return UpdateMetadataRequest(
        controller_id=1000, controller_epoch=controller_epoch, broker_epoch=-1,
        topic_states=tuple(UpdateMetadataTopicState(topic_name=t, partition_states=tuple(s)) for t, s in topics.items()),
        live_brokers=tuple(broker(b) for b in brokers),
    )


def test_cache_replaces_partitions_and_brokers():
    cache = MetadataCache(0)
    assert cache.update(update(1, {"a": [pstate(0, 0), pstate(1, 1)]}, brokers=(0, 1))) == []
    assert sorted(cache.topic_partitions("a")) == [0, 1]
    assert cache.partition_count("a") == 2 and cache.partition_count("zzz") == 0
    assert cache.leader_endpoint("a", 1) == (1, "127.0.0.1", 9093)
    cache.update(update(1, {"a": [pstate(1, 0, epoch=1)], "b": [pstate(0, 0)]}, brokers=(0,)))
    assert int(cache.partition_state("a", 1).leader_epoch) == 1
    assert int(cache.partition_state("a", 0).leader) == 0  # untouched partitions stay
    assert sorted(cache.topics()) == ["a", "b"]
    assert list(cache.live_brokers()) == [0]  # the broker set is replaced
    assert cache.leader_endpoint("a", 1) == (0, "127.0.0.1", 9092)
    assert cache.leader_endpoint("a", 0, listener="SSL") is None
    assert cache.partition_state("zzz", 0) is None and cache.topic_partitions("zzz") is None


def test_cache_rejects_a_stale_controller_epoch_without_change():
    cache = MetadataCache(0)
    cache.update(update(5, {"a": [pstate(0, 0)]}))
    generation = cache.generation
    with pytest.raises(StaleControllerEpochError):
        cache.update(update(4, {"b": [pstate(0, 0)]}, brokers=()))
    assert cache.topics() == ["a"] and list(cache.live_brokers()) == [0]
    assert cache.controller_epoch == 5 and cache.generation == generation
    cache.update(update(5, {"b": [pstate(0, 0)]}))  # same epoch is fine
    cache.update(update(6, {}))
    assert cache.controller_epoch == 6


def test_cache_drops_partitions_during_delete():
    cache = MetadataCache(0)
    cache.update(update(1, {"a": [pstate(0, 0), pstate(1, 0)], "b": [pstate(0, 0)]}))
    deleted = cache.update(update(1, {"a": [pstate(0, LEADER_DURING_DELETE)]}))
    assert deleted == [("a", 0)] and sorted(cache.topic_partitions("a")) == [1]
    deleted = cache.update(update(1, {"a": [pstate(1, LEADER_DURING_DELETE)], "zz": [pstate(0, -2)]}))
    assert deleted == [("a", 1)]
    assert cache.topics() == ["b"] and not cache.contains("a") and not cache.contains("zz")


def test_cache_wait_for_rechecks_on_updates():
    async def scenario():
        cache = MetadataCache(0)
        assert await cache.wait_for(lambda: True, 0)
        assert not await cache.wait_for(lambda: cache.contains("a"), 0.05)
        waiter = asyncio.create_task(cache.wait_for(lambda: cache.all_partitions_have_leaders("a"), 10))
        await turns()
        cache.update(update(1, {"a": [pstate(0, -1)]}))
        await turns()
        assert not waiter.done()
        cache.update(update(1, {"a": [pstate(0, 0)]}))
        assert await asyncio.wait_for(waiter, 5)
        assert not cache._waiters

    asyncio.run(scenario())

"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs against a real ZooKeeper, every request
and response through Kafka's framing (the Harness of test_metadata_apis plays the controller)."""

import asyncio
import json

import pytest
from kio.schema.errors import ErrorCode
from test_metadata_apis import Harness, creatable, create_request, nested, request

from odradek.common import zk_data

TOPIC, BROKER, BROKER_LOGGER = 2, 4, 8
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def incremental(version: int, resources, validate_only: bool = False):
    """resources: [(type, name, [(key, op, value)])]."""
    return request(44, version, validate_only=validate_only, resources=tuple(
        nested(44, version, "AlterConfigsResource", resource_type=t, resource_name=n, configs=tuple(
            nested(44, version, "AlterableConfig", name=k, config_operation=op, value=v) for k, op, v in ops))
        for t, n, ops in resources))


def alter(version: int, resources, validate_only: bool = False):
    """resources: [(type, name, {key: value})]."""
    return request(33, version, validate_only=validate_only, resources=tuple(
        nested(33, version, "AlterConfigsResource", resource_type=t, resource_name=n, configs=tuple(
            nested(33, version, "AlterableConfig", name=k, value=v) for k, v in configs.items()))
        for t, n, configs in resources))


def describe(version: int, resources, synonyms: bool = True, docs: bool = True):
    return request(32, version, include_synonyms=synonyms, include_documentation=docs, resources=tuple(
        nested(32, version, "DescribeConfigsResource", resource_type=t, resource_name=n, configuration_keys=keys)
        for t, n, keys in resources))


async def create(h: Harness, topic: str, configs: dict | None = None):
    controller = asyncio.create_task(h.controller_creates(topic))
    response = await h.call(create_request(4, [creatable(4, topic, 1, 1, configs=configs or {})]))
    await controller
    assert response.topics[0].error_code == ErrorCode.none


async def znode(h: Harness, path: str):
    data, _ = await asyncio.to_thread(h.raw.get, path)
    return json.loads(data)


async def notifications(h: Harness) -> list[dict]:
    names = sorted(await asyncio.to_thread(h.raw.get_children, zk_data.CONFIG_CHANGES))
    return [await znode(h, f"{zk_data.CONFIG_CHANGES}/{n}") for n in names]


def codes(response) -> list[ErrorCode]:
    return [r.error_code for r in response.responses]


def run(zk_connect, scenario, **props):
    async def main():
        async with Harness(zk_connect, **props) as h:
            await h.update_metadata({})
            await scenario(h)

    asyncio.run(main())


@pytest.mark.parametrize("version", [0, 1])
def test_incremental_alter_configs_on_a_topic(zk_connect, version):
    async def scenario(h: Harness):
        await create(h, "t", {"retention.ms": "1000"})
        response = await h.call(incremental(version, [(TOPIC, "t", [
            ("segment.bytes", SET, "100000"), ("retention.ms", DELETE, None),
            ("cleanup.policy", APPEND, "compact"), ("compression.type", SET, "lz4"),
        ])]))
        assert codes(response) == [ErrorCode.none]
        assert (response.responses[0].resource_type, response.responses[0].resource_name) == (TOPIC, "t")
        assert await znode(h, zk_data.topic_config_path("t")) == {"version": 1, "config": {
            "cleanup.policy": "delete,compact", "compression.type": "lz4", "segment.bytes": "100000"}}
        assert await notifications(h) == [{"version": 2, "entity_path": "topics/t"}]

        response = await h.call(incremental(version, [(TOPIC, "t", [("cleanup.policy", SUBTRACT, "delete")])]))
        assert codes(response) == [ErrorCode.none]
        assert (await znode(h, zk_data.topic_config_path("t")))["config"]["cleanup.policy"] == "compact"

        # validate_only: checked, not written, not announced
        response = await h.call(incremental(version, [(TOPIC, "t", [("segment.bytes", SET, "200000")])], True))
        assert codes(response) == [ErrorCode.none]
        assert (await znode(h, zk_data.topic_config_path("t")))["config"]["segment.bytes"] == "100000"
        assert len(await notifications(h)) == 2

        # the same configs again: nothing to write, nothing announced
        response = await h.call(incremental(version, [(TOPIC, "t", [("segment.bytes", SET, "100000")])]))
        assert codes(response) == [ErrorCode.none] and len(await notifications(h)) == 2

    run(zk_connect, scenario)


def test_incremental_alter_configs_errors_are_per_resource(zk_connect):
    async def scenario(h: Harness):
        await create(h, "t")
        await create(h, "u")
        response = await h.call(incremental(1, [
            (TOPIC, "t", [("retention.ms", SET, "1000")]),                       # ok
            (TOPIC, "missing", [("retention.ms", SET, "1000")]),                 # unknown topic
            (TOPIC, "u", [("retention.ms", SET, "soon")]),                       # invalid value
            (TOPIC, "u", [("retention.ms", SET, "1")]),                          # u named twice
            (TOPIC, "v", [("a.b", SET, "1"), ("a.b", DELETE, None)]),            # a key twice
            (TOPIC, "t2", [("retention.ms", SET, None)]),                        # null SET
            (TOPIC, "t3", [("retention.ms", 7, "1")]),                           # unknown operation
            (TOPIC, "", [("retention.ms", SET, "1")]),                           # default topic
            (BROKER, "3", [("log.retention.ms", SET, "1")]),                     # another broker
            (BROKER, "x", [("log.retention.ms", SET, "1")]),                     # not a broker id
            (99, "q", []),                                                       # unknown type
        ]))
        assert codes(response) == [
            ErrorCode.none, ErrorCode.unknown_topic_or_partition, ErrorCode.invalid_request,
            ErrorCode.invalid_request, ErrorCode.invalid_request, ErrorCode.invalid_request,
            ErrorCode.invalid_request, ErrorCode.invalid_request, ErrorCode.invalid_request,
            ErrorCode.invalid_request, ErrorCode.invalid_request,
        ]
        assert all(r.error_message for r in response.responses[1:])
        assert (await znode(h, zk_data.topic_config_path("u")))["config"] == {}

        response = await h.call(incremental(1, [
            (TOPIC, "u", [("retention.ms", SET, "soon")]),
            (TOPIC, "u2", [("no.such.key", SET, "1")]),
            (TOPIC, "t", [("retention.ms", APPEND, "5")]),
            (TOPIC, "t", [("min.compaction.lag.ms", SET, "10"), ("max.compaction.lag.ms", SET, "5")]),
        ]))
        assert codes(response)[0] == ErrorCode.invalid_config
        assert "retention.ms" in response.responses[0].error_message and "soon" in response.responses[0].error_message
        assert codes(response)[1] == ErrorCode.unknown_topic_or_partition
        assert codes(response)[2:] == [ErrorCode.invalid_request, ErrorCode.invalid_request]  # t named twice

        response = await h.call(incremental(1, [
            (TOPIC, "t", [("retention.ms", APPEND, "5")]),
            (TOPIC, "u", [("no.such.key", SET, "1")]),
        ]))
        assert codes(response) == [ErrorCode.invalid_request, ErrorCode.invalid_config]
        response = await h.call(incremental(1, [
            (TOPIC, "t", [("min.compaction.lag.ms", SET, "10"), ("max.compaction.lag.ms", SET, "5")]),
            (TOPIC, "u", [("remote.storage.enable", SET, "true")]),
        ]))
        assert codes(response) == [ErrorCode.invalid_config, ErrorCode.invalid_config]
        assert (await znode(h, zk_data.topic_config_path("t")))["config"] == {"retention.ms": "1000"}

    run(zk_connect, scenario)


@pytest.mark.parametrize("version", [0, 1, 2])
def test_alter_configs_replaces_the_whole_set(zk_connect, version):
    async def scenario(h: Harness):
        await create(h, "t", {"retention.ms": "1000", "segment.bytes": "100000"})
        response = await h.call(alter(version, [(TOPIC, "t", {"max.message.bytes": "2000000"})]))
        assert codes(response) == [ErrorCode.none]
        assert (await znode(h, zk_data.topic_config_path("t")))["config"] == {"max.message.bytes": "2000000"}
        response = await h.call(alter(version, [
            (TOPIC, "t", {"max.message.bytes": "-5"}),
            (BROKER_LOGGER, "0", {"kafka": "DEBUG"}),
            (TOPIC, "missing", {}),
        ]))
        assert codes(response) == [ErrorCode.invalid_config, ErrorCode.invalid_request,
                                   ErrorCode.unknown_topic_or_partition]
        response = await h.call(alter(version, [(TOPIC, "t", {})], validate_only=True))
        assert codes(response) == [ErrorCode.none]
        assert (await znode(h, zk_data.topic_config_path("t")))["config"] == {"max.message.bytes": "2000000"}

    run(zk_connect, scenario)


def test_broker_dynamic_configs_are_written_where_kafka_keeps_them(zk_connect):
    async def scenario(h: Harness):
        response = await h.call(incremental(1, [
            (BROKER, "", [("log.retention.ms", SET, "60000"), ("leader.replication.throttled.rate", SET, "1000")]),
            (BROKER, "0", [("follower.replication.throttled.rate", SET, "2000")]),
        ]))
        assert codes(response) == [ErrorCode.none, ErrorCode.none]
        assert (await znode(h, zk_data.broker_config_path("<default>")))["config"] == {
            "log.retention.ms": "60000", "leader.replication.throttled.rate": "1000"}
        assert (await znode(h, zk_data.broker_config_path("0")))["config"] == {
            "follower.replication.throttled.rate": "2000"}
        assert await notifications(h) == [{"version": 2, "entity_path": "brokers/<default>"},
                                          {"version": 2, "entity_path": "brokers/0"}]
        response = await h.call(incremental(1, [
            (BROKER, "", [("num.partitions", SET, "3")]),              # not dynamic
            (BROKER, "0", [("log.retention.hours", SET, "1")]),       # an alternative key: not dynamic
            (BROKER, "", [("log.segment.bytes", SET, "10")]),         # below the minimum
            (BROKER, "", [("made.up.key", SET, "1")]),
        ]))
        assert codes(response) == [ErrorCode.invalid_request, ErrorCode.invalid_config,
                                   ErrorCode.invalid_request, ErrorCode.invalid_request]  # "" named thrice
        response = await h.call(alter(1, [(BROKER, "", {"num.partitions": "3"}),
                                          (BROKER, "0", {"log.segment.bytes": "10"})]))
        assert codes(response) == [ErrorCode.invalid_config, ErrorCode.invalid_config]
        assert "Cannot update these configs dynamically" in response.responses[0].error_message
        response = await h.call(alter(1, [(BROKER, "", {"compression.type": "zstd"})]))
        assert codes(response) == [ErrorCode.none]
        assert (await znode(h, zk_data.broker_config_path("<default>")))["config"] == {"compression.type": "zstd"}

    run(zk_connect, scenario)


@pytest.mark.parametrize("version", range(1, 5))
def test_describe_configs_sources_synonyms_types_and_docs(zk_connect, version):
    async def scenario(h: Harness):
        await create(h, "t", {"retention.ms": "1000", "compression.type": "lz4"})
        h.apis.dynamic_config.update(default={"min.insync.replicas": "2", "log.segment.bytes": "5000000"},
                                     broker={"log.segment.bytes": "6000000"})
        response = await h.call(describe(version, [(TOPIC, "t", None), (BROKER, "0", None), (BROKER, "", None),
                                                   (TOPIC, "t", ())]))
        topic, broker, default, everything = response.results
        configs = {c.name: c for c in topic.configs}
        assert len(configs) == 36 and {c.name for c in everything.configs} == set(configs)  # Kafka 3.9's list
        retention = configs["retention.ms"]
        assert (retention.value, retention.config_source, retention.read_only) == ("1000", 1, False)
        assert configs["compression.type"].value == "lz4"
        mir = configs["min.insync.replicas"]
        assert (mir.value, mir.config_source) == ("2", 3)  # the cluster's dynamic default
        segment = configs["segment.bytes"]
        assert (segment.value, segment.config_source) == ("6000000", 2)  # this broker's dynamic config
        assert configs["segment.ms"].config_source == 5
        assert configs["leader.replication.throttled.replicas"].value == ""
        if version >= 1:
            assert [(s.name, s.value, s.source) for s in segment.synonyms] == [
                ("log.segment.bytes", "6000000", 2), ("log.segment.bytes", "5000000", 3),
                ("log.segment.bytes", str(1 << 30), 5)]
            assert next((s.name, s.source) for s in retention.synonyms) == ("retention.ms", 1)
        if version >= 3:
            assert (retention.config_type, configs["cleanup.policy"].config_type) == (5, 7)
            assert configs["min.cleanable.dirty.ratio"].config_type == 6
            assert retention.documentation and "deleted" in retention.documentation
        by_name = {c.name: c for c in broker.configs}
        assert by_name["log.segment.bytes"].config_source == 2 and not by_name["log.segment.bytes"].read_only
        assert by_name["num.partitions"].read_only and by_name["num.partitions"].config_source == 4
        assert by_name["log.retention.hours"].config_source == 5 and by_name["log.retention.hours"].value == "168"
        assert by_name["zookeeper.connect"].config_source == 4
        assert sorted((c.name, c.value, c.config_source) for c in default.configs) == [
            ("log.segment.bytes", "5000000", 3), ("min.insync.replicas", "2", 3)]

    run(zk_connect, scenario, **{"num.partitions": "1"})


def test_hostile_config_requests_get_errors_not_crashes(zk_connect):
    async def scenario(h: Harness):
        await create(h, "t")
        many = [(TOPIC, f"nope-{i}", [("retention.ms", SET, "1")]) for i in range(2000)]
        response = await h.call(incremental(1, many))
        assert set(codes(response)) == {ErrorCode.unknown_topic_or_partition} and len(response.responses) == 2000
        absurd = [("retention.ms", SET, "9" * 100), ("segment.bytes", SET, "-1"), ("min.insync.replicas", SET, "1e9"),
                  ("max.message.bytes", SET, "99999999999"), ("min.cleanable.dirty.ratio", SET, "NaN")]
        for op in absurd:
            response = await h.call(incremental(1, [(TOPIC, "t", [op])]))
            assert codes(response) == [ErrorCode.invalid_config], op
        huge = [("leader.replication.throttled.replicas", SET, ",".join(f"{p}:1" for p in range(200_000)))]
        response = await h.call(incremental(1, [(TOPIC, "t", huge)]))
        assert codes(response) == [ErrorCode.invalid_config]
        response = await h.call(describe(4, [(TOPIC, "../x", None), (TOPIC, "nope", None), (BROKER, "x", None),
                                             (BROKER, "5", None), (77, "t", None)] * 200))
        assert [r.error_code for r in response.results[:5]] == [
            ErrorCode.invalid_topic_exception, ErrorCode.unknown_topic_or_partition, ErrorCode.invalid_request,
            ErrorCode.invalid_request, ErrorCode.invalid_request]
        assert (await znode(h, zk_data.topic_config_path("t")))["config"] == {}

    run(zk_connect, scenario)

"""MetadataApis against a real ZooKeeper, every request and response through Kafka's framing.

Until the controller process exists in these tests, the test plays the controller's wire part:
it reads the assignment znodes the broker wrote and sends UpdateMetadata, as the controller does.
"""

import asyncio
import datetime
import sys
import uuid

import pytest
from kazoo.client import KazooClient
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32Timedelta

from odradek.broker.admin_manager import AdminManager
from odradek.broker.config_apis import ConfigApis
from odradek.broker.dynamic_config import DynamicBrokerConfig
from odradek.broker.metadata_apis import MetadataApis
from odradek.broker.metadata_cache import MetadataCache
from odradek.broker.zk_client import BrokerZkClient, base64_to_uuid
from odradek.common import wire, zk_data
from odradek.common.config import BrokerConfig
from odradek.common.messages import (
    LEADER_DURING_DELETE,
    UpdateMetadataBroker,
    UpdateMetadataEndpoint,
    UpdateMetadataPartitionState,
    UpdateMetadataRequest,
    UpdateMetadataTopicState,
)
from odradek.common.network.encoding import Body
from odradek.common.network.request_context import RequestContext

BROKER_ID = 0


def request(api_key: int, version: int, **values):
    return wire.make_entity(load_request_schema(api_key, version), **values)


def nested(api_key: int, version: int, cls_name: str, **values):
    module = sys.modules[load_request_schema(api_key, version).__module__]
    return wire.make_entity(getattr(module, cls_name), **values)


def ms(value: int) -> i32Timedelta:
    return i32Timedelta.parse(datetime.timedelta(milliseconds=value))


class Harness:
    """A broker's metadata side on a real ZooKeeper, and the controller's wire part."""

    def __init__(self, zk_connect: str, **props):
        base = {"broker.id": str(BROKER_ID), "zookeeper.connect": zk_connect, "num.partitions": "2"}
        base.update(props)
        self.config = BrokerConfig.from_properties(base)
        self.cache = MetadataCache(BROKER_ID)
        self.zk = BrokerZkClient(self.config)
        self.apis: MetadataApis | None = None
        self.raw: KazooClient | None = None
        self.live = [BROKER_ID]
        self.controller_epoch = 1
        self.correlation = 0

    async def __aenter__(self):
        await self.zk.start()
        dynamic = DynamicBrokerConfig.from_config(self.config)
        admin = AdminManager(self.config, self.cache, self.zk, current_config=lambda: dynamic.current)
        self.apis = MetadataApis(self.config, self.cache, self.zk, admin, dynamic)
        config_apis = ConfigApis(dynamic, self.cache, self.zk)
        self.handlers = {**self.apis.handlers, **config_apis.handlers}
        self.versions = {**self.apis.versions, **config_apis.versions}
        self.raw = KazooClient(hosts=self.config.zookeeper_connect)
        await asyncio.to_thread(self.raw.start, 10)
        return self

    async def __aexit__(self, *exc):
        await asyncio.to_thread(_close, self.raw)
        await self.zk.stop()

    async def call(self, payload):
        """Through the wire both ways: what a client would send and read back."""
        self.correlation += 1
        frame = wire.encode_request(payload, self.correlation, "test")
        header, decoded, schema = wire.decode_request(frame[4:])
        api_key = int(schema.__api_key__)
        assert api_key in self.handlers
        low, high = self.versions[api_key]
        assert low <= int(schema.__version__) <= high
        response = await self.handlers[api_key](RequestContext(header), decoded)
        flexible = wire.response_header_flexible(api_key, schema.__flexible__)
        if isinstance(response, Body):  # pre-encoded: frame it as KafkaApis does
            body = b"".join(response.chunks)
            assert len(body) == response.size
            out = b"\0\0\0\0" + wire.SIZE.pack(self.correlation) + (b"\0" if flexible else b"") + body
        else:
            out = wire.encode_response(response, self.correlation, flexible_header=flexible)
        correlation, answer = wire.decode_response(schema, out[4:])
        assert correlation == self.correlation
        if isinstance(response, Body):  # byte for byte what kio writes for the decoded object
            assert wire.encode_entity(answer) == body
        return answer

    # --- the controller's part ---------------------------------------------------------------

    def _state(self, p: int, replicas, leader: int) -> UpdateMetadataPartitionState:
        return UpdateMetadataPartitionState(
            partition_index=p, controller_epoch=self.controller_epoch, leader=leader, leader_epoch=0,
            isr=tuple(replicas), zk_version=0, replicas=tuple(replicas),
            offline_replicas=tuple(r for r in replicas if r not in self.live),
        )

    def _brokers(self):
        return tuple(
            UpdateMetadataBroker(
                id=b,
                endpoints=(UpdateMetadataEndpoint(port=9092 + b, host="127.0.0.1", listener="PLAINTEXT", security_protocol=0),),
                rack=None,
            )
            for b in self.live
        )

    async def update_metadata(self, topics: dict[str, list], epoch: int | None = None, broker_epoch: int = -1):
        payload = UpdateMetadataRequest(
            controller_id=1000,
            controller_epoch=self.controller_epoch if epoch is None else epoch,
            broker_epoch=broker_epoch,
            topic_states=tuple(
                UpdateMetadataTopicState(topic_name=t, partition_states=tuple(states)) for t, states in topics.items()
            ),
            live_brokers=self._brokers(),
        )
        return await self.call(payload)

    async def publish_topic(self, topic: str, leaderless: tuple[int, ...] = ()):
        """Read the assignment znode and announce leaders (the first replica), as the controller does."""
        data, _ = await asyncio.to_thread(self.raw.get, zk_data.topic_path(topic))
        assignment = zk_data.decode_topic_assignment(data)
        states = [
            self._state(p, replicas, -1 if p in leaderless else replicas[0])
            for p, replicas in sorted(assignment.partitions.items())
        ]
        return await self.update_metadata({topic: states})

    async def controller_creates(self, topic: str, rounds: int = 200) -> None:
        for _ in range(rounds):
            if await asyncio.to_thread(self.raw.exists, zk_data.topic_path(topic)):
                await self.publish_topic(topic)
                return
            await asyncio.sleep(0.02)
        raise AssertionError(f"{topic} was never written")

    async def controller_deletes(self, topic: str, rounds: int = 200) -> None:
        for _ in range(rounds):
            if await asyncio.to_thread(self.raw.exists, zk_data.delete_topic_path(topic)):
                parts = self.cache.topic_partitions(topic) or {}
                await self.update_metadata({topic: [self._state(p, s.replicas, LEADER_DURING_DELETE) for p, s in parts.items()]})
                return
            await asyncio.sleep(0.02)
        raise AssertionError(f"{topic} was never marked for deletion")


def _close(zk: KazooClient) -> None:
    zk.stop()
    zk.close()


def run(zk_connect, scenario, **props):
    async def main():
        async with Harness(zk_connect, **props) as h:
            await scenario(h)

    asyncio.run(main())


# --- Metadata ------------------------------------------------------------------------------------


def metadata_request(version: int, names, allow_auto: bool = True):
    topics = None if names is None else tuple(
        nested(3, version, "MetadataRequestTopic", name=n, topic_id=None) for n in names
    )
    return request(3, version, topics=topics, allow_auto_topic_creation=allow_auto,
                   include_topic_authorized_operations=False, include_cluster_authorized_operations=False)


@pytest.mark.parametrize("version", range(14))
def test_metadata_every_version(zk_connect, version):
    async def scenario(h: Harness):
        h.live = [0, 1]
        await asyncio.to_thread(
            h.raw.create, zk_data.topic_path("a"),
            zk_data.encode_topic_assignment(zk_data.TopicAssignment({0: (0,), 1: (2,)}, topic_id="AAAAAAAAAAAAAAAAAAAABw")),
            makepath=True,
        )
        await h.publish_topic("a")
        response = await h.call(metadata_request(version, ["a"]))
        assert [(b.node_id, b.host, b.port) for b in response.brokers] == [(0, "127.0.0.1", 9092), (1, "127.0.0.1", 9093)]
        (topic,) = response.topics
        assert topic.name == "a" and topic.error_code == ErrorCode.none
        p0, p1 = topic.partitions
        assert (p0.partition_index, p0.error_code, p0.leader_id, p0.replica_nodes) == (0, ErrorCode.none, 0, (0,))
        assert (p1.error_code, p1.leader_id) == (ErrorCode.leader_not_available, -1)  # leader 2 is not live
        if version >= 1:
            assert response.controller_id == 0  # the smallest live broker, never the controller process
        if version >= 2:
            assert response.cluster_id and response.cluster_id == await h.zk.get_cluster_id()
        if version >= 5:
            assert p1.offline_replicas == (2,)
        if version >= 10:
            assert topic.topic_id == base64_to_uuid("AAAAAAAAAAAAAAAAAAAABw")
        if version >= 13:
            assert response.error_code == ErrorCode.none
        everything = await h.call(metadata_request(version, [] if version == 0 else None))
        assert [t.name for t in everything.topics] == ["a"]
        if version >= 1:
            assert (await h.call(metadata_request(version, []))).topics == ()

    run(zk_connect, scenario)


@pytest.mark.parametrize("version", [1, 4, 12])
def test_metadata_auto_creates_missing_topics(zk_connect, version):
    async def scenario(h: Harness):
        await h.update_metadata({})
        response = await h.call(metadata_request(version, ["fresh", "bad name"]))
        errors = {t.name: t.error_code for t in response.topics}
        assert errors == {"fresh": ErrorCode.leader_not_available, "bad name": ErrorCode.invalid_topic_exception}
        data, _ = await asyncio.to_thread(h.raw.get, zk_data.topic_path("fresh"))
        assignment = zk_data.decode_topic_assignment(data)
        assert assignment.partitions == {0: (0,), 1: (0,)}  # num.partitions=2, RF 1
        assert base64_to_uuid(assignment.topic_id).int != 0
        again = await h.call(metadata_request(version, ["fresh"]))
        assert again.topics[0].error_code == ErrorCode.leader_not_available
        await h.publish_topic("fresh")
        ready = await h.call(metadata_request(version, ["fresh"]))
        assert ready.topics[0].error_code == ErrorCode.none and len(ready.topics[0].partitions) == 2
        if version >= 4:
            response = await h.call(metadata_request(version, ["other"], allow_auto=False))
            assert response.topics[0].error_code == ErrorCode.unknown_topic_or_partition
            assert not await asyncio.to_thread(h.raw.exists, zk_data.topic_path("other"))

    run(zk_connect, scenario)


def test_metadata_without_auto_creation(zk_connect):
    async def scenario(h: Harness):
        await h.update_metadata({})
        response = await h.call(metadata_request(9, ["missing"]))
        assert response.topics[0].error_code == ErrorCode.unknown_topic_or_partition
        assert not await asyncio.to_thread(h.raw.exists, zk_data.topic_path("missing"))
        h.live = [0, 1]
        assert (await h.call(metadata_request(9, ["x"]))).topics[0].error_code == ErrorCode.unknown_topic_or_partition

    run(zk_connect, scenario, **{"auto.create.topics.enable": "false"})


def test_metadata_auto_creation_error_is_reported(zk_connect):
    async def scenario(h: Harness):
        await h.update_metadata({})
        response = await h.call(metadata_request(12, ["t"]))
        assert response.topics[0].error_code == ErrorCode.invalid_replication_factor

    run(zk_connect, scenario, **{"default.replication.factor": "3"})


def test_metadata_from_an_empty_cache_auto_creates_nothing(zk_connect):
    """Before the controller's first UpdateMetadata the cache is empty, not the cluster (issue 32:
    a restarted broker answered `Replication factor: 1 larger than available brokers: 0` for a
    topic that existed): a named topic is retriable LEADER_NOT_AVAILABLE and nothing is written."""

    async def scenario(h: Harness):
        existing = zk_data.encode_topic_assignment(zk_data.TopicAssignment({0: (0,)}, topic_id="AAAAAAAAAAAAAAAAAAAACQ"))
        await asyncio.to_thread(h.raw.create, zk_data.topic_path("jepsen"), existing, makepath=True)
        response = await h.call(metadata_request(12, ["jepsen", "missing", "__consumer_offsets"]))
        assert {t.name: t.error_code for t in response.topics} == dict.fromkeys(
            ["jepsen", "missing", "__consumer_offsets"], ErrorCode.leader_not_available)
        assert response.brokers == ()
        assert not await asyncio.to_thread(h.raw.exists, zk_data.topic_path("missing"))
        assert not await asyncio.to_thread(h.raw.exists, zk_data.topic_path("__consumer_offsets"))
        assert (await asyncio.to_thread(h.raw.get, zk_data.topic_path("jepsen")))[0] == existing

    run(zk_connect, scenario)


def test_auto_creation_never_creates_a_topic_zookeeper_has(zk_connect):
    """A cache that lags ZooKeeper (the controller has not announced the topic yet): the topic is
    being created, LEADER_NOT_AVAILABLE, never an error from planning it again."""

    async def scenario(h: Harness):
        await h.update_metadata({})
        existing = zk_data.encode_topic_assignment(zk_data.TopicAssignment({0: (0, 1, 2)}, topic_id="AAAAAAAAAAAAAAAAAAAACg"))
        await asyncio.to_thread(h.raw.create, zk_data.topic_path("jepsen"), existing, makepath=True)
        response = await h.call(metadata_request(12, ["jepsen"]))
        assert response.topics[0].error_code == ErrorCode.leader_not_available  # not INVALID_REPLICATION_FACTOR
        assert (await asyncio.to_thread(h.raw.get, zk_data.topic_path("jepsen")))[0] == existing

    run(zk_connect, scenario, **{"default.replication.factor": "3"})


def test_metadata_by_topic_id(zk_connect):
    async def scenario(h: Harness):
        await asyncio.to_thread(
            h.raw.create, zk_data.topic_path("a"),
            zk_data.encode_topic_assignment(zk_data.TopicAssignment({0: (0,)}, topic_id="AAAAAAAAAAAAAAAAAAAACA")),
            makepath=True,
        )
        await h.publish_topic("a")
        wanted = base64_to_uuid("AAAAAAAAAAAAAAAAAAAACA")
        unknown = uuid.uuid4()
        topics = tuple(nested(3, 12, "MetadataRequestTopic", name=None, topic_id=t) for t in (wanted, unknown))
        response = await h.call(
            request(3, 12, topics=topics, allow_auto_topic_creation=True, include_topic_authorized_operations=False))
        by_id = {t.topic_id: (t.name, t.error_code) for t in response.topics}
        assert by_id == {wanted: ("a", ErrorCode.none), unknown: (None, ErrorCode.unknown_topic_id)}

    run(zk_connect, scenario)


@pytest.mark.parametrize("version", [10, 11])
def test_metadata_v10_v11_refuse_topic_ids_and_null_names(zk_connect, version):
    """Kafka: v10 and v11 carry a topic id and a nullable name, but naming a topic by id (or not at
    all) is an invalid request; their answer has no null name, so the name comes back empty."""
    async def scenario(h: Harness):
        some_id = uuid.uuid4()
        for name, topic_id, answered in ((None, some_id, ""), (None, None, ""), ("a", some_id, "a")):
            asked = (nested(3, version, "MetadataRequestTopic", name=name, topic_id=topic_id),)
            response = await h.call(request(3, version, topics=asked, allow_auto_topic_creation=False,
                                            include_topic_authorized_operations=False,
                                            include_cluster_authorized_operations=False))
            assert [(t.name, t.error_code) for t in response.topics] == [(answered, ErrorCode.invalid_request)]

    run(zk_connect, scenario)


def test_metadata_creates_the_offsets_topic_with_its_own_settings(zk_connect):
    """Asking Metadata for __consumer_offsets creates it as the group coordinator would
    (offsets.topic.num.partitions, compacted), never with num.partitions."""

    async def scenario(h: Harness):
        await h.update_metadata({})
        response = await h.call(metadata_request(12, ["__consumer_offsets"]))
        assert response.topics[0].error_code == ErrorCode.leader_not_available
        data, _ = await asyncio.to_thread(h.raw.get, zk_data.topic_path("__consumer_offsets"))
        assert sorted(zk_data.decode_topic_assignment(data).partitions) == list(range(5))
        config = await h.zk.get_topic_config("__consumer_offsets")
        assert config["cleanup.policy"] == "compact"

    run(zk_connect, scenario, **{"offsets.topic.num.partitions": "5", "offsets.topic.replication.factor": "1"})


class RacingKazoo(KazooClient):
    """A real ZooKeeper client whose writes to one path race another writer (`rival`, a second
    real client): before every `set` of that path the rival deletes it (a controller finishing a
    topic deletion) and before every `create` the rival creates it (another broker auto-creating
    the same name), so the znodes change in the racing order, deterministically."""

    def __init__(self, rival: KazooClient, path: str, **kw):
        super().__init__(**kw)
        self.rival, self.raced_path, self.races = rival, path, 0

    def set_async(self, path, value, version=-1):
        if path == self.raced_path and self.rival.exists(path):
            self.rival.delete(path)
            self.races += 1
        return super().set_async(path, value, version)

    def create_async(self, path, value=b"", *args, **kwargs):
        if path == self.raced_path and not self.rival.exists(path):
            self.rival.create(path, b"{}", makepath=True)
            self.races += 1
        return super().create_async(path, value, *args, **kwargs)


def test_auto_creation_racing_a_deletion_answers_that_topic_alone(zk_connect):
    """A topic being deleted while a producer auto-creates its name: only that topic gets a
    retriable LEADER_NOT_AVAILABLE, never an UNKNOWN_SERVER_ERROR for the whole request, and the
    half-deleted topic is not recreated under the controller's feet."""

    async def scenario(h: Harness):
        await asyncio.to_thread(h.raw.create, zk_data.topic_path("kept"),
                                zk_data.encode_topic_assignment(zk_data.TopicAssignment({0: (0,)})), makepath=True)
        await h.publish_topic("kept")
        # the controller is half way through deleting "doomed": assignment gone, config and marker left
        await asyncio.to_thread(h.raw.create, zk_data.topic_config_path("doomed"), b"{}", makepath=True)
        await asyncio.to_thread(h.raw.create, zk_data.delete_topic_path("doomed"), makepath=True)
        response = await h.call(metadata_request(12, ["kept", "doomed", "fresh"]))
        errors = {t.name: t.error_code for t in response.topics}
        assert errors == {"kept": ErrorCode.none, "doomed": ErrorCode.leader_not_available,
                          "fresh": ErrorCode.leader_not_available}
        assert not await asyncio.to_thread(h.raw.exists, zk_data.topic_path("doomed"))
        assert await asyncio.to_thread(h.raw.exists, zk_data.topic_path("fresh"))

        # the config znode appears and vanishes between every step (NodeExists, then NoNode, ...)
        racer = RacingKazoo(h.raw, zk_data.topic_config_path("raced"), hosts=h.config.zookeeper_connect)
        await asyncio.to_thread(racer.start, 10)
        quiet, h.zk.calls.zk = h.zk.calls.zk, racer  # the broker's bounded calls go through the racer
        try:
            response = await h.call(metadata_request(12, ["kept", "raced"]))
        finally:
            h.zk.calls.zk = quiet
            await asyncio.to_thread(_close, racer)
        assert racer.races >= 2
        assert {t.name: t.error_code for t in response.topics} == {
            "kept": ErrorCode.none, "raced": ErrorCode.leader_not_available}
        assert not await asyncio.to_thread(h.raw.exists, zk_data.topic_path("raced"))

        # once the rival is gone, the same name is created as usual
        response = await h.call(metadata_request(12, ["raced"]))
        assert response.topics[0].error_code == ErrorCode.leader_not_available
        assert await asyncio.to_thread(h.raw.exists, zk_data.topic_path("raced"))

    run(zk_connect, scenario)


# --- UpdateMetadata ------------------------------------------------------------------------------


def test_update_metadata_fencing(zk_connect):
    async def scenario(h: Harness):
        h.controller_epoch = 5
        assert (await h.update_metadata({"a": [h._state(0, (0,), 0)]})).error_code == ErrorCode.none
        stale = await h.update_metadata({"b": [h._state(0, (0,), 0)]}, epoch=4)
        assert stale.error_code == ErrorCode.stale_controller_epoch
        assert h.cache.topics() == ["a"]
        epoch = await h.zk.register_broker(zk_data.BrokerInfo(0, (zk_data.EndPoint("127.0.0.1", 9092),)))
        old = await h.update_metadata({"b": [h._state(0, (0,), 0)]}, broker_epoch=epoch - 1)
        assert old.error_code == ErrorCode.stale_broker_epoch
        ok = await h.update_metadata({"b": [h._state(0, (0,), 0)]}, broker_epoch=epoch)
        assert ok.error_code == ErrorCode.none and sorted(h.cache.topics()) == ["a", "b"]

    run(zk_connect, scenario)


# --- CreateTopics --------------------------------------------------------------------------------


def creatable(version: int, name: str, partitions: int = -1, rf: int = -1, assignments=None, configs=None):
    return nested(
        19, version, "CreatableTopic", name=name, num_partitions=partitions, replication_factor=rf,
        assignments=tuple(
            nested(19, version, "CreatableReplicaAssignment", partition_index=p, broker_ids=tuple(b))
            for p, b in (assignments or {}).items()
        ),
        configs=tuple(nested(19, version, "CreatableTopicConfig", name=k, value=v) for k, v in (configs or {}).items()),
    )


def create_request(version: int, topics, timeout_ms: int = 10_000, validate_only: bool = False):
    return request(19, version, topics=tuple(topics), timeout=ms(timeout_ms), validate_only=validate_only)


@pytest.mark.parametrize("version", range(2, 8))
def test_create_topics_every_version(zk_connect, version):
    async def scenario(h: Harness):
        h.live = [0, 1]
        await h.update_metadata({})
        controller = asyncio.create_task(h.controller_creates("orders"))
        response = await h.call(create_request(version, [creatable(version, "orders", 3, 2, configs={"retention.ms": "1000"})]))
        await controller
        (result,) = response.topics
        assert (result.name, result.error_code) == ("orders", ErrorCode.none)
        data, _ = await asyncio.to_thread(h.raw.get, zk_data.topic_path("orders"))
        assignment = zk_data.decode_topic_assignment(data)
        assert sorted(assignment.partitions) == [0, 1, 2]
        assert all(sorted(r) == [0, 1] for r in assignment.partitions.values())
        assert await h.zk.get_topic_config("orders") == {"retention.ms": "1000"}
        assert h.cache.all_partitions_have_leaders("orders")
        if version >= 5:
            assert (result.num_partitions, result.replication_factor) == (3, 2)
            configs = {c.name: (c.value, c.config_source) for c in result.configs}
            assert configs["retention.ms"] == ("1000", 1)
            assert configs["segment.bytes"] == (str(1 << 30), 5)
        if version >= 7:
            assert result.topic_id == base64_to_uuid(assignment.topic_id)

    run(zk_connect, scenario)


def test_create_topics_errors(zk_connect):
    async def scenario(h: Harness):
        v = 7
        h.live = [0, 1]
        await h.update_metadata({"taken": [h._state(0, (0,), 0)]})
        topics = [
            creatable(v, "taken", 1, 1),
            creatable(v, "bad/name", 1, 1),
            creatable(v, "zero", 0, 1),
            creatable(v, "toomany", 1, 3),
            creatable(v, "badconf", 1, 1, configs={"retention.ms": "soon"}),
            creatable(v, "unknownconf", 1, 1, configs={"no.such.key": "1"}),
            creatable(v, "dup", 1, 1),
            creatable(v, "dup", 1, 1),
            creatable(v, "manual", assignments={0: [1, 0], 1: [0, 1]}),
            creatable(v, "badmanual", assignments={0: [7]}),
            creatable(v, "both", 2, 1, assignments={0: [0]}),
        ]
        response = await h.call(create_request(v, topics, timeout_ms=0))
        errors = [(t.name, t.error_code) for t in response.topics]
        assert errors == [
            ("taken", ErrorCode.topic_already_exists),
            ("bad/name", ErrorCode.invalid_topic_exception),
            ("zero", ErrorCode.invalid_partitions),
            ("toomany", ErrorCode.invalid_replication_factor),
            ("badconf", ErrorCode.invalid_config),
            ("unknownconf", ErrorCode.invalid_config),
            ("dup", ErrorCode.invalid_request),
            ("dup", ErrorCode.invalid_request),
            ("manual", ErrorCode.none),
            ("badmanual", ErrorCode.invalid_replica_assignment),
            ("both", ErrorCode.invalid_request),
        ]
        assert all(t.error_message for t in response.topics if t.error_code != ErrorCode.none)
        children = await asyncio.to_thread(h.raw.get_children, zk_data.BROKER_TOPICS)
        assert children == ["manual"]
        data, _ = await asyncio.to_thread(h.raw.get, zk_data.topic_path("manual"))
        assert zk_data.decode_topic_assignment(data).partitions == {0: (1, 0), 1: (0, 1)}
        again = await h.call(create_request(v, [creatable(v, "manual", 1, 1)], timeout_ms=0))
        assert again.topics[0].error_code == ErrorCode.topic_already_exists

    run(zk_connect, scenario)


def test_create_topics_validate_only_and_timeout(zk_connect):
    async def scenario(h: Harness):
        await h.update_metadata({})
        checked = await h.call(create_request(5, [creatable(5, "dry", 4, 1)], validate_only=True))
        assert checked.topics[0].error_code == ErrorCode.none and checked.topics[0].num_partitions == 4
        assert not await asyncio.to_thread(h.raw.exists, zk_data.topic_path("dry"))
        # no controller answers: the znodes are written, the request times out with Kafka's error
        late = await h.call(create_request(5, [creatable(5, "late", 1, 1)], timeout_ms=300))
        assert late.topics[0].error_code == ErrorCode.request_timed_out
        assert await asyncio.to_thread(h.raw.exists, zk_data.topic_path("late"))

    run(zk_connect, scenario)


# --- DeleteTopics --------------------------------------------------------------------------------


@pytest.mark.parametrize("version", range(1, 7))
def test_delete_topics_every_version(zk_connect, version):
    async def scenario(h: Harness):
        await h.update_metadata({})
        controller = asyncio.create_task(h.controller_creates("gone"))
        await h.call(create_request(4, [creatable(4, "gone", 2, 1)]))
        await controller
        if version >= 6:
            tid = (await h.apis.topic_ids(["gone"]))["gone"]
            topics = (
                nested(20, version, "DeleteTopicState", name=None, topic_id=tid),
                nested(20, version, "DeleteTopicState", name="never", topic_id=None),
                nested(20, version, "DeleteTopicState", name=None, topic_id=uuid.uuid4()),
            )
            payload = request(20, version, topics=topics, timeout=ms(10_000))
        else:
            payload = request(20, version, topic_names=("gone", "never"), timeout=ms(10_000))
        controller = asyncio.create_task(h.controller_deletes("gone"))
        response = await h.call(payload)
        await controller
        errors = [(r.name, r.error_code) for r in response.responses]
        expected = [("gone", ErrorCode.none), ("never", ErrorCode.unknown_topic_or_partition)]
        if version >= 6:
            expected.append((None, ErrorCode.unknown_topic_id))
            assert response.responses[0].topic_id == tid
        assert errors == expected
        assert not h.cache.contains("gone")
        assert await asyncio.to_thread(h.raw.exists, zk_data.delete_topic_path("gone"))

    run(zk_connect, scenario)


def test_delete_topics_by_illegal_names_keeps_the_other_topics_ids(zk_connect):
    """DeleteTopics v6 answers each topic's id: names no topic may have ("", ".", "a/b") are
    unknown topics, not ZooKeeper paths to read (one failed read lost every id of the request)."""
    async def scenario(h: Harness):
        await h.update_metadata({})
        controller = asyncio.create_task(h.controller_creates("gone"))
        await h.call(create_request(4, [creatable(4, "gone", 1, 1)]))
        await controller
        data, _ = await asyncio.to_thread(h.raw.get, zk_data.topic_path("gone"))
        tid = base64_to_uuid(zk_data.decode_topic_assignment(data).topic_id)
        names = ("gone", "", ".", "a/b", "..")
        topics = tuple(nested(20, 6, "DeleteTopicState", name=n, topic_id=None) for n in names)
        controller = asyncio.create_task(h.controller_deletes("gone"))
        response = await h.call(request(20, 6, topics=topics, timeout=ms(10_000)))
        await controller
        assert [(r.name, r.topic_id, r.error_code) for r in response.responses] == [
            ("gone", tid, ErrorCode.none)] + [(n, None, ErrorCode.unknown_topic_or_partition) for n in names[1:]]

    run(zk_connect, scenario)


def test_delete_topics_timeout(zk_connect):
    async def scenario(h: Harness):
        await h.update_metadata({"stuck": [h._state(0, (0,), 0)]})
        response = await h.call(request(20, 4, topic_names=("stuck",), timeout=ms(200)))
        assert response.responses[0].error_code == ErrorCode.request_timed_out

    run(zk_connect, scenario)


def test_delete_topics_disabled(zk_connect):
    async def scenario(h: Harness):
        await h.update_metadata({"kept": [h._state(0, (0,), 0)]})
        response = await h.call(request(20, 5, topic_names=("kept",), timeout=ms(200)))
        assert response.responses[0].error_code == ErrorCode.topic_deletion_disabled
        assert not await asyncio.to_thread(h.raw.exists, zk_data.delete_topic_path("kept"))

    run(zk_connect, scenario, **{"delete.topic.enable": "false"})


# --- DescribeConfigs -----------------------------------------------------------------------------


def describe_request(version: int, resources):
    return request(
        32, version, include_synonyms=True, include_documentation=False,
        resources=tuple(
            nested(32, version, "DescribeConfigsResource", resource_type=t, resource_name=n, configuration_keys=keys)
            for t, n, keys in resources
        ),
    )


@pytest.mark.parametrize("version", range(1, 5))
def test_describe_configs(zk_connect, version):
    async def scenario(h: Harness):
        await h.update_metadata({})
        controller = asyncio.create_task(h.controller_creates("t"))
        await h.call(create_request(4, [creatable(4, "t", 1, 1, configs={"cleanup.policy": "compact"})]))
        await controller
        response = await h.call(describe_request(version, [
            (2, "t", None),
            (2, "t", ("retention.ms", "cleanup.policy", "no.such")),
            (2, "missing", None),
            (4, "0", None),
            (4, "", ("log.dirs",)),
            (4, "7", None),
            (8, "0", None),
        ]))
        full, filtered, missing, broker, own, other, logger = response.results
        configs = {c.name: c for c in full.configs}
        assert full.error_code == ErrorCode.none and (full.resource_type, full.resource_name) == (2, "t")
        assert (configs["cleanup.policy"].value, configs["cleanup.policy"].config_source) == ("compact", 1)
        assert (configs["retention.ms"].value, configs["retention.ms"].config_source) == (str(7 * 24 * 3600 * 1000), 5)
        assert not configs["cleanup.policy"].read_only
        assert sorted(c.name for c in filtered.configs) == ["cleanup.policy", "retention.ms"]
        assert missing.error_code == ErrorCode.unknown_topic_or_partition
        broker_configs = {c.name: c for c in broker.configs}
        assert broker.error_code == ErrorCode.none
        assert broker_configs["broker.id"].value == "0" and broker_configs["broker.id"].config_source == 4
        assert broker_configs["num.partitions"].value == "2"
        assert broker_configs["auto.create.topics.enable"].value == "true"
        assert broker_configs["log.retention.ms"].config_source == 5
        # The default resource lists the cluster's dynamic defaults only (none here), as Kafka does.
        assert own.error_code == ErrorCode.none and own.configs == ()
        assert other.error_code == ErrorCode.invalid_request and other.error_message
        assert logger.error_code == ErrorCode.invalid_request

    run(zk_connect, scenario)


# --- DescribeCluster -----------------------------------------------------------------------------


@pytest.mark.parametrize("version", range(3))
def test_describe_cluster(zk_connect, version):
    async def scenario(h: Harness):
        h.live = [2, 1]
        await h.update_metadata({})
        response = await h.call(request(60, version, include_cluster_authorized_operations=False,
                                        endpoint_type=1, include_fenced_brokers=False))
        assert response.error_code == ErrorCode.none
        assert response.controller_id == 1
        assert response.cluster_id == await h.zk.get_cluster_id()
        assert [(b.broker_id, b.port) for b in response.brokers] == [(1, 9093), (2, 9094)]
        if version >= 1:
            controllers = await h.call(request(60, version, include_cluster_authorized_operations=False,
                                               endpoint_type=2, include_fenced_brokers=False))
            assert controllers.error_code == ErrorCode.unsupported_endpoint_type

    run(zk_connect, scenario)


# --- CreatePartitions ----------------------------------------------------------------------------


def create_partitions_request(version: int, topics, timeout_ms: int = 10_000, validate_only: bool = False):
    """topics: [(name, count, assignments or None)]."""
    return request(37, version, timeout=ms(timeout_ms), validate_only=validate_only, topics=tuple(
        nested(37, version, "CreatePartitionsTopic", name=n, count=c, assignments=None if a is None else tuple(
            nested(37, version, "CreatePartitionsAssignment", broker_ids=tuple(r)) for r in a))
        for n, c, a in topics))


async def znode_partitions(h: Harness, topic: str) -> dict[int, tuple[int, ...]]:
    data, _ = await asyncio.to_thread(h.raw.get, zk_data.topic_path(topic))
    return zk_data.decode_topic_assignment(data).partitions


async def publish_when(h: Harness, topic: str, count: int, rounds: int = 200) -> None:
    """The controller's part: once the assignment has `count` partitions, announce them."""
    for _ in range(rounds):
        if len(await znode_partitions(h, topic)) >= count:
            await h.publish_topic(topic)
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"{topic} never got {count} partitions")


@pytest.mark.parametrize("version", range(4))
def test_create_partitions(zk_connect, version):
    async def scenario(h: Harness):
        h.live = [0, 1]
        await h.update_metadata({})
        controller = asyncio.create_task(h.controller_creates("t"))
        await h.call(create_request(4, [creatable(4, "t", 2, 2)]))
        await controller
        topic_id = (zk_data.decode_topic_assignment(
            (await asyncio.to_thread(h.raw.get, zk_data.topic_path("t")))[0])).topic_id
        before = await znode_partitions(h, "t")

        # validate_only: checked, nothing written
        response = await h.call(create_partitions_request(version, [("t", 4, None)], validate_only=True))
        assert [(r.name, r.error_code) for r in response.results] == [("t", ErrorCode.none)]
        assert await znode_partitions(h, "t") == before

        # broker-chosen replicas, answered once this broker's metadata has leaders for them
        controller = asyncio.create_task(publish_when(h, "t", 4))
        response = await h.call(create_partitions_request(version, [("t", 4, None)]))
        await controller
        assert [(r.name, r.error_code, r.error_message) for r in response.results] == [("t", ErrorCode.none, None)]
        after = await znode_partitions(h, "t")
        assert {p: after[p] for p in before} == before and sorted(after) == [0, 1, 2, 3]
        assert all(len(set(r)) == 2 and set(r) <= {0, 1} for r in after.values())
        data, _ = await asyncio.to_thread(h.raw.get, zk_data.topic_path("t"))
        assert zk_data.decode_topic_assignment(data).topic_id == topic_id  # kept
        assert h.cache.partition_count("t") == 4

        # explicit assignment; a decrease, no change, an unknown topic, duplicates, a wrong assignment
        controller = asyncio.create_task(publish_when(h, "t", 5))
        response = await h.call(create_partitions_request(version, [
            ("t", 5, [(1, 0)]), ("missing", 3, None), ("dup", 2, None), ("dup", 3, None), ("bad name", 2, None),
        ]))
        await controller
        assert [r.error_code for r in response.results] == [
            ErrorCode.none, ErrorCode.unknown_topic_or_partition, ErrorCode.invalid_request,
            ErrorCode.invalid_request, ErrorCode.unknown_topic_or_partition]
        assert (await znode_partitions(h, "t"))[4] == (1, 0)
        response = await h.call(create_partitions_request(version, [("t", 3, None)]))
        assert response.results[0].error_code == ErrorCode.invalid_partitions
        assert "higher than the requested 3" in response.results[0].error_message
        response = await h.call(create_partitions_request(version, [("t", 5, None)]))
        assert response.results[0].error_code == ErrorCode.invalid_partitions
        response = await h.call(create_partitions_request(version, [("t", 7, [(0, 1)])]))
        assert response.results[0].error_code == ErrorCode.invalid_replica_assignment
        response = await h.call(create_partitions_request(version, [("t", 6, [(0, 7)])]))
        assert response.results[0].error_code == ErrorCode.invalid_replica_assignment
        response = await h.call(create_partitions_request(version, [("t", 2**31 - 1, None)]))
        assert response.results[0].error_code == ErrorCode.invalid_partitions
        assert sorted(await znode_partitions(h, "t")) == [0, 1, 2, 3, 4]

        # no controller answers: written, but REQUEST_TIMED_OUT after the request's timeout
        response = await h.call(create_partitions_request(version, [("t", 6, None)], timeout_ms=200))
        assert response.results[0].error_code == ErrorCode.request_timed_out
        assert sorted(await znode_partitions(h, "t")) == [0, 1, 2, 3, 4, 5]

        # a topic queued for deletion
        await asyncio.to_thread(h.raw.create, zk_data.delete_topic_path("t"), makepath=True)
        response = await h.call(create_partitions_request(version, [("t", 9, None)]))
        assert response.results[0].error_code == ErrorCode.invalid_topic_exception

    run(zk_connect, scenario)

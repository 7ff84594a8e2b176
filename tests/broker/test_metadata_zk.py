"""BrokerZkClient against a real ZooKeeper: registration, re-registration, admin znodes in Kafka's format."""

import asyncio
import json

import pytest
from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError

from odradek.broker.zk_client import BrokerIdTakenError, BrokerZkClient, TopicExistsError, base64_to_uuid, split_connect
from odradek.common import zk_data
from odradek.common.config import BrokerConfig
from odradek.common.zk_data import BrokerInfo, EndPoint, TopicAssignment


def config(zk_connect: str, broker_id: int = 0, **extra) -> BrokerConfig:
    props = {"broker.id": str(broker_id), "zookeeper.connect": zk_connect, "zookeeper.session.timeout.ms": "4000"}
    props.update(extra)
    return BrokerConfig.from_properties(props)


def info(broker_id: int = 0, port: int = 19092, rack: str | None = None) -> BrokerInfo:
    return BrokerInfo(broker_id, (EndPoint("127.0.0.1", port),), rack)


def raw_client(zk_connect: str, **kw) -> KazooClient:
    hosts, chroot = split_connect(zk_connect)
    if chroot:
        root = KazooClient(hosts=hosts)
        root.start(timeout=10)
        root.ensure_path(chroot)
        root.stop()
        root.close()
    zk = KazooClient(hosts=zk_connect, **kw)
    zk.start(timeout=10)
    return zk


async def wait_until(predicate, timeout_s: float = 15.0, step: float = 0.05) -> bool:
    for _ in range(int(timeout_s / step)):
        if await predicate():
            return True
        await asyncio.sleep(step)
    return False


def expire_session(hosts: str, session_id: int, password: bytes) -> None:
    """Close a session from outside: a second client joins it and closes it (ZooKeeper's own trick).
    Joining a session that an earlier attempt already closed never connects: that is not an
    error here, the caller checks whether the owner has moved to a new session."""
    other = KazooClient(hosts=hosts, client_id=(session_id, password))
    try:
        other.start(timeout=10)
    except KazooTimeoutError:
        return  # start() has stopped and closed the client
    other.stop()
    other.close()


def test_start_creates_chroot_and_persistent_paths(zk_connect):
    async def scenario():
        zk = BrokerZkClient(config(zk_connect))
        await zk.start()
        await zk.stop()

    asyncio.run(scenario())
    raw = raw_client(zk_connect)
    try:
        for path in zk_data.PERSISTENT_PATHS:
            assert raw.exists(path) is not None
    finally:
        raw.stop()
        raw.close()


def test_register_epoch_is_czxid_and_stop_removes_it(zk_connect):
    raw = raw_client(zk_connect.split("/")[0])
    chroot = split_connect(zk_connect)[1]

    async def scenario():
        zk = BrokerZkClient(config(zk_connect, 3))
        await zk.start()
        epoch = await zk.register_broker(info(3, rack="r1"))
        data, stat = raw.get(chroot + zk_data.broker_path(3))
        assert epoch == stat.czxid == zk.broker_epoch
        assert stat.ephemeralOwner == zk.session_id
        decoded = zk_data.decode_broker(3, data)
        assert decoded.endpoints == (EndPoint("127.0.0.1", 19092),) and decoded.rack == "r1"
        assert json.loads(data)["version"] == 5
        await zk.stop()
        assert raw.exists(chroot + zk_data.broker_path(3)) is None

    try:
        asyncio.run(scenario())
    finally:
        raw.stop()
        raw.close()


def test_id_taken_by_another_live_broker(zk_connect):
    async def scenario():
        first, second = BrokerZkClient(config(zk_connect, 1)), BrokerZkClient(config(zk_connect, 1))
        await first.start()
        await second.start()
        try:
            await first.register_broker(info(1, port=19001))
            with pytest.raises(BrokerIdTakenError):
                await second.register_broker(info(1, port=19002))
        finally:
            await first.stop()
            await second.stop()

    asyncio.run(scenario())


def test_leftover_registration_of_a_dead_process_is_waited_out(zk_connect):
    """A broker restarted after SIGKILL finds its old znode (same endpoints) until the old session
    expires; it waits for that instead of failing."""
    hosts, _chroot = split_connect(zk_connect)
    old = raw_client(zk_connect, timeout=4.0)
    old.ensure_path(zk_data.BROKER_IDS)
    old.create(zk_data.broker_path(2), zk_data.encode_broker(info(2)), ephemeral=True)
    session_id, password = old.client_id

    async def scenario():
        zk = BrokerZkClient(config(zk_connect, 2))
        await zk.start()
        try:
            task = asyncio.create_task(zk.register_broker(info(2)))
            await asyncio.sleep(0.5)
            assert not task.done()  # still held by the "dead" session
            await asyncio.to_thread(expire_session, hosts, session_id, password)
            epoch = await asyncio.wait_for(task, 20)
            assert epoch > 0 and zk.broker_epoch == epoch
        finally:
            await zk.stop()

    try:
        asyncio.run(scenario())
    finally:
        old.stop()
        old.close()


def test_reregisters_after_session_expiry(zk_connect):
    hosts, _chroot = split_connect(zk_connect)
    raw = raw_client(zk_connect)

    async def scenario():
        zk = BrokerZkClient(config(zk_connect, 4))
        await zk.start()
        epochs = []
        zk.registration_listeners.append(epochs.append)
        try:
            first = await zk.register_broker(info(4))
            old_session = zk.session_id
            session_id, password = zk.zk.client_id
            # The owner reconnects within a fraction of a second and may win its session back
            # before the joining client closes it: then join again (bounded).
            for _ in range(5):
                await asyncio.to_thread(expire_session, hosts, session_id, password)
                if await wait_until(lambda: _true(zk.session_id not in (None, old_session)), 10):
                    break

            async def reregistered() -> bool:
                stat = raw.exists(zk_data.broker_path(4))
                return stat is not None and stat.czxid != first

            assert await wait_until(reregistered, 30)
            stat = raw.exists(zk_data.broker_path(4))
            assert zk.session_id != old_session and stat.ephemeralOwner == zk.session_id
            assert await wait_until(lambda: _true(zk.broker_epoch == stat.czxid), 5)
            assert epochs[-1] == stat.czxid and len(epochs) == 2
        finally:
            await zk.stop()

    try:
        asyncio.run(scenario())
    finally:
        raw.stop()
        raw.close()


async def _true(value: bool) -> bool:
    return value


def test_admin_znodes_in_kafkas_format(zk_connect):
    raw = raw_client(zk_connect.split("/")[0])
    chroot = split_connect(zk_connect)[1]

    async def scenario():
        zk = BrokerZkClient(config(zk_connect))
        await zk.start()
        try:
            cluster_id = await zk.get_cluster_id()
            stored = json.loads(raw.get(chroot + "/cluster/id")[0])
            assert stored == {"version": "1", "id": cluster_id}
            assert base64_to_uuid(cluster_id).int != 0
            assert await zk.get_cluster_id() == cluster_id  # stable

            assignment = TopicAssignment({0: (0, 1), 1: (1, 0)}, topic_id="AAAAAAAAAAAAAAAAAAAAAQ")
            await zk.create_topic("orders", assignment, {"retention.ms": "1000"})
            with pytest.raises(TopicExistsError):
                await zk.create_topic("orders", assignment, {})
            topic = json.loads(raw.get(chroot + "/brokers/topics/orders")[0])
            assert topic["version"] == 2 and topic["partitions"] == {"0": [0, 1], "1": [1, 0]}
            assert topic["topic_id"] == "AAAAAAAAAAAAAAAAAAAAAQ"
            conf = json.loads(raw.get(chroot + "/config/topics/orders")[0])
            assert conf == {"version": 1, "config": {"retention.ms": "1000"}}
            assert await zk.get_topic_config("orders") == {"retention.ms": "1000"}
            assert await zk.get_topic_config("nothing") == {}
            assert await zk.topic_exists("orders") and not await zk.topic_exists("nothing")
            assert await zk.get_topic_ids(["orders", "nothing"]) == {"orders": "AAAAAAAAAAAAAAAAAAAAAQ", "nothing": None}
            assert (await zk.get_topic_assignment("orders")).partitions == {0: (0, 1), 1: (1, 0)}

            await zk.delete_topic("orders")
            await zk.delete_topic("orders")  # idempotent
            assert raw.exists(chroot + "/admin/delete_topics/orders") is not None
            assert await zk.is_topic_marked_for_deletion("orders")
        finally:
            await zk.stop()

    try:
        asyncio.run(scenario())
    finally:
        raw.stop()
        raw.close()


def test_create_topics_in_one_batch_answers_each_topic(zk_connect):
    """Pipelined creation: existing, marked-for-deletion and pre-configured topics each get their
    own answer; the others get both znodes (a config znode already there is overwritten)."""
    raw = raw_client(zk_connect.split("/")[0])
    chroot = split_connect(zk_connect)[1]

    async def scenario():
        zk = BrokerZkClient(config(zk_connect))
        await zk.start()
        try:
            one = TopicAssignment({0: (0,)})
            await zk.create_topic("old", one, {})
            raw.create(chroot + "/admin/delete_topics/going", makepath=True)
            raw.create(chroot + "/config/topics/configured", b'{"version":1,"config":{"x":"1"}}', makepath=True)
            names = ["old", "going", "configured", *(f"new-{i}" for i in range(50))]
            answers = await zk.create_topics([(n, one, {"retention.ms": "5"}) for n in names])
            assert isinstance(answers["old"], TopicExistsError) and "already exists" in str(answers["old"])
            assert isinstance(answers["going"], TopicExistsError) and "marked for deletion" in str(answers["going"])
            assert all(answers[n] is None for n in names[2:])
            assert raw.exists(chroot + "/brokers/topics/going") is None
            assert await zk.topics_existing(names + ["nothing"]) == set(names) - {"going"}
            configs = await zk.get_topic_configs(names[2:])
            assert all(configs[n].config == {"retention.ms": "5"} for n in names[2:])
            assert await zk.get_topic_config("old") == {}
            with pytest.raises(ValueError):
                await zk.create_topics([("dup", one, {}), ("dup", one, {})])
        finally:
            await zk.stop()

    try:
        asyncio.run(scenario())
    finally:
        raw.stop()
        raw.close()


def test_unreachable_zookeeper_fails_start_within_the_connection_timeout():
    from odradek.dev.zookeeper import free_port

    cfg = config(f"127.0.0.1:{free_port()}/x", **{"zookeeper.connection.timeout.ms": "1000"})

    async def scenario():
        zk = BrokerZkClient(cfg)
        with pytest.raises(ConnectionError):
            await zk.start()
        assert zk.zk is None

    asyncio.run(scenario())

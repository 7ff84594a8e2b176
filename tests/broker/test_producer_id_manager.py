"""Producer ids: the block arithmetic and znode JSON (pure), and ZkProducerIdManager against a real
ZooKeeper (blocks claimed by compare-and-set; managers racing never hand out the same id)."""

import asyncio
import json

import pytest
from kazoo.client import KazooClient

from odradek.broker.producer_id_manager import (
    MAX_PRODUCER_ID,
    ProducerIdBlockUnavailableError,
    ProducerIdGenerator,
    ProducerIdsExhaustedError,
    ZkProducerIdManager,
    next_producer_id_block,
)
from odradek.broker.zk_client import BrokerZkClient
from odradek.common import zk_data
from odradek.common.config import BrokerConfig
from odradek.common.network.request_context import RequestContext
from odradek.common.zk_data import ProducerIdsBlock

# --- pure ------------------------------------------------------------------------------------------


def test_znode_json_is_kafkas():
    block = ProducerIdsBlock(assigned_broker_id=3, first_producer_id=2000, size=1000)
    obj = json.loads(zk_data.encode_producer_id_block(block))
    # ProducerIdBlockZNode: version and broker numbers, the ids as strings
    assert obj == {"version": 1, "broker": 3, "block_start": "2000", "block_end": "2999"}
    assert zk_data.decode_producer_id_block(zk_data.encode_producer_id_block(block)) == block


def test_decodes_a_block_kafka_wrote():
    data = b'{"version":1,"broker":0,"block_start":"0","block_end":"999"}'
    block = zk_data.decode_producer_id_block(data)
    assert (block.assigned_broker_id, block.first_producer_id, block.last_producer_id, block.size) == (0, 0, 999, 1000)


@pytest.mark.parametrize("data", [b"", b"{}", b'{"version":1,"broker":0,"block_start":"x","block_end":"9"}',
                                  b'{"version":1,"broker":0,"block_start":"10","block_end":"9"}'])
def test_rejects_malformed_znode(data):
    with pytest.raises((ValueError, KeyError)):
        zk_data.decode_producer_id_block(data)


def test_first_block_starts_at_zero_and_next_follows_on():
    first = next_producer_id_block(None, broker_id=7)
    assert (first.assigned_broker_id, first.first_producer_id, first.last_producer_id) == (7, 0, 999)
    second = next_producer_id_block(first, broker_id=2)
    assert (second.assigned_broker_id, second.first_producer_id, second.last_producer_id) == (2, 1000, 1999)
    assert next_producer_id_block(second, 2, block_size=5).first_producer_id == 2000


def test_exhausted_ids_are_fatal():
    last_possible = ProducerIdsBlock(0, MAX_PRODUCER_ID - 1999, 1000)
    assert next_producer_id_block(last_possible, 0).last_producer_id == MAX_PRODUCER_ID
    with pytest.raises(ProducerIdsExhaustedError):
        next_producer_id_block(ProducerIdsBlock(0, MAX_PRODUCER_ID - 1500, 1000), 0)


def test_generator_hands_out_each_id_of_its_block_once():
    gen = ProducerIdGenerator(ProducerIdsBlock(0, 10, 3))
    assert [gen.take() for _ in range(4)] == [10, 11, 12, None]
    assert gen.remaining() == 0
    assert ProducerIdGenerator().take() is None


class FakeZk:
    """An in-memory znode with the same compare-and-set contract, for the manager's own logic."""

    def __init__(self, fail: bool = False):
        self.block: ProducerIdsBlock | None = None
        self.claims = 0
        self.fail = fail

    async def claim_producer_id_block(self, next_block):
        if self.fail:
            raise ConnectionError("ZooKeeper unreachable")
        await asyncio.sleep(0)
        self.block = next_block(self.block)
        self.claims += 1
        return self.block


def test_manager_claims_a_new_block_only_when_the_current_runs_out():
    async def scenario():
        zk = FakeZk()
        manager = ZkProducerIdManager(1, zk, block_size=4)
        ids = [await manager.generate_producer_id() for _ in range(9)]
        assert ids == list(range(9))
        assert zk.claims == 3
        # concurrent callers at an empty block share one claim
        manager = ZkProducerIdManager(1, zk, block_size=4)
        ids = await asyncio.gather(*(manager.generate_producer_id() for _ in range(4)))
        assert sorted(ids) == [12, 13, 14, 15] and zk.claims == 4

    asyncio.run(scenario())


def test_manager_reports_zookeeper_trouble_as_retriable():
    async def scenario():
        manager = ZkProducerIdManager(1, FakeZk(fail=True))
        with pytest.raises(ProducerIdBlockUnavailableError):
            await manager.generate_producer_id()

    asyncio.run(scenario())


# --- real ZooKeeper --------------------------------------------------------------------------------


def config(zk_connect: str, broker_id: int) -> BrokerConfig:
    return BrokerConfig.from_properties(
        {"broker.id": str(broker_id), "zookeeper.connect": zk_connect, "zookeeper.session.timeout.ms": "4000"}
    )


def read_znode(zk_connect: str):
    zk = KazooClient(hosts=zk_connect)
    zk.start(timeout=10)
    try:
        data, stat = zk.get(zk_data.LATEST_PRODUCER_ID_BLOCK)
        return json.loads(data), stat.version
    finally:
        zk.stop()
        zk.close()


def test_blocks_are_claimed_in_zookeeper_in_kafkas_format(zk_connect):
    async def scenario():
        zk = BrokerZkClient(config(zk_connect, 5))
        await zk.start()
        try:
            manager = ZkProducerIdManager(5, zk, block_size=10)
            assert [await manager.generate_producer_id() for _ in range(3)] == [0, 1, 2]
            assert read_znode(zk_connect) == ({"version": 1, "broker": 5, "block_start": "0", "block_end": "9"}, 0)
            # a restarted broker (a new manager) starts a fresh block; ids of the old one are never reused
            restarted = ZkProducerIdManager(5, zk, block_size=10)
            assert await restarted.generate_producer_id() == 10
            assert read_znode(zk_connect) == ({"version": 1, "broker": 5, "block_start": "10", "block_end": "19"}, 1)
        finally:
            await zk.stop()

    asyncio.run(scenario())


def test_claim_retries_after_losing_the_compare_and_set(zk_connect):
    """Another broker claims a block between our read and our write: we read again and take the next."""

    async def scenario():
        zk = BrokerZkClient(config(zk_connect, 1))
        other = BrokerZkClient(config(zk_connect, 2))
        await zk.start()
        await other.start()
        try:
            await ZkProducerIdManager(2, other, block_size=10).generate_producer_id()  # block 0..9 exists
            seen: list = []

            def next_block(current):
                seen.append(current)
                if len(seen) == 1:  # the rival writes after our read: our conditional set must fail
                    other._claim_producer_id_block_blocking(lambda c: next_producer_id_block(c, 2, 10), 5)
                return next_producer_id_block(current, 1, 10)

            block = await zk.claim_producer_id_block(next_block)
            assert [b.first_producer_id for b in seen] == [0, 10]
            assert (block.assigned_broker_id, block.first_producer_id) == (1, 20)
            assert read_znode(zk_connect)[0]["block_start"] == "20"
        finally:
            await zk.stop()
            await other.stop()

    asyncio.run(scenario())


def test_racing_managers_never_hand_out_the_same_id(zk_connect):
    """Three brokers' managers with tiny blocks claim concurrently (each claim in its own thread)."""

    async def scenario():
        clients = [BrokerZkClient(config(zk_connect, b)) for b in range(3)]
        for c in clients:
            await c.start()
        try:
            managers = [ZkProducerIdManager(b, c, block_size=3) for b, c in enumerate(clients)]

            async def take(manager, n):
                return [await manager.generate_producer_id() for _ in range(n)]

            results = await asyncio.wait_for(asyncio.gather(*(take(m, 60) for m in managers)), 120)
        finally:
            for c in clients:
                await c.stop()
        ids = [pid for r in results for pid in r]
        assert len(ids) == 180 and len(set(ids)) == 180, "an id was handed out twice"
        for r in results:
            assert r == sorted(r)
        # 60 blocks claimed in all, each the successor of the last: the znode ends at id 179
        znode, version = read_znode(zk_connect)
        assert znode["block_end"] == "179" and version == 59

    asyncio.run(scenario())


def test_init_producer_id_answers_a_retriable_error_while_no_block_can_be_claimed():
    """ZooKeeper unreachable: COORDINATOR_LOAD_IN_PROGRESS (clients retry), not a fatal error."""
    from types import SimpleNamespace

    from kio.schema.errors import ErrorCode

    from odradek.broker.authorizer.authorizer import ALLOW_ALL
    from odradek.broker.kafka_apis import KafkaApis
    from odradek.common import wire

    request = wire.request_schema(22, 0)(transactional_id=None, transaction_timeout=wire.NO_THROTTLE)
    header = SimpleNamespace(request_api_version=0)

    async def answer(zk):
        apis = SimpleNamespace(producer_id_manager=ZkProducerIdManager(0, zk), authorizer=ALLOW_ALL)
        return await KafkaApis.handle_init_producer_id(apis, RequestContext(header), request)

    down = asyncio.run(answer(FakeZk(fail=True)))
    assert (down.error_code, int(down.producer_id), int(down.producer_epoch)) == (
        ErrorCode.coordinator_load_in_progress, -1, -1)
    up = asyncio.run(answer(FakeZk()))
    assert (up.error_code, int(up.producer_id), int(up.producer_epoch)) == (ErrorCode.none, 0, 0)

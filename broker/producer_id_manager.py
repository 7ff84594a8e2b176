"""ZkProducerIdManager: cluster-wide unique producer ids, claimed from ZooKeeper in blocks.

Kafka's ZooKeeper-era scheme: `/latest_producer_id_block` holds the newest block any broker has
claimed; a broker claims the next one by a compare-and-set on that znode's version (retried when
another broker won the race), then hands out the block's ids one by one from memory and claims
again only when the block runs out. So ids are unique across brokers and restarts (a restarted
broker claims a fresh block; the rest of its old one is simply never used) at one ZooKeeper write
per 1000 ids.

The pure part (which block follows which, taking ids from a block) is separate from the ZooKeeper
calls, which live in BrokerZkClient.claim_producer_id_block.
"""

import asyncio
import logging

from kio.schema.errors import ErrorCode

from odradek.common.errors import KafkaError
from odradek.common.zk_data import PRODUCER_ID_BLOCK_SIZE, ProducerIdsBlock

from .zk_client import BrokerZkClient

log = logging.getLogger(__name__)

MAX_PRODUCER_ID = 2**63 - 1
"""Producer ids are int64 on the wire."""


class ProducerIdsExhaustedError(KafkaError):
    """Every int64 producer id has been handed out (Kafka treats this as fatal too)."""


class ProducerIdBlockUnavailableError(KafkaError):
    """No block could be claimed right now (ZooKeeper unreachable or too contended); retriable."""

    error_code = ErrorCode.coordinator_load_in_progress


# --- the pure part ---------------------------------------------------------------------------------


def next_producer_id_block(
    current: ProducerIdsBlock | None, broker_id: int, block_size: int = PRODUCER_ID_BLOCK_SIZE
) -> ProducerIdsBlock:
    """The block a broker claims after `current` (the znode's block; None: none claimed yet, start at 0)."""
    if current is None:
        return ProducerIdsBlock(broker_id, 0, block_size)
    if current.last_producer_id > MAX_PRODUCER_ID - block_size:
        raise ProducerIdsExhaustedError(
            f"the next block after one ending at {current.last_producer_id} would pass the int64 limit"
        )
    return ProducerIdsBlock(broker_id, current.next_block_first_id(), block_size)


class ProducerIdGenerator:
    """Hands out the ids of one block in order; `take()` is None once the block is used up."""

    def __init__(self, block: ProducerIdsBlock | None = None):
        self.block = block
        self.next_producer_id = block.first_producer_id if block is not None else 0

    def take(self) -> int | None:
        block = self.block
        if block is None or self.next_producer_id > block.last_producer_id:
            return None
        pid = self.next_producer_id
        self.next_producer_id += 1
        return pid

    def remaining(self) -> int:
        if self.block is None:
            return 0
        return max(0, self.block.last_producer_id - self.next_producer_id + 1)


# --- the I/O shell ---------------------------------------------------------------------------------


class ZkProducerIdManager:
    """`await generate_producer_id()`: the next id of this broker's block, claiming a new block in
    ZooKeeper when the current one is used up (or on first use: unlike Kafka, which claims one at
    start-up, the first InitProducerId pays, so a broker that never sees one never claims one).

    `zk_client` is anything with BrokerZkClient's `claim_producer_id_block(next_block)`.
    """

    def __init__(self, broker_id: int, zk_client: BrokerZkClient, block_size: int = PRODUCER_ID_BLOCK_SIZE):
        self.broker_id = broker_id
        self.zk_client = zk_client
        self.block_size = block_size
        self.generator = ProducerIdGenerator()
        self._lock = asyncio.Lock()
        """One claim at a time: callers arriving during a claim wait for its block."""

    async def generate_producer_id(self) -> int:
        pid = self.generator.take()
        if pid is not None:
            return pid
        async with self._lock:
            pid = self.generator.take()  # another caller may have claimed a block meanwhile
            if pid is not None:
                return pid
            block = await self._claim()
            self.generator = ProducerIdGenerator(block)
            pid = self.generator.take()
            assert pid is not None, "a fresh block has ids"
            return pid

    async def _claim(self) -> ProducerIdsBlock:
        try:
            return await self.zk_client.claim_producer_id_block(
                lambda current: next_producer_id_block(current, self.broker_id, self.block_size)
            )
        except ProducerIdsExhaustedError:
            raise
        except Exception as e:
            log.warning("claiming a producer id block failed: %s", e)
            raise ProducerIdBlockUnavailableError(str(e)) from e

"""KIP-890 part 1 at a partition leader: before a producer's first transactional append to a
partition (no transaction of it open here), ask its transaction coordinator whether the partition
is in its open transaction (AddPartitionsToTxn v4, verify_only). A produce delayed past its
transaction's markers is then refused instead of opening a transaction nobody will end (which
would hold the LSO until the producer's epoch is bumped).

A marker landing between the answer and the append makes the answer stale: the append goes
ahead only if the producer's last marker offset at the partition is still what it was when the
question was asked (the guard, checked by ReplicaManager.append_records in the same step as
the write). Coordinator errors that a retry may fix are answered NOT_ENOUGH_REPLICAS, as Kafka
3.6 does, so every client retries the produce.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from kio.schema.add_partitions_to_txn.v4.request import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnTopic,
    AddPartitionsToTxnTransaction,
)
from kio.schema.errors import ErrorCode
from kio.schema.types import ProducerId, TopicName, TransactionalId
from kio.static.primitive import i16, i32

from odradek.broker.log.control_batch import TRANSACTIONAL_MASK
from odradek.broker.log.record_batch import HEADER, Buffer
from odradek.broker.metadata_cache import MetadataCache
from odradek.broker.replica_manager import ReplicaManager
from odradek.common.network.client import NetworkClient
from odradek.common.security.channel import PLAINTEXT, ClientSecurity

from .transaction_state_manager import TRANSACTION_STATE_TOPIC_NAME

if TYPE_CHECKING:
    from .transaction_coordinator import TransactionCoordinator

PartitionKey = tuple[str, int]

log = logging.getLogger(__name__)

RETRIABLE = (ErrorCode.concurrent_transactions, ErrorCode.coordinator_load_in_progress, ErrorCode.not_coordinator,
             ErrorCode.coordinator_not_available)


def first_batch_producer(records: Buffer | None) -> tuple[int, int] | None:
    """(producer id, epoch) of a transactional first batch, else None."""
    if records is None or len(records) < HEADER.size:
        return None
    fields = HEADER.unpack_from(records, 0)
    attributes, producer_id, epoch = fields[5], fields[9], fields[10]
    if not attributes & TRANSACTIONAL_MASK or producer_id < 0:
        return None
    return producer_id, epoch


def fenced_to_produce(code: ErrorCode) -> ErrorCode:
    """A fenced producer's Produce and TxnOffsetCommit get INVALID_PRODUCER_EPOCH, as from the log
    (Kafka's AddPartitionsToTxnManager): clients treat it as fatal fencing there, while PRODUCER_FENCED
    on a Produce would only abort the transaction (librdkafka)."""
    return ErrorCode.invalid_producer_epoch if code == ErrorCode.producer_fenced else code


class TransactionVerifier:
    def __init__(self, broker_id: int, replica_manager: ReplicaManager, metadata_cache: MetadataCache,
                 coordinator: TransactionCoordinator, timeout_ms: int, *,
                 listener: str = "PLAINTEXT", security: ClientSecurity = PLAINTEXT):
        self.broker_id = broker_id
        self.replica_manager = replica_manager
        self.metadata_cache = metadata_cache
        self.coordinator = coordinator
        self.timeout_s = timeout_ms / 1000
        self._clients: dict[int, NetworkClient] = {}
        self.listener = listener
        """The inter-broker listener, where the coordinator is asked."""
        self.security = security

    def needs_verification(self, key: PartitionKey, producer_id: int) -> int | None:
        """The guard (last marker offset, -1 if none) when the producer has no transaction open
        at this partition we lead; None when no question is needed."""
        p = self.replica_manager.get_partition(key)
        if p is None or not p.is_leader:
            return None  # the append answers NOT_LEADER_OR_FOLLOWER
        entry = p.log.producer_state.last_entry(producer_id)
        if entry is not None and entry.current_txn_first_offset >= 0:
            return None
        return entry.last_marker_offset if entry is not None else -1

    async def verify(self, transactional_id: str, entries: Iterable[tuple[str, int, Buffer | None]]
                     ) -> tuple[dict[PartitionKey, ErrorCode], dict[PartitionKey, tuple[int, int]]]:
        """({key: error} of the refused partitions, {key: (producer id, guard)} of the verified)."""
        ask: dict[PartitionKey, int] = {}
        producer: tuple[int, int] | None = None
        for topic, index, records in entries:
            found = first_batch_producer(records)
            if found is None:
                continue
            guard = self.needs_verification((topic, index), found[0])
            if guard is not None:
                ask[(topic, index)] = guard
                producer = found
        if not ask or producer is None:
            return {}, {}
        producer_id, epoch = producer
        codes = await self._ask(transactional_id, producer_id, epoch, list(ask))
        errors: dict[PartitionKey, ErrorCode] = {}
        guards: dict[PartitionKey, tuple[int, int]] = {}
        for key, guard in ask.items():
            code = codes.get(key, ErrorCode.not_enough_replicas)
            if code == ErrorCode.none:
                guards[key] = (producer_id, guard)
            else:
                errors[key] = ErrorCode.not_enough_replicas if code in RETRIABLE else fenced_to_produce(code)
        return errors, guards

    async def verify_offsets(self, transactional_id: str, producer_id: int, epoch: int, key: PartitionKey
                             ) -> tuple[ErrorCode, int | None]:
        """TxnOffsetCommit's check: (error, guard) for the group's `__consumer_offsets` partition;
        retriable coordinator errors are COORDINATOR_NOT_AVAILABLE, which clients retry."""
        guard = self.needs_verification(key, producer_id)
        if guard is None:
            return ErrorCode.none, None
        code = (await self._ask(transactional_id, producer_id, epoch, [key])).get(key, ErrorCode.coordinator_not_available)
        code = ErrorCode.coordinator_not_available if code in RETRIABLE else fenced_to_produce(code)
        return code, guard if code == ErrorCode.none else None

    async def _ask(self, transactional_id: str, producer_id: int, epoch: int, partitions: Sequence[PartitionKey]
                   ) -> dict[PartitionKey, ErrorCode]:
        from odradek.broker.group.offsets_topic import partition_for

        count = self.metadata_cache.partition_count(TRANSACTION_STATE_TOPIC_NAME)
        if not count:
            return {}
        endpoint = self.metadata_cache.leader_endpoint(TRANSACTION_STATE_TOPIC_NAME,
                                                       partition_for(transactional_id, count), self.listener)
        if endpoint is None:
            return {}
        broker_id, host, port = endpoint
        if broker_id == self.broker_id:
            return self.coordinator.verify_partitions(transactional_id, producer_id, epoch, partitions)
        by_topic: dict[str, list[int]] = {}
        for topic, index in partitions:
            by_topic.setdefault(topic, []).append(index)
        request = AddPartitionsToTxnRequest(transactions=(AddPartitionsToTxnTransaction(
            transactional_id=TransactionalId(transactional_id), producer_id=ProducerId(producer_id),
            producer_epoch=i16(epoch), verify_only=True,
            topics=tuple(AddPartitionsToTxnTopic(name=TopicName(t), partitions=tuple(map(i32, ps)))
                                           for t, ps in by_topic.items())),))
        client = self._clients.get(broker_id)
        if client is None or (client.host, client.port) != (host, port):
            client = self._clients[broker_id] = NetworkClient(host, port, client_id=f"txn-verify-{self.broker_id}",
                                                                security=self.security)
        try:
            response = await client.send(request, self.timeout_s)
        except (ConnectionError, TimeoutError, OSError) as e:
            log.info("verifying %s with broker %d failed: %s", transactional_id, broker_id, e)
            return {}
        if response.error_code != ErrorCode.none:
            return dict.fromkeys(partitions, response.error_code)
        return {(t.name, int(r.partition_index)): r.partition_error_code
                for txn in response.results_by_transaction for t in txn.topic_results for r in t.results_by_partition}

    async def close(self) -> None:
        for client in self._clients.values():
            await client.close()
        self._clients.clear()

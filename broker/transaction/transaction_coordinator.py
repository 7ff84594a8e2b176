"""TransactionCoordinator: Kafka's transaction protocol over TransactionMetadata (Kafka 3.x
semantics, transaction version 1).

InitProducerId bumps the epoch (fencing older producers; an open transaction is first aborted
with a fenced epoch, the caller retrying on CONCURRENT_TRANSACTIONS meanwhile); AddPartitionsToTxn
and AddOffsetsToTxn move to Ongoing; EndTxn writes PrepareCommit/PrepareAbort, answers, and the
markers go out to the partitions' leaders before CompleteCommit/CompleteAbort is written. Open
transactions past their timeout are aborted with a bumped epoch; ids idle past
transactional.id.expiration.ms are removed. Results are error codes; TransactionApis turns them
into each version's response.

A producer's next transaction usually starts while the markers of its last one are still being
written: its AddPartitionsToTxn (or InitProducerId) meets PrepareCommit. Kafka answers
CONCURRENT_TRANSACTIONS at once and the client backs off (20 ms in the Java client and
librdkafka), many times what the markers take on one broker. Here the request first waits, at
most COMPLETION_WAIT_S, for that completion, then is handled afresh: the answer is the one a
client retry would get, only sooner.
"""

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from odradek.broker.producer_id_manager import ProducerIdBlockUnavailableError
from odradek.common.clock import now_ms

from .marker_channel import MarkersAbandoned, TransactionMarkerChannel
from .marker_writer import TxnMarker
from .transaction_metadata import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TransactionMetadata,
    TransactionState,
    is_epoch_exhausted,
)
from .transaction_state_manager import TransactionConfig, TransactionStateManager

log = logging.getLogger(__name__)

S = TransactionState
COMPLETE_RETRY_BACKOFF_S = 0.2
COMPLETION_WAIT_S = 0.1
"""How long a request meeting a transaction's markers waits for its completion before it is
answered CONCURRENT_TRANSACTIONS."""
PartitionKey = tuple[str, int]


class ProducerIdSource(Protocol):
    """Where new producer ids come from (ZkProducerIdManager)."""

    async def generate_producer_id(self) -> int: ...


def end_in_state(state: TransactionState, commit: bool) -> ErrorCode:
    """EndTxn outside an open transaction (Kafka's endTransaction): only a retry of the outcome
    already reached or being reached is accepted (NONE once complete, CONCURRENT_TRANSACTIONS while
    its markers go out); anything else, an EndTxn with nothing begun (Empty) included, is
    INVALID_TXN_STATE."""
    if state in (S.COMPLETE_COMMIT, S.PREPARE_COMMIT, S.COMPLETE_ABORT, S.PREPARE_ABORT):
        same = state in (S.COMPLETE_COMMIT, S.PREPARE_COMMIT) if commit else state in (S.COMPLETE_ABORT,
                                                                                        S.PREPARE_ABORT)
        if not same:
            return ErrorCode.invalid_txn_state
        return ErrorCode.concurrent_transactions if state.is_prepare else ErrorCode.none
    return ErrorCode.invalid_txn_state


class TransactionCoordinator:
    def __init__(self, state_manager: TransactionStateManager, producer_id_manager: ProducerIdSource,
                 marker_channel: TransactionMarkerChannel,
                 config: TransactionConfig, *, clock: Callable[[], int] = now_ms):
        self.state = state_manager
        self.clock = clock
        """Wall-clock milliseconds for timeouts and timestamps (injectable: tests move time by hand)."""
        self.producer_id_manager = producer_id_manager
        self.markers = marker_channel
        self.config = config
        self._tasks: set[asyncio.Future[Any]] = set()
        self._loops: list[asyncio.Task[None]] = []
        self._completions: dict[str, asyncio.Event] = {}
        """Transactional id → set once its markers are out and its completion written (or given up)."""

    # --- life cycle -----------------------------------------------------------------------------

    def startup(self) -> None:
        loop = asyncio.get_running_loop()
        self._loops = [
            loop.create_task(self._every(self.config.abort_timed_out_interval_ms, self.abort_timed_out_transactions)),
            loop.create_task(self._every(self.config.remove_expired_interval_ms, self.remove_expired_transactions)),
        ]

    async def shutdown(self) -> None:
        for t in [*self._loops, *self._tasks]:
            t.cancel()
        await self.markers.close()

    async def _every(self, interval_ms: int, action: Callable[[int], Awaitable[int]]) -> None:
        while True:
            await asyncio.sleep(max(10, interval_ms) / 1000)
            try:
                await action(self.clock())
            except Exception:
                log.exception("%s failed", action.__name__)

    def _spawn(self, awaitable: Awaitable[Any]) -> None:
        t = asyncio.ensure_future(awaitable)
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)

    def on_election(self, partition: int, epoch: int) -> None:
        self.state.on_election(partition, epoch, self._on_loaded)

    def _on_loaded(self, partition: int, epoch: int, transactions: list[TransactionMetadata]) -> None:
        """A new coordinator finishes what the old one prepared: markers, then Complete*."""
        for m in transactions:
            if m.state.is_prepare:
                log.info("transactional id %s: resuming %s (coordinator epoch %d)", m.transactional_id,
                         m.state.title, epoch)
                self._spawn(self._send_markers_and_complete(m, epoch))

    def on_resignation(self, partition: int) -> None:
        self.state.on_resignation(partition)

    async def _completed(self, transactional_id: str) -> bool:
        """Waits (at most COMPLETION_WAIT_S) for the id's markers and completion, if they are under
        way; True when they finished meanwhile, so that the request is worth handling again."""
        done = self._completions.get(transactional_id)
        if done is None:
            return False
        try:
            await asyncio.wait_for(done.wait(), COMPLETION_WAIT_S)
        except TimeoutError:
            return False
        return True

    # --- InitProducerId -------------------------------------------------------------------------

    async def init_producer_id(self, transactional_id: str, timeout_ms: int, expected_producer_id: int = NO_PRODUCER_ID,
                               expected_epoch: int = NO_PRODUCER_EPOCH) -> tuple[ErrorCode, int, int]:
        """(error, producer id, epoch) for a transactional producer."""
        result = await self._init_producer_id(transactional_id, timeout_ms, expected_producer_id, expected_epoch)
        if result[0] == ErrorCode.concurrent_transactions and await self._completed(transactional_id):
            result = await self._init_producer_id(transactional_id, timeout_ms, expected_producer_id, expected_epoch)
        return result

    async def _init_producer_id(self, transactional_id: str, timeout_ms: int, expected_producer_id: int,
                                expected_epoch: int) -> tuple[ErrorCode, int, int]:
        fail = (NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
        if not transactional_id:
            return (ErrorCode.invalid_request, *fail)
        if not 0 < timeout_ms <= self.config.max_timeout_ms:
            return (ErrorCode.invalid_transaction_timeout, *fail)
        error, coordinator_epoch, m = self.state.lookup(transactional_id)
        if error != ErrorCode.none:
            return (error, *fail)
        if m is None:
            try:
                producer_id = await self.producer_id_manager.generate_producer_id()
            except ProducerIdBlockUnavailableError:
                return (ErrorCode.coordinator_not_available, *fail)
            error, coordinator_epoch, m = self.state.lookup(transactional_id)  # anything may have moved meanwhile
            if error != ErrorCode.none:
                return (error, *fail)
            if m is None:
                m = TransactionMetadata(transactional_id, producer_id, txn_timeout_ms=timeout_ms,
                                        txn_last_update_timestamp=self.clock())
                self.state.transactions[transactional_id] = m
        if m.pending is not None or m.state.is_prepare or m.state in (S.DEAD, S.PREPARE_EPOCH_FENCE):
            return (ErrorCode.concurrent_transactions, *fail)
        if expected_producer_id != NO_PRODUCER_ID and not (
                m.producer_epoch == NO_PRODUCER_EPOCH or expected_producer_id == m.producer_id):
            return (ErrorCode.producer_fenced, *fail)
        if m.state == S.ONGOING:
            # A new producer (or a retry of one) meets an open transaction: abort it with a fenced
            # epoch; the caller retries and gets the epoch after that.
            m.prepare_fence_epoch()
            self._spawn(self._end(m, coordinator_epoch, m.producer_id, m.producer_epoch, commit=False,
                                  from_client=False))
            return (ErrorCode.concurrent_transactions, *fail)
        new_producer_id = None
        expected = expected_epoch if expected_producer_id != NO_PRODUCER_ID else None
        if is_epoch_exhausted(m.producer_epoch) and expected in (None, m.producer_epoch):
            try:
                new_producer_id = await self.producer_id_manager.generate_producer_id()
            except ProducerIdBlockUnavailableError:
                return (ErrorCode.coordinator_not_available, *fail)
            if m.pending is not None or self.state.transactions.get(transactional_id) is not m:
                return (ErrorCode.concurrent_transactions, *fail)
        transit = m.prepare_init(timeout_ms, self.clock(), new_producer_id, expected)
        if transit is None:
            return (ErrorCode.producer_fenced, *fail)
        code = await self.state.append(transactional_id, transit, coordinator_epoch)
        if code != ErrorCode.none:
            m.abort_pending()
            return (code, *fail)
        m.complete(transit)
        log.info("transactional id %s: producer id %d epoch %d", transactional_id, m.producer_id, m.producer_epoch)
        return ErrorCode.none, m.producer_id, m.producer_epoch

    # --- AddPartitionsToTxn / AddOffsetsToTxn ---------------------------------------------------

    def _check_producer(self, m: TransactionMetadata | None, producer_id: int, epoch: int) -> ErrorCode:
        if m is None or m.producer_id != producer_id:
            return ErrorCode.invalid_producer_id_mapping
        if m.producer_epoch != epoch:
            return ErrorCode.producer_fenced
        return ErrorCode.none

    async def add_partitions(self, transactional_id: str, producer_id: int, epoch: int,
                             partitions: Iterable[PartitionKey]) -> ErrorCode:
        partitions = set(partitions)  # read twice when the request is handled again
        code = await self._add_partitions(transactional_id, producer_id, epoch, partitions)
        if code == ErrorCode.concurrent_transactions and await self._completed(transactional_id):
            code = await self._add_partitions(transactional_id, producer_id, epoch, partitions)
        return code

    async def _add_partitions(self, transactional_id: str, producer_id: int, epoch: int,
                              partitions: Iterable[PartitionKey]) -> ErrorCode:
        if not transactional_id:
            return ErrorCode.invalid_request
        error, coordinator_epoch, m = self.state.lookup(transactional_id)
        if error == ErrorCode.none:
            error = self._check_producer(m, producer_id, epoch)
        if error != ErrorCode.none or m is None:
            return error
        if m.pending is not None or m.state.is_prepare:
            return ErrorCode.concurrent_transactions
        partitions = set(partitions)
        if m.state == S.ONGOING and partitions <= m.partitions:
            return ErrorCode.none
        transit = m.prepare_add_partitions(partitions, self.clock())
        code = await self.state.append(transactional_id, transit, coordinator_epoch)
        if code != ErrorCode.none:
            m.abort_pending()
            return code
        m.complete(transit)
        return ErrorCode.none

    def verify_partitions(self, transactional_id: str, producer_id: int, epoch: int,
                          partitions: Iterable[PartitionKey]) -> dict[PartitionKey, ErrorCode]:
        """AddPartitionsToTxn v4 verify_only, from partition leaders (KIP-890): each partition is
        NONE only if it is in this producer's open transaction."""
        error, _, m = self.state.lookup(transactional_id)
        if error == ErrorCode.none:
            error = self._check_producer(m, producer_id, epoch)
        if error != ErrorCode.none or m is None:
            return dict.fromkeys(partitions, error)
        if m.pending in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            return dict.fromkeys(partitions, ErrorCode.concurrent_transactions)
        return {p: ErrorCode.none if m.state == S.ONGOING and p in m.partitions else ErrorCode.invalid_txn_state
                for p in partitions}

    # --- EndTxn ---------------------------------------------------------------------------------

    async def end_transaction(self, transactional_id: str, producer_id: int, epoch: int, commit: bool) -> ErrorCode:
        if not transactional_id:
            return ErrorCode.invalid_request
        error, coordinator_epoch, m = self.state.lookup(transactional_id)
        if error != ErrorCode.none:
            return error
        if m is None:
            return ErrorCode.invalid_producer_id_mapping
        return await self._end(m, coordinator_epoch, producer_id, epoch, commit, from_client=True)

    async def _end(self, m: TransactionMetadata, coordinator_epoch: int, producer_id: int, epoch: int, commit: bool,
                   from_client: bool) -> ErrorCode:
        """Kafka's endTransaction. From a client the epoch must be the current one; the
        coordinator's own aborts (timeouts, fencing) carry the bumped epoch."""
        if m.producer_id != producer_id:
            return ErrorCode.invalid_producer_id_mapping
        if (from_client and epoch != m.producer_epoch) or epoch < m.producer_epoch:
            return ErrorCode.producer_fenced
        if m.pending is not None and m.pending != S.PREPARE_EPOCH_FENCE:
            return ErrorCode.concurrent_transactions
        state = m.state
        if state != S.ONGOING:
            return end_in_state(state, commit)
        transit = m.prepare_end(commit, self.clock())
        code = await self.state.append(m.transactional_id, transit, coordinator_epoch)
        if code != ErrorCode.none:
            m.abort_pending()
            return code
        m.complete(transit)
        log.debug("transactional id %s: %s (producer %d epoch %d, %d partitions)", m.transactional_id,
                  m.state.title, m.producer_id, m.producer_epoch, len(m.partitions))
        self._spawn(self._send_markers_and_complete(m, coordinator_epoch))
        return ErrorCode.none

    async def _send_markers_and_complete(self, m: TransactionMetadata, coordinator_epoch: int) -> None:
        txn_id = m.transactional_id
        done = self._completions[txn_id] = asyncio.Event()
        try:
            await self._markers_and_complete(m, coordinator_epoch)
        finally:
            if self._completions.get(txn_id) is done:
                del self._completions[txn_id]
            done.set()

    async def _markers_and_complete(self, m: TransactionMetadata, coordinator_epoch: int) -> None:
        txn_id = m.transactional_id

        def still_ours() -> bool:
            return self.state.still_coordinator(txn_id, coordinator_epoch) and self.state.transactions.get(txn_id) is m

        marker = TxnMarker(m.producer_id, m.producer_epoch, coordinator_epoch, m.state == S.PREPARE_COMMIT,
                           sorted(m.partitions))
        try:
            await self.markers.send(marker, still_ours)
        except MarkersAbandoned as e:
            log.info("transactional id %s: markers abandoned: %s", txn_id, e)
            return
        backoff = COMPLETE_RETRY_BACKOFF_S
        while still_ours():
            transit = m.prepare_complete(self.clock())
            code = await self.state.append(txn_id, transit, coordinator_epoch)
            if code == ErrorCode.none:
                m.complete(transit)
                log.debug("transactional id %s: %s", txn_id, m.state.title)
                return
            m.abort_pending()
            if code == ErrorCode.not_coordinator:
                return
            log.info("transactional id %s: writing the completion failed (%s); retrying", txn_id, code.name)
            await asyncio.sleep(backoff)
            backoff = min(2 * backoff, 2.0)

    # --- timeouts and expiration ----------------------------------------------------------------

    async def abort_timed_out_transactions(self, now: int) -> int:
        """Open transactions past their timeout are aborted with a bumped epoch (Kafka's
        abortTimedOutTransactions), so the producer cannot go on and the LSO moves."""
        count = 0
        for m, coordinator_epoch in self.state.owned_transactions():
            if m.state == S.ONGOING and m.pending is None and m.txn_start_timestamp + m.txn_timeout_ms < now:
                log.info("transactional id %s: timed out after %d ms; aborting", m.transactional_id, m.txn_timeout_ms)
                m.prepare_fence_epoch()
                self._spawn(self._end(m, coordinator_epoch, m.producer_id, m.producer_epoch, commit=False,
                                      from_client=False))
                count += 1
        return count

    async def remove_expired_transactions(self, now: int) -> int:
        """Ids idle past transactional.id.expiration.ms (not in a transaction) get a tombstone."""
        removed = 0
        for m, coordinator_epoch in self.state.owned_transactions():
            if m.pending is not None or m.state not in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
                continue
            if now - m.txn_last_update_timestamp < self.config.id_expiration_ms:
                continue
            transit = m.prepare_dead(now)
            code = await self.state.append(m.transactional_id, transit, coordinator_epoch)
            if code != ErrorCode.none:
                m.abort_pending()
                continue
            m.complete(transit)
            if self.state.transactions.get(m.transactional_id) is m:
                del self.state.transactions[m.transactional_id]
            removed += 1
            log.info("transactional id %s expired", m.transactional_id)
        return removed

    # --- tooling --------------------------------------------------------------------------------

    def describe(self, transactional_id: str) -> tuple[ErrorCode, TransactionMetadata | None]:
        error, _, m = self.state.lookup(transactional_id)
        if error != ErrorCode.none:
            return error, None
        if m is None or m.state == S.DEAD:
            return ErrorCode.transactional_id_not_found, None
        return ErrorCode.none, m

    def list_transactions(self, states: set[str], producer_ids: set[int], min_duration_ms: int = -1,
                          now: int | None = None) -> tuple[ErrorCode, list[TransactionMetadata], list[str]]:
        """(error, transactions, unknown state filters) of the ids this broker coordinates."""
        known = {s.title.lower() for s in S}
        unknown = [s for s in states if s.lower() not in known]
        if self.state.loading:
            return ErrorCode.coordinator_load_in_progress, [], unknown
        wanted = {s.lower() for s in states}
        now = self.clock() if now is None else now
        out = []
        for m, _ in self.state.owned_transactions():
            if m.state == S.DEAD or (wanted and m.state.title.lower() not in wanted):
                continue
            if producer_ids and m.producer_id not in producer_ids:
                continue
            if min_duration_ms >= 0 and (m.state != S.ONGOING or now - m.txn_start_timestamp < min_duration_ms):
                continue
            out.append(m)
        return ErrorCode.none, out, unknown

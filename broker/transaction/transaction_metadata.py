"""One transactional id's state at its coordinator (Kafka's TransactionMetadata), pure.

Every change is two steps, as in Kafka: `prepare_*` checks the move and returns a TxnTransit (the
state to be), marking it pending so no other request starts a change meanwhile (those get
CONCURRENT_TRANSACTIONS); once the transit is written to `__transaction_state`, `complete`
applies it, or `abort_pending` forgets it when the write failed.
"""

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
MAX_PRODUCER_EPOCH = 2**15 - 1


class TransactionState(enum.Enum):
    """Kafka's states and their ids in the log (TransactionStatus)."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def title(self) -> str:
        """Kafka's name of the state (DescribeTransactions, ListTransactions' filter)."""
        return "".join(w.capitalize() for w in self.name.split("_"))

    @property
    def is_complete(self) -> bool:
        return self in (TransactionState.COMPLETE_COMMIT, TransactionState.COMPLETE_ABORT)

    @property
    def is_prepare(self) -> bool:
        return self in (TransactionState.PREPARE_COMMIT, TransactionState.PREPARE_ABORT)

    @classmethod
    def from_title(cls, title: str) -> "TransactionState | None":
        for state in cls:
            if state.title.lower() == title.lower():
                return state
        return None


S = TransactionState
VALID_PREVIOUS: dict[TransactionState, frozenset[TransactionState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}
"""Kafka's TransactionState.validPreviousStates."""


class IllegalTransitionError(Exception):
    pass


def is_epoch_exhausted(epoch: int) -> bool:
    """Kafka rotates to a new producer id before the epoch could overflow."""
    return epoch >= MAX_PRODUCER_EPOCH - 1


@dataclass(frozen=True)
class TxnTransit:
    """The state a transaction is moving to (Kafka's TxnTransitMetadata): what is written to
    `__transaction_state` and applied once written."""

    producer_id: int
    last_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    txn_timeout_ms: int
    state: TransactionState
    partitions: frozenset[tuple[str, int]]
    txn_start_timestamp: int
    txn_last_update_timestamp: int


@dataclass
class TransactionMetadata:
    transactional_id: str
    producer_id: int
    last_producer_id: int = NO_PRODUCER_ID
    """The id before the epoch rotated to a new one (a retry of that InitProducerId is not fenced)."""
    producer_epoch: int = NO_PRODUCER_EPOCH
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    """The epoch before the last bump: a retried InitProducerId with it gets the current one."""
    txn_timeout_ms: int = 60_000
    state: TransactionState = TransactionState.EMPTY
    partitions: set[tuple[str, int]] = field(default_factory=set)
    txn_start_timestamp: int = -1
    txn_last_update_timestamp: int = -1
    pending: TransactionState | None = None
    """The state being written; no other change may start meanwhile."""

    # --- transits ------------------------------------------------------------------------------

    def _transit(self, state: TransactionState, now: int, **changes: Any) -> TxnTransit:
        if self.pending is not None:
            raise IllegalTransitionError(f"{self.transactional_id}: {self.pending.title} is in flight")
        if self.state not in VALID_PREVIOUS[state]:
            raise IllegalTransitionError(f"{self.transactional_id}: {self.state.title} -> {state.title}")
        base = TxnTransit(self.producer_id, self.last_producer_id, self.producer_epoch, self.last_producer_epoch,
                          self.txn_timeout_ms, state, frozenset(self.partitions), self.txn_start_timestamp, now)
        self.pending = state
        return replace(base, **changes)

    def prepare_init(self, timeout_ms: int, now: int, new_producer_id: int | None = None,
                     expected_epoch: int | None = None) -> TxnTransit | None:
        """InitProducerId from Empty/Complete*: a bumped epoch (or a new producer id when the epoch
        is exhausted, `new_producer_id`). With the epoch a KIP-360 client sends (`expected_epoch`):
        the current one bumps, the previous one is a retry that gets the current epoch back, any
        other is fenced (None)."""
        if new_producer_id is not None:
            return self._transit(TransactionState.EMPTY, now, producer_id=new_producer_id,
                                 last_producer_id=self.producer_id, producer_epoch=0,
                                 last_producer_epoch=NO_PRODUCER_EPOCH, txn_timeout_ms=timeout_ms,
                                 partitions=frozenset(), txn_start_timestamp=-1)
        if expected_epoch is None or self.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == self.producer_epoch:
            epoch, last = self.producer_epoch + 1, self.producer_epoch
        elif expected_epoch == self.last_producer_epoch:
            epoch, last = self.producer_epoch, self.last_producer_epoch
        else:
            return None
        return self._transit(TransactionState.EMPTY, now, producer_epoch=epoch, last_producer_epoch=last,
                             txn_timeout_ms=timeout_ms, partitions=frozenset(), txn_start_timestamp=-1)

    def prepare_fence_epoch(self) -> None:
        """An open transaction meets a new producer (InitProducerId) or its timeout: the epoch is
        bumped in memory only (PrepareEpochFence is never written, as in Kafka), then aborted."""
        if self.state != TransactionState.ONGOING or self.pending is not None:
            raise IllegalTransitionError(f"{self.transactional_id}: cannot fence from {self.state.title}")
        if not is_epoch_exhausted(self.producer_epoch):
            self.producer_epoch += 1
        self.pending = TransactionState.PREPARE_EPOCH_FENCE

    def prepare_add_partitions(self, partitions: Iterable[tuple[str, int]], now: int) -> TxnTransit:
        start = now if self.state in (TransactionState.EMPTY, TransactionState.COMPLETE_COMMIT,
                                      TransactionState.COMPLETE_ABORT) else self.txn_start_timestamp
        return self._transit(TransactionState.ONGOING, now, partitions=frozenset(self.partitions | set(partitions)),
                             txn_start_timestamp=start)

    def prepare_end(self, commit: bool, now: int) -> TxnTransit:
        if self.pending == TransactionState.PREPARE_EPOCH_FENCE:
            if commit:
                raise IllegalTransitionError(f"{self.transactional_id}: a fenced transaction can only abort")
            self.pending = None  # the fence becomes the abort, with the bumped epoch
            return self._transit(TransactionState.PREPARE_ABORT, now, last_producer_epoch=NO_PRODUCER_EPOCH)
        return self._transit(TransactionState.PREPARE_COMMIT if commit else TransactionState.PREPARE_ABORT, now)

    def prepare_complete(self, now: int) -> TxnTransit:
        state = TransactionState.COMPLETE_COMMIT if self.state == TransactionState.PREPARE_COMMIT \
            else TransactionState.COMPLETE_ABORT
        return self._transit(state, now, partitions=frozenset())

    def prepare_dead(self, now: int) -> TxnTransit:
        return self._transit(TransactionState.DEAD, now, partitions=frozenset())

    def complete(self, transit: TxnTransit) -> None:
        """Apply a written transit (Kafka's completeTransitionTo)."""
        if self.pending != transit.state:
            raise IllegalTransitionError(
                f"{self.transactional_id}: completing {transit.state.title}, but "
                f"{self.pending.title if self.pending else 'nothing'} is pending")
        self.pending = None
        self.producer_id, self.last_producer_id = transit.producer_id, transit.last_producer_id
        self.producer_epoch, self.last_producer_epoch = transit.producer_epoch, transit.last_producer_epoch
        self.txn_timeout_ms = transit.txn_timeout_ms
        self.state = transit.state
        self.partitions = set(transit.partitions)
        self.txn_start_timestamp = transit.txn_start_timestamp
        self.txn_last_update_timestamp = transit.txn_last_update_timestamp

    def abort_pending(self) -> None:
        """The transit's write failed: nothing changed (a fenced epoch stays bumped: harmless,
        it only ever grows)."""
        self.pending = None

    @classmethod
    def from_transit(cls, transactional_id: str, transit: TxnTransit) -> "TransactionMetadata":
        """The state as loaded from the log."""
        m = cls(transactional_id, transit.producer_id)
        m.pending = transit.state
        m.complete(transit)
        return m

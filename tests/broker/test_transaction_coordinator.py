"""The transaction coordinator over a stand-in log and marker channel: a producer's next
transaction meeting the markers of its last one waits for them instead of being sent away with
CONCURRENT_TRANSACTIONS, and is still sent away when they do not finish in time."""

import asyncio

import pytest
from kio.schema.errors import ErrorCode

from odradek.broker.replica_manager import ProduceResult
from odradek.broker.transaction import transaction_coordinator
from odradek.broker.transaction.transaction_coordinator import TransactionCoordinator
from odradek.broker.transaction.transaction_metadata import TransactionState
from odradek.broker.transaction.transaction_state_manager import TransactionConfig, TransactionStateManager

S = TransactionState


class Log:
    """`__transaction_state` that takes every append at once."""

    async def append_records(self, timeout_ms, acks, entries, *args):
        return {(topic, p): ProduceResult() for topic, p, _ in entries}


class Markers:
    """A marker channel whose sends finish when the test says so."""

    def __init__(self):
        self.release = asyncio.Event()
        self.sent = []

    async def send(self, marker, still_valid):
        self.sent.append(marker)
        await self.release.wait()

    async def close(self):
        pass


class ProducerIds:
    async def generate_producer_id(self):
        return 1000


async def coordinator_with_open_transaction(markers):
    state = TransactionStateManager(Log(), 1, TransactionConfig(num_partitions=1))
    state.owned[0] = 0  # this broker coordinates partition 0 at coordinator epoch 0
    c = TransactionCoordinator(state, ProducerIds(), markers, TransactionConfig(num_partitions=1))
    code, pid, epoch = await c.init_producer_id("app", 60_000)
    assert code == ErrorCode.none
    assert await c.add_partitions("app", pid, epoch, [("t", 0)]) == ErrorCode.none
    assert await c.end_transaction("app", pid, epoch, commit=True) == ErrorCode.none
    await asyncio.sleep(0)  # the markers task starts
    assert markers.sent and c.state.transactions["app"].state == S.PREPARE_COMMIT
    return c, pid, epoch


def test_the_next_transaction_waits_for_the_last_ones_markers():
    async def run():
        markers = Markers()
        c, pid, epoch = await coordinator_with_open_transaction(markers)
        add = asyncio.ensure_future(c.add_partitions("app", pid, epoch, [("t", 1)]))
        await asyncio.sleep(0)
        assert not add.done()  # held, not answered CONCURRENT_TRANSACTIONS
        markers.release.set()
        assert await add == ErrorCode.none
        m = c.state.transactions["app"]
        assert (m.state, m.partitions) == (S.ONGOING, {("t", 1)})
        await c.shutdown()

    asyncio.run(run())


def test_markers_that_do_not_finish_in_time_still_answer_concurrent_transactions(monkeypatch):
    monkeypatch.setattr(transaction_coordinator, "COMPLETION_WAIT_S", 0)

    async def run():
        markers = Markers()
        c, pid, epoch = await coordinator_with_open_transaction(markers)
        assert await c.add_partitions("app", pid, epoch, [("t", 1)]) == ErrorCode.concurrent_transactions
        code, _, _ = await c.init_producer_id("app", 60_000, pid, epoch)
        assert code == ErrorCode.concurrent_transactions
        assert c.state.transactions["app"].state == S.PREPARE_COMMIT
        markers.release.set()
        await c.shutdown()

    asyncio.run(run())


@pytest.mark.parametrize("fenced_epoch", [True, False])
def test_a_request_that_would_fail_anyway_is_not_held(fenced_epoch):
    async def run():
        markers = Markers()
        c, pid, epoch = await coordinator_with_open_transaction(markers)
        code = await (c.add_partitions("app", pid, epoch - 1, [("t", 1)]) if fenced_epoch
                      else c.add_partitions("app", pid + 1, epoch, [("t", 1)]))
        assert code == (ErrorCode.producer_fenced if fenced_epoch else ErrorCode.invalid_producer_id_mapping)
        markers.release.set()
        await c.shutdown()

    asyncio.run(run())

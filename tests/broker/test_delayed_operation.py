"""broker/delayed_operation.py: the purgatory completes operations on a check or expires them."""

import asyncio

from odradek.broker.delayed_operation import DelayedOperation, DelayedOperationPurgatory


class _Counter(DelayedOperation):
    def __init__(self, delay_ms, state, target):
        super().__init__(delay_ms)
        self.state, self.target = state, target
        self.completions = 0

    def try_complete(self):
        if self.state["n"] >= self.target:
            return self.force_complete()
        return False

    def on_complete(self):
        self.completions += 1


def test_purgatory_completes_on_check_or_expires():
    async def scenario():
        purgatory = DelayedOperationPurgatory("test")
        state = {"n": 0}
        now = _Counter(1000, {"n": 5}, 1)
        assert purgatory.try_complete_else_watch(now, ["k"]) is True
        waiting = _Counter(10_000, state, 2)
        expiring = _Counter(50, state, 100)
        assert purgatory.try_complete_else_watch(waiting, ["k", "j"]) is False
        assert purgatory.try_complete_else_watch(expiring, ["k"]) is False
        state["n"] = 1
        assert purgatory.check_and_complete("k") == 0
        state["n"] = 2
        assert purgatory.check_and_complete("j") == 1
        await asyncio.wait_for(waiting.wait(), 1)
        assert purgatory.check_and_complete("k") == 0  # already complete: counted once only
        await asyncio.wait_for(expiring.wait(), 2)
        assert expiring.expired and not waiting.expired
        assert waiting.completions == 1 and expiring.completions == 1
        assert purgatory.watched() == 0

    asyncio.run(scenario())


def test_a_full_fetch_watching_thousands_of_partitions_checks_only_the_changed_one():
    from types import SimpleNamespace

    from odradek.broker.replica_manager import DelayedFetch

    def partition():
        return SimpleNamespace(is_leader=True, fenced=False,
                               log=SimpleNamespace(log_end_offset=10, log_start_offset=0, high_watermark=10))

    keys = [("t", i) for i in range(3000)]
    manager = SimpleNamespace(_partitions={k: partition() for k in keys})
    infos = [SimpleNamespace(topic=t, partition=i, fetch_offset=10, max_bytes=1 << 20) for t, i in keys]

    async def scenario():
        purgatory = DelayedOperationPurgatory("fetch")
        op = DelayedFetch(10_000, manager, 1, 1, infos)
        checked = []
        check = op._check
        op._check = lambda info: checked.append(info) or check(info)
        assert purgatory.try_complete_else_watch(op, keys) is False
        checked.clear()
        for k in keys[:100]:  # ISR changes, appends elsewhere: nothing to read yet
            assert purgatory.check_and_complete(k) == 0
        assert len(checked) == 100
        manager._partitions[keys[7]].log.log_end_offset = 11  # a follower's data arrives
        assert purgatory.check_and_complete(keys[7]) == 1 and op.completed
        await asyncio.wait_for(op.wait(), 1)

    asyncio.run(scenario())

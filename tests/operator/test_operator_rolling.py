"""Roll and scale decisions over what Metadata reports (pure; no cluster needed)."""

from types import SimpleNamespace as NS

from odradek.operator.rolling import (
    BrokerState,
    ClusterView,
    PartitionView,
    broker_count,
    next_roll_step,
    view_from_metadata,
)

ALL = ClusterView(registered=frozenset({0, 1, 2}))


def part(topic, p, replicas, isr):
    return PartitionView(topic, p, tuple(replicas), tuple(isr))


def holding(counts):
    """Partitions of replication factor 1: `counts[b]` of them on broker b (they never block a roll)."""
    return tuple(part(f"t{b}", i, (b,), (b,)) for b, n in counts.items() for i in range(n))


def brokers(*hashes, running=(True, True, True)):
    return [BrokerState(i, h, r) for i, (h, r) in enumerate(zip(hashes, running))]


def test_nothing_to_do_when_every_broker_runs_the_desired_config():
    step = next_roll_step(brokers("new", "new", "new"), "new", ALL)
    assert step.done and step.restart is None


def test_one_broker_at_a_time_lowest_id_first():
    step = next_roll_step(brokers("old", "new", "old"), "new", ALL)
    assert step.restart == 0 and step.pending == (0, 2)


def test_waits_until_the_restarted_broker_registers():
    view = ClusterView(registered=frozenset({1, 2}))
    step = next_roll_step(brokers("new", "old", "old"), "new", view)
    assert step.restart is None and "[0]" in step.waiting


def test_waits_for_a_pod_that_is_down():
    step = next_roll_step(brokers("new", "old", "old", running=(False, True, True)), "new", ALL)
    assert step.restart is None and "register" in step.waiting


def test_waits_while_a_restart_would_leave_a_partition_under_min_isr():
    # broker 0 is back but not yet in sync: taking 1 or 2 down leaves t-0 and t-3 one in-sync replica
    view = ClusterView(registered=frozenset({0, 1, 2}), default_min_insync=2,
                       partitions=(part("t", 0, (0, 1, 2), (1, 2)), part("t", 3, (0, 1, 2), (1, 2))))
    step = next_roll_step(brokers("new", "old", "old"), "new", view)
    assert step.restart is None and "under-replicated" in step.waiting and "t-3" in step.waiting
    assert "min.insync.replicas" in step.waiting


def test_an_under_replicated_partition_the_broker_is_not_in_sync_for_does_not_block():
    view = ClusterView(registered=frozenset({0, 1, 2}), default_min_insync=2,
                       partitions=(part("t", 0, (0, 1, 2), (0, 1)), part("u", 0, (0, 1, 2), (0, 1, 2))))
    assert next_roll_step(brokers("new", "new", "old"), "new", view).restart == 2
    # ...but broker 1 is in t-0's ISR of two: held back
    assert next_roll_step(brokers("new", "old", "new"), "new", view).restart is None


def test_min_isr_is_per_topic_and_partitions_that_can_never_stay_available_do_not_block():
    # "pair" (2 replicas, min 2) and "single" (1 replica) are unwritable with acks=all during
    # any restart of broker 1: they are not what holds a roll back
    partitions = (part("strict", 0, (0, 1, 2), (1, 2)), part("single", 0, (1,), (1,)),
                  part("pair", 0, (1, 2), (1, 2)))
    lenient = ClusterView(registered=frozenset({0, 1, 2}), partitions=partitions, default_min_insync=1,
                          min_insync={"pair": 2})
    assert next_roll_step(brokers("new", "old", "new"), "new", lenient).restart == 1
    strict = ClusterView(registered=frozenset({0, 1, 2}), partitions=partitions, default_min_insync=1,
                         min_insync={"strict": 2, "pair": 2})
    held = next_roll_step(brokers("new", "old", "new"), "new", strict)
    assert held.restart is None and "strict-0" in held.waiting


def test_a_stale_broker_that_is_down_is_restarted_first_whatever_the_health():
    # broker 1 was restarted into a broken config and never came up; the spec is fixed now
    view = ClusterView(registered=frozenset({0, 2}), default_min_insync=2,
                       partitions=(part("t", 0, (0, 1, 2), (0, 2)),))
    step = next_roll_step(brokers("old", "broken", "old", running=(True, False, True)), "fixed", view)
    assert step.restart == 1 and step.waiting is None
    # a running pod whose broker never registered (crash after start) is stuck too
    step = next_roll_step(brokers("old", "broken", "old"), "fixed", view)
    assert step.restart == 1


def test_a_missing_pod_is_being_created_not_restarted():
    step = next_roll_step(brokers("new", None, "old", running=(True, False, True)), "new",
                          ClusterView(registered=frozenset({0, 2})))
    assert step.restart is None and "[1]" in step.waiting


def test_scale_up_is_immediate():
    assert broker_count(5, 3, ALL).replicas == 5 and broker_count(5, 3, ALL).refused is None


def test_scale_down_refused_while_removed_brokers_hold_replicas():
    view = ClusterView(registered=frozenset(range(5)), partitions=holding({0: 4, 3: 2, 4: 0}))
    decision = broker_count(3, 5, view)
    assert decision.replicas == 4 and "[3]" in decision.refused
    empty = ClusterView(registered=frozenset(range(5)), partitions=holding({0: 4, 1: 2}))
    assert broker_count(3, 5, empty) == broker_count(3, 5, empty).__class__(3, None)


def test_view_from_metadata():
    response = NS(
        brokers=[NS(node_id=0), NS(node_id=1), NS(node_id=2)],
        topics=[NS(name="a", partitions=[
            NS(partition_index=0, replica_nodes=[0, 1], isr_nodes=[0, 1]),
            NS(partition_index=1, replica_nodes=[1, 2], isr_nodes=[1]),
        ])])
    view = view_from_metadata(response)
    assert view.registered == {0, 1, 2}
    assert view.under_replicated == (("a", 1),)
    assert view.replicas_by_broker == {0: 1, 1: 2, 2: 1}


def test_fetch_view_reports_when_no_broker_answers():
    import asyncio
    import socket

    import pytest

    from odradek.operator.rolling import fetch_view

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    with pytest.raises(ConnectionError, match=f"127.0.0.1:{port}"):
        asyncio.run(fetch_view([("127.0.0.1", port)], timeout=2.0))


# --- reconcile_brokers: one step at a time through a recording orchestrator ----------------------


class FakeOrchestrator:
    """Brokers as a list of states; records every call. A restarted or added broker comes back
    with the desired hash but is not registered until the test says so (as in a real cluster)."""

    def __init__(self, hashes, desired="new", running=None, cannot_serve=()):
        self.states = [BrokerState(i, h, True if running is None else running[i], i in cannot_serve)
                       for i, h in enumerate(hashes)]
        self.desired = desired
        self.calls: list[tuple[str, int]] = []

    async def brokers(self):
        return list(self.states)

    async def restart_broker(self, broker_id):
        self.calls.append(("restart", broker_id))
        self.states[broker_id] = BrokerState(broker_id, self.desired, True)

    async def set_broker_count(self, count):
        self.calls.append(("count", count))
        self.states = self.states[:count] + [BrokerState(i, self.desired, True) for i in range(len(self.states), count)]


def step(orchestrator, count, view, desired="new"):
    import asyncio

    from odradek.operator.rolling import reconcile_brokers

    return asyncio.run(reconcile_brokers(orchestrator, desired, count, view))


def view_of(registered, under=(), replicas=None):
    """`under`: partitions of three replicas whose ISR lacks broker 0 (min.insync.replicas 2)."""
    lagging = tuple(part(t, p, (0, 1, 2), (1, 2)) for t, p in under)
    return ClusterView(registered=frozenset(registered), partitions=lagging + holding(replicas or {}),
                       default_min_insync=2)


def test_reconcile_rolls_one_broker_per_step_and_waits_for_registration():
    fake = FakeOrchestrator(["old", "old", "old"])
    first = step(fake, 3, view_of({0, 1, 2}))
    assert first.restarted == 0 and first.pending == (0, 1, 2) and not first.done
    # broker 0 restarted but its registration is not visible yet: nothing else is restarted
    held = step(fake, 3, view_of({1, 2}))
    assert held.restarted is None and "[0]" in held.waiting and fake.calls == [("restart", 0)]
    # registered, but a partition it follows has not caught up
    held = step(fake, 3, view_of({0, 1, 2}, under=[("t", 1)]))
    assert held.restarted is None and "under-replicated" in held.waiting
    assert step(fake, 3, view_of({0, 1, 2})).restarted == 1
    assert step(fake, 3, view_of({0, 1, 2})).restarted == 2
    final = step(fake, 3, view_of({0, 1, 2}))
    assert final.done and final.restarted is None and final.waiting is None
    assert fake.calls == [("restart", 0), ("restart", 1), ("restart", 2)]
    # idempotent: a converged cluster is left alone
    assert step(fake, 3, view_of({0, 1, 2})).done and len(fake.calls) == 3


def test_reconcile_never_restarts_a_healthy_broker_while_another_is_down():
    fake = FakeOrchestrator(["old", "new", "old"], running=[True, False, True])
    result = step(fake, 3, view_of({0, 1, 2}))
    assert result.restarted is None and "[1]" in result.waiting and fake.calls == []


def test_reconcile_restarts_a_stale_broker_that_is_down_first():
    fake = FakeOrchestrator(["old", "old", "old"], running=[True, False, True], cannot_serve={1})
    result = step(fake, 3, view_of({0, 2}, under=[("t", 0)]))
    assert result.restarted == 1 and fake.calls == [("restart", 1)]


def test_reconcile_never_restarts_an_unready_broker_that_may_be_the_last_in_sync_replica():
    """A paused process or a probe flap: the pod runs, is not Ready, Metadata may not list it, but
    it is still in the ISR; restarting it would take the partition under min.insync.replicas."""
    fake = FakeOrchestrator(["old", "old", "old"], running=[True, False, True])
    last = ClusterView(registered=frozenset({0, 2}), default_min_insync=2,
                       partitions=(part("t", 0, (0, 1, 2), (1,)), part("u", 0, (0, 1, 2), (1, 2))))
    result = step(fake, 3, last)
    assert result.restarted is None and fake.calls == [] and "broker 1" in result.waiting
    assert "t-0" in result.waiting and "u-0" in result.waiting
    # the same broker stuck in a crash loop holds nothing: restarted at once
    fake = FakeOrchestrator(["old", "old", "old"], running=[True, False, True], cannot_serve={1})
    assert step(fake, 3, last).restarted == 1
    # out of every ISR (the leader shrank it), the unready broker is restarted through the check
    fake = FakeOrchestrator(["old", "old", "old"], running=[True, False, True])
    out = ClusterView(registered=frozenset({0, 2}), default_min_insync=2,
                      partitions=(part("t", 0, (0, 1, 2), (0, 2)),))
    assert step(fake, 3, out).restarted == 1
    # ...but never while another broker is down too
    fake = FakeOrchestrator(["old", "old", "old"], running=[False, False, True])
    assert step(fake, 3, ClusterView(registered=frozenset({2}))).restarted is None


def test_which_pods_cannot_be_serving():
    from odradek.operator.orchestrator import cannot_serve

    def pod(phase="Running", **container):
        return {"status": {"phase": phase, "containerStatuses": [{"name": "broker", **container}]}}

    running = {"running": {"startedAt": "T"}}
    assert cannot_serve(pod("Pending"))
    assert cannot_serve(pod(state={"waiting": {"reason": "CrashLoopBackOff"}}))
    assert cannot_serve(pod(state={"waiting": {"reason": "ImagePullBackOff"}}))
    assert cannot_serve(pod(state={"waiting": {"reason": "ContainerCreating"}}))
    assert cannot_serve(pod(state={"terminated": {"exitCode": 1}}))
    assert cannot_serve(pod(state=running, started=False)), "its startup probe has not passed"
    assert not cannot_serve(pod(state=running, started=True, ready=False)), "not Ready may still be in sync"
    assert not cannot_serve(pod(state=running, ready=True))


def test_reconcile_scales_up_before_rolling_and_waits_for_the_new_brokers():
    fake = FakeOrchestrator(["old", "old", "old"])
    scaled = step(fake, 5, view_of({0, 1, 2}))
    assert scaled.count == 5 and scaled.restarted is None and not scaled.done
    assert fake.calls == [("count", 5)]
    held = step(fake, 5, view_of({0, 1, 2}))  # brokers 3 and 4 not registered yet
    assert held.restarted is None and "[3, 4]" in held.waiting and held.count is None
    assert step(fake, 5, view_of(range(5))).restarted == 0
    assert fake.calls == [("count", 5), ("restart", 0)]  # new brokers started on the new config


def test_reconcile_is_not_done_until_new_brokers_register():
    fake = FakeOrchestrator(["new", "new", "new"])
    assert step(fake, 4, view_of({0, 1, 2})).count == 4
    waiting = step(fake, 4, view_of({0, 1, 2}))
    assert not waiting.done and "[3]" in waiting.waiting
    assert step(fake, 4, view_of(range(4))).done


def test_reconcile_scales_down_before_rolling_so_removed_brokers_are_not_restarted():
    fake = FakeOrchestrator(["old", "old", "old", "old"])
    result = step(fake, 3, view_of(range(4), replicas={0: 2, 1: 2, 2: 2}))
    assert result.count == 3 and fake.calls == [("count", 3)]
    for expected in (0, 1, 2):
        assert step(fake, 3, view_of(range(3), replicas={0: 2, 1: 2, 2: 2})).restarted == expected
    assert step(fake, 3, view_of(range(3))).done
    assert ("restart", 3) not in fake.calls


def test_reconcile_refuses_to_shrink_past_a_broker_holding_replicas_and_keeps_rolling():
    fake = FakeOrchestrator(["new", "new", "new", "old"])
    holding = view_of(range(4), replicas={0: 1, 3: 1})
    held = step(fake, 3, holding)
    assert held.count is None and "[3]" in held.refused and not held.done
    assert held.restarted == 3  # the kept broker is still brought to the desired config
    again = step(fake, 3, holding)
    assert again.refused and not again.done and fake.calls == [("restart", 3)]
    # its replicas are gone (topic deleted): the scale-down goes through
    freed = step(fake, 3, view_of(range(4), replicas={0: 1}))
    assert freed.count == 3 and freed.refused is None and fake.calls[-1] == ("count", 3)
    assert step(fake, 3, view_of(range(3), replicas={0: 1})).done


def test_reconcile_rejects_an_empty_cluster():
    import pytest

    with pytest.raises(ValueError):
        step(FakeOrchestrator(["new"]), 0, view_of({0}))

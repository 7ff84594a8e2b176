"""Roll and scale decisions over what Metadata reports (pure; no cluster needed)."""

from types import SimpleNamespace as NS

from odradek.operator.rolling import (
    BrokerState, ClusterView, broker_count, next_roll_step, view_from_metadata,
)

ALL = ClusterView(registered=frozenset({0, 1, 2}))


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


def test_waits_while_partitions_are_under_replicated():
    view = ClusterView(registered=frozenset({0, 1, 2}), under_replicated=(("t", 0), ("t", 3)))
    step = next_roll_step(brokers("new", "old", "old"), "new", view)
    assert step.restart is None and "2 under-replicated" in step.waiting and "t-3" in step.waiting


def test_scale_up_is_immediate():
    assert broker_count(5, 3, ALL).replicas == 5 and broker_count(5, 3, ALL).refused is None


def test_scale_down_refused_while_removed_brokers_hold_replicas():
    view = ClusterView(registered=frozenset(range(5)), replicas_by_broker={0: 4, 3: 2, 4: 0})
    decision = broker_count(3, 5, view)
    assert decision.replicas == 4 and "[3]" in decision.refused
    empty = ClusterView(registered=frozenset(range(5)), replicas_by_broker={0: 4, 1: 2})
    assert broker_count(3, 5, empty) == broker_count(3, 5, empty).__class__(3, None)


def test_view_from_metadata():
    response = NS(
        brokers=[NS(node_id=0), NS(node_id=1), NS(node_id=2)], controller_id=-1,
        topics=[NS(name="a", partitions=[
            NS(partition_index=0, replica_nodes=[0, 1], isr_nodes=[0, 1]),
            NS(partition_index=1, replica_nodes=[1, 2], isr_nodes=[1]),
        ])])
    view = view_from_metadata(response)
    assert view.registered == {0, 1, 2}
    assert view.under_replicated == (("a", 1),)
    assert view.replicas_by_broker == {0: 1, 1: 2, 2: 1}
    assert view.controller_id is None


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

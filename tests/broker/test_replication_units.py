"""Replication decisions without processes: the truncation point, the fetcher's retry delays and
the HW checkpoint round trip."""

import asyncio
import threading
import time
from types import SimpleNamespace

from kio.schema.errors import ErrorCode

from odradek.broker.log import LogManager
from odradek.broker.log.record_batch import build_batch
from odradek.broker.replica_fetcher import PartitionFetchState, ReplicaFetcher, truncation_offset
from odradek.broker.replica_manager import HIGH_WATERMARK_CHECKPOINT, ReplicaManager
from odradek.common.config import BrokerConfig


def local_epochs(entries):
    """end_offset_for over [(epoch, start)] with log end 100, like LeaderEpochFileCache."""
    def end_for(epoch):
        for i, (e, _) in enumerate(entries):
            if e == epoch:
                return e, entries[i + 1][1] if i + 1 < len(entries) else 100
        return -1, -1
    return end_for


def log_manager_with_t0(tmp_path):
    """Broker 0's config, a started LogManager in `tmp_path` and its empty log t-0."""
    config = BrokerConfig.from_properties({"broker.id": "0", "zookeeper.connect": "x", "log.dirs": str(tmp_path)})
    manager = LogManager([tmp_path], config)
    manager.startup()
    return config, manager, manager.get_or_create_log("t", 0, manager.default_config)


def test_truncates_to_the_leaders_end_of_our_epoch():
    # We wrote epoch 1 up to 100; the leader's epoch 1 ended at 60: offsets 60.. diverged.
    assert truncation_offset(local_epochs([(1, 0)]), 1, 60, log_end_offset=100, high_watermark=50) == 60


def test_never_truncates_above_our_end():
    assert truncation_offset(local_epochs([(1, 0)]), 1, 150, log_end_offset=100, high_watermark=50) == 100


def test_older_epoch_answer_is_bounded_by_our_end_of_that_epoch():
    # We have epochs 1 (0..40) and 3 (40..); the leader never saw 3 and says its epoch 1 ends at 70.
    assert truncation_offset(local_epochs([(1, 0), (3, 40)]), 1, 70, log_end_offset=100, high_watermark=10) == 40


def test_undefined_answer_falls_back_to_the_high_watermark():
    assert truncation_offset(local_epochs([]), -1, -1, log_end_offset=100, high_watermark=42) == 42


def test_high_watermark_checkpoint_round_trip(tmp_path):
    config, manager, plog = log_manager_with_t0(tmp_path)
    for i in range(5):
        plog.append_as_leader(build_batch([(None, b"v%d" % i)]), 0)
    plog.high_watermark = 3

    async def checkpoint():
        await ReplicaManager(config, manager, None, None).checkpoint_high_watermarks()

    asyncio.run(checkpoint())
    assert (tmp_path / HIGH_WATERMARK_CHECKPOINT).read_text().splitlines() == ["0", "1", "t 0 3"]
    manager.shutdown()

    # After a restart the HW is the checkpointed 3, not the log end offset 5.
    manager = LogManager([tmp_path], config)
    manager.startup()
    assert manager.get_log("t", 0).log_end_offset == 5
    ReplicaManager.load_high_watermarks(SimpleNamespace(log_manager=manager))
    assert manager.get_log("t", 0).high_watermark == 3
    manager.shutdown()


def test_a_leader_not_there_yet_is_retried_fast_then_at_the_backoff():
    config = BrokerConfig.from_properties({"broker.id": "1", "zookeeper.connect": "x", "log.dirs": "/tmp/x",
                                           "replica.fetch.backoff.ms": "1000"})
    fetcher = ReplicaFetcher(SimpleNamespace(replica_manager=None, config=config, broker_id=1), 0, "127.0.0.1", 9)
    state = PartitionFetchState(leader_epoch=0)
    delays = []
    for code in [ErrorCode.unknown_topic_or_partition] + [ErrorCode.not_leader_or_follower] * 6:
        fetcher.retry_after(state, ("t", 0), code, now=0.0, what="fetch")
        delays.append(state.delayed_until)
    assert delays == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0]

    # Our own epoch is stale: only the controller's next LeaderAndIsr helps, so the full backoff.
    fresh = PartitionFetchState(leader_epoch=0)
    fetcher.retry_after(fresh, ("t", 0), ErrorCode.fenced_leader_epoch, now=0.0, what="fetch")
    assert fresh.delayed_until == 1.0


def test_first_retries_of_a_response_are_one_summary_line(caplog):
    """A leadership change answers NOT_LEADER for thousands of partitions at once: one INFO line
    per kind of first retry (with a count and a few names), every partition at DEBUG."""
    config = BrokerConfig.from_properties({"broker.id": "1", "zookeeper.connect": "x", "log.dirs": "/tmp/x"})
    fetcher = ReplicaFetcher(SimpleNamespace(replica_manager=None, config=config, broker_id=1), 0, "127.0.0.1", 9)
    states = {("t", i): PartitionFetchState(leader_epoch=0) for i in range(1000)}
    with caplog.at_level("DEBUG", logger="odradek.broker.replica_fetcher"):
        for key, state in states.items():
            fetcher.retry_after(state, key, ErrorCode.not_leader_or_follower, now=0.0, what="fetch")
        fetcher.retry_after(states[("t", 0)], ("t", 0), ErrorCode.not_leader_or_follower, now=0.0, what="fetch")
        fetcher._log_retries()
        fetcher._log_retries()  # nothing new: nothing logged
    info = [r.getMessage() for r in caplog.records if r.levelname == "INFO"]
    assert len(info) == 1, info
    assert "fetch answered not_leader_or_follower for 1000 partitions (t-0, t-1, t-2 and 997 more)" in info[0]
    assert sum(r.levelname == "DEBUG" for r in caplog.records) == 1001


def test_epoch_checkpoints_are_written_in_parallel_and_failures_kept_apart(tmp_path):
    """write_in_worker writes many checkpoints at once (each its own file) and reports exactly the
    ones whose directory is gone."""
    from odradek.broker.log.leader_epoch import LeaderEpochFileCache, read_checkpoint, write_in_worker

    caches = []
    for i in range(100):
        d = tmp_path / f"p-{i}"
        d.mkdir()
        caches.append(LeaderEpochFileCache(d / "leader-epoch-checkpoint", lambda: 0))
    for i, cache in enumerate(caches):
        assert cache.assign(i + 1, 10 * i)
    for d in (tmp_path / "p-7", tmp_path / "p-70"):
        d.rmdir()  # as a failed (or deleted) log dir
    failed = asyncio.run(write_in_worker(caches))
    assert set(failed) == {caches[7], caches[70]}
    assert all(isinstance(e, OSError) for e in failed.values())
    for i, cache in enumerate(caches):
        if i not in (7, 70):
            assert read_checkpoint(cache.path) == [[str(i + 1), str(10 * i)]]


def test_a_large_leader_and_isr_lets_the_event_loop_answer_meanwhile(tmp_path, monkeypatch):
    """A peer taking over thousands of partitions must keep answering (Metadata, Fetch): the
    apply loop yields once it has run APPLY_SLICE_S (here 0: at every check), and every
    partition ends up led."""
    from odradek.broker import replica_manager
    from odradek.broker.replica_manager import APPLY_CHECK
    from odradek.common.messages import LeaderAndIsrPartitionState, LeaderAndIsrRequest, LeaderAndIsrTopicState

    config = BrokerConfig.from_properties({"broker.id": "0", "zookeeper.connect": "x", "log.dirs": str(tmp_path)})
    manager = LogManager([tmp_path], config)
    manager.startup()
    monkeypatch.setattr(replica_manager, "APPLY_SLICE_S", 0.0)
    count = 3 * APPLY_CHECK
    for p in range(count):
        manager.get_or_create_log("t", p, manager.default_config)
    states = tuple(LeaderAndIsrPartitionState(partition_index=p, controller_epoch=1, leader=0, leader_epoch=1,
                                              isr=(0,), zk_version=0, replicas=(0,), is_new=False)
                   for p in range(count))
    request = LeaderAndIsrRequest(controller_id=1000, controller_epoch=1, broker_epoch=-1, live_leaders=(),
                                  topic_states=(LeaderAndIsrTopicState(topic_name="t", partition_states=states),))

    async def run():
        rm = ReplicaManager(config, manager, None, None)
        turns = []

        def leads(p: int) -> bool:
            partition = rm.get_partition(("t", p))
            return partition is not None and partition.is_leader

        async def other_requests():  # until cancelled (bounded: the apply takes seconds at most)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                turns.append((leads(0), leads(count - 1)))
                await asyncio.sleep(0)

        other = asyncio.get_running_loop().create_task(other_requests())
        response = await rm.become_leader_or_follower(request)
        other.cancel()
        return rm, response, turns

    rm, response, turns = asyncio.run(run())
    try:
        assert all(e.error_code == 0 for e in response.partition_errors)
        assert all(rm.get_partition(("t", p)).is_leader for p in range(count))
        assert (True, False) in turns, "no other task ran while the partitions were applied"
    finally:
        manager.shutdown()


def test_a_stopping_broker_follows_without_fetching(tmp_path):
    """In its controlled shutdown a broker is made follower of every partition it led: it applies
    the LeaderAndIsr (no longer leader: produce gets NOT_LEADER_OR_FOLLOWER) but starts no
    fetcher, which would only compete with the handover until the shutdown stops it."""
    from odradek.common.messages import (
        LeaderAndIsrLiveLeader,
        LeaderAndIsrPartitionState,
        LeaderAndIsrRequest,
        LeaderAndIsrTopicState,
    )

    config = BrokerConfig.from_properties({"broker.id": "0", "zookeeper.connect": "x", "log.dirs": str(tmp_path)})
    manager = LogManager([tmp_path], config)
    manager.startup()
    for p in range(2):
        manager.get_or_create_log("t", p, manager.default_config)

    def request(leader: int, epoch: int) -> LeaderAndIsrRequest:
        states = tuple(LeaderAndIsrPartitionState(partition_index=p, controller_epoch=1, leader=leader,
                                                  leader_epoch=epoch, isr=(leader,), zk_version=epoch,
                                                  replicas=(0, 1), is_new=False) for p in range(2))
        return LeaderAndIsrRequest(controller_id=1000, controller_epoch=1, broker_epoch=-1,
                                   live_leaders=(LeaderAndIsrLiveLeader(broker_id=1, host_name="127.0.0.1", port=9),),
                                   topic_states=(LeaderAndIsrTopicState(topic_name="t", partition_states=states),))

    async def run(stopping: bool) -> tuple[list, list]:
        rm = ReplicaManager(config, manager, None, None)
        added: list = []
        rm.fetcher_manager.add_fetchers = lambda targets: added.extend(targets)
        await rm.become_leader_or_follower(request(leader=0, epoch=1))
        rm.stopping = stopping
        await rm.become_leader_or_follower(request(leader=1, epoch=2))
        return [rm.get_partition(("t", p)).is_leader for p in range(2)], added

    try:
        assert asyncio.run(run(stopping=False)) == ([False, False], [("t", 0), ("t", 1)])
        assert asyncio.run(run(stopping=True)) == ([False, False], [])
    finally:
        manager.shutdown()


def leader_and_isr(epoch: int, isr: tuple[int, ...], topic: str = "t", replicas: tuple[int, ...] = (0, 1),
                   leader: int = 0):
    """`leader` (broker 0 by default) leads `topic`-0 at `epoch` with `isr`."""
    from odradek.common.messages import LeaderAndIsrPartitionState, LeaderAndIsrRequest, LeaderAndIsrTopicState

    state = LeaderAndIsrPartitionState(partition_index=0, controller_epoch=1, leader=leader, leader_epoch=epoch,
                                       isr=isr, zk_version=epoch, replicas=replicas, is_new=False)
    return LeaderAndIsrRequest(controller_id=1000, controller_epoch=1, broker_epoch=-1, live_leaders=(),
                               topic_states=(LeaderAndIsrTopicState(topic_name=topic, partition_states=(state,)),))

def test_a_sitting_leaders_new_epoch_holds_no_append_and_is_written_off_the_loop(tmp_path, monkeypatch):
    """A follower died: the controller shrinks the ISR of a partition we already lead, with a new
    epoch. Appends go in under it at once, with no file written meanwhile (a peer of a dead broker
    takes thousands of these); the LogManager's background pass writes the checkpoint, in a
    worker thread, not on the event loop."""
    from odradek.broker.log import leader_epoch
    from odradek.broker.log.record_batch import iter_batches

    config, manager, plog = log_manager_with_t0(tmp_path)

    async def run():
        rm = ReplicaManager(config, manager, None, None)
        loop_thread = threading.get_ident()
        writers = []
        real_write = leader_epoch.write_checkpoint

        def recorded_write(path, lines):
            writers.append(threading.get_ident())
            real_write(path, lines)

        monkeypatch.setattr(leader_epoch, "write_checkpoint", recorded_write)
        assert (await rm.become_leader_or_follower(leader_and_isr(1, (0, 1)))).partition_errors[0].error_code == 0
        first = await rm.append_records(1000, 1, [("t", 0, build_batch([b"before"]))])
        assert first[("t", 0)].error == ErrorCode.none and plog.log_end_offset == 1
        assert (await rm.become_leader_or_follower(leader_and_isr(2, (0,)))).partition_errors[0].error_code == 0
        offsets = [(await rm.append_records(1000, 1, [("t", 0, build_batch([v]))]))[("t", 0)].base_offset
                   for v in (b"a", b"b")]
        unwritten = list(writers)
        await manager.write_epoch_checkpoints()
        return offsets, unwritten, writers, loop_thread

    offsets, unwritten, writers, loop_thread = asyncio.run(run())
    try:
        assert offsets == [1, 2]
        assert unwritten == []  # nothing written before the appends
        assert writers and loop_thread not in writers
        assert (plog.dir / "leader-epoch-checkpoint").read_text().splitlines()[2:] == ["1 0", "2 1"]
        # every batch carries the epoch it went in under: "before" epoch 1, the others epoch 2
        epochs = [b.partition_leader_epoch for b in iter_batches(plog.read(0, 1 << 20).read_bytes())]
        assert epochs == [1, 2, 2]
    finally:
        manager.shutdown()


def test_a_failed_epoch_checkpoint_write_takes_its_log_dir_offline(tmp_path, monkeypatch):
    """The background pass cannot write a lagging checkpoint: the directory goes offline (Kafka's
    LogDirFailureChannel), its logs close, and its partitions answer KAFKA_STORAGE_ERROR."""
    from odradek.broker.log import leader_epoch

    config, manager, plog = log_manager_with_t0(tmp_path)

    def failing_write(path, lines):
        raise OSError(5, "Input/output error")

    async def run():
        rm = ReplicaManager(config, manager, None, None)
        await rm.become_leader_or_follower(leader_and_isr(1, (0, 1)))
        monkeypatch.setattr(leader_epoch, "write_checkpoint", failing_write)
        await manager.write_epoch_checkpoints()
        return (await rm.append_records(1000, 1, [("t", 0, build_batch([b"x"]))]))[("t", 0)].error

    try:
        error = asyncio.run(run())
        assert manager.offline_dirs == {tmp_path} and plog.closed
        assert error == ErrorCode.kafka_storage_error
    finally:
        manager.shutdown()


def test_after_the_controllers_answer_a_stopping_broker_leads_nothing_that_could_move(tmp_path):
    """The controller answered our controlled shutdown: the leaderships it moved are given up at
    once, before its LeaderAndIsr comes. A write waiting for its followers and every new write
    get NOT_LEADER_OR_FOLLOWER (the client retries at the new leader); a single-replica partition,
    which cannot move, is still led; the fetchers stop; the LeaderAndIsr that comes later still
    applies."""
    config, manager, _ = log_manager_with_t0(tmp_path)
    manager.get_or_create_log("single", 0, manager.default_config)
    stopped: list[bool] = []

    async def run():
        rm = ReplicaManager(config, manager, None, None)
        rm.fetcher_manager.add_fetchers = lambda targets: None
        fetchers_stop = rm.fetcher_manager.shutdown
        rm.fetcher_manager.shutdown = lambda: stopped.append(True) or fetchers_stop()
        await rm.become_leader_or_follower(leader_and_isr(1, (0, 1)))
        await rm.become_leader_or_follower(leader_and_isr(1, (0,), topic="single", replicas=(0,)))
        waiting = asyncio.create_task(rm.append_records(30_000, -1, [("t", 0, build_batch([b"w"]))]))
        for _ in range(100):
            await asyncio.sleep(0)
        assert not waiting.done()  # follower 1 never fetches: the write waits for it
        given_up = await rm.finish_handover()
        answer = await asyncio.wait_for(waiting, 5)
        later = await rm.append_records(1000, 1, [("t", 0, build_batch([b"x"])), ("single", 0, build_batch([b"y"]))])
        applied = await rm.become_leader_or_follower(leader_and_isr(2, (1,), leader=1))
        return given_up, answer, later, applied, rm

    given_up, answer, later, applied, rm = asyncio.run(run())
    try:
        assert given_up == 1 and stopped  # and it fetches no more: no leader waits for it
        assert answer[("t", 0)].error == ErrorCode.not_leader_or_follower
        assert later[("t", 0)].error == ErrorCode.not_leader_or_follower
        assert later[("single", 0)].error == ErrorCode.none
        assert applied.partition_errors[0].error_code == ErrorCode.none
        assert rm.get_partition(("t", 0)).leader_id == 1
    finally:
        manager.shutdown()

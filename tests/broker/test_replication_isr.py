"""ISR decisions without processes (Partition's pure functions), the AlterPartition batching and
answer handling (AlterPartitionManager with a stand-in channel), and the controller channel against
stand-in controllers on loopback sockets."""

import asyncio
from types import SimpleNamespace

import pytest
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32

from odradek.broker.alter_partition_manager import (
    AlterPartitionAnswer,
    AlterPartitionManager,
    answers_of,
    build_request,
)
from odradek.broker.controller_channel import (
    BrokerToControllerChannel,
    ControllerNotAvailableError,
    controller_channels,
)
from odradek.broker.partition import Partition, ReplicaState
from odradek.common import messages as m
from odradek.common import wire
from odradek.common.zk_data import ControllerInfo, EndPoint

LAG = 3000


class FakeLog:
    def __init__(self, leo=0, hw=0, min_isr=2):
        self.log_end_offset = leo
        self.high_watermark = hw
        self.config = SimpleNamespace(min_insync_replicas=min_isr)
        self.leader_epoch_cache = SimpleNamespace(assign=lambda epoch, offset: None)


def state(leader=0, epoch=1, isr=(0, 1, 2), replicas=(0, 1, 2), zk_version=5):
    return SimpleNamespace(leader=leader, leader_epoch=epoch, controller_epoch=1, zk_version=zk_version,
                           isr=isr, replicas=replicas)


def leader(leo=100, hw=100, now=1_000_000, **kw) -> Partition:
    p = Partition("t", 0, 0, FakeLog(leo, hw))
    p.make_leader(state(**kw), now)
    for r in p.remote_replicas.values():
        r.log_end_offset = leo
    return p


# --- who is out of sync at time t ------------------------------------------------------------------


def test_followers_get_a_full_lag_period_from_the_leader_epoch_start():
    p = leader(now=1_000_000)
    assert p.out_of_sync_replicas(1_000_000 + LAG, LAG) == ()
    # nobody fetched since, and the leader's end moved on: both fell out
    p.log.log_end_offset = 120
    assert p.out_of_sync_replicas(1_000_000 + LAG + 1, LAG) == (1, 2)


def test_a_follower_at_the_leaders_end_is_never_out_of_sync():
    p = leader(now=0)
    assert p.out_of_sync_replicas(10 * LAG, LAG) == ()  # log end offsets equal: caught up


def test_under_steady_load_a_follower_that_reaches_the_previous_end_stays_in_sync():
    """The leader's end moves between fetches; reaching what the leader had at the previous fetch
    counts as caught up as of that fetch (Kafka's lastFetchLeaderLogEndOffset rule)."""
    r = ReplicaState()
    r.update_fetch_state(100, 110, now_ms=1000)   # behind: not caught up now
    assert r.last_caught_up_ms == 0
    r.update_fetch_state(110, 125, now_ms=1500)   # has what the leader had at t=1000
    assert r.last_caught_up_ms == 1000
    r.update_fetch_state(120, 140, now_ms=2000)   # not what the leader had at 1500 (125)
    assert r.last_caught_up_ms == 1000
    r.update_fetch_state(140, 140, now_ms=2500)   # at the end now
    assert r.last_caught_up_ms == 2500


def test_a_fenced_leader_moves_no_high_watermark_and_proposes_no_isr_change():
    """Without its ZooKeeper registration the broker may already have been replaced as leader:
    followers' fetches must not commit anything, and nothing goes to the controller."""
    p = leader(leo=150, hw=100, now=0)
    p.fenced = True
    assert not p.update_follower_fetch_state(1, 150, 10) and not p.update_follower_fetch_state(2, 150, 10)
    assert p.log.high_watermark == 100
    assert p.maybe_shrink_isr(10 * LAG, LAG) is None
    p.fenced = False
    assert p.maybe_increment_high_watermark() and p.log.high_watermark == 150


def test_low_watermark_is_the_smallest_start_of_the_live_replicas():
    """DeleteRecords completes when it reaches the asked offset (Kafka's lowWatermarkIfLeader)."""
    p = leader(leo=150, hw=150, now=0)
    p.log.log_start_offset = 100
    alive = {0, 1, 2}.__contains__
    assert p.low_watermark(alive) == -1  # followers not heard from yet
    p.update_follower_fetch_state(1, 150, 10, log_start_offset=100)
    p.update_follower_fetch_state(2, 150, 10, log_start_offset=40)
    assert p.low_watermark(alive) == 40
    assert p.low_watermark({0, 1}.__contains__) == 100  # a dead replica does not hold it back
    p.update_follower_fetch_state(2, 150, 20)  # no start reported: the last one stays
    assert p.low_watermark(alive) == 40
    p.update_follower_fetch_state(2, 150, 30, log_start_offset=120)
    assert p.low_watermark(alive) == 100


def test_shrink_proposes_the_isr_without_laggards_and_only_once():
    p = leader(now=0)
    p.log.log_end_offset = 150
    p.update_follower_fetch_state(1, 150, LAG)  # follower 1 keeps up, 2 is silent
    change = p.maybe_shrink_isr(LAG + 10, LAG)
    assert change is not None and change.new_isr == (0, 1)
    assert (change.leader_epoch, change.partition_epoch) == (1, 5)
    assert p.maybe_shrink_isr(LAG + 20, LAG) is None, "a second change while one is in flight"
    assert p.maximal_isr == (0, 1, 2), "a pending shrink does not count until committed"


# --- maximal ISR and the high watermark -------------------------------------------------------------


def test_pending_shrink_keeps_the_hw_until_committed_then_it_moves():
    p = leader(leo=100, hw=100, now=0)
    p.log.log_end_offset = 150
    p.update_follower_fetch_state(1, 150, LAG)
    assert p.log.high_watermark == 100  # follower 2 still at 100
    change = p.maybe_shrink_isr(LAG + 10, LAG)
    assert not p.maybe_increment_high_watermark()
    assert p.on_alter_partition_answer(change, ErrorCode.none, 1, (0, 1), 6)
    assert (p.isr, p.zk_version) == ((0, 1), 6)
    assert p.maybe_increment_high_watermark() and p.log.high_watermark == 150


def test_expansion_needs_the_hw_and_the_epoch_start_and_counts_at_once():
    p = leader(leo=100, hw=100, isr=(0, 1), now=0)
    p.remote_replicas[2].log_end_offset = -1
    assert p.maybe_expand_isr(2, 10) is None  # knows nothing yet
    p.update_follower_fetch_state(2, 90, 10)
    assert p.maybe_expand_isr(2, 10) is None  # below the HW
    p.update_follower_fetch_state(2, 100, 20)
    change = p.maybe_expand_isr(2, 20)
    assert change is not None and change.new_isr == (0, 1, 2)
    assert p.maximal_isr == (0, 1, 2)
    # while pending, the joining follower bounds the HW
    p.log.log_end_offset = 130
    p.update_follower_fetch_state(1, 130, 30)
    assert p.log.high_watermark == 100


def test_epoch_start_offset_bounds_expansion():
    p = leader(leo=100, hw=40, isr=(0, 1), now=0)  # HW lags: epoch started at 100
    p.update_follower_fetch_state(2, 60, 10)
    assert p.maybe_expand_isr(2, 10) is None
    p.update_follower_fetch_state(2, 100, 20)
    assert p.maybe_expand_isr(2, 20) is not None


# --- adopting the controller's answer ----------------------------------------------------------------


def test_fenced_or_stale_answers_drop_the_change_and_hold_off_new_ones():
    p = leader(now=0)
    p.log.log_end_offset = 150
    change = p.maybe_shrink_isr(LAG + 10, LAG)
    assert not p.on_alter_partition_answer(change, ErrorCode.invalid_update_version, now_ms=LAG + 20,
                                           retry_after_ms=1000)
    assert p.pending_isr_change is None and p.isr == (0, 1, 2)
    assert p.maybe_shrink_isr(LAG + 500, LAG) is None
    assert p.maybe_shrink_isr(LAG + 1020, LAG) is not None


def test_leader_and_isr_wins_over_a_pending_change():
    p = leader(now=0)
    p.log.log_end_offset = 150
    change = p.maybe_shrink_isr(LAG + 10, LAG)
    p.make_leader(state(epoch=2, isr=(0, 2), zk_version=9), LAG + 15)
    assert p.pending_isr_change is None
    assert not p.on_alter_partition_answer(change, ErrorCode.none, 1, (0, 1), 6)
    assert (p.isr, p.zk_version, p.leader_epoch) == ((0, 2), 9, 2)


def test_answer_for_an_older_state_is_not_adopted():
    p = leader(now=0)
    p.log.log_end_offset = 150
    change = p.maybe_shrink_isr(LAG + 10, LAG)
    assert not p.on_alter_partition_answer(change, ErrorCode.none, 0, (0, 1), 6)  # other leader epoch
    assert p.isr == (0, 1, 2)


# --- the manager: one request for many partitions, answers routed, retries -----------------------------


class FakeChannel:
    def __init__(self, answers):
        self.answers = list(answers)
        self.requests = []

    async def send(self, request, timeout_s):
        self.requests.append(request)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer(request)


def echo_isr(request):
    """A controller accepting every change at partition epoch + 1."""
    return m.AlterPartitionResponse(throttle_time_ms=i32(0), error_code=ErrorCode.none, topics=tuple(
        m.AlterPartitionResponseTopic(topic_name=t.topic_name, partitions=tuple(
            m.AlterPartitionResponsePartition(partition_index=p.partition_index, error_code=ErrorCode.none,
                                              leader_id=i32(0), leader_epoch=p.leader_epoch, isr=p.new_isr,
                                              partition_epoch=i32(p.partition_epoch + 1))
            for p in t.partitions)) for t in request.topics))


def test_request_and_answers_round_trip_through_the_wire():
    change = SimpleNamespace(leader_epoch=3, new_isr=(0, 1), partition_epoch=7)
    req = build_request(0, 42, {("b", 1): change, ("a", 0): change, ("b", 0): change})
    assert [(t.topic_name, [int(p.partition_index) for p in t.partitions]) for t in req.topics] == [("a", [0]), ("b", [0, 1])]
    _, decoded, _ = wire.decode_request(wire.encode_request(req, 1, "x")[4:])
    assert decoded == req
    answers = answers_of(echo_isr(req), [("a", 0), ("c", 9)])
    assert answers[("a", 0)] == AlterPartitionAnswer(ErrorCode.none, 0, 3, (0, 1), 8)
    assert answers[("c", 9)].error == ErrorCode.unknown_server_error
    stale = m.AlterPartitionResponse(throttle_time_ms=i32(0), error_code=ErrorCode.stale_broker_epoch, topics=())
    assert answers_of(stale, [("a", 0)])[("a", 0)].error == ErrorCode.stale_broker_epoch


def test_manager_batches_retries_and_skips_superseded_changes():
    async def go():
        parts = {k: leader(now=0) for k in [("t", 0), ("t", 1), ("u", 0)]}
        for p in parts.values():
            p.log.log_end_offset = 150
        changes = {k: p.maybe_shrink_isr(LAG + 10, LAG) for k, p in parts.items()}
        got = {}
        channel = FakeChannel([ConnectionError("controller away"), echo_isr])
        mgr = AlterPartitionManager(channel, 0, lambda: 42, lambda k, c: parts[k].pending_isr_change is c,
                                    retry_backoff_ms=10)
        for k, c in changes.items():
            mgr.submit(k, c, lambda key, change, answer: got.__setitem__(key, answer))
        parts[("u", 0)].make_leader(state(epoch=2), LAG + 11)  # a LeaderAndIsr replaces one change
        assert not await mgr.send_queued()  # the connection failed: the wanted changes stay queued
        assert len(channel.requests) == 1 and set(mgr.queued) == {("t", 0), ("t", 1)}
        assert await mgr.send_queued()
        for req in channel.requests:  # one request for both, never the superseded one
            listed = sorted((t.topic_name, int(p.partition_index)) for t in req.topics for p in t.partitions)
            assert listed == [("t", 0), ("t", 1)]
            assert int(req.broker_epoch) == 42
        assert not mgr.queued
        assert set(got) == {("t", 0), ("t", 1)} and all(a.isr == (0,) for a in got.values())

    asyncio.run(go())


# --- the channel: finds the controller in ZooKeeper, follows NOT_CONTROLLER, bounded -------------------


class StandInController:
    """Answers ControlledShutdown with a fixed error code on a loopback port; holds, unanswered,
    the requests of clients whose id ends with `hold` (a request the controller is still on)."""

    def __init__(self, code: ErrorCode, hold: str | None = None):
        self.code = code
        self.hold = hold
        self.served = 0
        self.held = asyncio.Event()

    async def start(self):
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    async def _serve(self, reader, writer):
        try:
            while True:
                size = int.from_bytes(await reader.readexactly(4), "big")
                header, _, _schema = wire.decode_request(await reader.readexactly(size))
                if self.hold is not None and str(header.client_id).endswith(self.hold):
                    self.held.set()
                    continue  # this connection's later requests queue behind it, as on a controller
                self.served += 1
                response = m.ControlledShutdownResponse(error_code=self.code, remaining_partitions=())
                writer.write(wire.encode_response(response, int(header.correlation_id), flexible_header=False))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()


class FakeZk:
    def __init__(self, infos):
        self.infos = list(infos)

    async def get_controller(self, on_change=None, timeout_s=None):
        return self.infos.pop(0) if len(self.infos) > 1 else self.infos[0]


def test_channel_moves_on_from_a_standby_to_the_active_controller():
    async def go():
        standby, active = StandInController(ErrorCode.not_controller), StandInController(ErrorCode.none)
        ports = [await standby.start(), await active.start()]
        zk = FakeZk([None, ControllerInfo(1000, EndPoint("127.0.0.1", ports[0])),
                     ControllerInfo(1001, EndPoint("127.0.0.1", ports[1]))])
        channel = BrokerToControllerChannel(zk, 0, retry_backoff_ms=10)
        request = m.ControlledShutdownRequest(broker_id=i32(0), broker_epoch=0)
        try:
            response = await channel.send(request, 10)
            assert response.error_code == ErrorCode.none
            assert (standby.served, active.served, channel.controller_id) == (1, 1, 1001)
        finally:
            await channel.close()
            standby.server.close()
            active.server.close()

    asyncio.run(go())


def test_controlled_shutdown_is_not_queued_behind_a_held_alter_partition():
    async def go():
        controller = StandInController(ErrorCode.none, hold="alter_partition")
        zk = FakeZk([ControllerInfo(1000, EndPoint("127.0.0.1", await controller.start()))])
        channels = controller_channels(zk, 0, retry_backoff_ms=10)
        request = m.ControlledShutdownRequest(broker_id=i32(0), broker_epoch=0)
        held = asyncio.create_task(channels.alter_partition.send(request, 30))
        try:
            await asyncio.wait_for(controller.held.wait(), 5)
            for channel in (channels.controlled_shutdown, channels.forwarding):
                assert (await asyncio.wait_for(channel.send(request, 5), 5)).error_code == ErrorCode.none
            assert not held.done()
        finally:
            held.cancel()
            for channel in channels:
                await channel.close()
            controller.server.close()

    asyncio.run(go())


def test_channel_gives_up_at_its_deadline_without_a_controller():
    async def go():
        channel = BrokerToControllerChannel(FakeZk([None]), 0, retry_backoff_ms=10)
        with pytest.raises(ControllerNotAvailableError):
            await channel.send(m.ControlledShutdownRequest(broker_id=i32(0), broker_epoch=0), 0.3)

    asyncio.run(go())

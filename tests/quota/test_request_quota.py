"""The request quota (request_percentage) and the throttled Fetch, over KafkaApis with stand-ins:
handler time is charged per step on the loop (never the awaits), exempt APIs are never charged,
and a consumer over its byte-rate quota gets an empty, throttled Fetch and loses nothing."""

import asyncio
import datetime
from types import SimpleNamespace

from kio.static.primitive import i32, i64

from odradek.broker.kafka_apis import KafkaApis
from odradek.broker.quota.client_quota_manager import QuotaConfig
from odradek.broker.quota.quota_managers import QuotaManagers
from odradek.broker.quota.request_time import CURRENT, RequestTime
from odradek.broker.quota.zk_quota_store import QuotaConfigs
from odradek.broker.replica_manager import FetchResult
from odradek.common import wire
from odradek.common.api_key import ApiKey
from odradek.common.clock import ManualClock

CONFIG = SimpleNamespace(max_incremental_fetch_session_cache_slots=10, min_incremental_fetch_session_eviction_ms=1000)


class Conn:
    peer = ("127.0.0.1", 5555)

    def __init__(self):
        self.mutes: list[float] = []

    def mute_for(self, seconds: float) -> None:
        self.mutes.append(seconds)


class FakeTimer:
    def __init__(self):
        self.ns = 0

    def __call__(self) -> int:
        return self.ns


def test_only_steps_on_the_loop_are_charged():
    timer = FakeTimer()
    release = asyncio.Event

    async def handler(gate):
        timer.ns += 3_000_000  # 3 ms of work
        assert CURRENT.get() is time
        await gate.wait()  # waiting is not charged
        timer.ns += 2_000_000
        return "answer"

    async def main():
        gate = release()

        async def elsewhere():
            await asyncio.sleep(0)
            timer.ns += 500_000_000  # another task's half second
            gate.set()

        other = asyncio.create_task(elsewhere())
        result = await time.run(handler(gate))
        await other
        return result

    time = RequestTime(timer)
    assert asyncio.run(main()) == "answer"
    assert time.nanos == 5_000_000 and abs(time.percentage() - 0.5) < 1e-9
    assert CURRENT.get() is None


def test_exceptions_and_cancellation_reach_the_handler():
    timer = FakeTimer()

    async def failing():
        await asyncio.sleep(0)
        raise KeyError("x")

    async def main():
        time = RequestTime(timer)
        try:
            await time.run(failing())
        except KeyError:
            pass
        else:
            raise AssertionError("no KeyError")
        cleaned = []

        async def slow():
            try:
                await asyncio.get_running_loop().create_future()  # never done: cancelled below
            finally:
                cleaned.append(True)

        async def timed():
            return await RequestTime(timer).run(slow())

        task = asyncio.create_task(timed())
        await asyncio.sleep(0)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        else:
            raise AssertionError("not cancelled")
        return cleaned

    assert asyncio.run(main()) == [True]


def find_coordinator_frame(client_id: str, version: int = 1) -> bytes:
    schema = wire.request_schema(ApiKey.FIND_COORDINATOR, version)
    return wire.encode_request(schema(key="g", key_type=0), 9, client_id)[4:]


def apis_with_request_quota(percent: float, timer, clock):
    apis = KafkaApis(CONFIG, SimpleNamespace(), None, clock=clock)
    apis.quotas = QuotaManagers(None, QuotaConfig(samples=2, window_ms=1000), clock)
    apis.quotas.update(QuotaConfigs(clients={"busy": {"request_percentage": str(percent)}}))
    apis.request_timer = timer
    return apis


class SlowTimer:
    """Every reading is `step` ns after the last: each handler step seems to take `step`."""

    def __init__(self, step: int):
        self.ns, self.step = 0, step

    def __call__(self) -> int:
        self.ns += self.step
        return self.ns


def test_request_quota_throttles_and_mutes_kio_answers():
    clock = ManualClock(0)
    apis = apis_with_request_quota(1.0, SlowTimer(50_000_000), clock)  # 1 %; each request 50 ms
    conn = Conn()
    throttles = []
    for _ in range(3):
        answer = asyncio.run(apis.handle(find_coordinator_frame("busy"), conn))
        _, response = wire.decode_response(wire.response_schema(ApiKey.FIND_COORDINATOR, 1), b"".join(answer)[4:])
        throttles.append(wire.ms(response.throttle_time))
    assert throttles[-1] > 0 and throttles[-1] <= 1000  # at most one window (ClientRequestQuotaManager)
    assert conn.mutes and conn.mutes[-1] == throttles[-1] / 1000.0
    other = Conn()
    asyncio.run(apis.handle(find_coordinator_frame("idle"), other))
    assert other.mutes == []
    stats = apis.quotas.request.stats[("", "busy")]
    assert stats.rate.rate(clock()) > 1.0


def test_api_versions_and_metadata_bodies_carry_the_throttle():
    clock = ManualClock(0)
    apis = apis_with_request_quota(0.001, SlowTimer(10_000_000), clock)
    conn = Conn()
    schema = wire.request_schema(ApiKey.API_VERSIONS, 3)
    frame = wire.encode_request(schema(client_software_name="t", client_software_version="1"), 1, "busy")[4:]
    answer = asyncio.run(apis.handle(frame, conn))
    _, response = wire.decode_response(wire.response_schema(ApiKey.API_VERSIONS, 3), b"".join(answer)[4:])
    assert wire.ms(response.throttle_time) > 0 and conn.mutes
    unthrottled = asyncio.run(apis.handle(wire.encode_request(schema(client_software_name="t",
                                                                     client_software_version="1"), 2, "x")[4:], Conn()))
    _, response = wire.decode_response(wire.response_schema(ApiKey.API_VERSIONS, 3), b"".join(unthrottled)[4:])
    assert wire.ms(response.throttle_time) == 0


class Guard:
    async def admit(self, request, listener):
        from kio.schema.errors import ErrorCode

        return ErrorCode.none


def test_exempt_apis_are_never_charged():
    clock = ManualClock(0)
    apis = apis_with_request_quota(0.001, SlowTimer(10_000_000), clock)
    # a follower's Fetch is exempt: no rate is kept for it
    apis.replica_manager = StandInReplicaManager(b"")
    asyncio.run(apis.handle(fetch_frame("busy", replica_id=1), Conn()))
    assert apis.quotas.request.stats == {}


class StandInReplicaManager:
    def __init__(self, records: bytes):
        self.records = records
        self.reads = 0
        self.metadata_cache = SimpleNamespace(contains=lambda name: True)

    async def fetch_messages(self, replica_id, max_wait_ms, min_bytes, max_bytes, infos, unchanged=None,
                             isolation_level=0):
        self.reads += 1
        return [FetchResult(high_watermark=10, last_stable_offset=10, log_start_offset=0,
                            regions=[self.records] if self.records else [], size=len(self.records)) for _ in infos]


def fetch_frame(client_id: str, replica_id: int = -1, version: int = 11, session_epoch: int = -1,
                session_id: int = 0) -> bytes:
    schema = wire.request_schema(ApiKey.FETCH, version)
    mod = __import__(schema.__module__, fromlist=["x"])
    part = mod.FetchPartition(partition=i32(0), current_leader_epoch=i32(-1), fetch_offset=i64(0),
                              log_start_offset=i64(-1), partition_max_bytes=i32(1 << 20))
    request = schema(replica_id=i32(replica_id), max_wait=datetime.timedelta(0), min_bytes=i32(1),
                     max_bytes=i32(1 << 20), isolation_level=0, session_id=i32(session_id), session_epoch=i32(session_epoch),
                     topics=(mod.FetchTopic(topic="t", partitions=(part,)),), forgotten_topics_data=(), rack_id="")
    return wire.encode_request(request, 5, client_id)[4:]


def fetched(answer, version: int = 11):
    _, response = wire.decode_response(wire.response_schema(ApiKey.FETCH, version), b"".join(
        c if isinstance(c, bytes) else bytes(c) for c in answer)[4:])
    return response


def test_a_consumer_over_its_quota_gets_an_empty_throttled_fetch():
    clock = ManualClock(0)
    apis = KafkaApis(CONFIG, StandInReplicaManager(b"\0" * 3000), None, clock=clock)
    apis.quotas = QuotaManagers(None, QuotaConfig(samples=2, window_ms=1000), clock)
    apis.quotas.update(QuotaConfigs(clients={"reader": {"consumer_byte_rate": "4000"}}))
    conn = Conn()
    first = fetched(asyncio.run(apis.handle(fetch_frame("reader"), conn)))
    assert wire.ms(first.throttle_time) == 0 and first.responses[0].partitions[0].records
    rate = apis.quotas.fetch.stats[("", "reader")].rate
    charged = sum(s[1] for s in rate.samples)
    second = fetched(asyncio.run(apis.handle(fetch_frame("reader"), conn)))
    assert wire.ms(second.throttle_time) > 0 and second.responses == () and second.session_id == 0
    assert conn.mutes == [wire.ms(second.throttle_time) / 1000.0]
    assert sum(s[1] for s in rate.samples) == charged  # taken back: nothing was sent
    clock.advance(2000)  # once the window has passed, the same offsets are read again
    third = fetched(asyncio.run(apis.handle(fetch_frame("reader"), conn)))
    assert wire.ms(third.throttle_time) == 0 and third.responses[0].partitions[0].records


def test_a_throttled_full_fetch_creates_no_session_and_an_incremental_one_keeps_it():
    clock = ManualClock(0)
    apis = KafkaApis(CONFIG, StandInReplicaManager(b"\0" * 3000), None, clock=clock)
    apis.quotas = QuotaManagers(None, QuotaConfig(samples=2, window_ms=1000), clock)
    apis.quotas.update(QuotaConfigs(clients={"reader": {"consumer_byte_rate": "4000"}}))
    first = fetched(asyncio.run(apis.handle(fetch_frame("reader", session_epoch=0), Conn())))
    assert wire.ms(first.throttle_time) == 0 and first.session_id != 0  # ~3000 B over 1 s: within 4000 B/s
    throttled_full = fetched(asyncio.run(apis.handle(fetch_frame("reader", session_epoch=0), Conn())))
    assert throttled_full.session_id == 0 and throttled_full.responses == ()
    assert apis.fetch_manager.cache.size == 1  # only the first one's session
    clock.advance(2000)
    session = first.session_id
    incremental = fetched(asyncio.run(apis.handle(fetch_frame("reader", session_epoch=1, session_id=session),
                                                  Conn())))
    assert wire.ms(incremental.throttle_time) == 0 and incremental.responses  # within the quota again
    throttled = fetched(asyncio.run(apis.handle(fetch_frame("reader", session_epoch=2, session_id=session), Conn())))
    assert wire.ms(throttled.throttle_time) > 0 and throttled.session_id == session and throttled.responses == ()
    clock.advance(2000)
    again = fetched(asyncio.run(apis.handle(fetch_frame("reader", session_epoch=3, session_id=session), Conn())))
    assert again.error_code == 0 and again.session_id == session and again.responses  # the session goes on

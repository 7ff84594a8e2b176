"""Fetch sessions (KIP-227): the pure rules of broker/fetch_session (cache, session, cached
partition, the full/incremental decisions), and KafkaApis.handle_fetch over them with a stand-in
ReplicaManager that records what it was asked to read (no I/O)."""

import asyncio
import datetime
import random
import uuid
from types import SimpleNamespace

from kio.schema.errors import ErrorCode
from kio.schema.fetch.v11.request import FetchPartition, FetchRequest, FetchTopic, ForgottenTopic
from kio.schema.fetch.v13 import request as v13
from kio.serial import entity_reader
from kio.static.primitive import i32, i32Timedelta, i64

from odradek.broker.fetch_session import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    INVALID_SESSION_ID,
    MAX_EPOCH,
    CachedPartition,
    FetchManager,
    FetchSessionCache,
    FullFetchContext,
    IncrementalFetchContext,
    SessionErrorContext,
    SessionlessFetchContext,
    is_full,
    next_epoch,
)
from odradek.broker.kafka_apis import KafkaApis
from odradek.broker.replica_manager import FetchInfo, FetchResult
from odradek.common import wire
from odradek.common.network.request_context import RequestContext


class Clock:
    def __init__(self, now: int = 1_000_000):
        self.now = now

    def __call__(self) -> int:
        return self.now


def info(topic: str, partition: int, offset: int = 0, max_bytes: int = 1024, epoch: int = -1) -> FetchInfo:
    return FetchInfo(topic, partition, offset, max_bytes, epoch)


def result(hw: int = 10, lso: int = 0, size: int = 0, error: ErrorCode = ErrorCode.none) -> FetchResult:
    return FetchResult(error=error, high_watermark=hw, last_stable_offset=hw, log_start_offset=lso, size=size)


def manager(slots: int = 10, eviction_ms: int = 120_000, clock: Clock | None = None) -> FetchManager:
    return FetchManager(FetchSessionCache(slots, eviction_ms, random.Random(7)), clock or Clock())


def keys(pairs) -> list[tuple[str, int]]:
    return [(i.topic, i.partition) for i, _ in pairs]


def open_session(m: FetchManager, infos, results=None, follower=False) -> int:
    ctx = m.new_context(INVALID_SESSION_ID, INITIAL_EPOCH, infos, [], follower)
    assert isinstance(ctx, FullFetchContext)
    _, session_id, _ = ctx.response(results or [result() for _ in infos])
    return session_id


# --- epochs ---------------------------------------------------------------------------------------


def test_next_epoch_advances_wraps_to_one_and_keeps_final():
    assert next_epoch(0) == 1 and next_epoch(1) == 2
    assert next_epoch(MAX_EPOCH) == 1  # never back to 0, which would mean INITIAL
    assert next_epoch(FINAL_EPOCH) == FINAL_EPOCH
    assert is_full(INITIAL_EPOCH) and is_full(FINAL_EPOCH) and not is_full(1)


# --- full requests --------------------------------------------------------------------------------


def test_final_epoch_without_session_is_sessionless():
    m = manager()
    infos = [info("a", 0), info("a", 1)]
    ctx = m.new_context(INVALID_SESSION_ID, FINAL_EPOCH, infos, [], False)
    assert isinstance(ctx, SessionlessFetchContext) and ctx.infos == infos
    error, session_id, pairs = ctx.response([result(), result()])
    assert (error, session_id, keys(pairs)) == (ErrorCode.none, 0, [("a", 0), ("a", 1)])
    assert m.cache.size == 0


def test_initial_epoch_creates_a_session_that_remembers_the_response():
    clock = Clock()
    m = manager(clock=clock)
    infos = [info("a", 0, offset=5), info("b", 3, offset=7, epoch=4)]
    ctx = m.new_context(INVALID_SESSION_ID, INITIAL_EPOCH, infos, [], True)
    assert ctx.infos == infos
    error, session_id, pairs = ctx.response([result(hw=9, lso=1), result(hw=20, lso=2, size=100)])
    assert error == ErrorCode.none and session_id > 0
    assert keys(pairs) == [("a", 0), ("b", 3)]  # a full response answers every partition
    session = m.cache.get(session_id)
    assert session.epoch == 1 and session.privileged and session.creation_ms == clock.now
    a0, b3 = session.partitions.values()
    assert (a0.fetch_offset, a0.high_watermark, a0.local_log_start_offset) == (5, 9, 1)
    assert (b3.fetch_offset, b3.current_leader_epoch, b3.high_watermark) == (7, 4, 20)
    assert m.cache.total_partitions == 2


def test_full_request_closes_the_session_it_names():
    m = manager()
    old = open_session(m, [info("a", 0)])
    ctx = m.new_context(old, FINAL_EPOCH, [info("a", 0)], [], False)
    assert isinstance(ctx, SessionlessFetchContext)
    assert m.cache.get(old) is None and m.cache.size == 0
    old = open_session(m, [info("a", 0)])
    ctx = m.new_context(old, INITIAL_EPOCH, [info("a", 1)], [], False)
    assert isinstance(ctx, FullFetchContext) and m.cache.get(old) is None
    _, new, _ = ctx.response([result()])
    assert new not in (0, old) and list(m.cache.get(new).partitions) == [("a", 1)]


# --- incremental requests -------------------------------------------------------------------------


def test_incremental_reads_every_session_partition_and_answers_only_changes():
    m = manager()
    sid = open_session(m, [info("a", 0), info("a", 1), info("b", 0), info("b", 1), info("c", 0)],
                       [result(hw=10, lso=0)] * 5)
    ctx = m.new_context(sid, 1, [], [], False)
    assert isinstance(ctx, IncrementalFetchContext)
    assert [(i.topic, i.partition) for i in ctx.infos] == [("a", 0), ("a", 1), ("b", 0), ("b", 1), ("c", 0)]
    error, session_id, pairs = ctx.response([
        result(hw=10, lso=0),                    # nothing new
        result(hw=10, lso=0, size=50),           # records
        result(hw=11, lso=0),                    # high watermark moved
        result(hw=10, lso=3),                    # log start offset moved
        result(hw=-1, lso=-1, error=ErrorCode.not_leader_or_follower),
    ])
    assert (error, session_id) == (ErrorCode.none, sid)
    assert keys(pairs) == [("a", 1), ("b", 0), ("b", 1), ("c", 0)]
    session = m.cache.get(sid)
    assert session.epoch == 2
    # What was sent is remembered: the same state again answers only the error.
    ctx = m.new_context(sid, 2, [], [], False)
    _, _, pairs = ctx.response([result(hw=10, lso=0), result(hw=10, lso=0), result(hw=11, lso=0),
                                result(hw=10, lso=3), result(hw=-1, lso=-1, error=ErrorCode.not_leader_or_follower)])
    assert keys(pairs) == [("c", 0)]


def test_answered_partitions_move_to_the_end_of_the_session():
    m = manager()
    sid = open_session(m, [info("a", 0), info("a", 1), info("a", 2)], [result()] * 3)
    ctx = m.new_context(sid, 1, [], [], False)
    ctx.response([result(size=10), result(), result()])
    assert list(m.cache.get(sid).partitions) == [("a", 1), ("a", 2), ("a", 0)]
    ctx = m.new_context(sid, 2, [], [], False)
    assert [i.partition for i in ctx.infos] == [1, 2, 0]


def test_a_partition_in_error_is_sent_again_once_the_error_is_gone():
    m = manager()
    sid = open_session(m, [info("a", 0)], [result(hw=10)])
    m.new_context(sid, 1, [], [], False).response([result(hw=-1, error=ErrorCode.not_leader_or_follower)])
    cached = m.cache.get(sid).partitions[("a", 0)]
    assert cached.high_watermark == -1
    _, _, pairs = m.new_context(sid, 2, [], [], False).response([result(hw=10)])
    assert keys(pairs) == [("a", 0)]


def test_unlisted_partition_whose_answer_would_say_nothing_may_be_skipped():
    m = manager()
    sid = open_session(m, [info("a", 0, offset=5), info("a", 1, offset=5), info("b", 0, offset=5)],
                       [result(hw=5, lso=0)] * 3)
    ctx = m.new_context(sid, 1, [info("a", 1, offset=5)], [], True)
    a0, a1, _b0 = ctx.infos
    assert ctx.unchanged(a0, 5, 0)
    assert not ctx.unchanged(a0, 6, 0) and not ctx.unchanged(a0, 5, 2)  # news to tell
    assert not ctx.unchanged(a1, 5, 0)  # listed again: answered as asked
    # a skipped partition (None) is not answered; the others are, as usual
    error, _, pairs = ctx.response([None, result(hw=5, lso=0), result(hw=5, lso=0, size=10)])
    assert error == ErrorCode.none and keys(pairs) == [("b", 0)]
    assert [i.key for i in m.new_context(sid, 2, [], [], True).infos] == [("a", 0), ("a", 1), ("b", 0)]
    full = m.new_context(sid, 0, [info("a", 0)], [], True)
    assert full.unchanged is None  # full and sessionless requests read everything


def test_incremental_request_updates_adds_and_forgets_and_keeps_the_rest():
    m = manager()
    sid = open_session(m, [info("a", 0, offset=1), info("a", 1, offset=2), info("b", 0, offset=3)])
    ctx = m.new_context(
        sid, 1, [info("a", 1, offset=20, max_bytes=99, epoch=6), info("c", 5, offset=40)], [("b", 0), ("x", 9)], True
    )
    session = m.cache.get(sid)
    assert list(session.partitions) == [("a", 0), ("a", 1), ("c", 5)]
    a0, a1, c5 = session.partitions.values()
    assert a0.fetch_offset == 1  # not listed: cached state kept
    assert (a1.fetch_offset, a1.max_bytes, a1.current_leader_epoch) == (20, 99, 6)
    assert (c5.fetch_offset, c5.high_watermark) == (40, -1)  # new: always answered first time
    assert [i.fetch_offset for i in ctx.infos] == [1, 20, 40]
    _, _, pairs = ctx.response([result(), result(), result()])
    assert keys(pairs) == [("c", 5)]
    assert m.cache.total_partitions == 3


def test_forgetting_every_partition_closes_the_session():
    m = manager()
    sid = open_session(m, [info("a", 0)])
    ctx = m.new_context(sid, 1, [], [("a", 0)], False)
    assert isinstance(ctx, SessionlessFetchContext) and ctx.infos == []
    assert m.cache.get(sid) is None
    assert ctx.response([]) == (ErrorCode.none, INVALID_SESSION_ID, [])


def test_unknown_session_and_wrong_epoch_are_top_level_errors():
    m = manager()
    ctx = m.new_context(12345, 1, [info("a", 0)], [], False)
    assert isinstance(ctx, SessionErrorContext) and ctx.infos == []
    assert ctx.response([]) == (ErrorCode.fetch_session_id_not_found, INVALID_SESSION_ID, [])
    # An incremental epoch without a session id names no session either.
    assert m.new_context(INVALID_SESSION_ID, 1, [], [], False).error == ErrorCode.fetch_session_id_not_found
    sid = open_session(m, [info("a", 0)])
    for wrong in (2, 7, -5):
        ctx = m.new_context(sid, wrong, [info("a", 1)], [("a", 0)], False)
        assert ctx.response([]) == (ErrorCode.invalid_fetch_session_epoch, INVALID_SESSION_ID, [])
    session = m.cache.get(sid)
    assert session.epoch == 1 and list(session.partitions) == [("a", 0)]  # untouched by the errors
    assert isinstance(m.new_context(sid, 1, [], [], False), IncrementalFetchContext)
    assert m.new_context(sid, 1, [], [], False).error == ErrorCode.invalid_fetch_session_epoch  # replayed


def test_a_request_overtaken_while_waiting_answers_invalid_epoch():
    m = manager()
    sid = open_session(m, [info("a", 0)])
    first = m.new_context(sid, 1, [], [], False)  # waits in the purgatory...
    second = m.new_context(sid, 2, [], [], False)  # ...while the fetcher already sent the next
    assert second.response([result(size=5)])[0] == ErrorCode.none
    assert first.response([result(size=5)]) == (ErrorCode.invalid_fetch_session_epoch, sid, [])


def test_session_epoch_wraps_to_one():
    m = manager()
    sid = open_session(m, [info("a", 0)])
    m.cache.get(sid).epoch = MAX_EPOCH
    m.new_context(sid, MAX_EPOCH, [], [], False)
    assert m.cache.get(sid).epoch == 1
    assert isinstance(m.new_context(sid, 1, [], [], False), IncrementalFetchContext)


def test_incremental_use_touches_the_session():
    clock = Clock()
    m = manager(clock=clock)
    sid = open_session(m, [info("a", 0)])
    clock.now += 500
    m.new_context(sid, 1, [info("a", 1)], [], False)
    session = m.cache.get(sid)
    assert session.last_used_ms == clock.now and session.cached_size == 2 and m.cache.total_partitions == 2


# --- the cache ------------------------------------------------------------------------------------


def make_cache(slots: int, eviction_ms: int = 1000) -> FetchSessionCache:
    return FetchSessionCache(slots, eviction_ms, random.Random(3))


def create(cache: FetchSessionCache, now: int, privileged: bool, size: int) -> int:
    return cache.maybe_create_session(
        now, privileged, size, lambda: {("t", i): CachedPartition(info("t", i)) for i in range(size)}
    )


def test_session_ids_are_positive_and_unique():
    cache = make_cache(200)
    ids = {create(cache, 0, False, 1) for _ in range(200)}
    assert len(ids) == 200 and all(0 < i < 2**31 for i in ids)


def test_full_cache_refuses_a_consumer_when_nothing_is_evictable():
    cache = make_cache(2)
    a, b = create(cache, 0, False, 5), create(cache, 0, False, 5)
    assert create(cache, 100, False, 50) == INVALID_SESSION_ID  # recent sessions are safe from consumers
    assert cache.sessions.keys() == {a, b} and cache.evictions == 0


def test_a_stale_session_is_evicted_first():
    cache = make_cache(2, eviction_ms=1000)
    create(cache, 0, True, 10)
    b = create(cache, 500, False, 1)
    new = create(cache, 1001 + 1, False, 1)  # a unused for > eviction_ms
    assert new != INVALID_SESSION_ID and cache.sessions.keys() == {b, new} and cache.evictions == 1
    assert cache.total_partitions == 2


def test_a_follower_evicts_a_recent_consumer_session_but_not_a_recent_follower_one():
    cache = make_cache(2)
    follower = create(cache, 0, True, 1)
    consumer = create(cache, 0, False, 100)
    new = create(cache, 10, True, 1)  # privileged beats unprivileged whatever the sizes
    assert new != INVALID_SESSION_ID and cache.sessions.keys() == {follower, new}
    assert create(cache, 20, True, 1000) == INVALID_SESSION_ID  # both recent followers
    assert consumer not in cache.sessions


def test_old_sessions_are_evictable_by_all_in_value_order():
    cache = make_cache(2, eviction_ms=1000)
    small = create(cache, 0, False, 2)
    big = create(cache, 0, False, 8)
    cache.touch(cache.get(small), 900)
    cache.touch(cache.get(big), 900)
    # At 1500 nothing is stale (last used 900), but created > 1000 ms ago: evictable once touched.
    assert create(cache, 1500, False, 5) == INVALID_SESSION_ID  # not touched since becoming old
    cache.touch(cache.get(small), 1400)
    cache.touch(cache.get(big), 1400)
    assert create(cache, 1500, False, 1) == INVALID_SESSION_ID  # smaller than the least valuable (2)
    new = create(cache, 1500, False, 5)
    assert new != INVALID_SESSION_ID and cache.sessions.keys() == {big, new}


def test_an_old_follower_session_is_evictable_but_only_by_a_more_valuable_one():
    cache = make_cache(1, eviction_ms=1000)
    old = create(cache, 0, True, 4)
    cache.touch(cache.get(old), 1500)
    assert create(cache, 1600, False, 100) == INVALID_SESSION_ID  # unprivileged < privileged
    assert create(cache, 1600, True, 3) == INVALID_SESSION_ID
    new = create(cache, 1600, True, 4)  # equal value: (privileged, size, 0) vs (privileged, size, id) → no
    assert new == INVALID_SESSION_ID
    new = create(cache, 1600, True, 5)
    assert new != INVALID_SESSION_ID and cache.sessions.keys() == {new}


def test_no_room_means_a_full_response_without_session():
    m = FetchManager(make_cache(1), Clock(0))
    open_session(m, [info("a", 0)], follower=True)
    ctx = m.new_context(INVALID_SESSION_ID, INITIAL_EPOCH, [info("b", 0)], [], False)
    error, session_id, pairs = ctx.response([result()])
    assert (error, session_id, keys(pairs)) == (ErrorCode.none, INVALID_SESSION_ID, [("b", 0)])


# --- KafkaApis.handle_fetch over a stand-in ReplicaManager -----------------------------------------


class RecordingReplicaManager:
    """Answers every read from `state` {(topic, partition): FetchResult} and records the calls."""

    def __init__(self, state):
        self.state = state
        self.calls = []

    async def fetch_messages(self, replica_id, max_wait_ms, min_bytes, max_bytes, infos, unchanged=None,
                             isolation_level=0):
        """Skips what `unchanged` calls unchanged, as ReplicaManager.read_from_local_log does for a
        partition with nothing to read."""
        self.calls.append((replica_id, max_wait_ms, min_bytes, [(i.topic, i.partition, i.fetch_offset) for i in infos]))
        results = []
        for i in infos:
            r = self.state[(i.topic, i.partition)]
            quiet = unchanged is not None and r.size == 0 and unchanged(i, r.high_watermark, r.log_start_offset)
            results.append(None if quiet else r)
        return results


def apis_with(state) -> tuple[KafkaApis, RecordingReplicaManager]:
    config = SimpleNamespace(max_incremental_fetch_session_cache_slots=10, min_incremental_fetch_session_eviction_ms=1000)
    rm = RecordingReplicaManager(state)
    return KafkaApis(config, rm, None), rm


def fetch(apis, session_id, epoch, partitions, forget=(), replica_id=-1):
    """A v11 Fetch through handle_fetch; partitions = {(topic, p): offset}."""
    by_topic: dict[str, list] = {}
    for (t, p), offset in partitions.items():
        by_topic.setdefault(t, []).append(FetchPartition(partition=i32(p), fetch_offset=i64(offset),
                                                         partition_max_bytes=i32(1 << 20)))
    forgotten: dict[str, list] = {}
    for t, p in forget:
        forgotten.setdefault(t, []).append(i32(p))
    request = FetchRequest(
        replica_id=i32(replica_id), max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=500)),
        min_bytes=i32(1), session_id=i32(session_id), session_epoch=i32(epoch),
        topics=tuple(FetchTopic(topic=t, partitions=tuple(ps)) for t, ps in by_topic.items()),
        forgotten_topics_data=tuple(ForgottenTopic(topic=t, partitions=tuple(ps)) for t, ps in forgotten.items()),
    )
    body = asyncio.run(apis.handle_fetch(RequestContext(SimpleNamespace(request_api_version=11)), request))
    data = b"".join(body.chunks)
    response, _ = entity_reader(wire.response_schema(1, 11))(data, 0)
    return response


def answered(response) -> list[tuple[str, int]]:
    return [(t.topic, int(p.partition_index)) for t in response.responses for p in t.partitions]


def test_handle_fetch_session_round_trip_reads_all_session_partitions():
    state = {("a", 0): result(hw=5), ("a", 1): result(hw=5), ("b", 0): result(hw=5)}
    apis, rm = apis_with(state)
    full = fetch(apis, 0, 0, {("a", 0): 5, ("a", 1): 5, ("b", 0): 5}, replica_id=1)
    assert full.error_code == ErrorCode.none and full.session_id > 0
    assert answered(full) == [("a", 0), ("a", 1), ("b", 0)]
    sid = int(full.session_id)
    state[("a", 1)] = result(hw=6)
    inc = fetch(apis, sid, 1, {}, replica_id=1)
    # The follower's read (and its fetch-state update, and the long poll) covers the whole session.
    assert rm.calls[-1] == (1, 500, 1, [("a", 0, 5), ("a", 1, 5), ("b", 0, 5)])
    assert (inc.error_code, inc.session_id, answered(inc)) == (ErrorCode.none, sid, [("a", 1)])
    inc = fetch(apis, sid, 2, {("a", 1): 6}, forget=[("b", 0)], replica_id=1)
    assert rm.calls[-1][3] == [("a", 0, 5), ("a", 1, 6)]
    assert answered(inc) == []
    calls = len(rm.calls)
    bad = fetch(apis, sid, 9, {("a", 0): 5})
    assert (bad.error_code, bad.session_id, answered(bad)) == (ErrorCode.invalid_fetch_session_epoch, 0, [])
    missing = fetch(apis, sid + 1, 3, {})
    assert missing.error_code == ErrorCode.fetch_session_id_not_found and answered(missing) == []
    assert len(rm.calls) == calls  # errors read nothing
    closed = fetch(apis, sid, FINAL_EPOCH, {("a", 0): 5})
    assert (closed.error_code, closed.session_id, answered(closed)) == (ErrorCode.none, 0, [("a", 0)])
    assert fetch(apis, sid, 3, {}).error_code == ErrorCode.fetch_session_id_not_found


def test_handle_fetch_sessionless_request_is_answered_in_request_order():
    state = {("b", 2): result(hw=1), ("a", 0): result(hw=2)}
    apis, _rm = apis_with(state)
    resp = fetch(apis, 0, FINAL_EPOCH, {("b", 2): 0, ("a", 0): 0})
    assert (resp.error_code, resp.session_id, answered(resp)) == (ErrorCode.none, 0, [("b", 2), ("a", 0)])
    assert apis.fetch_manager.cache.size == 0


# --- reading only what may have news (sweep_ms > 0) -----------------------------------------------


def quiet_reader(state):
    """Reads like ReplicaManager.read_from_local_log: None for what `unchanged` calls unchanged."""
    def read(ctx):
        out = []
        for i in ctx.infos:
            r = state[(i.topic, i.partition)]
            quiet = r.size == 0 and ctx.unchanged(i, r.high_watermark, r.log_start_offset)
            out.append(None if quiet else r)
        return out
    return read


def test_incremental_fetch_reads_listed_and_changed_partitions_then_sweeps_all():
    clock = Clock(0)
    m = FetchManager(FetchSessionCache(10, 1000, random.Random(7)), clock, sweep_ms=1000)
    state = {("a", 0): result(hw=5), ("a", 1): result(hw=5), ("b", 0): result(hw=5)}
    read = quiet_reader(state)
    sid = open_session(m, [info("a", 0, 5), info("a", 1, 5), info("b", 0, 5)], [state[k] for k in state], True)
    ctx = m.new_context(sid, 1, [], [], True)
    assert ctx.infos == [] and ctx.session_watch is ctx  # nothing changed: nothing read
    assert ctx.response(read(ctx)) == (ErrorCode.none, sid, [])
    state[("b", 0)] = result(hw=6)
    m.partition_changed(("b", 0))
    m.partition_changed(("zz", 9))  # held by no session
    ctx = m.new_context(sid, 2, [info("a", 1, 5)], [], True)
    assert [i.key for i in ctx.infos] == [("a", 1), ("b", 0)]  # listed and changed, in session order
    assert keys(ctx.response(read(ctx))[2]) == [("b", 0)]
    ctx = m.new_context(sid, 3, [], [], True)
    assert [i.key for i in ctx.infos] == [("a", 1), ("b", 0)]  # read once more, found quiet...
    assert ctx.response(read(ctx))[2] == []
    assert m.new_context(sid, 4, [], [], True).infos == []  # ...and left alone
    clock.now = 1000
    ctx = m.new_context(sid, 5, [], [], True)
    assert ctx.session_watch is None and len(ctx.infos) == 3  # the sweep reads the whole session


def test_session_watch_hears_of_its_partitions_and_refreshes():
    m = FetchManager(FetchSessionCache(10, 1000, random.Random(7)), Clock(0), sweep_ms=1000)
    sid = open_session(m, [info("a", 0, 5), info("a", 1, 5)], [result(hw=5), result(hw=5)], True)
    ctx = m.new_context(sid, 1, [], [], True)
    watch = ctx.session_watch
    heard = []
    watch.watch(heard.append)
    m.partition_changed(("a", 1))
    assert heard == [("a", 1)] and watch.lookup(("a", 1)).fetch_offset == 5 and watch.lookup(("x", 0)) is None
    assert [i.key for i in watch.refresh()] == [("a", 1)] and ctx.infos == watch.refresh()
    watch.watch(None)
    m.partition_changed(("a", 0))
    assert heard == [("a", 1)]  # stopped listening
    ctx = m.new_context(sid, 2, [], [("a", 0)], True)  # forgotten: no longer marked, nor read
    m.partition_changed(("a", 0))
    assert [i.key for i in ctx.infos] == [("a", 1)]
    m.cache.remove(sid)
    m.partition_changed(("a", 1))  # a removed session is no longer told anything
    assert m.cache._holders == {}


def test_a_throttled_answer_leaves_what_it_read_to_be_read_again():
    m = FetchManager(FetchSessionCache(10, 1000, random.Random(7)), Clock(0), sweep_ms=1000)
    state = {("a", 0): result(hw=5)}
    sid = open_session(m, [info("a", 0, 5)], [state[("a", 0)]], True)
    m.partition_changed(("a", 0))
    state[("a", 0)] = result(hw=5, size=100)
    ctx = m.new_context(sid, 1, [], [], True)
    assert [i.key for i in ctx.infos] == [("a", 0)]
    assert ctx.throttled() == (ErrorCode.none, sid)
    ctx = m.new_context(sid, 2, [], [], True)
    assert [i.key for i in ctx.infos] == [("a", 0)]


def test_consumer_sessions_and_refused_followers_read_the_whole_session():
    m = FetchManager(FetchSessionCache(10, 1000, random.Random(7)), Clock(0), sweep_ms=1000)
    sid = open_session(m, [info("a", 0, 5), info("a", 1, 5)], [result(hw=5), result(hw=5)])
    ctx = m.new_context(sid, 1, [], [], False)
    assert ctx.session_watch is None and len(ctx.infos) == 2
    sid = open_session(m, [info("a", 0, 5), info("a", 1, 5)], [result(hw=5), result(hw=5)], True)
    ctx = m.new_context(sid, 1, [], [], True)
    assert ctx.infos == []
    ctx.visit_all()
    assert ctx.session_watch is None and len(ctx.infos) == 2


def test_handle_fetch_by_zero_or_unknown_topic_id_answers_unknown_topic_id():
    """Fetch v13+: kio reads the zero topic id as None; it, like any id no topic has, is answered
    UNKNOWN_TOPIC_ID with the id echoed (Kafka's answer), not a handler failure."""
    class Unknown(dict):
        def __missing__(self, key):
            return result(error=ErrorCode.unknown_topic_or_partition)

    apis, _rm = apis_with(Unknown())
    stranger = uuid.uuid4()
    topics = tuple(v13.FetchTopic(topic_id=t, partitions=(v13.FetchPartition(
        partition=i32(0), fetch_offset=i64(0), partition_max_bytes=i32(1024)),)) for t in (uuid.UUID(int=0), stranger))
    request = v13.FetchRequest(
        replica_id=i32(-1), max_wait=i32Timedelta.parse(datetime.timedelta(0)), min_bytes=i32(1), session_id=i32(0),
        session_epoch=i32(FINAL_EPOCH), topics=topics, forgotten_topics_data=(), rack_id="")
    frame = wire.encode_request(request, 1, "test")
    _, decoded, _ = wire.decode_request(frame[4:])
    assert decoded.topics[0].topic_id is None
    body = asyncio.run(apis.handle_fetch(RequestContext(SimpleNamespace(request_api_version=13)), decoded))
    response, _ = entity_reader(wire.response_schema(1, 13))(b"".join(body.chunks), 0)
    answers = {t.topic_id: [p.error_code for p in t.partitions] for t in response.responses}
    assert answers == {None: [ErrorCode.unknown_topic_id], stranger: [ErrorCode.unknown_topic_id]}

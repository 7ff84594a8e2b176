"""Incremental fetch sessions (KIP-227): the leader remembers what a fetcher fetches.

A fetcher that follows many partitions, most of them idle, would otherwise list every partition in
every Fetch and get every partition back. With a session the broker caches each partition's fetch
state (CachedPartition); an incremental request lists only what changed (new fetch offsets, added
partitions, forgotten ones), and the response carries only partitions with something to say.

Kafka's rules (FetchSession.scala), as data and decisions without I/O:
- (session 0, epoch -1 FINAL): sessionless full fetch. (any session, epoch 0 INITIAL): full fetch
  that closes the named session, if any, and creates a new one when the cache has room.
  (S, -1): close S, then sessionless. (S, E > 0): incremental; unknown S → FETCH_SESSION_ID_NOT_FOUND,
  E ≠ the session's expected epoch → INVALID_FETCH_SESSION_EPOCH; the expected epoch then advances.
- The cache holds `max.incremental.fetch.session.cache.slots` sessions. When full, a new session
  may evict: first a stale one (unused for over `min.incremental.fetch.session.eviction.ms`), else the
  least valuable evictable one (ordered by privileged, size, id) if the newcomer is not less
  valuable. Followers' sessions are privileged: only sessions older than the eviction time are
  evictable by anyone; consumers' sessions are also evictable by followers.

Reading a session's partitions: a follower's session holds every partition it follows on this
leader (thousands), and an incremental fetch used to read them all, every round trip. Here the
cache knows which sessions hold a partition, the replica manager tells it whenever a partition
changes (an append, a high watermark, a leadership, a log start offset: `partition_changed`), and an
incremental fetch reads only its listed partitions and those marked since (`FetchSession.dirty`).
A partition leaves the mark only when a read finds nothing to say. Every `sweep_ms` one fetch
reads the whole session, as before: it catches what no notification covers (a log start moved by
retention) and keeps every follower's caught-up time fresh for the ISR check.
"""

import random
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol, TypeVar, cast

from kio.schema.errors import ErrorCode

INVALID_SESSION_ID = 0
"""Session id of sessionless requests and responses."""
INITIAL_EPOCH = 0
"""A request epoch asking for a new session (a full fetch)."""
FINAL_EPOCH = -1
"""A request epoch closing any session: a sessionless full fetch."""
MAX_EPOCH = 2**31 - 1


class PartitionFetch(Protocol):
    """What a fetch asks of one partition: a request's FetchInfo, or a session's CachedPartition."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def fetch_offset(self) -> int: ...
    @property
    def max_bytes(self) -> int: ...
    @property
    def current_leader_epoch(self) -> int: ...
    @property
    def log_start_offset(self) -> int:
        """The fetcher's own log start offset (followers; -1 from consumers)."""
        ...


class PartitionFetchResult(Protocol):
    """What reading one partition found (the replica manager's FetchResult)."""

    @property
    def error(self) -> ErrorCode: ...
    @property
    def high_watermark(self) -> int: ...
    @property
    def log_start_offset(self) -> int: ...
    @property
    def size(self) -> int: ...


R = TypeVar("R", bound=PartitionFetchResult)
"""The reader's result type: a context hands back the results it was given, typed as they came."""
Answer = tuple[PartitionFetch, R]
"""One partition of a response: what was asked and what was read."""
Unchanged = Callable[[PartitionFetch, int, int], bool]
"""`unchanged(info, high_watermark, log_start_offset)`: True when an empty answer says nothing new."""


def next_epoch(prev: int) -> int:
    """The epoch after `prev`: FINAL stays FINAL, int32 max wraps to 1 (0 means INITIAL)."""
    if prev < 0:
        return FINAL_EPOCH
    if prev == MAX_EPOCH:
        return 1
    return prev + 1


def is_full(epoch: int) -> bool:
    """INITIAL and FINAL requests list every partition they want; others are incremental."""
    return epoch in (INITIAL_EPOCH, FINAL_EPOCH)


def _order(cached: "CachedPartition") -> int:
    return cached.order


class CachedPartition:
    """One partition's fetch state in a session.

    Its request fields carry FetchInfo's names, so the session's partitions are read (and waited
    on) as they are, without a copy per request. The response fields (high watermark, local log
    start offset) are what the fetcher was last told: unchanged ones need not be sent again.
    """

    __slots__ = (
        "current_leader_epoch",
        "fetch_offset",
        "high_watermark",
        "local_log_start_offset",
        "log_start_offset",
        "max_bytes",
        "order",
        "partition",
        "topic",
    )

    def __init__(self, info: PartitionFetch, result: PartitionFetchResult | None = None):
        self.topic = info.topic
        self.partition = info.partition
        self.update_request_params(info)
        self.high_watermark = -1 if result is None else result.high_watermark
        self.local_log_start_offset = -1 if result is None else result.log_start_offset
        self.order = 0
        """Its place in the session's fetch order (a counter: larger is later)."""

    @property
    def key(self) -> tuple[str, int]:
        return self.topic, self.partition

    def update_request_params(self, info: PartitionFetch) -> None:
        self.max_bytes = info.max_bytes
        self.fetch_offset = info.fetch_offset
        self.current_leader_epoch = info.current_leader_epoch
        self.log_start_offset = getattr(info, "log_start_offset", -1)
        """The fetcher's own log start offset (followers), as Kafka's fetcherLogStartOffset."""

    def maybe_update_response_data(self, result: PartitionFetchResult, update: bool) -> bool:
        """Whether an incremental response must carry this partition (records, a changed high
        watermark or log start offset, an error); with `update`, remember what is sent. An error
        resets the cached high watermark so the partition is sent again once the error is gone."""
        must_respond = result.size > 0
        if self.high_watermark != result.high_watermark:
            must_respond = True
            if update:
                self.high_watermark = result.high_watermark
        if self.local_log_start_offset != result.log_start_offset:
            must_respond = True
            if update:
                self.local_log_start_offset = result.log_start_offset
        if result.error != ErrorCode.none:
            must_respond = True
            if update:
                self.high_watermark = -1
        return must_respond

    def __repr__(self) -> str:
        return (f"CachedPartition({self.topic}-{self.partition}, fetch_offset={self.fetch_offset}, "
                f"high_watermark={self.high_watermark}, local_log_start_offset={self.local_log_start_offset})")


class FetchSession:
    """A fetcher's cached partitions, in fetch order, and the epoch its next request must carry."""

    __slots__ = ("cached_size", "creation_ms", "dirty", "epoch", "id", "last_sweep_ms", "last_used_ms", "next_order",
                 "partitions", "privileged", "waiter")

    def __init__(self, session_id: int, privileged: bool, partitions: dict[tuple[str, int], CachedPartition],
                 creation_ms: int, epoch: int):
        self.id = session_id
        self.privileged = privileged
        self.partitions: dict[tuple[str, int], CachedPartition] = partitions
        self.creation_ms = creation_ms
        self.last_used_ms = creation_ms
        self.epoch = epoch
        self.cached_size = -1
        """The size the cache last accounted for (-1: not in the cache), as in Kafka."""
        self.dirty: set[tuple[str, int]] = set()
        """Partitions that may have something to say since they were last read (module doc)."""
        self.last_sweep_ms = creation_ms
        """When a fetch last read every partition (the full fetch that created it, at first)."""
        self.waiter: Callable[[tuple[str, int]], None] | None = None
        """A long poll of this session waiting for news: called with each partition marked dirty."""
        self.next_order = 0
        for cached in partitions.values():
            self.place_last(cached)

    def place_last(self, cached: CachedPartition) -> None:
        """`cached` goes to the end of the fetch order."""
        cached.order = self.next_order
        self.next_order += 1

    @property
    def size(self) -> int:
        return len(self.partitions)

    def evictable_key(self) -> tuple[bool, int, int]:
        """Eviction value: unprivileged before privileged, then smaller before larger."""
        return self.privileged, self.cached_size, self.id

    def update(self, infos: Iterable[PartitionFetch], to_forget: Iterable[tuple[str, int]],
               cache: "FetchSessionCache | None" = None) -> set[CachedPartition]:
        """An incremental request: listed partitions are added or get new fetch parameters, then
        forgotten ones leave (and `cache`, if given, learns which partitions it holds now).
        Returns the listed partitions still in the session."""
        listed = []
        partitions = self.partitions
        for info in infos:
            key = (info.topic, info.partition)
            cached = partitions.get(key)
            if cached is None:
                cached = partitions[key] = CachedPartition(info)
                self.place_last(cached)
                if cache is not None:
                    cache.watch(self, (key,))
            else:
                cached.update_request_params(info)
            listed.append(cached)
        for key in to_forget:
            if partitions.pop(key, None) is not None:
                self.dirty.discard(key)
                if cache is not None:
                    cache.unwatch(self, (key,))
        return {c for c in listed if partitions.get(c.key) is c}

    def __repr__(self) -> str:
        return (f"FetchSession(id={self.id}, privileged={self.privileged}, partitions={self.size}, "
                f"epoch={self.epoch}, last_used_ms={self.last_used_ms})")


class FetchSessionCache:
    """At most `max_entries` sessions by id, with Kafka's eviction rules (see the module doc).

    Eviction looks for its candidate by a scan (at most `max_entries`, only when the cache is full
    and someone asks for a new session), instead of keeping Kafka's sorted trees up to date on
    every fetch.
    """

    def __init__(self, max_entries: int, eviction_ms: int, rng: random.Random | None = None):
        self.max_entries = max_entries
        self.eviction_ms = eviction_ms
        self.sessions: dict[int, FetchSession] = {}
        self.evictable_by_all: dict[int, FetchSession] = {}
        """Sessions any newcomer may evict (created longer than the eviction time ago)."""
        self.evictable_by_privileged: dict[int, FetchSession] = {}
        """Sessions a follower's new session may evict: the unprivileged ones and the old ones."""
        self.total_partitions = 0
        self.evictions = 0
        self._rng = rng or random.Random()
        self._holders: dict[tuple[str, int], set[FetchSession]] = {}
        """Partition → the sessions holding it (see `partition_changed`)."""

    def watch(self, session: FetchSession, keys: Iterable[tuple[str, int]]) -> None:
        for key in keys:
            holders = self._holders.get(key)
            if holders is None:
                holders = self._holders[key] = set()
            holders.add(session)

    def unwatch(self, session: FetchSession, keys: Iterable[tuple[str, int]]) -> None:
        for key in keys:
            holders = self._holders.get(key)
            if holders is not None:
                holders.discard(session)
                if not holders:
                    del self._holders[key]

    def partition_changed(self, key: tuple[str, int]) -> None:
        """Something about partition `key` changed: every session holding it marks it, and a long
        poll waiting on such a session hears of it."""
        holders = self._holders.get(key)
        if not holders:
            return
        for session in list(holders):
            session.dirty.add(key)
            waiter = session.waiter
            if waiter is not None:
                waiter(key)

    def get(self, session_id: int) -> FetchSession | None:
        return self.sessions.get(session_id)

    @property
    def size(self) -> int:
        return len(self.sessions)

    def new_session_id(self) -> int:
        """A random positive id not in use (random, so a restarted broker rarely reuses one)."""
        while True:
            session_id = self._rng.randint(1, MAX_EPOCH - 1)
            if session_id not in self.sessions:
                return session_id

    def maybe_create_session(
        self, now: int, privileged: bool, size: int, create_partitions: Callable[[], dict[tuple[str, int], CachedPartition]]
    ) -> int:
        """A new session's id, or INVALID_SESSION_ID when the cache is full and nothing may go."""
        if len(self.sessions) >= self.max_entries and not self.try_evict(privileged, (privileged, size, 0), now):
            return INVALID_SESSION_ID
        session = FetchSession(self.new_session_id(), privileged, create_partitions(), now,
                               next_epoch(INITIAL_EPOCH))
        self.sessions[session.id] = session
        self.watch(session, session.partitions)
        self.touch(session, now)
        return session.id

    def try_evict(self, privileged: bool, key: tuple[bool, int, int], now: int) -> bool:
        """Evicts the least recently used session if stale, else the least valuable evictable one
        unless it is worth more than `key` (the newcomer's (privileged, size, 0))."""
        if not self.sessions:
            return False
        stale = min(self.sessions.values(), key=lambda s: (s.last_used_ms, s.id))
        if now - stale.last_used_ms > self.eviction_ms:
            self.remove_session(stale)
            self.evictions += 1
            return True
        candidates = self.evictable_by_privileged if privileged else self.evictable_by_all
        if not candidates:
            return False
        victim = min(candidates.values(), key=FetchSession.evictable_key)
        if key < victim.evictable_key():
            return False
        self.remove_session(victim)
        self.evictions += 1
        return True

    def remove(self, session_id: int) -> FetchSession | None:
        session = self.sessions.get(session_id)
        return None if session is None else self.remove_session(session)

    def remove_session(self, session: FetchSession) -> FetchSession | None:
        self.evictable_by_all.pop(session.id, None)
        self.evictable_by_privileged.pop(session.id, None)
        removed = self.sessions.pop(session.id, None)
        if removed is not None:
            self.total_partitions -= session.cached_size
            session.cached_size = -1
            self.unwatch(session, session.partitions)
            session.waiter = None
        return removed

    def touch(self, session: FetchSession, now: int) -> None:
        """A session was used: record when, its size, and whether it became evictable."""
        session.last_used_ms = now
        if session.cached_size != -1:
            self.total_partitions -= session.cached_size
        session.cached_size = session.size
        self.total_partitions += session.cached_size
        old = now - session.creation_ms > self.eviction_ms
        if not session.privileged or old:
            self.evictable_by_privileged[session.id] = session
        else:
            self.evictable_by_privileged.pop(session.id, None)
        if old:
            self.evictable_by_all[session.id] = session
        else:
            self.evictable_by_all.pop(session.id, None)


# --- fetch contexts: what a request reads, and what its response carries -------------------------


class FetchContext:
    """`infos`: the partitions to read, in order. `response(results)` → (error, session id,
    [(info, result)] to send), with results in `infos` order."""

    error = ErrorCode.none
    infos: Sequence[PartitionFetch]
    unchanged: Unchanged | None = None
    """Optional: True for a partition whose empty answer would say nothing new; the reader may
    skip it (see IncrementalFetchContext)."""
    session_watch: "SessionWatch | None" = None
    """Set when `infos` is only part of a session: a long poll must then wait on the whole
    session through it, and read `refresh()` afterwards (see IncrementalFetchContext)."""

    def response(self, results: Sequence[R | None]) -> tuple[ErrorCode, int, list[Answer[R]]]:
        raise NotImplementedError

    def visit_all(self) -> None:
        """Read every partition of the session after all (`infos` is then all of it)."""

    def preview(self, results: Sequence[R | None]) -> list[Answer[R]]:
        """What `response(results)` would send, changing nothing (Kafka's getResponseSize walks
        the same partitions): a consumer's fetch quota is charged for it before it is sent."""
        return _answered(self.infos, results)

    def throttled(self) -> tuple[ErrorCode, int]:
        """(error, session id) of the empty answer to a throttled fetch (getThrottledResponse): no
        partition, and nothing of the session changes (a full fetch creates none)."""
        return ErrorCode.none, INVALID_SESSION_ID


class SessionErrorContext(FetchContext):
    """A session error: nothing is read; the response is the error alone, without a session."""

    def __init__(self, error: ErrorCode):
        self.error = error
        self.infos = []

    def response(self, results: Sequence[R | None]) -> tuple[ErrorCode, int, list[Answer[R]]]:
        return self.error, INVALID_SESSION_ID, []

    def preview(self, results: Sequence[R | None]) -> list[Answer[R]]:
        return []

    def throttled(self) -> tuple[ErrorCode, int]:
        return self.error, INVALID_SESSION_ID


class SessionlessFetchContext(FetchContext):
    """The request's partitions, all of them answered, no session."""

    def __init__(self, infos: Sequence[PartitionFetch]):
        self.infos = infos

    def response(self, results: Sequence[R | None]) -> tuple[ErrorCode, int, list[Answer[R]]]:
        return ErrorCode.none, INVALID_SESSION_ID, _answered(self.infos, results)


class FullFetchContext(FetchContext):
    """Every requested partition answered; afterwards a session of them is created if the cache
    has room, remembering what this response told the fetcher."""

    def __init__(self, infos: Sequence[PartitionFetch], cache: FetchSessionCache, privileged: bool,
                 clock: Callable[[], int]):
        self.infos = infos
        self.cache = cache
        self.privileged = privileged
        self.clock = clock

    def response(self, results: Sequence[R | None]) -> tuple[ErrorCode, int, list[Answer[R]]]:
        pairs = _answered(self.infos, results)

        def create_partitions() -> dict[tuple[str, int], CachedPartition]:
            partitions = {}
            for info, result in pairs:
                partitions[(info.topic, info.partition)] = CachedPartition(info, result)
            return partitions

        session_id = self.cache.maybe_create_session(self.clock(), self.privileged, len(pairs), create_partitions)
        return ErrorCode.none, session_id, pairs


class SessionWatch(Protocol):
    """How a long poll over part of a session waits on all of it (IncrementalFetchContext)."""

    def lookup(self, key: tuple[str, int]) -> PartitionFetch | None:
        """The session's partition `key` (None: no longer in the session)."""
        ...

    def watch(self, on_change: Callable[[tuple[str, int]], None] | None) -> None:
        """Call `on_change(key)` for each partition of the session that changes (None: stop)."""
        ...

    def refresh(self) -> Sequence[PartitionFetch]:
        """The partitions to read now (the context's `infos` become these)."""
        ...


class IncrementalFetchContext(FetchContext):
    """Reads the session's partitions that may have news (those listed in the request and those
    marked dirty since; every `sweep_ms`, all of them) in session order; answers only those with
    something to say, and moves them to the end of the session so the next fetch reads the
    others first (no partition starves under the response byte limit).

    A partition the request did not list keeps the fetch offset of the last request, so if its
    log still shows the high watermark and log start offset the fetcher was last told, and has
    nothing to read, its answer would be empty: `unchanged` lets the reader skip it (a result of
    None), and it leaves the dirty set."""

    def __init__(self, session: FetchSession, request_epoch: int, listed: set[CachedPartition], now: int = 0,
                 sweep_ms: int = 0):
        self.session = session
        self.request_epoch = request_epoch
        self.listed = listed
        self.unchanged = self._unchanged
        self._on_change: Callable[[tuple[str, int]], None] | None = None
        if sweep_ms <= 0 or now - session.last_sweep_ms >= sweep_ms:
            session.last_sweep_ms = now
            self.visit_all()
        else:
            self.cached = self._may_have_news()
            self.infos = list[PartitionFetch](self.cached)
            self.session_watch = self

    def visit_all(self) -> None:
        self.cached = list(self.session.partitions.values())
        self.infos = list[PartitionFetch](self.cached)
        self.session_watch = None

    def _may_have_news(self) -> list[CachedPartition]:
        partitions = self.session.partitions
        visit = set(self.listed)
        for key in self.session.dirty:
            cached = partitions.get(key)
            if cached is not None:
                visit.add(cached)
        return sorted(visit, key=_order)

    # SessionWatch
    def lookup(self, key: tuple[str, int]) -> PartitionFetch | None:
        return self.session.partitions.get(key)

    def watch(self, on_change: Callable[[tuple[str, int]], None] | None) -> None:
        session = self.session
        if on_change is not None:
            session.waiter = self._on_change = on_change
        elif session.waiter is self._on_change:  # a later request of the session may wait now
            session.waiter = self._on_change = None

    def refresh(self) -> Sequence[PartitionFetch]:
        self.cached = self._may_have_news()
        self.infos = list[PartitionFetch](self.cached)
        return self.infos

    def _unchanged(self, info: PartitionFetch, high_watermark: int, log_start_offset: int) -> bool:
        cached = cast(CachedPartition, info)  # this context's infos are its session's partitions
        return (cached.high_watermark == high_watermark and cached.local_log_start_offset == log_start_offset
                and cached not in self.listed)

    def response(self, results: Sequence[R | None]) -> tuple[ErrorCode, int, list[Answer[R]]]:
        session = self.session
        if session.epoch != next_epoch(self.request_epoch):
            # Another request of this session was served meanwhile (a duplicate or a retry).
            return ErrorCode.invalid_fetch_session_epoch, session.id, []
        partitions = session.partitions
        dirty = session.dirty
        out: list[Answer[R]] = []
        for cached, result in zip(self.cached, results):
            key = (cached.topic, cached.partition)
            if result is None:
                dirty.discard(key)  # read and found quiet
                continue
            if key in partitions:
                dirty.add(key)  # it spoke (or was asked): read it again next time, until quiet
            if cached.maybe_update_response_data(result, True):
                out.append((cached, result))
                if partitions.pop(key, None) is not None:
                    partitions[key] = cached
                    session.place_last(cached)
        return ErrorCode.none, session.id, out

    def preview(self, results: Sequence[R | None]) -> list[Answer[R]]:
        return [(cached, result) for cached, result in zip(self.cached, results)
                if result is not None and cached.maybe_update_response_data(result, False)]

    def throttled(self) -> tuple[ErrorCode, int]:
        """The session stays as this request left it (its epoch already moved on); what was read
        and not sent is read again next time."""
        if self.session.epoch != next_epoch(self.request_epoch):
            return ErrorCode.invalid_fetch_session_epoch, self.session.id
        partitions = self.session.partitions
        self.session.dirty.update(c.key for c in self.cached if c.key in partitions)
        return ErrorCode.none, self.session.id


class FetchManager:
    """Turns a Fetch request's session fields into the context that serves it (Kafka's newContext)."""

    def __init__(self, cache: FetchSessionCache, clock: Callable[[], int], sweep_ms: int = 0):
        self.cache = cache
        self.clock = clock
        self.sweep_ms = sweep_ms
        """How often an incremental fetch of a follower reads its whole session (0: always)."""

    def partition_changed(self, key: tuple[str, int]) -> None:
        """The replica manager's notice that partition `key` changed (see the module doc)."""
        self.cache.partition_changed(key)

    def new_context(self, session_id: int, epoch: int, infos: Sequence[PartitionFetch], to_forget: list[tuple[str, int]],
                    is_follower: bool) -> FetchContext:
        """`infos`: the request's partitions (FetchInfo-like); `to_forget`: [(topic, partition)]."""
        if is_full(epoch):
            if session_id != INVALID_SESSION_ID:
                self.cache.remove(session_id)  # a full request closes the session it names
            if epoch == FINAL_EPOCH:
                return SessionlessFetchContext(infos)
            return FullFetchContext(infos, self.cache, is_follower, self.clock)
        session = self.cache.get(session_id)
        if session is None:
            return SessionErrorContext(ErrorCode.fetch_session_id_not_found)
        if session.epoch != epoch:
            return SessionErrorContext(ErrorCode.invalid_fetch_session_epoch)
        listed = session.update(infos, to_forget, self.cache)
        if not session.partitions:
            self.cache.remove_session(session)
            return SessionlessFetchContext(infos)
        now = self.clock()
        self.cache.touch(session, now)
        session.epoch = next_epoch(session.epoch)
        # Consumers' sessions are read whole, as before: their topics are authorized per request.
        return IncrementalFetchContext(session, epoch, listed, now, self.sweep_ms if session.privileged else 0)


def _answered(infos: Sequence[PartitionFetch], results: Sequence[R | None]) -> list[Answer[R]]:
    """Without `unchanged` the reader answers every partition: no result is None."""
    return cast(list[Answer[R]], list(zip(infos, results)))

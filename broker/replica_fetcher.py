"""Replica fetchers: how a follower copies its leader's log (Kafka's ReplicaFetcherManager/Thread).

One `ReplicaFetcher` per source broker (one connection each, a bounded number), shared by every
partition this broker follows on that leader. A partition first truncates: it asks the leader with
OffsetForLeaderEpoch (api 23) where our latest leader epoch ends on the leader, and cuts its log
there, so a tail written under an older leader that the new leader never had is removed, never
merged. Then it fetches (Fetch with replica_id = our id) from its log end offset and appends the
batches byte for byte (Log.append_as_follower); the follower's high watermark follows the leader's.
Fetches go through a fetch session (KIP-227, `fetch_session_handler`), so idle partitions cost no
bytes per round trip, and are encoded and read by hand (`replica_fetch_codec`). Errors back off
(`replica.fetch.backoff.ms`); a fetcher with no partitions left shuts down.

A round costs O(partitions that changed), not O(partitions followed): a fetcher keeps each
partition's fetch data (`_fetching`) and looks again only at those marked since the last round
(`_changed`: added, removed, answered by the leader, truncated, back from a backoff), as the
leader's session does. Truncating partitions and backoffs have their own set and heap. A sweep
every `SWEEP_S` marks every partition, for what no answer announces (our log start offset moved
by retention, a new replica.fetch.max.bytes).

All of this runs on the broker's event loop: between awaits nothing else runs, so a response is
applied only if its partition is still ours, on the same leader epoch, at the same offset.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from kio.schema.errors import ErrorCode
from kio.schema.offset_for_leader_epoch.v3.request import (
    OffsetForLeaderEpochRequest,
    OffsetForLeaderPartition,
    OffsetForLeaderTopic,
)
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i32

from odradek.broker.fetch_session_handler import FetchSessionHandler
from odradek.broker.log.errors import LogError
from odradek.broker.log.leader_epoch import UNDEFINED_EPOCH
from odradek.broker.partition import Partition
from odradek.broker.replica_fetch_codec import (
    FetchedPartition,
    PartitionFetch,
    decode_fetch_response,
    encode_fetch_request,
)
from odradek.broker.replication_quota import ReplicationQuota, is_throttled
from odradek.common.config import BrokerConfig
from odradek.common.log_summary import a_few
from odradek.common.network.client import NetworkClient
from odradek.common.security.channel import PLAINTEXT, ClientSecurity

log = logging.getLogger(__name__)

Key = tuple[str, int]
"""(topic, partition)."""


class ReplicaHost(Protocol):
    """What the fetchers use of the ReplicaManager (which imports this module)."""

    @property
    def follower_quota(self) -> ReplicationQuota | None: ...

    def get_partition(self, key: Key) -> Partition | None: ...

    def complete_delayed_requests(self, key: Key) -> None: ...

@dataclass
class PartitionFetchState:
    """What the fetcher knows about one followed partition."""

    leader_epoch: int
    truncating: bool = True
    """True until OffsetForLeaderEpoch told us where to cut (every new leader epoch)."""
    delayed_until: float = 0.0
    """Loop time before which this partition is not fetched (after a partition-level error)."""
    retries: int = 0
    """Consecutive 'leadership not there yet' answers (see `ReplicaFetcher.retry_after`)."""


LEADERSHIP_PENDING = frozenset({ErrorCode.not_leader_or_follower, ErrorCode.unknown_topic_or_partition,
                                ErrorCode.unknown_leader_epoch})
"""Answers of a leader that has not applied its own LeaderAndIsr yet: the controller sends it to
every replica at once, so a follower often asks first."""
FIRST_RETRY_S = 0.05
SWEEP_S = 1.0
"""How often a fetcher looks at every partition it follows (see the module doc)."""
SESSION_ERRORS = frozenset({ErrorCode.fetch_session_id_not_found, ErrorCode.invalid_fetch_session_epoch})
"""Answers that only mean "start a new fetch session": the next request is a full one."""


def truncation_offset(local_end_for_epoch: Callable[[int], tuple[int, int]], leader_epoch: int, leader_end: int,
                      log_end_offset: int, high_watermark: int) -> int:
    """Where a follower cuts its log after OffsetForLeaderEpoch (Kafka's truncation rule, KIP-279).

    `local_end_for_epoch(epoch)` is our own end offset of an epoch. An undefined answer (the
    leader knows no epochs, or we have none) falls back to our high watermark. When the leader
    answers an older epoch than we asked for, our end of *that* epoch bounds the cut too.
    """
    if leader_epoch == UNDEFINED_EPOCH or leader_end < 0:
        return min(high_watermark, log_end_offset)
    offset = min(leader_end, log_end_offset)
    local_epoch, local_end = local_end_for_epoch(leader_epoch)
    if local_epoch == leader_epoch and local_end >= 0:
        offset = min(offset, local_end)
    return offset


class ReplicaFetcher:
    """Fetches every partition this broker follows on one source broker."""

    def __init__(self, manager: ReplicaFetcherManager, source_id: int, host: str, port: int):
        self.manager = manager
        self.replica_manager: ReplicaHost = manager.replica_manager
        self.config: BrokerConfig = manager.config
        self.broker_id = manager.broker_id
        self.source_id = source_id
        self.host, self.port = host, port
        self.partitions: dict[Key, PartitionFetchState] = {}
        self.client = NetworkClient(host, port, client_id=f"replica-fetcher-{self.broker_id}-{source_id}",
                                    connect_attempts=1, security=getattr(manager, "security", PLAINTEXT))
        self._wakeup = asyncio.Event()
        self._polling = False
        """True while a Fetch is in flight (see `_long_poll`)."""
        self._abandoned = False
        """Set when partitions joined during that Fetch: its connection is dropped (`_long_poll`)."""
        self.session: FetchSessionHandler[PartitionFetch] = FetchSessionHandler()
        self._fetching: dict[Key, PartitionFetch] = {}
        """The fetch set: the partitions ready to fetch, with the data the next Fetch asks; an
        entry is reused while unchanged (the session sends what changed). Only `_refresh` changes
        it, so it holds still while a Fetch is in flight."""
        self._fetch_states: dict[Key, PartitionFetchState] = {}
        """The state each `_fetching` entry was made for: an answer applies to that state only."""
        self._changed: set[Key] = set()
        """Partitions `_refresh` must look at again."""
        self._unsent: set[Key] = set()
        """`_fetching` keys changed since the last request was built (the session's diff)."""
        self._truncating: set[Key] = set()
        """Partitions waiting for OffsetForLeaderEpoch (`PartitionFetchState.truncating`)."""
        self._delays: list[tuple[float, Key]] = []
        """Heap of backoffs (delayed_until, key); entries whose state moved on are skipped."""
        self._retrying: dict[tuple[str, ErrorCode, float], list[Key]] = {}
        """First retries of this round by (request, error, delay): one INFO line each (_log_retries)."""
        self._next_sweep = 0.0
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self.backoff_s = self.config.replica_fetch_backoff_ms / 1000
        self.timeout_s = self.config.replica_socket_timeout_ms / 1000

    def __repr__(self) -> str:
        return f"ReplicaFetcher({self.broker_id}<-{self.source_id} {self.host}:{self.port})"

    # --- partitions -----------------------------------------------------------------------

    def add(self, key: Key, leader_epoch: int) -> None:
        self.partitions[key] = PartitionFetchState(leader_epoch)
        self._truncating.add(key)
        self._changed.add(key)
        self._wakeup.set()
        if self._polling and not self._abandoned:
            self._abandoned = True
            self.client.disconnect()

    def remove(self, key: Key) -> None:
        if self.partitions.pop(key, None) is not None:
            self._truncating.discard(key)
            self._changed.add(key)

    def _delay(self, key: Key, state: PartitionFetchState, until: float) -> None:
        """No fetch of `key` before loop time `until` (it leaves the fetch set meanwhile)."""
        state.delayed_until = until
        heapq.heappush(self._delays, (until, key))
        self._changed.add(key)

    def _end_truncation(self, key: Key, state: PartitionFetchState) -> None:
        state.truncating = False
        state.retries = 0
        self._truncating.discard(key)
        self._changed.add(key)

    def _truncate_again(self, key: Key, state: PartitionFetchState) -> None:
        state.truncating = True
        self._truncating.add(key)
        self._changed.add(key)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name=repr(self))

    async def shutdown(self) -> None:
        # The flag as well as the cancel: Python 3.11's wait_for can swallow a cancellation that
        # races with its inner wait finishing, and the loop would then run on forever.
        self._stopping = True
        self._wakeup.set()
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            try:
                await asyncio.wait_for(task, 10)
            except (TimeoutError, asyncio.CancelledError, Exception):
                pass
        await self.client.close()

    # --- the loop -------------------------------------------------------------------------

    async def _run(self) -> None:
        log.info("%r started", self)
        while not self._stopping:
            try:
                await self.do_work()
            except asyncio.CancelledError:
                raise
            except (ConnectionError, TimeoutError, OSError) as e:
                log.info("%r: %s; backing off", self, e)
                self.client.disconnect()
                await asyncio.sleep(self.backoff_s)
            except Exception:
                log.exception("%r failed; backing off", self)
                self.client.disconnect()
                await asyncio.sleep(self.backoff_s)

    async def do_work(self) -> None:
        now = asyncio.get_running_loop().time()
        self._release_delays(now)
        if self._truncating:
            partitions = self.partitions
            truncating = {k: s for k in self._truncating if (s := partitions[k]).delayed_until <= now}
            if truncating:
                await self.truncate(truncating)
                return
        self._update_fetch_set(now)
        delays = self._delays
        if not self._fetching:
            # Nothing to fetch now (every partition backing off, or none left): wait for an
            # `add` or the first backoff's end, never spin.
            self._wakeup.clear()
            wait = delays[0][0] - now if delays else self.backoff_s
            try:
                await asyncio.wait_for(self._wakeup.wait(), max(0.01, wait))
            except TimeoutError:
                pass
            return
        # A partition backing off (a leader that has not taken over yet) must not wait for a
        # whole long poll over the others: the poll ends when its backoff does.
        await self.fetch(delays[0][0] - now if delays else None)

    def _update_fetch_set(self, now: float) -> None:
        """The fetch set of the next Fetch: swept, refreshed, then throttled replicas held back
        (after the refresh, so one just back from its backoff is held again while exceeded)."""
        self._sweep(now)
        self._refresh(now)
        if self._throttle(now):
            self._refresh(now)

    def _release_delays(self, now: float) -> None:
        """Backoffs that ended mark their partitions (a stale heap entry marks one for nothing)."""
        delays = self._delays
        while delays and delays[0][0] <= now:
            _, key = heapq.heappop(delays)
            if key in self.partitions:
                self._changed.add(key)

    def _sweep(self, now: float) -> None:
        """Every SWEEP_S, every partition is looked at again (see the module doc)."""
        if now < self._next_sweep:
            return
        self._next_sweep = now + SWEEP_S
        self._changed.update(self.partitions)
        self._changed.update(self._fetching)

    def _throttle(self, now: float) -> bool:
        """While the follower quota is exceeded, throttled replicas wait (replication_quota),
        backing off as Kafka's fetcher does; True if one was held back. Walks the refreshed fetch
        set (a partition back from its backoff included), but only while exceeded."""
        quota = self.replica_manager.follower_quota
        if quota is None or not quota.is_exceeded():
            return False
        get_partition, states = self.replica_manager.get_partition, self._fetch_states
        held = False
        for key in list(self._fetching):
            p = get_partition(key)
            if p is not None and self._throttled(p):
                self._delay(key, states[key], now + self.backoff_s)
                held = True
        return held

    def _refresh(self, now: float) -> None:
        """Brings the fetch set up to date for the partitions marked changed."""
        changed, self._changed = self._changed, set()
        if not changed:
            return
        get_partition = self.replica_manager.get_partition
        max_bytes = self.config.replica_fetch_max_bytes
        partitions, fetching, states, unsent = self.partitions, self._fetching, self._fetch_states, self._unsent
        for key in changed:
            s = partitions.get(key)
            p = None if s is None or s.truncating or s.delayed_until > now else get_partition(key)
            if s is None or p is None:
                if fetching.pop(key, None) is not None:
                    del states[key]
                    unsent.add(key)
                continue
            states[key] = s
            plog = p.log
            end, start = plog.log_end_offset, plog.log_start_offset
            data = fetching.get(key)
            if (data is None or data.fetch_offset != end or data.log_start_offset != start
                    or data.current_leader_epoch != s.leader_epoch or data.partition_max_bytes != max_bytes):
                fetching[key] = PartitionFetch(key[1], s.leader_epoch, end, start, max_bytes)
                unsent.add(key)

    # --- truncation -----------------------------------------------------------------------

    def _follower(self, key: Key, state: PartitionFetchState) -> Partition | None:
        """The local Partition if we still follow it on this source at the state's epoch."""
        if self.partitions.get(key) is not state:
            return None
        p = self.replica_manager.get_partition(key)
        if p is None or p.is_leader or p.leader_id != self.source_id or p.leader_epoch != state.leader_epoch:
            return None
        return p

    def _throttled(self, p: Partition) -> bool:
        """A replica of ours out of the ISR that its topic's follower throttle names."""
        return self.broker_id not in p.isr and is_throttled(
            p.log.config.follower_replication_throttled_replicas, p.partition, self.broker_id)

    async def truncate(self, pending: dict[Key, PartitionFetchState]) -> None:
        by_topic: dict[str, list[OffsetForLeaderPartition]] = {}
        for (topic, index), s in pending.items():
            p = self.replica_manager.get_partition((topic, index))
            if p is None:
                continue
            by_topic.setdefault(topic, []).append(OffsetForLeaderPartition(
                partition=i32(index),
                current_leader_epoch=i32(s.leader_epoch),
                leader_epoch=i32(p.log.leader_epoch_cache.latest_epoch),
            ))
        request = OffsetForLeaderEpochRequest(
            replica_id=BrokerId(self.broker_id),
            topics=tuple(OffsetForLeaderTopic(topic=TopicName(t), partitions=tuple(ps)) for t, ps in by_topic.items()),
        )
        response = await self.client.send(request, self.timeout_s)
        now = asyncio.get_running_loop().time()
        for t in response.topics:
            for r in t.partitions:
                key = (t.topic, int(r.partition))
                state = pending.get(key)
                if state is None:
                    continue
                p = self._follower(key, state)
                if p is None:
                    continue
                if r.error_code != ErrorCode.none:
                    self.retry_after(state, key, r.error_code, now, "OffsetForLeaderEpoch")
                    continue
                plog = p.log
                offset = truncation_offset(
                    plog.leader_epoch_cache.end_offset_for, int(r.leader_epoch), int(r.end_offset),
                    plog.log_end_offset, plog.high_watermark,
                )
                if offset < plog.log_end_offset:
                    log.info("%s-%d: truncating from %d to %d (leader %d epoch %d ends at %d)", *key,
                             plog.log_end_offset, offset, self.source_id, r.leader_epoch, r.end_offset)
                    plog.truncate_to(offset)
                self._end_truncation(key, state)
        self._log_retries()

    # --- fetching -------------------------------------------------------------------------

    async def fetch(self, wait_bound_s: float | None = None) -> None:
        """One Fetch of the fetch set; it long-polls at most `wait_bound_s` (if given)."""
        partitions = self._fetching
        unsent, self._unsent = self._unsent, set()
        session = self.session.build(partitions, unsent)
        topics: dict[str, list[PartitionFetch]] = {}
        for (topic, _), data in session.to_send.items():
            topics.setdefault(topic, []).append(data)
        forgotten: dict[str, list[int]] = {}
        for topic, index in session.forgotten:
            forgotten.setdefault(topic, []).append(index)
        config = self.config
        wait_ms = config.replica_fetch_wait_max_ms
        if wait_bound_s is not None:
            wait_ms = max(0, min(wait_ms, int(wait_bound_s * 1000)))

        def encode(correlation_id: int) -> bytes:
            return encode_fetch_request(
                correlation_id, self.client.client_id, replica_id=self.broker_id, max_wait_ms=wait_ms,
                min_bytes=config.replica_fetch_min_bytes, max_bytes=config.replica_fetch_response_max_bytes,
                session_id=session.session_id, session_epoch=session.epoch, topics=topics, forgotten=forgotten,
            )

        try:
            frame = await self._long_poll(encode, self.timeout_s + wait_ms / 1000)
        except BaseException:
            self.session.handle_error()
            raise
        if frame is None:
            self.session.handle_error()
            return
        try:
            self._apply(frame, self._fetch_states, partitions)
        except BaseException:
            self.session.handle_error()  # a response not (wholly) applied: start the session over
            raise
        finally:
            self.client.recycle(frame)  # appends are done: nothing refers to the frame any more

    def _apply(self, frame: Any, ready: dict[Key, PartitionFetchState], sent: dict[Key, PartitionFetch]) -> None:
        """Appends what a Fetch response brought to the partitions still ours, still at the offset
        it was asked for (a partition may change while a fetch is in flight)."""
        response = decode_fetch_response(frame)
        self.session.handle_response(response.error_code, response.session_id)
        if response.error_code in SESSION_ERRORS:
            log.info("%r: fetch session answered %s; starting a new one", self, ErrorCode(response.error_code).name)
            return
        if response.error_code != ErrorCode.none:
            raise ConnectionError(f"fetch failed: {ErrorCode(response.error_code).name}")

        def still_ours(p: Partition, state: PartitionFetchState) -> bool:
            return self._follower(p.key, state) is p and p.log.log_end_offset == sent[p.key].fetch_offset

        changed = self._changed
        now = asyncio.get_running_loop().time()
        for r in response.partitions:
            key = (r.topic, r.partition)
            changed.add(key)  # data or an error: its fetch data is looked at again next round
            state = ready.get(key)
            p = None if state is None else self.replica_manager.get_partition(key)
            if state is not None and p is not None and still_ours(p, state):
                self._process(p, state, r, now)
        self._log_retries()

    async def _long_poll(self, encode: Callable[[int], bytes], timeout_s: float) -> Any:
        """Sends a Fetch; its response frame, or None if partitions were added while it waited.

        A long poll over idle partitions can sit at the leader for replica.fetch.wait.max.ms,
        and a partition that joins meanwhile (a new topic, a new leader) would wait that long
        for its first fetch, holding back its high watermark and every acks=all produce on it.
        Such a poll is abandoned by dropping the connection (a request cannot be withdrawn):
        `add` does it, and the send then fails here. Awaited in this task, with no helper task
        or wait set per round trip: one request per round trip is this loop's whole job.
        """
        self._polling, self._abandoned = True, False
        try:
            return await self.client.send_frame(encode, "Fetch", timeout_s)
        except ConnectionError:
            if not self._abandoned:
                raise
            log.debug("%r: partitions added; restarting the long poll", self)
            return None
        finally:
            self._polling = False

    def _process(self, p: Partition, state: PartitionFetchState, r: FetchedPartition, now: float) -> None:
        key = p.key
        plog = p.log
        code = ErrorCode(r.error_code)
        if code == ErrorCode.none:
            records = r.records
            if records:
                try:
                    plog.append_as_follower(records)
                except LogError as e:
                    log.warning("%s-%d: follower append failed: %s", *key, e)
                    self._delay(key, state, now + self.backoff_s)
                    return
                quota = self.replica_manager.follower_quota
                if quota is not None and self._throttled(p):
                    quota.record(len(records))
            plog.high_watermark = min(int(r.high_watermark), plog.log_end_offset)
            self._follow_log_start(p, int(r.log_start_offset))
            state.retries = 0
            self.replica_manager.complete_delayed_requests(key)
        elif code == ErrorCode.offset_out_of_range:
            self._handle_out_of_range(p, state, r)
        else:
            # FENCED_LEADER_EPOCH: the leader moved on; we wait for the controller's LeaderAndIsr.
            self.retry_after(state, key, code, now, "fetch")

    @staticmethod
    def _follow_log_start(p: Partition, leader_start: int) -> None:
        """The leader's log start moved (DeleteRecords, retention): ours follows, as far as our
        own high watermark (Kafka's follower maybeIncrementLogStartOffset)."""
        plog = p.log
        if leader_start > plog.log_start_offset:
            try:
                plog.maybe_increment_log_start_offset(min(leader_start, plog.high_watermark))
            except LogError as e:
                log.warning("%s-%d: cannot follow the leader's log start offset %d: %s", *p.key, leader_start, e)

    def retry_after(self, state: PartitionFetchState, key: Key, code: ErrorCode, now: float, what: str) -> None:
        """Delay the partition after an error: replica.fetch.backoff.ms, except while the leader
        has not applied its LeaderAndIsr yet, where 50 ms doubling up to that bound lets a new
        partition start replicating (and its acks=all produces complete) without a 1 s stall."""
        if code in LEADERSHIP_PENDING:
            delay = min(self.backoff_s, FIRST_RETRY_S * 2 ** state.retries)
            state.retries += 1
        else:
            delay = self.backoff_s
        log.debug("%s-%d: %s from %d answered %s; retrying in %.0f ms", *key, what, self.source_id,
                  code.name, delay * 1000)
        if state.retries <= 1:
            self._retrying.setdefault((what, code, delay), []).append(key)
        self._delay(key, state, now + delay)

    def _log_retries(self) -> None:
        """One INFO line per kind of first retry in a response, not one per partition: a leadership
        change moves thousands of partitions at once (Kafka 1.1 cut this logging too). Per
        partition at DEBUG (retry_after)."""
        retrying, self._retrying = self._retrying, {}
        for (what, code, delay), keys in retrying.items():
            log.info("%r: %s answered %s for %d partitions (%s); retrying in %.0f ms", self, what, code.name,
                     len(keys), a_few(keys, lambda k: f"{k[0]}-{k[1]}"), delay * 1000)

    def _handle_out_of_range(self, p: Partition, state: PartitionFetchState, r: FetchedPartition) -> None:
        """Our offset is outside the leader's log: below its start (retention) or past its end."""
        plog = p.log
        leader_start = int(r.log_start_offset)
        if leader_start >= 0 and plog.log_end_offset < leader_start:
            log.info("%s-%d: behind the leader's log start %d; restarting there", *p.key, leader_start)
            plog.truncate_fully_and_start_at(leader_start)
        else:
            self._truncate_again(p.key, state)  # past the leader's end: truncate by epoch again


class ReplicaFetcherManager:
    """Which fetcher follows which partition; fetchers come and go with their partitions."""

    def __init__(self, replica_manager: ReplicaHost, config: BrokerConfig, security: ClientSecurity = PLAINTEXT):
        self.replica_manager = replica_manager
        self.config = config
        self.broker_id = int(config.broker_id)
        self.fetchers: dict[int, ReplicaFetcher] = {}
        self.security = security
        """How fetchers connect to their leaders' inter-broker listener."""
        self._closing: set[asyncio.Task[None]] = set()
        self._closed = False
        """Set by shutdown: a LeaderAndIsr still arriving then starts no fetcher (it would outlive
        the broker's shutdown and keep the process from exiting)."""

    def add_fetchers(self, targets: dict[Key, tuple[int, str, int, int]]) -> None:
        """`targets` = {(topic, p): (leader_id, host, port, leader_epoch)}; each restarts with truncation."""
        if self._closed:
            return
        self._remove(targets.keys())
        for key, (leader_id, host, port, epoch) in targets.items():
            fetcher = self.fetchers.get(leader_id)
            if fetcher is not None and (fetcher.host, fetcher.port) != (host, port):
                self._shutdown(self.fetchers.pop(leader_id))
                fetcher = None
            if fetcher is None:
                fetcher = self.fetchers[leader_id] = ReplicaFetcher(self, leader_id, host, port)
                fetcher.start()
            fetcher.add(key, epoch)
        self._prune()

    def remove_fetchers(self, keys: Iterable[Key]) -> None:
        self._remove(keys)
        self._prune()

    def _remove(self, keys: Iterable[Key]) -> None:
        for key in keys:
            for fetcher in self.fetchers.values():
                fetcher.remove(key)

    def _prune(self) -> None:
        for source_id, fetcher in list(self.fetchers.items()):
            if not fetcher.partitions:
                log.info("%r has no partitions left; shutting it down", fetcher)
                self._shutdown(self.fetchers.pop(source_id))

    def _shutdown(self, fetcher: ReplicaFetcher) -> None:
        task = asyncio.get_running_loop().create_task(fetcher.shutdown())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def shutdown(self) -> None:
        self._closed = True
        fetchers, self.fetchers = list(self.fetchers.values()), {}
        await asyncio.gather(*(f.shutdown() for f in fetchers), *list(self._closing), return_exceptions=True)

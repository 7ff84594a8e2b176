"""The controller's ZooKeeper access (kazoo): election, epoch fencing, loading, watches, writes.

Blocking calls, made from the controller's own ZooKeeper worker threads by controller/controller.py. Every
write the active controller makes is a ZooKeeper transaction that first checks the version of
/controller_epoch it set when it won (Kafka's controller-epoch zkVersion check): once another
controller has incremented the epoch, a deposed controller's writes fail as a whole and it learns
it was deposed (ControllerMovedError) instead of overwriting its successor's decisions.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kazoo.exceptions import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    RolledBackError,
    RuntimeInconsistency,
)

from odradek.common import zk_data as z
from odradek.common.zk_calls import BoundedCalls
from odradek.common.zk_connect import close_client, ensure_chroot, new_client, start_client
from odradek.common.zk_data import BrokerInfo, ControllerInfo, LeaderIsrAndControllerEpoch, TopicAssignment
from odradek.common.zk_security import NO_SECURITY, ZkSecurity

from .context import ControllerContext, ReplicaAssignment, TopicPartition
from .state_machine import StateWrite, with_partition

log = logging.getLogger(__name__)

TRANSACTION_OPS = 200
"""Partition-state writes per ZooKeeper transaction (keeps each request far below jute.maxbuffer)."""

Watch = Callable[[object], None] | None
RESIGN_TIMEOUT_S = 2.0
"""Longest a stopping controller waits to delete /controller (ZooKeeper may be unreachable)."""


class ControllerMovedError(Exception):
    """Another controller holds a newer epoch: this one must stop acting."""


@dataclass
class WriteResult:
    applied: list[StateWrite] = field(default_factory=list)
    conflicts: list[TopicPartition] = field(default_factory=list)
    """Partitions whose znode version (or existence) was not what the context said: re-read them."""


def _failure(results: list[object]) -> tuple[int, Exception] | None:
    """(index, cause) of the op that failed a transaction, None if it committed."""
    for i, r in enumerate(results):
        if isinstance(r, Exception) and not isinstance(r, (RolledBackError, RuntimeInconsistency)):
            return i, r
    return None


class ControllerZkClient:
    """Every call waits at most zookeeper.connection.timeout.ms and gives up once `abort` is set
    (the controller stopping), so no worker thread outlives a stop (common/zk_calls)."""

    def __init__(self, connect: str, session_timeout_ms: int = 18000, connection_timeout_ms: int = 18000,
                 abort: threading.Event | None = None, security: ZkSecurity = NO_SECURITY):
        self.connect = connect
        self.security = security
        self.session_timeout = session_timeout_ms / 1000
        self.connection_timeout = connection_timeout_ms / 1000
        self.zk = new_client(connect, self.session_timeout, security)
        self.calls = BoundedCalls(self.zk, self.connection_timeout, abort)

    # --- session -------------------------------------------------------------------------------

    def start(self, stop: threading.Event | None = None) -> None:
        ensure_chroot(self.connect, self.connection_timeout, stop, self.security)
        start_client(self.zk, self.connection_timeout, stop)
        for path in z.PERSISTENT_PATHS:
            self.calls.ensure_path(path)

    def add_listener(self, listener: Callable[[str], None]) -> None:
        self.zk.add_listener(listener)

    @property
    def session_id(self) -> int:
        return self.zk.client_id[0] if self.zk.client_id else -1

    def close(self) -> None:
        """End the session (bounded: see close_client)."""
        close_client(self.zk)

    # --- election ------------------------------------------------------------------------------

    def elect(self, info: ControllerInfo, attempts: int = 10) -> tuple[int, int] | None:
        """Race for /controller; the winner's create and epoch increment are one transaction.

        Returns (epoch, version of /controller_epoch) on winning, None if another controller is
        active. /controller_epoch is created (epoch 0) if absent, so the first epoch is 1.
        """
        for _ in range(attempts):
            try:
                data, stat = self.calls.get(z.CONTROLLER_EPOCH)
            except NoNodeError:
                try:
                    self.calls.create(z.CONTROLLER_EPOCH, z.encode_controller_epoch(0))
                except NodeExistsError:
                    pass
                continue
            epoch = z.decode_controller_epoch(data) + 1
            t = self.zk.transaction()
            t.create(z.CONTROLLER, z.encode_controller(info), ephemeral=True)
            t.set_data(z.CONTROLLER_EPOCH, z.encode_controller_epoch(epoch), version=stat.version)
            failure = _failure(self.calls.commit(t))
            if failure is None:
                return epoch, stat.version + 1
            if isinstance(failure[1], NodeExistsError):
                return self._ours_after_retry()
            if isinstance(failure[1], BadVersionError):
                continue  # someone else moved the epoch: read it again
            raise failure[1]
        raise RuntimeError(f"could not increment {z.CONTROLLER_EPOCH} in {attempts} attempts")

    def _ours_after_retry(self) -> tuple[int, int] | None:
        """/controller exists: ours if our session owns it (a commit retried after a connection
        blip), else someone else's."""
        try:
            _, stat = self.calls.get(z.CONTROLLER)
        except NoNodeError:
            return None
        if stat.ephemeralOwner != self.session_id:
            return None
        data, epoch_stat = self.calls.get(z.CONTROLLER_EPOCH)
        return z.decode_controller_epoch(data), epoch_stat.version

    def controller(self, watch: Watch = None) -> tuple[ControllerInfo, int] | None:
        """(info, owner session) of /controller, watching it (data change or deletion)."""
        try:
            if watch is not None and self.calls.exists(z.CONTROLLER, watch=watch) is None:
                return None
            data, stat = self.calls.get(z.CONTROLLER)
        except NoNodeError:
            return None
        return z.decode_controller(data), stat.ephemeralOwner

    def is_active(self) -> bool:
        found = self.controller()
        return found is not None and found[1] == self.session_id

    def resign(self) -> None:
        """Delete /controller if this session owns it (a clean hand-over to a standby). Runs while
        stopping, so not subject to `abort`; RESIGN_TIMEOUT_S at most per call (TimeoutError)."""
        calls = BoundedCalls(self.zk, RESIGN_TIMEOUT_S)
        try:
            _, stat = calls.get(z.CONTROLLER)
            if stat.ephemeralOwner == self.session_id:
                calls.delete(z.CONTROLLER, version=stat.version)
        except (NoNodeError, BadVersionError):
            pass

    # --- reads ---------------------------------------------------------------------------------

    def _get_many(self, paths: list[str], watch_of: Callable[[str], Watch] | None = None
                  ) -> dict[str, tuple[bytes, Any] | None]:
        """Pipelined reads: one round trip's worth of latency for many znodes; `watch_of(path)`
        gives each znode's data watch (none for a missing znode: ZooKeeper sets none)."""
        pending = [(p, self.zk.get_async(p, watch=watch_of(p) if watch_of else None)) for p in paths]
        out: dict[str, tuple[bytes, Any] | None] = {}
        for p, result in pending:
            try:
                out[p] = self.calls.wait(result)
            except NoNodeError:
                out[p] = None
        return out

    def live_brokers(self, watch: Watch = None) -> dict[int, BrokerInfo]:
        ids = [int(c) for c in self.calls.get_children(z.BROKER_IDS, watch=watch) if c.isdigit()]
        found = self._get_many([z.broker_path(b) for b in ids])
        out = {}
        for b in ids:
            got = found[z.broker_path(b)]
            if got is not None:
                out[b] = z.decode_broker(b, got[0], got[1].czxid)
        return out

    def topic_assignments(
        self, watch: Watch = None, known: dict[str, TopicAssignment] | None = None,
        topic_watch: Callable[[str], Watch] | None = None,
    ) -> dict[str, TopicAssignment]:
        """Every topic's assignment; those in `known` are taken from it rather than read again.
        Each topic read gets the data watch `topic_watch(topic)` (Kafka's partition modifications
        handler: a changed assignment, e.g. CreatePartitions, fires it once)."""
        known = known or {}
        topics = self.calls.get_children(z.BROKER_TOPICS, watch=watch)
        out = {t: known[t] for t in topics if t in known}
        out.update(self.assignments_of([t for t in topics if t not in known], topic_watch))
        return out

    def assignments_of(self, topics: Iterable[str], topic_watch: Callable[[str], Watch] | None = None
                       ) -> dict[str, TopicAssignment]:
        """The assignments of `topics` (the missing and unreadable ones left out), each read with
        the data watch `topic_watch(topic)`."""
        topics = list(topics)
        by_path = {z.topic_path(t): t for t in topics}
        found = self._get_many(list(by_path), (lambda p: topic_watch(by_path[p])) if topic_watch else None)
        out = {}
        for t in topics:
            got = found[z.topic_path(t)]
            if got is None:
                continue
            try:
                out[t] = z.decode_topic_assignment(got[0])
            except (ValueError, KeyError, TypeError, AttributeError) as e:
                log.error("ignoring topic %s: unreadable assignment %r (%s)", t, got[0][:200], e)
        return out

    def partition_states(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, LeaderIsrAndControllerEpoch]:
        tps = list(tps)
        found = self._get_many([z.partition_state_path(*tp) for tp in tps])
        out = {}
        for tp in tps:
            got = found[z.partition_state_path(*tp)]
            if got is not None:
                out[tp] = z.decode_partition_state(got[0], got[1].version)
        return out

    def delete_markers(self, watch: Watch = None) -> set[str]:
        return set(self.calls.get_children(z.DELETE_TOPICS, watch=watch))

    def log_dir_events(self, watch: Watch = None) -> tuple[list[str], set[int]]:
        """The children of /log_dir_event_notification (watched) and the brokers they name."""
        children = [c for c in self.calls.get_children(z.LOG_DIR_EVENT_NOTIFICATION, watch=watch)
                    if c.startswith(z.LOG_DIR_EVENT_PREFIX)]
        found = self._get_many([z.log_dir_event_path(c) for c in children])
        brokers = set()
        for c in children:
            got = found[z.log_dir_event_path(c)]
            broker = None if got is None else z.decode_log_dir_event(got[0])
            if broker is not None:
                brokers.add(broker)
            elif got is not None:
                log.warning("ignoring %s: %r", z.log_dir_event_path(c), got[0][:200])
        return children, brokers

    def delete_log_dir_events(self, children: list[str], epoch_zk_version: int) -> None:
        """Delete handled notifications, each in a transaction fenced by the controller epoch
        (one already gone is not an error)."""
        for c in children:
            t = self.zk.transaction()
            t.check(z.CONTROLLER_EPOCH, epoch_zk_version)
            t.delete(z.log_dir_event_path(c))
            failure = _failure(self.calls.commit(t))
            if failure is None or isinstance(failure[1], NoNodeError):
                continue
            if failure[0] == 0:
                raise ControllerMovedError(f"{z.CONTROLLER_EPOCH} moved on: {failure[1]!r}")
            raise failure[1]

    def load_context(self, controller_id: int, epoch: int, epoch_zk_version: int, *, brokers_watch: Watch = None,
                     topics_watch: Watch = None, deletions_watch: Watch = None,
                     topic_watch: Callable[[str], Watch] | None = None) -> ControllerContext:
        ctx = ControllerContext(controller_id=controller_id, epoch=epoch, epoch_zk_version=epoch_zk_version)
        ctx.live_brokers = self.live_brokers(brokers_watch)
        ctx.assignments = self.topic_assignments(topics_watch, topic_watch=topic_watch)
        ctx.partition_states = self.partition_states(ctx.all_partitions())
        ctx.topics_to_delete = self.delete_markers(deletions_watch)
        return ctx

    # --- fenced writes -------------------------------------------------------------------------

    def write_states(self, writes: list[StateWrite], epoch_zk_version: int) -> WriteResult:
        """Create or compare-and-set partition state znodes, in transactions fenced by the epoch.

        Raises ControllerMovedError when /controller_epoch moved on. A version conflict fails its
        whole transaction: its writes are reported as not applied and the culprit as a conflict.
        """
        result = WriteResult()
        new = sorted({w.tp for w in writes if w.expected_version is None})
        self._create_parents(sorted({z.partitions_path(topic) for topic, _ in new}))
        self._create_parents([f"{z.partitions_path(topic)}/{partition}" for topic, partition in new])
        # Pipelined, as Kafka 1.1's asynchronous writes: every transaction is sent before the first
        # answer is awaited (one after another, 18,000 states were 90 round trips and ZooKeeper
        # fsyncs between a controlled shutdown and its answer). ZooKeeper applies a session's
        # requests in order, and each transaction stands alone, as before.
        chunks = [writes[start : start + TRANSACTION_OPS] for start in range(0, len(writes), TRANSACTION_OPS)]
        pending = {}
        for i, chunk in enumerate(chunks):
            t = self.zk.transaction()
            t.check(z.CONTROLLER_EPOCH, epoch_zk_version)
            for w in chunk:
                path = z.partition_state_path(*w.tp)
                data = z.encode_partition_state(w.state)
                if w.expected_version is None:
                    t.create(path, data)
                else:
                    t.set_data(path, data, version=w.expected_version)
            pending[i] = t.commit_async()
        error: Exception | None = None
        for i, outcome in self.calls.settle(pending).items():
            chunk = chunks[i]
            if isinstance(outcome, Exception):  # no answer (timeout, stopping): raised below
                error = error or outcome
                continue
            failure = _failure(outcome)
            if failure is None:
                result.applied += chunk
                continue
            index, cause = failure
            if index == 0:
                raise ControllerMovedError(f"{z.CONTROLLER_EPOCH} moved on: {cause!r}")
            if not isinstance(cause, (BadVersionError, NodeExistsError, NoNodeError)):
                error = error or cause
                continue
            result.conflicts.append(chunk[index - 1].tp)
        if error is not None:
            raise error  # the session starts over and reloads what was written from ZooKeeper
        return result

    def _create_parents(self, paths: list[str]) -> None:
        """Create empty znodes for new state znodes, every request sent before the first answer
        is awaited (one after another, two round trips a partition, 2,000 new partitions took
        3-5 s here). One that exists is fine, as one whose parent is gone (its topic deleted: the
        state's create then fails as a conflict)."""
        if not paths:
            return
        outcomes = self.calls.settle({path: self.zk.create_async(path) for path in paths})
        for outcome in outcomes.values():
            if isinstance(outcome, Exception) and not isinstance(outcome, (NodeExistsError, NoNodeError)):
                raise outcome

    def write_assignments(self, writes: Mapping[TopicPartition, ReplicaAssignment], epoch_zk_version: int,
                          attempts: int = 10) -> None:
        """Record reassignment progress (TopicPartition → reassignment.ReplicaAssignment) in the
        topic znodes: read-modify-write with the znode version, fenced by the epoch, so that a
        concurrent change of other partitions (CreatePartitions at a broker) is kept."""
        by_topic: dict[str, dict[int, ReplicaAssignment]] = {}
        for tp, ra in writes.items():
            by_topic.setdefault(tp.topic, {})[tp.partition] = ra
        for topic, parts in sorted(by_topic.items()):
            for _ in range(attempts):
                try:
                    data, stat = self.calls.get(z.topic_path(topic))
                except NoNodeError:
                    break  # deleted meanwhile: nothing left to record
                a = z.decode_topic_assignment(data)
                for p, ra in parts.items():
                    a = with_partition(a, p, ra.replicas, ra.adding, ra.removing)
                t = self.zk.transaction()
                t.check(z.CONTROLLER_EPOCH, epoch_zk_version)
                t.set_data(z.topic_path(topic), z.encode_topic_assignment(a), version=stat.version)
                failure = _failure(self.calls.commit(t))
                if failure is None:
                    break
                if failure[0] == 0:
                    raise ControllerMovedError(f"{z.CONTROLLER_EPOCH} moved on: {failure[1]!r}")
                if not isinstance(failure[1], (BadVersionError, NoNodeError)):
                    raise failure[1]
            else:
                raise RuntimeError(f"could not write the assignment of {topic} in {attempts} attempts")

    def reassign_partitions(self, watch: Watch = None) -> bytes | None:
        """The content of /admin/reassign_partitions (None: absent), watching its creation,
        change and deletion."""
        if self.calls.exists(z.REASSIGN_PARTITIONS, watch=watch) is None:
            return None
        data: bytes
        try:
            data, _ = self.calls.get(z.REASSIGN_PARTITIONS)
        except NoNodeError:
            return None
        return data

    def write_reassign_partitions(self, data: bytes | None, epoch_zk_version: int) -> None:
        """Replace /admin/reassign_partitions (None: delete it), fenced by the epoch."""
        t = self.zk.transaction()
        t.check(z.CONTROLLER_EPOCH, epoch_zk_version)
        if data is None:
            t.delete(z.REASSIGN_PARTITIONS)
        else:
            t.set_data(z.REASSIGN_PARTITIONS, data)
        failure = _failure(self.calls.commit(t))
        if failure is None or (data is None and isinstance(failure[1], NoNodeError)):
            return
        if failure[0] == 0:
            raise ControllerMovedError(f"{z.CONTROLLER_EPOCH} moved on: {failure[1]!r}")
        if isinstance(failure[1], NoNodeError):
            return  # deleted by an operator meanwhile: what it listed is no longer wanted
        raise failure[1]

    def delete_recursive(self, path: str, epoch_zk_version: int, attempts: int = 5) -> None:
        """Delete a subtree, leaves first, in one transaction fenced by the epoch (gone = done)."""
        def walk(p: str) -> list[str]:
            return [n for child in self.calls.get_children(p) for n in walk(f"{p}/{child}")] + [p]

        for _ in range(attempts):
            try:
                nodes = walk(path)
            except NoNodeError:
                continue  # changed while walking: look again
            t = self.zk.transaction()
            t.check(z.CONTROLLER_EPOCH, epoch_zk_version)
            for p in nodes:
                t.delete(p)
            failure = _failure(self.calls.commit(t))
            if failure is None:
                return
            index, cause = failure
            if index == 0:
                raise ControllerMovedError(f"{z.CONTROLLER_EPOCH} moved on: {cause!r}")
            if self.calls.exists(path) is None:
                return
            log.info("deleting %s raced with a change (%r); retrying", path, cause)
        if self.calls.exists(path) is not None:
            raise RuntimeError(f"could not delete {path} in {attempts} attempts")

"""AlterPartitionManager: sends the leader's ISR changes to the controller, batched (Kafka's).

Partitions propose changes (Partition.maybe_shrink_isr / maybe_expand_isr); `submit` queues them
and one sender task puts every queued change into a single AlterPartition v1 request, so an ISR
check that shrinks many partitions costs one round trip. Each answer goes back to the submitter's
callback. A change stays queued and is re-sent (the controller treats a repeat as idempotent) until
the controller answers it or `still_wanted` says a LeaderAndIsr has replaced it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from kio.schema.errors import ErrorCode
from kio.static.primitive import i8, i32, i64

from odradek.common import messages as m

log = logging.getLogger(__name__)

PartitionKey = tuple[str, int]
"""(topic, partition)."""


class IsrChange(Protocol):
    """What the manager reads of a proposed change (Partition's PendingIsrChange); the rest is the
    submitter's."""

    @property
    def leader_epoch(self) -> int: ...
    @property
    def new_isr(self) -> tuple[int, ...]: ...
    @property
    def partition_epoch(self) -> int: ...


class ControllerChannel(Protocol):
    """The broker-to-controller channel (BrokerToControllerChannel): a kio request in, its
    response class out."""

    async def send(self, request: Any, timeout_s: float) -> Any: ...


StillWanted = Callable[[PartitionKey, IsrChange], bool]
AnswerCallback = Callable[[PartitionKey, IsrChange, "AlterPartitionAnswer"], None]


@dataclass(frozen=True)
class AlterPartitionAnswer:
    """One partition's answer: the error and, on NONE, the controller's state."""

    error: ErrorCode
    leader_id: int = -1
    leader_epoch: int = -1
    isr: tuple[int, ...] = ()
    partition_epoch: int = -1


def build_request(broker_id: int, broker_epoch: int, items: dict[PartitionKey, IsrChange]) -> m.AlterPartitionRequest:
    """`items` = {(topic, partition): PendingIsrChange} → one request, grouped by topic."""
    by_topic: dict[str, list[m.AlterPartitionRequestPartition]] = {}
    for (topic, index), change in sorted(items.items()):
        by_topic.setdefault(topic, []).append(m.AlterPartitionRequestPartition(
            partition_index=i32(index), leader_epoch=i32(change.leader_epoch),
            new_isr=tuple(i32(b) for b in change.new_isr), leader_recovery_state=i8(0),
            partition_epoch=i32(change.partition_epoch),
        ))
    return m.AlterPartitionRequest(
        broker_id=i32(broker_id), broker_epoch=i64(broker_epoch),
        topics=tuple(m.AlterPartitionRequestTopic(topic_name=t, partitions=tuple(ps)) for t, ps in by_topic.items()),
    )


def answers_of(response: m.AlterPartitionResponse,
               keys: Iterable[PartitionKey]) -> dict[PartitionKey, AlterPartitionAnswer]:
    """{key: AlterPartitionAnswer} for every key sent; a top-level error applies to all, and a
    partition the answer leaves out is UNKNOWN_SERVER_ERROR (re-proposed later)."""
    if response.error_code != ErrorCode.none:
        return {k: AlterPartitionAnswer(response.error_code) for k in keys}
    out: dict[PartitionKey, AlterPartitionAnswer] = {}
    for t in response.topics:
        for p in t.partitions:
            key = (t.topic_name, int(p.partition_index))
            if p.error_code != ErrorCode.none:
                out[key] = AlterPartitionAnswer(p.error_code)
            else:
                out[key] = AlterPartitionAnswer(ErrorCode.none, int(p.leader_id), int(p.leader_epoch),
                                                tuple(int(b) for b in p.isr), int(p.partition_epoch))
    return {k: out.get(k, AlterPartitionAnswer(ErrorCode.unknown_server_error)) for k in keys}


class AlterPartitionManager:
    def __init__(self, channel: ControllerChannel, broker_id: int, broker_epoch: Callable[[], int],
                 still_wanted: StillWanted, request_timeout_ms: int = 30000, retry_backoff_ms: int = 500):
        self.channel = channel
        self.broker_id = broker_id
        self.broker_epoch = broker_epoch
        self.still_wanted = still_wanted
        self.request_timeout_s = request_timeout_ms / 1000
        self.backoff_s = retry_backoff_ms / 1000
        self.queued: dict[PartitionKey, tuple[IsrChange, AnswerCallback]] = {}
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    def submit(self, key: PartitionKey, change: IsrChange, callback: AnswerCallback) -> None:
        """Queue `change` for `key` (replacing an older one); `callback(key, change, answer)`."""
        self.queued[key] = (change, callback)
        self._wakeup.set()

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="alter-partition-manager")

    async def shutdown(self) -> None:
        """Stop sending. The flag as well as the cancel: a cancellation that races with a
        wait_for's inner wait finishing is swallowed (Python 3.11), and the loop would then wait
        for a wake-up that never comes."""
        self._stopping = True
        self._wakeup.set()
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.wait({task}, timeout=5)

    async def _run(self) -> None:
        while not self._stopping:
            await self._wakeup.wait()
            self._wakeup.clear()
            if self._stopping:
                return
            try:
                sent = await self.send_queued()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("AlterPartition failed")
                sent = False
            if not sent and self.queued:
                await asyncio.sleep(self.backoff_s)
                self._wakeup.set()

    async def send_queued(self) -> bool:
        """One round trip for everything queued; False when it must be retried later."""
        for key, (change, _) in list(self.queued.items()):
            if not self.still_wanted(key, change):
                del self.queued[key]
        if not self.queued:
            return True
        batch = dict(self.queued)
        request = build_request(self.broker_id, self.broker_epoch(), {k: c for k, (c, _) in batch.items()})
        try:
            response = await self.channel.send(request, self.request_timeout_s)
        except (ConnectionError, TimeoutError, OSError) as e:
            log.info("AlterPartition for %d partitions not answered (%s); will retry", len(batch), e)
            return False
        for key, answer in answers_of(response, batch.keys()).items():
            change, callback = batch[key]
            if self.queued.get(key, (None,))[0] is change:
                del self.queued[key]
            try:
                callback(key, change, answer)
            except Exception:
                log.exception("AlterPartition callback for %s-%d failed", *key)
        return True

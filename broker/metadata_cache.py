"""The broker's view of the cluster: partition states and live brokers, as the controller sent them.

Only UpdateMetadata changes it (Kafka's rule), so every broker answers Metadata from the same
controller-made picture. Reads are plain dict lookups because Metadata is asked often; waiters
(CreateTopics, DeleteTopics) re-check their predicate after every update.
"""

import asyncio
import logging
from collections.abc import Callable

from kio.schema.errors import ErrorCode

from odradek.common.errors import KafkaError
from odradek.common.messages import (
    LEADER_DURING_DELETE,
    UpdateMetadataBroker,
    UpdateMetadataEndpoint,
    UpdateMetadataPartitionState,
    UpdateMetadataRequest,
)

log = logging.getLogger(__name__)


class StaleControllerEpochError(KafkaError):
    """An UpdateMetadata from a controller older than one already heard from."""

    error_code = ErrorCode.stale_controller_epoch

    def __init__(self, request_epoch: int, current_epoch: int):
        super().__init__(f"controller epoch {request_epoch} is older than {current_epoch}")
        self.request_epoch = request_epoch
        self.current_epoch = current_epoch


class MetadataCache:
    def __init__(self, broker_id: int):
        self.broker_id = broker_id
        self.controller_id: int = -1
        """The controller process that sent the newest update (not a broker: see MetadataApis)."""
        self.controller_epoch: int = -1
        """Highest controller epoch seen in an UpdateMetadata."""
        self.generation: int = 0
        """Bumped on every accepted update, so readers can memoise what they build from the cache."""
        self._partitions: dict[str, dict[int, UpdateMetadataPartitionState]] = {}
        self._brokers: dict[int, UpdateMetadataBroker] = {}
        self._waiters: set[asyncio.Future[None]] = set()

    # --- writes (UpdateMetadata only) ------------------------------------------------------------

    def update(self, request: UpdateMetadataRequest) -> list[tuple[str, int]]:
        """Apply an UpdateMetadata; returns the partitions it deleted (leader LEADER_DURING_DELETE).

        Partition states replace per partition; the live broker set is replaced as a whole.
        Raises StaleControllerEpochError (and changes nothing) for an older controller epoch.
        """
        epoch = int(request.controller_epoch)
        if epoch < self.controller_epoch:
            raise StaleControllerEpochError(epoch, self.controller_epoch)
        new_controller = epoch > self.controller_epoch
        self.controller_epoch = epoch
        self.controller_id = int(request.controller_id)
        self._brokers = {int(b.id): b for b in request.live_brokers}
        deleted: list[tuple[str, int]] = []
        for topic_state in request.topic_states:
            topic = topic_state.topic_name
            for state in topic_state.partition_states:
                p = int(state.partition_index)
                if int(state.leader) == LEADER_DURING_DELETE:
                    parts = self._partitions.get(topic)
                    if parts is not None and parts.pop(p, None) is not None:
                        deleted.append((topic, p))
                    if parts is not None and not parts:
                        del self._partitions[topic]
                else:
                    self._partitions.setdefault(topic, {})[p] = state
        self.generation += 1
        self._wake()
        if new_controller:  # once per controller epoch: when a failover has reached this broker
            log.info("metadata from controller %d epoch %d: %d topics", self.controller_id, epoch, len(self._partitions))
        return deleted

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, set()
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    # --- reads -----------------------------------------------------------------------------------

    @property
    def initialized(self) -> bool:
        """Whether a controller has described the cluster to us yet (one UpdateMetadata accepted).
        Before that the cache is empty, not the cluster: it tells nobody that a topic or a broker
        is missing."""
        return self.generation > 0

    def partition_state(self, topic: str, partition: int) -> UpdateMetadataPartitionState | None:
        parts = self._partitions.get(topic)
        return None if parts is None else parts.get(partition)

    def topic_partitions(self, topic: str) -> dict[int, UpdateMetadataPartitionState] | None:
        """partition → state (a copy), or None when the topic is unknown."""
        parts = self._partitions.get(topic)
        return None if parts is None else dict(parts)

    def partition_count(self, topic: str) -> int:
        """How many partitions the topic has (0 when unknown), without copying its states."""
        parts = self._partitions.get(topic)
        return 0 if parts is None else len(parts)

    def contains(self, topic: str) -> bool:
        return topic in self._partitions

    def topics(self) -> list[str]:
        return list(self._partitions)

    def live_brokers(self) -> dict[int, UpdateMetadataBroker]:
        return dict(self._brokers)

    def is_alive(self, broker_id: int) -> bool:
        return broker_id in self._brokers

    def leader_endpoint(
        self, topic: str, partition: int, listener: str = "PLAINTEXT"
    ) -> tuple[int, str, int] | None:
        """(leader id, host, port) of a partition's live leader on `listener`, else None."""
        state = self.partition_state(topic, partition)
        if state is None or int(state.leader) < 0:
            return None
        broker = self._brokers.get(int(state.leader))
        if broker is None:
            return None
        endpoint = broker_endpoint(broker, listener)
        if endpoint is None:
            return None
        return int(broker.id), endpoint.host, int(endpoint.port)

    def all_partitions_have_leaders(self, topic: str) -> bool:
        parts = self._partitions.get(topic)
        if not parts:
            return False
        return all(int(s.leader) >= 0 for s in parts.values())

    async def wait_for(self, predicate: Callable[[], bool], timeout_s: float) -> bool:
        """True once `predicate()` holds (checked now and after every update), False on timeout."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0.0, timeout_s)
        while not predicate():
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            fut: asyncio.Future[None] = loop.create_future()
            self._waiters.add(fut)
            try:
                await asyncio.wait_for(fut, remaining)
            except TimeoutError:
                return predicate()
            finally:
                self._waiters.discard(fut)
        return True


def broker_endpoint(broker: UpdateMetadataBroker, listener: str = "PLAINTEXT") -> UpdateMetadataEndpoint | None:
    """The broker's endpoint on `listener`, or None (no fallback: a client must reach that listener)."""
    for endpoint in broker.endpoints:
        if endpoint.listener == listener:
            return endpoint
    return None

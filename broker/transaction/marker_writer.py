"""WriteTxnMarkers at a partition leader (Kafka's handleWriteTxnMarkersRequest): each marker is
appended as a COMMIT/ABORT control batch to each of its partitions, acks=all, by the COORDINATOR
origin (producer epoch and coordinator epoch checked, sequences not). Listeners hear of every
marker written (the group coordinator completes transactional offset commits on them)."""

import asyncio
import logging
from collections.abc import Callable
from typing import NamedTuple

from kio.schema.errors import ErrorCode

from odradek.broker.log.control_batch import build_marker
from odradek.broker.log.producer_state import AppendOrigin
from odradek.broker.replica_manager import ReplicaManager
from odradek.common.clock import now_ms

log = logging.getLogger(__name__)


class TxnMarker(NamedTuple):
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    commit: bool
    partitions: list[tuple[str, int]]


class MarkerWriter:
    def __init__(self, replica_manager: ReplicaManager, timeout_ms: int, *, clock: Callable[[], int] = now_ms):
        self.replica_manager = replica_manager
        self.clock = clock
        """Wall-clock milliseconds for the markers' timestamps (injectable for tests)."""
        self.timeout_ms = timeout_ms
        self.listeners: list[Callable[[TxnMarker, list[tuple[str, int]]], None]] = []
        """Called with (marker, partitions written) once a marker is replicated."""

    async def write(self, marker: TxnMarker) -> dict[tuple[str, int], ErrorCode]:
        """Appends `marker` to its partitions; {partition: error code}."""
        batch = build_marker(marker.producer_id, marker.producer_epoch, marker.coordinator_epoch, marker.commit,
                             self.clock())
        entries = [(topic, index, bytearray(batch)) for topic, index in dict.fromkeys(marker.partitions)]
        results = await self.replica_manager.append_records(self.timeout_ms, -1, entries, AppendOrigin.COORDINATOR)
        codes = {key: r.error for key, r in results.items()}
        written = [key for key, code in codes.items() if code == ErrorCode.none]
        if written:
            for listener in self.listeners:
                try:
                    listener(marker, written)
                except Exception:
                    log.exception("a marker listener failed")
        return codes

    async def write_all(self, markers: list[TxnMarker]) -> list[dict[tuple[str, int], ErrorCode]]:
        return list(await asyncio.gather(*(self.write(m) for m in markers)))

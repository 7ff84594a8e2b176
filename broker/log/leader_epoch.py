"""LeaderEpochFileCache: which leader epoch started at which offset, for truncation by epoch.

A follower asks its new leader for the end offset of its own latest epoch (OffsetForLeaderEpoch)
and truncates there; this cache answers that question on the leader and is persisted in the
partition's `leader-epoch-checkpoint` on every change.
"""

import bisect
import logging
from pathlib import Path
from typing import Callable, NamedTuple

from .checkpoint import read_checkpoint, write_checkpoint

log = logging.getLogger(__name__)

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1
FILE_NAME = "leader-epoch-checkpoint"


class EpochEntry(NamedTuple):
    epoch: int
    start_offset: int


class LeaderEpochFileCache:
    def __init__(self, path: Path, log_end_offset: Callable[[], int]):
        self.path = path
        self._log_end_offset = log_end_offset
        self.entries: list[EpochEntry] = []
        try:
            rows = read_checkpoint(path) or []
            self.entries = [EpochEntry(int(e), int(o)) for e, o in rows]
        except (ValueError, OSError) as exc:
            # A damaged cache only costs precision: followers then truncate to the high watermark.
            log.warning("ignoring unreadable %s: %s", path, exc)

    @property
    def latest_epoch(self) -> int:
        return self.entries[-1].epoch if self.entries else UNDEFINED_EPOCH

    @property
    def earliest_entry(self) -> EpochEntry | None:
        return self.entries[0] if self.entries else None

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that `epoch` starts at `start_offset`; only a newer epoch adds an entry.

        Entries starting at or after `start_offset` conflict with the new one and are dropped.
        """
        if epoch < 0 or epoch <= self.latest_epoch:
            return
        while self.entries and self.entries[-1].start_offset >= start_offset:
            self.entries.pop()
        self.entries.append(EpochEntry(epoch, start_offset))
        self._flush()

    def end_offset_for(self, requested_epoch: int) -> tuple[int, int]:
        """(epoch, end offset) as OffsetForLeaderEpoch answers it (Kafka's endOffsetFor)."""
        if requested_epoch == UNDEFINED_EPOCH or not self.entries:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if requested_epoch == self.latest_epoch:
            return requested_epoch, self._log_end_offset()
        epochs = [e.epoch for e in self.entries]
        i = bisect.bisect_right(epochs, requested_epoch)  # first entry with a larger epoch
        if i == len(self.entries):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if i == 0:
            return requested_epoch, self.entries[0].start_offset
        return self.entries[i - 1].epoch, self.entries[i].start_offset

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop entries starting at or after `end_offset` (the log was truncated there)."""
        if self.entries and self.entries[-1].start_offset >= end_offset:
            self.entries = [e for e in self.entries if e.start_offset < end_offset]
            self._flush()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at `start_offset`: older entries go, the one covering it is moved up."""
        keep = [e for e in self.entries if e.start_offset >= start_offset]
        older = [e for e in self.entries if e.start_offset < start_offset]
        if not older:
            return
        if not keep or keep[0].start_offset > start_offset:
            keep.insert(0, EpochEntry(older[-1].epoch, start_offset))
        self.entries = keep
        self._flush()

    def clear(self) -> None:
        if self.entries:
            self.entries = []
            self._flush()

    def _flush(self) -> None:
        write_checkpoint(self.path, [f"{e.epoch} {e.start_offset}" for e in self.entries])

"""LogLoader: a log's segments read back from its directory at startup (Kafka's LogLoader).

It finishes interrupted segment swaps, removes what an interrupted delete or checkpoint write
left, opens the segments and, after an unclean stop, recovers those at and after the recovery
point (each batch checked, a torn or corrupt tail truncated). Producer state is rebuilt by the
log afterwards (Kafka's UnifiedLog.rebuildProducerState), from `replay_at_most_from` at the latest.
"""

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .leader_epoch import LeaderEpochFileCache
from .log_segments import LogSegments
from .producer_state import SNAPSHOT_SUFFIX
from .segment import DELETED_SUFFIX, INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, LogSegment
from .segment_swap import CLEANED_SUFFIX, SWAP_END_SUFFIX, SWAP_SUFFIX, complete_swaps
from .transaction_index import TXN_INDEX_SUFFIX

log = logging.getLogger(__name__)

_SWAP_SUFFIXES = (SWAP_SUFFIX, SWAP_END_SUFFIX, CLEANED_SUFFIX)
"""What an interrupted cleaning leaves (`complete_swaps` finishes or undoes it)."""


@dataclass(frozen=True, slots=True)
class LoadedLogOffsets:
    """What loading found (Kafka's LoadedLogOffsets, with the segments)."""

    segments: LogSegments
    log_start_offset: int
    recovery_point: int
    log_end_offset: int
    replay_at_most_from: int | None
    """After an unclean stop, producer state (and the transaction indexes) is replayed from no
    later than the first recovered segment (Kafka's recoverSegment)."""
    snapshots: list[tuple[int, Path]]
    """The producer snapshot files found, (offset, path), oldest first."""


class LogLoader:
    def __init__(
        self,
        directory: Path,
        new_segment: Callable[[int], LogSegment],
        leader_epoch_cache: LeaderEpochFileCache,
        *,
        recovery_point: int,
        log_start_offset: int,
        had_clean_shutdown: bool,
    ):
        self.dir = directory
        self._new_segment = new_segment
        self._leader_epoch_cache = leader_epoch_cache
        self._recovery_point = recovery_point
        self._log_start_offset = log_start_offset
        self._had_clean_shutdown = had_clean_shutdown

    def load(self) -> LoadedLogOffsets:
        # One listing per log: a start-up loads thousands, and each listing costs as much as the rest.
        names = os.listdir(self.dir)
        if any(name.endswith(_SWAP_SUFFIXES) for name in names):
            complete_swaps(self.dir)
            names = os.listdir(self.dir)
        bases, snapshots = self._segment_files(names)
        segments = LogSegments([self._new_segment(b) for b in sorted(bases)] or [self._new_segment(0)])
        replay_at_most_from = None
        if self._had_clean_shutdown:
            for seg in segments.values()[:-1]:
                seg.load_lazily()
            segments.active_segment.load(is_active=True)
        else:
            replay_at_most_from = self._recover(segments)
        end = segments.active_segment.next_offset
        # The checkpointed start (DeleteRecords) may lie inside the first segment; past the end
        # (records lost in a crash) every record is gone.
        start = min(max(self._log_start_offset, segments.first_segment.base_offset), end)
        # In memory only, as every change (leader_epoch): the LogManager writes the file soon, a
        # load truncates again whatever it still holds (thousands of fsyncs at start-up otherwise).
        self._leader_epoch_cache.truncate_from_end(end)
        self._leader_epoch_cache.truncate_from_start(start)
        return LoadedLogOffsets(segments, start, min(self._recovery_point, end), end, replay_at_most_from,
                                snapshots)

    def _segment_files(self, names: list[str]) -> tuple[set[int], list[tuple[int, Path]]]:
        """The base offsets of the `.log` files and the producer snapshots (offset, path),
        oldest first; leftovers of unfinished deletes and checkpoint writes and indexes without
        their `.log` are removed."""
        bases: set[int] = set()
        snapshots: list[tuple[int, Path]] = []
        indexes: list[tuple[int, str]] = []
        for name in names:
            if name.endswith((DELETED_SUFFIX, ".tmp")):
                (self.dir / name).unlink(missing_ok=True)  # a delete or checkpoint write the last run did not finish
            elif name.endswith(SNAPSHOT_SUFFIX):
                if name[: -len(SNAPSHOT_SUFFIX)].isdigit():
                    snapshots.append((int(name[: -len(SNAPSHOT_SUFFIX)]), self.dir / name))
            elif name.endswith(LOG_SUFFIX) and name[: -len(LOG_SUFFIX)].isdigit():
                bases.add(int(name[: -len(LOG_SUFFIX)]))
            else:
                for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
                    if name.endswith(suffix) and name[: -len(suffix)].isdigit():
                        indexes.append((int(name[: -len(suffix)]), name))
        for base, name in indexes:
            if base not in bases:
                (self.dir / name).unlink(missing_ok=True)  # orphaned index
        return bases, sorted(snapshots)

    def _recover(self, segments: LogSegments) -> int:
        """After an unclean stop: check every batch of the segments at and after the recovery
        point (Kafka's recoverLog). Returns the base offset of the first segment checked."""
        first_unflushed = segments.floor_index(self._recovery_point)
        values = segments.values()
        for seg in values[:first_unflushed]:
            seg.load_lazily()
        # The checkpoint may lag the log here, or hold entries of records truncated and replaced
        # since (it is written before the recovery point moves, not with each change): the
        # batches checked below are the truth for these offsets, and rebuild their entries.
        self._leader_epoch_cache.truncate_from_end(values[first_unflushed].base_offset)
        for i in range(first_unflushed, len(values)):
            seg = values[i]
            truncated = seg.recover(self._leader_epoch_cache)
            if truncated:
                log.warning("%s: truncated %d torn or corrupt bytes from %s", self.dir.name, truncated, seg.log_path.name)
                for later in segments.remove_after(i):
                    log.warning("%s: deleting %s, which follows a corrupt segment", self.dir.name, later.log_path.name)
                    later.delete_files()
                break
        return values[first_unflushed].base_offset

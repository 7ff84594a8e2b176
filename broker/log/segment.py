"""LogSegment: one `.log` file of whole batches plus its sparse `.index` and `.timeindex`, and
the `.txnindex` of the transactions aborted by markers in it.

The segment owns one file descriptor, used with pwrite/pread (never the file position) and handed
out as the file of FileRegions for sendfile. It knows nothing of leader epochs or retention; the
Log decides when to roll, truncate and delete.
"""

import logging
import os
from bisect import bisect_right
from collections.abc import Iterator
from functools import cached_property
from pathlib import Path

from crc32c import crc32c

from odradek.common.clock import Clock, now_ms

from .errors import CorruptRecordError, InvalidRecordError, KafkaStorageError
from .leader_epoch import LeaderEpochFileCache
from .offset_index import IndexCorruptError, OffsetIndex, TimeIndex
from .record_batch import (
    _U32,
    ATTRIBUTES_POS,
    CRC_POS,
    HEADER_SIZE,
    NO_TIMESTAMP,
    BatchInfo,
    Buffer,
    read_header,
)
from .transaction_index import TXN_INDEX_SUFFIX, TransactionIndex

log = logging.getLogger(__name__)

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
DELETED_SUFFIX = ".deleted"
_SCAN_CHUNK = 16 * 1024
_RECOVERY_CHUNK = 1024 * 1024
_LAZY = ("index", "time_index", "max_timestamp", "offset_of_max_timestamp")
"""What `load_lazily` leaves for first use."""
_RECENT_BATCHES = 32
"""Batch starts an active segment remembers (`LogSegment._recent`)."""


class TruncatedBatchError(CorruptRecordError):
    """The file ends inside a batch (a torn write)."""


def file_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


class LogSegment:
    def __init__(self, directory: Path, base_offset: int, *, index_interval_bytes: int, max_index_entries: int,
                 file_suffix: str = "", clock: Clock = now_ms):
        """`file_suffix` names a segment being written aside (the cleaner's `.cleaned`)."""
        self.base_offset = base_offset
        self.log_path = directory / (file_name(base_offset, LOG_SUFFIX) + file_suffix)
        self._index_paths = (directory / (file_name(base_offset, INDEX_SUFFIX) + file_suffix),
                             directory / (file_name(base_offset, TIME_INDEX_SUFFIX) + file_suffix))
        self._max_index_entries = max_index_entries
        self.index, self.time_index = self._new_indexes()
        self.txn_index = TransactionIndex(directory / (file_name(base_offset, TXN_INDEX_SUFFIX) + file_suffix))
        self.index_interval_bytes = index_interval_bytes
        fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT, 0o644)
        self.file = os.fdopen(fd, "r+b", buffering=0)
        self._fd = fd
        self.size = os.fstat(fd).st_size
        self.created_ms = clock()
        self.max_timestamp = NO_TIMESTAMP
        self.offset_of_max_timestamp = base_offset
        self._next_offset: int | None = base_offset if self.size == 0 else None
        self._rolling_timestamp: int | None = None
        self._bytes_since_index = 0
        self._recent: list[tuple[int, int]] = []
        """(base offset, position) of the latest batches appended, ascending: a follower or
        consumer at the log's end asks for an offset appended moments ago, which the sparse index
        (an entry per index.interval.bytes) would leave a scan of dozens of headers away."""
        self.closed = False

    def _new_indexes(self) -> tuple[OffsetIndex, TimeIndex]:
        index_path, time_index_path = self._index_paths
        return (OffsetIndex(index_path, self.base_offset, self._max_index_entries),
                TimeIndex(time_index_path, self.base_offset, self._max_index_entries))

    # --- appending ------------------------------------------------------------------------

    def append(self, data: Buffer, batches: list[BatchInfo], base_offsets: list[int], append_time: int | None,
               position_base: int = 0) -> None:
        """Write `data` (whole batches, offsets already assigned) at the end, then index it.
        The batches' positions count from `position_base` in the buffer `data` was cut from."""
        start = self.size - position_base
        self._write_at(self.size, data)
        track = self._track
        recent, tail = self._recent, -_RECENT_BATCHES
        recent.extend(zip(base_offsets[tail:], [start + info.position for info in batches[tail:]]))
        if len(recent) > 2 * _RECENT_BATCHES:
            del recent[:tail]
        if append_time is None:
            for info, base in zip(batches, base_offsets):
                track(base, start + info.position, info.size, info.max_timestamp)
        else:
            for info, base in zip(batches, base_offsets):
                track(base, start + info.position, info.size, append_time)
        if self._rolling_timestamp is None and self.size == 0:
            self._rolling_timestamp = append_time if append_time is not None else batches[0].max_timestamp
        self.size += len(data)
        self._next_offset = base_offsets[-1] + batches[-1].last_offset_delta + 1

    def _track(self, base_offset: int, position: int, size: int, max_timestamp: int) -> None:
        if max_timestamp > self.max_timestamp:
            self.max_timestamp = max_timestamp
            self.offset_of_max_timestamp = base_offset
        if self._bytes_since_index > self.index_interval_bytes and not self.index.is_full:
            self.index.append(base_offset, position)
            if not self.time_index.is_full:
                self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            self._bytes_since_index = 0
        self._bytes_since_index += size

    def _write_at(self, position: int, data: Buffer) -> None:
        view = memoryview(data)
        written = 0
        try:
            while written < len(view):
                written += os.pwrite(self._fd, view[written:], position + written)
        except OSError as exc:
            try:
                os.ftruncate(self._fd, position)  # all or nothing
            except OSError:
                pass
            raise KafkaStorageError(f"write to {self.log_path} failed: {exc}") from exc

    # --- reading --------------------------------------------------------------------------

    def scan(self, start: int = 0, end: int | None = None, *, verify_crc: bool = False,
             chunk: int = _SCAN_CHUNK) -> Iterator[BatchInfo]:
        """Batch headers from `start` (a batch boundary) to `end`, with absolute positions.

        Raises TruncatedBatchError if the bytes end inside a batch and Corrupt/InvalidRecordError
        on a bad header (or CRC, with `verify_crc`).
        """
        end = self.size if end is None else end
        fd = self._fd
        pos, buf, buf_pos = start, b"", start
        while pos < end:
            off = pos - buf_pos
            if off + HEADER_SIZE > len(buf):
                buf, buf_pos, off = os.pread(fd, min(chunk, end - pos), pos), pos, 0
                if len(buf) < HEADER_SIZE:
                    raise TruncatedBatchError(f"{self.log_path}: partial batch header at position {pos}")
            info = read_header(buf, off, pos)
            if pos + info.size > end:
                raise TruncatedBatchError(f"{self.log_path}: batch at position {pos} runs past the end")
            if verify_crc:
                if off + info.size > len(buf):
                    buf, buf_pos, off = os.pread(fd, min(max(chunk, info.size), end - pos), pos), pos, 0
                    if len(buf) < info.size:
                        raise TruncatedBatchError(f"{self.log_path}: batch at position {pos} is cut short")
                view = memoryview(buf)
                if crc32c(view[off + ATTRIBUTES_POS : off + info.size]) != _U32.unpack_from(buf, off + CRC_POS)[0]:
                    raise CorruptRecordError(f"{self.log_path}: batch at position {pos} fails its CRC32C")
            yield info
            pos += info.size

    def translate_offset(self, offset: int, start_position: int = 0) -> BatchInfo | None:
        """The first batch whose last offset is >= `offset` (None if the segment holds none)."""
        _, position = self.index.lookup(offset)
        recent = self._recent
        if recent and recent[0][0] <= offset:
            position = max(position, recent[bisect_right(recent, (offset, self.size)) - 1][1])
        for info in self.scan(max(position, start_position)):
            if info.base_offset + info.last_offset_delta >= offset:
                return info
        return None

    def read_range(self, first: BatchInfo, max_bytes: int, max_position: int, min_one_message: bool) -> int:
        """Bytes to serve from `first`: whole batches, at most `max_bytes` (unless the first one
        alone is larger and `min_one_message`), never past `max_position`."""
        start = first.position
        if start >= max_position:
            return 0
        limit = min(max_position, start + max_bytes)
        if limit == max_position:
            return max_position - start
        if start + first.size > limit:
            return first.size if min_one_message else 0
        end = scan_from = max(start, self.index.lookup_position(limit))
        for info in self.scan(scan_from, max_position):
            if info.position + info.size > limit:
                break
            end = info.position + info.size
        return end - start

    def find_timestamp(self, timestamp: int) -> BatchInfo | None:
        """The first batch whose max timestamp is >= `timestamp` (time index, then a short scan)."""
        entry = self.time_index.lookup(timestamp)
        position = self.index.lookup(entry[1])[1] if entry else 0
        for info in self.scan(position):
            if info.max_timestamp >= timestamp:
                return info
        return None

    def read_bytes(self, position: int, size: int) -> bytes:
        return os.pread(self._fd, size, position)

    @property
    def next_offset(self) -> int:
        """The offset after the last batch in this segment (base offset if empty)."""
        if self._next_offset is None:
            _, position = self.index.lookup(2**63 - 1)
            next_offset = self.base_offset
            for info in self.scan(position):
                next_offset = info.next_offset
            self._next_offset = next_offset
        return self._next_offset

    def time_waited_for_roll(self, now_ms: int, message_timestamp: int) -> int:
        """Kafka's rule: the age of the segment by message timestamps, else by creation time."""
        if self._rolling_timestamp is None and self.size:
            buf = self.read_bytes(0, HEADER_SIZE)
            self._rolling_timestamp = read_header(buf, 0, 0).max_timestamp
        if self._rolling_timestamp is not None and self._rolling_timestamp >= 0:
            return message_timestamp - self._rolling_timestamp
        return now_ms - self.created_ms

    @property
    def largest_timestamp(self) -> int:
        """Newest record timestamp, or the file's mtime when batches carry none (retention)."""
        if self.max_timestamp > 0:
            return self.max_timestamp
        return int(os.fstat(self._fd).st_mtime * 1000)

    # --- loading and recovery -------------------------------------------------------------

    def load_lazily(self) -> None:
        """An inactive segment after a clean stop (or below the recovery point): its indexes and
        max timestamp are read on first use, not at start-up (Kafka's lazy indexes, KIP-263). A
        log of many segments then costs one open and one stat per old segment to load."""
        if self.size == 0:
            self.load(is_active=False)
            return
        for name in _LAZY:
            del self.__dict__[name]  # from now on the cached_property below reads them

    @cached_property
    def index(self) -> OffsetIndex:
        self._load_indexes()
        value: OffsetIndex = self.__dict__["index"]
        return value

    @cached_property
    def time_index(self) -> TimeIndex:
        self._load_indexes()
        value: TimeIndex = self.__dict__["time_index"]
        return value

    @cached_property
    def max_timestamp(self) -> int:
        self._load_indexes()
        value: int = self.__dict__["max_timestamp"]
        return value

    @cached_property
    def offset_of_max_timestamp(self) -> int:
        self._load_indexes()
        value: int = self.__dict__["offset_of_max_timestamp"]
        return value

    def _load_indexes(self) -> None:
        """The deferred part of `load` for an inactive segment, on first use. A failed check
        rebuilds the indexes from the batches, but never truncates: data in the middle of a log
        stays as it is (a corrupt batch is then the reader's error, not lost records)."""
        index, time_index = self._new_indexes()
        self.__dict__.update(index=index, time_index=time_index)
        try:
            index.load(self.size)
            time_index.load(2**63 - 1)
            self._restore_max_timestamp(scan_tail=False)
            return
        except IndexCorruptError as exc:
            log.warning("%s: %s; rebuilding its indexes", self.log_path, exc)
        index.reset()
        time_index.reset()
        self.max_timestamp, self.offset_of_max_timestamp = NO_TIMESTAMP, self.base_offset
        self._bytes_since_index = 0
        try:
            for info in self.scan(0, self.size, chunk=_RECOVERY_CHUNK):
                self._track(info.base_offset, info.position, info.size, info.max_timestamp)
        except (CorruptRecordError, InvalidRecordError) as exc:
            log.error("%s: %s; indexed up to there", self.log_path, exc)
        self.on_become_inactive()

    def load(self, is_active: bool) -> None:
        """Open existing index files after a clean shutdown; recover if any fails its check."""
        if self.size == 0:
            self.index.reset()
            self.time_index.reset()
            return
        try:
            self.index.load(self.size)
            self.time_index.load(self.next_offset if is_active else 2**63 - 1)
            # An active segment's tail may hold newer batches; the scan also proves the tail whole.
            self._restore_max_timestamp(scan_tail=is_active)
        except (IndexCorruptError, CorruptRecordError, InvalidRecordError) as exc:
            log.warning("%s: %s; rebuilding its indexes", self.log_path, exc)
            self.recover()

    def recover(self, epoch_cache: LeaderEpochFileCache | None = None) -> int:
        """Rebuild the indexes by reading every batch (length, CRC32C); truncate at the first bad one.

        Returns the number of bytes truncated. Leader epochs found in the batches go to `epoch_cache`.
        """
        self.index.reset()
        self.time_index.reset()
        self.max_timestamp, self.offset_of_max_timestamp = NO_TIMESTAMP, self.base_offset
        self._bytes_since_index = 0
        self._rolling_timestamp = None
        file_size = os.fstat(self._fd).st_size
        valid, next_offset = 0, self.base_offset
        try:
            for info in self.scan(0, file_size, verify_crc=True, chunk=_RECOVERY_CHUNK):
                if info.base_offset < next_offset:
                    raise CorruptRecordError(
                        f"{self.log_path}: batch at position {info.position} has offset {info.base_offset}, "
                        f"expected at least {next_offset}"
                    )
                if self._rolling_timestamp is None:
                    self._rolling_timestamp = info.max_timestamp
                self._track(info.base_offset, info.position, info.size, info.max_timestamp)
                if epoch_cache is not None and info.partition_leader_epoch > epoch_cache.latest_epoch:
                    epoch_cache.assign(info.partition_leader_epoch, info.base_offset)
                valid, next_offset = info.position + info.size, info.next_offset
        except (CorruptRecordError, InvalidRecordError) as exc:
            log.warning("%s: %s; truncating to %d bytes", self.log_path, exc, valid)
        truncated = file_size - valid
        if truncated:
            os.ftruncate(self._fd, valid)
        self.size = valid
        self._recent.clear()
        self._next_offset = next_offset
        self.write_indexes()
        return truncated

    # --- truncation, flush, close, delete -------------------------------------------------

    def truncate_to(self, offset: int) -> int:
        """Drop every batch that holds an offset >= `offset` (a batch straddling it goes whole).

        Returns the segment's new next offset.
        """
        info = self.translate_offset(offset)
        if info is None:
            return self.next_offset
        os.ftruncate(self._fd, info.position)
        self.size = info.position
        self._recent.clear()
        self.index.truncate_to(info.base_offset)
        self.time_index.truncate_to(info.base_offset)
        self.txn_index.truncate_to(info.base_offset)
        self._next_offset = info.base_offset if info.position else self.base_offset
        self._bytes_since_index = 0
        if self.size == 0:
            self._rolling_timestamp = None
        self._restore_max_timestamp(scan_tail=True)
        return self._next_offset

    def _restore_max_timestamp(self, scan_tail: bool) -> None:
        """max_timestamp and its offset from the time index's last entry, then (if `scan_tail`)
        from the batches after that entry, which the sparse index may not cover."""
        last = self.time_index.last_entry
        self.max_timestamp, self.offset_of_max_timestamp = last if last else (NO_TIMESTAMP, self.base_offset)
        if not scan_tail:
            return
        position = self.index.lookup(last[1])[1] if last else 0
        for info in self.scan(position):
            if info.max_timestamp > self.max_timestamp:
                self.max_timestamp, self.offset_of_max_timestamp = info.max_timestamp, info.base_offset

    def on_become_inactive(self) -> None:
        """At roll: a final time-index entry for the segment's max timestamp, indexes written out."""
        if self.max_timestamp >= 0:
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
        self.write_indexes()

    def write_indexes(self, fsync: bool = False) -> None:
        if "index" not in self.__dict__:
            return  # never read since a clean load: the files are as they were (see load_lazily)
        self.index.flush(fsync)
        self.time_index.flush(fsync)
        if fsync:
            self.txn_index.fsync()

    def fsync(self) -> None:
        os.fsync(self._fd)

    def close(self) -> None:
        """Write out the index entries (an inactive segment has its final time-index entry from
        its roll; the active one needs none: a load scans its tail for the max timestamp, and
        leaving it out spares a write for each quiet log of a big broker) and close the file."""
        if self.closed:
            return
        self.write_indexes()
        self.file.close()
        self.closed = True

    def rename_to_deleted(self) -> None:
        """Kafka's async delete, step one: a crash from here on removes the files at load."""
        paths = [self.log_path, *self._index_paths]
        targets = [path.with_name(path.name + DELETED_SUFFIX) for path in paths]
        for path, target in zip(paths, targets):
            try:
                path.rename(target)
            except FileNotFoundError:
                pass
        self.log_path = targets[0]
        self._index_paths = (targets[1], targets[2])
        if "index" in self.__dict__:  # loaded (else they are read from the new names, if ever)
            self.index.path, self.time_index.path = self._index_paths
        self.txn_index.rename(self.txn_index.path.with_name(self.txn_index.path.name + DELETED_SUFFIX))

    def delete_files(self) -> None:
        """Close and unlink. Readers holding the file object keep reading until they drop it."""
        if not self.closed:
            self.file.close()
            self.closed = True
        for path in (self.log_path, *self._index_paths, self.txn_index.path):
            path.unlink(missing_ok=True)

    def __repr__(self) -> str:
        return f"LogSegment({self.log_path.name}, size={self.size})"

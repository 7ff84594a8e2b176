"""Sparse indexes of a segment: OffsetIndex (offset -> file position) and TimeIndex (timestamp -> offset).

Kafka's on-disk entry formats (big-endian, offsets relative to the segment's base offset), kept in
memory as arrays for binary search. The files are append-only: new entries are written in
chunks, at roll, flush and close; a file that fails the sanity check on load is rebuilt from the
log by the segment, so a crash can cost an index rebuild but never a wrong answer.
"""

import bisect
import os
import struct
import sys
from array import array
from pathlib import Path

_WRITE_CHUNK = 1024  # entries buffered in memory before they are written out
_BIG_ENDIAN = sys.byteorder == "big"


class IndexCorruptError(Exception):
    """An index file failed its sanity check; the segment rebuilds it."""


class _IndexFile:
    entry_size: int
    _rel: "array[int]"  # relative offsets, one per entry

    def __init__(self, path: Path, base_offset: int, max_entries: int):
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max_entries
        self._written = 0  # entries already in the file
        self._on_disk = False
        """The file is known to exist (written, read or found here): a close with nothing to write
        then makes no system call (a stat for each of a log's two indexes was half of closing
        3,000 quiet logs, under cProfile)."""

    def __len__(self) -> int:
        return len(self._rel)

    @property
    def is_full(self) -> bool:
        return len(self._rel) >= self.max_entries

    def _encode(self, start: int, end: int) -> bytes:
        raise NotImplementedError

    def _drop_from(self, keep: int) -> None:
        raise NotImplementedError

    def flush(self, fsync: bool = False) -> None:
        """Write out the entries not yet in the file (and fsync if asked)."""
        if self._written == len(self._rel) and not fsync and (self._on_disk or self.path.exists()):
            self._on_disk = True
            return
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
        self._on_disk = True
        try:
            if self._written < len(self._rel):
                data = self._encode(self._written, len(self._rel))
                os.pwrite(fd, data, self._written * self.entry_size)
                self._written = len(self._rel)
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)

    def _maybe_write_chunk(self) -> None:
        if len(self._rel) - self._written >= _WRITE_CHUNK:
            self.flush()

    def _truncate_entries(self, keep: int) -> None:
        if keep >= len(self._rel):
            return
        self._drop_from(keep)
        if self._written > keep:
            self._written = keep
            if self.path.exists():
                os.truncate(self.path, keep * self.entry_size)

    def reset(self) -> None:
        self._truncate_entries(0)
        self._written = 0
        # Start the file over: a rebuilt index must not inherit stale bytes.
        with open(self.path, "wb"):
            pass
        self._on_disk = True

    def read_file(self) -> bytes | None:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return None
        self._on_disk = True
        return data


class OffsetIndex(_IndexFile):
    """Entries (relative offset u32, position u32): the base offset of a batch and where it starts."""

    entry_size = 8

    def __init__(self, path: Path, base_offset: int, max_entries: int):
        super().__init__(path, base_offset, max_entries)
        self._rel = array("I")
        self._pos = array("I")

    def append(self, offset: int, position: int) -> None:
        self._rel.append(offset - self.base_offset)
        self._pos.append(position)
        self._maybe_write_chunk()

    def lookup(self, offset: int) -> tuple[int, int]:
        """(offset, position) of the largest entry at or below `offset`; (base, 0) if none."""
        i = bisect.bisect_right(self._rel, offset - self.base_offset) - 1
        if i < 0:
            return self.base_offset, 0
        return self.base_offset + self._rel[i], self._pos[i]

    def lookup_position(self, position: int) -> int:
        """Largest indexed batch start at or below `position` (0 if none)."""
        i = bisect.bisect_right(self._pos, position) - 1
        return self._pos[i] if i >= 0 else 0

    def truncate_to(self, offset: int) -> None:
        """Remove entries for offsets >= `offset`."""
        self._truncate_entries(bisect.bisect_left(self._rel, offset - self.base_offset))

    def _drop_from(self, keep: int) -> None:
        del self._rel[keep:]
        del self._pos[keep:]

    def _encode(self, start: int, end: int) -> bytes:
        out = array("I", bytes(8 * (end - start)))
        out[0::2] = self._rel[start:end]
        out[1::2] = self._pos[start:end]
        if not _BIG_ENDIAN:
            out.byteswap()
        return out.tobytes()

    def load(self, log_size: int) -> None:
        """Read the file; IndexCorruptError if it is missing or inconsistent with a log of `log_size`."""
        data = self.read_file()
        if data is None:
            raise IndexCorruptError(f"{self.path} is missing")
        if len(data) % 8:
            raise IndexCorruptError(f"{self.path} has a partial entry ({len(data)} bytes)")
        raw = array("I", data)
        if not _BIG_ENDIAN:
            raw.byteswap()
        rel, pos = raw[0::2], raw[1::2]
        for i in range(1, len(rel)):
            if rel[i] <= rel[i - 1] or pos[i] <= pos[i - 1]:
                raise IndexCorruptError(f"{self.path}: entry {i} is not after entry {i - 1}")
        if pos and pos[-1] >= log_size:
            raise IndexCorruptError(f"{self.path}: last position {pos[-1]} is beyond the log ({log_size} bytes)")
        self._rel, self._pos = rel, pos
        self._written = len(rel)


_TIME_ENTRY = struct.Struct(">qI")


class TimeIndex(_IndexFile):
    """Entries (timestamp i64, relative offset u32): the running max timestamp and the batch holding it."""

    entry_size = 12

    def __init__(self, path: Path, base_offset: int, max_entries: int):
        super().__init__(path, base_offset, max_entries)
        self._ts = array("q")
        self._rel = array("I")

    @property
    def last_entry(self) -> tuple[int, int] | None:
        """(timestamp, offset) of the newest entry."""
        if not self._ts:
            return None
        return self._ts[-1], self.base_offset + self._rel[-1]

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Add an entry only when the timestamp moved forward (entries stay monotonic)."""
        if self._ts and timestamp <= self._ts[-1]:
            return
        self._ts.append(timestamp)
        self._rel.append(offset - self.base_offset)
        self._maybe_write_chunk()

    def lookup(self, timestamp: int) -> tuple[int, int] | None:
        """(timestamp, offset) of the largest entry with timestamp <= target; None if none."""
        i = bisect.bisect_right(self._ts, timestamp) - 1
        if i < 0:
            return None
        return self._ts[i], self.base_offset + self._rel[i]

    def truncate_to(self, offset: int) -> None:
        """Remove entries whose offset is >= `offset`."""
        rel = offset - self.base_offset
        keep = len(self._rel)
        while keep and self._rel[keep - 1] >= rel:
            keep -= 1
        self._truncate_entries(keep)

    def _drop_from(self, keep: int) -> None:
        del self._ts[keep:]
        del self._rel[keep:]

    def _encode(self, start: int, end: int) -> bytes:
        return b"".join(_TIME_ENTRY.pack(self._ts[i], self._rel[i]) for i in range(start, end))

    def load(self, next_offset: int) -> None:
        data = self.read_file()
        if data is None:
            raise IndexCorruptError(f"{self.path} is missing")
        if len(data) % 12:
            raise IndexCorruptError(f"{self.path} has a partial entry ({len(data)} bytes)")
        ts, rel = array("q"), array("I")
        for t, r in _TIME_ENTRY.iter_unpack(data):
            if ts and (t < ts[-1] or r < rel[-1]):
                raise IndexCorruptError(f"{self.path}: entries are not monotonic")
            ts.append(t)
            rel.append(r)
        if rel and self.base_offset + rel[-1] >= next_offset:
            raise IndexCorruptError(f"{self.path}: last offset is beyond the log end {next_offset}")
        self._ts, self._rel = ts, rel
        self._written = len(rel)

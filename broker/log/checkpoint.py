"""Kafka's checkpoint file format: a version line, a count line, then one entry per line.

Used for `leader-epoch-checkpoint` ("epoch startOffset") and the per-partition offset files,
`recovery-point-offset-checkpoint` and `replication-offset-checkpoint` ("topic partition offset").
Written to a temp file, fsynced, then renamed, so a crash leaves
either the old or the new file, never a torn one.
"""

import ctypes
import os
import threading
from collections.abc import Callable
from pathlib import Path

VERSION = 0


def write_checkpoint(path: Path, lines: list[str]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    data = f"{VERSION}\n{len(lines)}\n" + "".join(f"{line}\n" for line in lines)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_path(path.parent)


def read_checkpoint(path: Path) -> list[list[str]] | None:
    """Entries split on whitespace; None if the file is missing. ValueError if malformed."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    lines = text.splitlines()
    if len(lines) < 2 or int(lines[0]) != VERSION:
        raise ValueError(f"{path}: unsupported checkpoint header")
    count = int(lines[1])
    entries = [line.split() for line in lines[2 : 2 + count]]
    if len(entries) != count:
        raise ValueError(f"{path}: expected {count} entries, found {len(entries)}")
    return entries


def write_offsets(path: Path, offsets: dict[tuple[str, int], int]) -> None:
    """A "topic partition offset" checkpoint, sorted by partition."""
    write_checkpoint(path, [f"{t} {p} {o}" for (t, p), o in sorted(offsets.items())])


def read_offsets(path: Path) -> dict[tuple[str, int], int]:
    """{(topic, partition): offset} of a "topic partition offset" checkpoint; {} if missing.

    ValueError if malformed."""
    return {(topic, int(p)): int(offset) for topic, p, offset in read_checkpoint(path) or []}


def fsync_path(path: Path) -> None:
    """Make a file written earlier durable, or a directory's entries (files created, renamed or
    removed in it)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _find_syncfs() -> Callable[[int], int] | None:
    try:
        return ctypes.CDLL(None, use_errno=True).syncfs
    except (OSError, AttributeError):
        return None


_SYNCFS = _find_syncfs()


def can_sync_filesystem() -> bool:
    """Whether `sync_filesystem` is there (Linux's syncfs, in the C library)."""
    return _SYNCFS is not None


def sync_filesystem(fd: int) -> None:
    """syncfs(2): everything written to the filesystem holding `fd` made durable in one call,
    where an fsync per file costs a journal commit each (thousands of logs at shutdown). Since
    Linux 5.8 it fails with the write-back errors the filesystem had since `fd` was opened."""
    if _SYNCFS is None:
        raise OSError("syncfs is not available here")
    if _SYNCFS(fd) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno))


class OffsetsCheckpoints:
    """One "topic partition offset" file in each log directory (recovery points, log start
    offsets): a copy of what each file should say, kept current entry by entry as the logs
    report changes, and written only when it differs from what was written last. A broker with
    tens of thousands of logs then builds no dict over all of them to find that nothing changed."""

    def __init__(self, file_name: str):
        self.file_name = file_name
        self._copies: dict[Path, dict[tuple[str, int], int]] = {}
        self._unwritten: set[Path] = set()
        self._taken: dict[Path, int] = {}
        """Per directory, the number of copies taken to write: each write knows its place."""
        self._written: dict[Path, int] = {}
        self._lock = threading.Lock()
        """Writes come from worker threads and the event loop; they share a temp file."""

    def set(self, log_dir: Path, key: tuple[str, int], offset: int | None) -> None:
        """The file's entry for `key` (None: no entry)."""
        copy = self._copies.setdefault(log_dir, {})
        if offset is None:
            if copy.pop(key, None) is not None:
                self._unwritten.add(log_dir)
        elif copy.get(key) != offset:
            copy[key] = offset
            self._unwritten.add(log_dir)

    def forget(self, log_dir: Path) -> None:
        """An offline directory: nothing is written there any more."""
        self._copies.pop(log_dir, None)
        self._unwritten.discard(log_dir)

    def to_write(self, dirs: list[Path], force: bool) -> list[tuple[Path, int, dict[tuple[str, int], int]]]:
        """(dir, ticket, entries) of each of `dirs` whose file lags its copy (all with `force`)."""
        out = []
        for log_dir in dirs:
            if force or log_dir in self._unwritten:
                self._unwritten.discard(log_dir)
                ticket = self._taken[log_dir] = self._taken.get(log_dir, 0) + 1
                out.append((log_dir, ticket, dict(self._copies.get(log_dir, {}))))
        return out

    def write(self, log_dir: Path, ticket: int, offsets: dict[tuple[str, int], int]) -> None:
        """Write a copy from `to_write` unless a later one is on disk already (any thread)."""
        with self._lock:
            if ticket <= self._written.get(log_dir, 0):
                return
            write_offsets(log_dir / self.file_name, offsets)
            self._written[log_dir] = ticket

"""Kafka's checkpoint file format: a version line, a count line, then one entry per line.

Used for `leader-epoch-checkpoint` ("epoch startOffset") and the per-partition offset files,
`recovery-point-offset-checkpoint` and `replication-offset-checkpoint` ("topic partition offset").
Written to a temp file, fsynced, then renamed, so a crash leaves
either the old or the new file, never a torn one.
"""

import ctypes
import os
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

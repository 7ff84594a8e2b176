"""Swapping cleaned segments in, crash-safe (Kafka's replaceSegments and the swap-file recovery
of its LogLoader).

A cleaning writes `<base>.log.cleaned` (and its indexes) aside; the swap of a group of old
segments [base, end) for it is:

1. `<base>.swapend` is written and fsynced: it holds `end`, so a recovery knows which old
   segments the swap replaces (a cleaned group may end well before its last old segment did);
2. the cleaned files become `.swap` files, the log file last: once `<base>.log.swap` exists (the
   directory fsynced), the swap is decided;
3. the old segments are renamed `.deleted` (readers holding their files keep reading);
4. `<base>.log.swap` becomes `<base>.log`, then the index swaps; the directory is fsynced and
   `<base>.swapend` removed.

`complete_swaps` runs before a log loads: a crash before step 2 ends leaves the old segments and
removes the new files, a crash after it finishes the swap. Either way every record is in exactly
one segment.
"""

import logging
import os
from pathlib import Path

from .checkpoint import fsync_path

log = logging.getLogger(__name__)

CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
SWAP_END_SUFFIX = ".swapend"
SEGMENT_SUFFIXES = (".log", ".index", ".timeindex", ".txnindex")
"""Log last among the index files where order matters: see the module docstring."""
_INDEX_SUFFIXES = SEGMENT_SUFFIXES[1:]


def _base_of(name: str, suffix: str) -> int | None:
    stem = name[: -len(suffix)] if name.endswith(suffix) else ""
    return int(stem) if stem.isdigit() else None


def write_swap_end(directory: Path, base: int, end: int) -> Path:
    path = directory / f"{base:020d}{SWAP_END_SUFFIX}"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, str(end).encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    return path


def rename_suffix(directory: Path, base: int, old: str, new: str, log_first: bool = False) -> None:
    """Every file of segment `base` from suffix `old` to `new`: index files first and the log last
    (cleaned → swap), or the log first (swap → final); see the module docstring."""
    order = (".log", *_INDEX_SUFFIXES) if log_first else (*_INDEX_SUFFIXES, ".log")
    for suffix in order:
        source = directory / f"{base:020d}{suffix}{old}"
        try:
            os.replace(source, directory / f"{base:020d}{suffix}{new}")
        except FileNotFoundError:
            pass


def complete_swaps(directory: Path) -> int:
    """Finish or undo what a crash interrupted (see the module docstring); returns the swaps
    completed."""
    names = {p.name for p in directory.iterdir()}
    bases = {b for n in names if (b := _swap_base(n)) is not None}
    completed = 0
    for base in sorted(bases):
        prefix = f"{base:020d}"
        if prefix + ".log" + SWAP_SUFFIX in names:  # decided: finish it
            try:
                end = int((directory / (prefix + SWAP_END_SUFFIX)).read_text())
            except (OSError, ValueError):
                end = base + 1  # cannot happen (written first); replace the segment of that base only
            for other in names:
                for suffix in SEGMENT_SUFFIXES:
                    old = _base_of(other, suffix)
                    if old is not None and base <= old < end:
                        (directory / other).unlink(missing_ok=True)
            rename_suffix(directory, base, SWAP_SUFFIX, "")
            log.warning("%s: completed the swap of cleaned segment %d (replacing segments up to %d)",
                        directory.name, base, end)
            completed += 1
        elif prefix + ".log" + CLEANED_SUFFIX in names:  # not decided: undo it
            for suffix in SEGMENT_SUFFIXES:
                for extra in (SWAP_SUFFIX, CLEANED_SUFFIX):
                    (directory / (prefix + suffix + extra)).unlink(missing_ok=True)
        else:  # the log was swapped in, its indexes not yet
            rename_suffix(directory, base, SWAP_SUFFIX, "")
        (directory / (prefix + SWAP_END_SUFFIX)).unlink(missing_ok=True)
    for name in names:
        if name.endswith(CLEANED_SUFFIX):  # a cleaning that never reached its swap
            (directory / name).unlink(missing_ok=True)
    if bases or any(n.endswith(CLEANED_SUFFIX) for n in names):
        fsync_path(directory)
    return completed


def _swap_base(name: str) -> int | None:
    """The base offset of a swap's file (`.swap`, `.swapend`), None for any other file."""
    for suffix in (SWAP_SUFFIX, SWAP_END_SUFFIX):
        if name.endswith(suffix):
            stem = name.split(".", 1)[0]
            return int(stem) if stem.isdigit() else None
    return None

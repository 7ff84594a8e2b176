"""A small disk for fault tests: a tmpfs of a few MiB mounted as a broker's log directory, filled
up to make every write on it fail with ENOSPC, as a full disk does. Mounting needs root."""

import errno
import os
import subprocess
from pathlib import Path

FILLER = "filler"
_CHUNK = 64 * 1024


def can_mount() -> bool:
    return os.geteuid() == 0


class SmallDisk:
    """`mount()` a tmpfs of `size_bytes` at `path`; `fill()` takes every free byte; `free()` gives
    them back; `unmount()` (lazily: a killed process may still hold files) always cleans up."""

    def __init__(self, path: Path, size_bytes: int = 4 << 20):
        self.path = Path(path)
        self.size_bytes = size_bytes
        self.mounted = False

    def mount(self) -> "SmallDisk":
        self.path.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={self.size_bytes}", "tmpfs", str(self.path)],
                       check=True, capture_output=True, timeout=10)
        self.mounted = True
        return self

    def fill(self) -> int:
        """Write a filler file until the disk is full; the bytes it took."""
        written = 0
        chunk = b"\0" * _CHUNK
        with open(self.path / FILLER, "ab", buffering=0) as f:
            for _ in range(self.size_bytes // 512 + 2):  # at most one pass over the disk, in shrinking writes
                try:
                    written += f.write(chunk)
                except OSError as e:
                    if e.errno != errno.ENOSPC:
                        raise
                    if len(chunk) == 1:
                        return written
                    chunk = chunk[: len(chunk) // 2]
        return written

    def free(self) -> None:
        (self.path / FILLER).unlink(missing_ok=True)

    def unmount(self) -> None:
        if self.mounted:
            subprocess.run(["umount", "-l", str(self.path)], capture_output=True, timeout=10)
            self.mounted = False

    def __enter__(self) -> "SmallDisk":
        return self.mount()

    def __exit__(self, *exc: object) -> None:
        self.unmount()

"""What the benches read of a process from Linux's /proc: CPU seconds, resident and peak memory,
open descriptors. One place, so every bench counts them the same way."""

import os
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int | None) -> float:
    """User + system CPU time of a process; 0.0 for no pid or a process already gone."""
    if pid is None:
        return 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()  # comm may hold spaces
    except FileNotFoundError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def _status_mb(pid: int, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/{pid}/status")


def rss_mb(pid: int) -> float:
    """Resident memory now (VmRSS), in MiB."""
    return _status_mb(pid, "VmRSS")


def vm_hwm_mb(pid: int) -> float:
    """Peak resident memory (VmHWM), in MiB."""
    return _status_mb(pid, "VmHWM")


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))

"""What the benches read of a process from Linux's /proc: CPU seconds, resident and peak memory,
open descriptors. One place, so every bench counts them the same way."""

import os
import resource
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK")


def _stat_fields(path: str | Path) -> list[str]:
    """The fields of a /proc stat file after the command name (state first, then ppid, ...)."""
    return Path(path).read_text().rsplit(")", 1)[1].split()  # comm may hold spaces


def stat_ticks(path: str | Path) -> tuple[int, int]:
    """(utime, stime) in clock ticks of a /proc stat file: a process's /proc/PID/stat or a
    thread's /proc/PID/task/TID/stat. Raises FileNotFoundError when it is gone."""
    fields = _stat_fields(path)
    return int(fields[11]), int(fields[12])


def cpu_seconds(pid: int | None) -> float:
    """User + system CPU time of a process; 0.0 for no pid or a process already gone."""
    if pid is None:
        return 0.0
    try:
        user, system = stat_ticks(f"/proc/{pid}/stat")
    except FileNotFoundError:
        return 0.0
    return (user + system) / CLK_TCK


def system_seconds(pid: int) -> float:
    """System (kernel) CPU time of a process."""
    return stat_ticks(f"/proc/{pid}/stat")[1] / CLK_TCK


def thread_cpu_seconds(comm_prefix: str) -> float:
    """User + system CPU time of this process's threads whose name starts with `comm_prefix`
    (a C library's own threads, e.g. librdkafka's `rdk:mock`)."""
    ticks = 0
    for task in Path("/proc/self/task").iterdir():
        try:
            if not (task / "comm").read_text().startswith(comm_prefix):
                continue
            ticks += sum(stat_ticks(task / "stat"))
        except FileNotFoundError:  # a thread that ended meanwhile
            continue
    return ticks / CLK_TCK


def tree_cpu_seconds(root: int | None = None) -> float:
    """User + system CPU time of a process (this one by default) and every descendant alive now;
    a process that starts and ends between two readings is missed."""
    parent, ticks = {}, {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = _stat_fields(f"/proc/{entry}/stat")
        except OSError:  # gone meanwhile
            continue
        parent[int(entry)], ticks[int(entry)] = int(fields[1]), int(fields[11]) + int(fields[12])
    top = os.getpid() if root is None else root
    tree, frontier = {top}, {top}
    while frontier:
        frontier = {pid for pid, ppid in parent.items() if ppid in frontier and pid not in tree}
        tree |= frontier
    return sum(ticks.get(pid, 0) for pid in tree) / CLK_TCK


def children_cpu_seconds() -> float:
    """User + system CPU time of the waited-for child processes (not those still running)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


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

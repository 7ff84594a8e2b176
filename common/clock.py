"""Wall-clock milliseconds, the unit of every timestamp and deadline the broker keeps (logs,
groups, replication)."""

import time


def now_ms() -> int:
    return int(time.time() * 1000)

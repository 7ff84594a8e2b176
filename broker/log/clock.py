"""Wall-clock milliseconds, the unit of every timestamp and deadline the log keeps."""

import time


def now_ms() -> int:
    return int(time.time() * 1000)

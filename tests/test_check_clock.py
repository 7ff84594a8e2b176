"""The clock rule of `make lint` (tools/check_clock.py) and the one clock it protects."""

import importlib.util
from pathlib import Path

from odradek.broker.log.config import LogConfig
from odradek.broker.log.log import Log
from odradek.broker.log.record_batch import build_batch, record_timestamps
from odradek.common.clock import ManualClock

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("check_clock", ROOT / "tools" / "check_clock.py")
assert _spec is not None and _spec.loader is not None
check_clock = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check_clock)


def test_direct_wall_clock_calls_are_found():
    source = "\n".join([
        "import time",
        "import time as t",
        "from time import monotonic as mono",
        "from odradek.common.clock import now_ms",
        "from odradek.common import clock",
        "a = time.time()",
        "b = t.monotonic()",
        "c = mono()",
        "d = now_ms()",
        "e = clock.now_ms()",
    ])
    assert check_clock.banned_calls(source) == [
        (6, "time.time"), (7, "time.monotonic"), (8, "time.monotonic"), (9, "now_ms"), (10, "now_ms")]


def test_a_clock_passed_in_is_not_a_call():
    source = "\n".join([
        "import time",
        "from odradek.common.clock import now_ms",
        "def f(clock=now_ms):",
        "    time.sleep(0)",  # not a reading of the clock
        "    return clock()",
    ])
    assert check_clock.banned_calls(source) == []


def test_a_log_stamps_new_segments_and_batches_with_its_clock(tmp_path):
    clock = ManualClock(5_000)
    lg = Log(tmp_path / "t-0", LogConfig(), clock=clock)
    try:
        assert lg.segments[0].created_ms == 5_000
    finally:
        lg.close()
    clock.advance(250)
    assert record_timestamps(build_batch([b"x"], clock=clock)) == [(0, 5_250)]

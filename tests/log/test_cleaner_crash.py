"""Crashes during a cleaning: at every file operation of the swap, and a real SIGKILL at
spread-out moments of a whole cleaning. The log must load serving every key's latest value
exactly once, with nothing that was not there before."""

import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time

import pytest

from odradek.broker.log import Log
from odradek.broker.log.cleaner_worker import clean
from odradek.broker.log.config import LogConfig
from odradek.broker.log.log_cleaner import CleanerConfig, apply_result, clean_now, make_task, plan

from .test_cleaner import fill, latest, records

CONFIG = LogConfig(cleanup_policy="compact", segment_bytes=4096, index_interval_bytes=512)


class Crash(BaseException):
    """The process stops here (no handler catches a BaseException that is not an Exception)."""


def build(directory: pathlib.Path, keys: int = 30, versions: int = 40) -> list:
    log = Log(directory, CONFIG)
    fill(log, keys=keys, versions=versions)
    rows = records(log)
    log.close()
    return rows


def check_recovered(directory: pathlib.Path, before: list) -> Log:
    log = Log(directory, CONFIG, had_clean_shutdown=False)
    log.high_watermark = log.log_end_offset
    rows = records(log)
    assert set(rows) <= set(before), "a record that was never written"
    assert [o for o, _, _ in rows] == sorted({o for o, _, _ in rows}), "offsets out of order or repeated"
    assert latest(rows) == latest(before)
    last_of = {k: o for o, k, _ in before}
    assert {o for o, _, _ in rows} >= set(last_of.values()), "a key's latest record is gone"
    names = os.listdir(directory)
    assert not [n for n in names if n.endswith((".cleaned", ".swap", ".swapend", ".deleted"))], names
    return log


def _count_file_ops(monkeypatch, crash_at: int | None) -> list[int]:
    """Count (and crash at the `crash_at`th) rename, replace and unlink from here on."""
    done = [0]

    def counted(fn):
        def wrapper(*args, **kwargs):
            if crash_at is not None and done[0] == crash_at:
                raise Crash()
            done[0] += 1
            return fn(*args, **kwargs)
        return wrapper

    monkeypatch.setattr(os, "replace", counted(os.replace))
    monkeypatch.setattr(pathlib.Path, "rename", counted(pathlib.Path.rename))
    monkeypatch.setattr(pathlib.Path, "unlink", counted(pathlib.Path.unlink))
    return done


def _clean_and_swap(directory: pathlib.Path, monkeypatch, crash_at: int | None) -> int:
    log = Log(directory, CONFIG)
    log.high_watermark = log.log_end_offset
    to_clean = plan(log, None, 0)
    result = clean(make_task(log, to_clean, CleanerConfig()))
    assert len(result.groups) > 1
    with monkeypatch.context() as m:
        done = _count_file_ops(m, crash_at)
        try:
            assert apply_result(log, result, log.truncation_count)
        except Crash:
            return -1
    return done[0]


def test_a_crash_at_any_file_operation_of_the_swap(tmp_path, monkeypatch):
    template = tmp_path / "template" / "t-0"
    before = build(template, keys=300, versions=4)  # latest values fill several cleaned segments
    total = _clean_and_swap(shutil.copytree(template, tmp_path / "dry" / "t-0"), monkeypatch, None)
    assert total > 10, total
    for crash_at in range(total):
        directory = shutil.copytree(template, tmp_path / f"crash{crash_at}" / "t-0")
        assert _clean_and_swap(directory, monkeypatch, crash_at) == -1
        log = check_recovered(directory, before)
        assert clean_now(log) is not None
        rows = records(log)
        below_active = [k for o, k, _ in rows if o < log.active_segment.base_offset]
        assert len(below_active) == len(set(below_active))
        log.close()


_CLEANER = """
import sys
from pathlib import Path
from odradek.broker.log import Log
from odradek.broker.log.config import LogConfig
from odradek.broker.log.log_cleaner import clean_now
log = Log(Path(sys.argv[1]), LogConfig(cleanup_policy="compact", segment_bytes=4096, index_interval_bytes=512))
log.high_watermark = log.log_end_offset
print("cleaning", flush=True)
clean_now(log)
log.close()
print("done", flush=True)
"""


def _run_cleaner(directory: pathlib.Path, kill_after: float | None) -> tuple[float, bool]:
    """Run a cleaning in a child process, SIGKILLed `kill_after` seconds after it starts
    cleaning; (seconds it ran for, whether it finished)."""
    proc = subprocess.Popen([sys.executable, "-c", _CLEANER, str(directory)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "cleaning"
        started = time.monotonic()
        if kill_after is not None:
            try:
                proc.wait(timeout=kill_after)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
        return time.monotonic() - started, proc.returncode == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        proc.stdout.close()


@pytest.mark.integration  # a real SIGKILL of a cleaning child process
def test_sigkill_at_spread_out_moments_of_a_cleaning(tmp_path):
    template = tmp_path / "template" / "t-0"
    before = build(template, keys=200, versions=60)
    durations = []
    for run in range(2):  # the shorter: a first run on a cold cache or a busy core would put every kill late
        duration, finished = _run_cleaner(shutil.copytree(template, tmp_path / f"full{run}" / "t-0"), None)
        assert finished
        durations.append(duration)
    duration = min(durations)
    kills = 0
    for i in range(8):
        directory = shutil.copytree(template, tmp_path / f"kill{i}" / "t-0")
        ran, finished = _run_cleaner(directory, duration * (i + 0.5) / 8)
        kills += not finished
        if finished:  # the machine got quieter since the runs above: the later moments come sooner
            duration = min(duration, ran)
        check_recovered(directory, before).close()
    assert kills >= 4, "the kills came too late to test anything"

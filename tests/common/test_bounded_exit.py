"""common/bounded_exit's exit after a clean shutdown, in real processes: what was logged and
written reaches its file, and a non-daemon thread still at work is waited for."""

import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration

CHILD = """
import logging, sys, threading, time
from odradek.common.bounded_exit import exit_after_clean_shutdown
logging.basicConfig(filename=sys.argv[1], level=logging.INFO, format="%(message)s")
print("to stdout", end="")  # no newline: only a flush gets it out of the buffer
sys.stderr.write("to stderr")
if sys.argv[2] == "busy":
    def write():
        time.sleep(0.3)
        with open(sys.argv[1] + ".thread", "w") as f:
            f.write("done")
    threading.Thread(target=write, name="writer").start()
for i in range(1000):
    logging.info("line %d", i)
exit_after_clean_shutdown(0)
print(" and after", end="")
"""


def run(tmp_path, mode: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "log"), mode],
                          capture_output=True, text=True, timeout=30)


def test_every_logged_line_and_stream_is_flushed_before_the_exit(tmp_path):
    done = run(tmp_path, "idle")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "to stdout"  # flushed, and nothing ran after the exit
    assert done.stderr == "to stderr"
    lines = (tmp_path / "log").read_text().splitlines()
    assert lines[-1] == "line 999" and len(lines) == 1000


def test_a_non_daemon_thread_still_running_is_waited_for(tmp_path):
    done = run(tmp_path, "busy")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "log.thread").read_text() == "done"
    assert done.stdout == "to stdout and after"  # the ordinary exit, which joins the thread
    assert "exiting after threads writer end" in (tmp_path / "log").read_text()

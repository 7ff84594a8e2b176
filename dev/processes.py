"""Stopping a child process the way an orchestrator does: SIGTERM, a bounded wait, then SIGKILL."""

import signal
import subprocess
import sys


def stop_process(popen: "subprocess.Popen[bytes]", timeout: float = 10.0, name: str | None = None) -> int | None:
    """SIGCONT (a stopped process would not see SIGTERM before the deadline), SIGTERM, wait up to
    `timeout`, then SIGKILL and wait again. Returns the exit code. With `name`, a kill is said on
    stderr (a process that ignores SIGTERM is a finding)."""
    if popen.poll() is None:
        popen.send_signal(signal.SIGCONT)
        popen.send_signal(signal.SIGTERM)
        try:
            popen.wait(timeout)
        except subprocess.TimeoutExpired:
            if name is not None:
                print(f"{name} ignored SIGTERM for {timeout}s; killing it", file=sys.stderr)
            popen.kill()
            popen.wait(10)
    return popen.returncode

"""The checkout's layout: the operator/ folder never shadows the standard library's `operator`."""

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration  # each test runs a python process from the checkout root

ROOT = Path(__file__).resolve().parent.parent


def run_in_root(code: str, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *flags, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)


def test_standard_operator_wins_from_the_checkout_root():
    # -S: no site-packages, so nothing imported the standard `operator` before the checkout root
    # (sys.path[0]) is searched.
    proc = run_in_root("import operator; operator.eq; print(operator.__file__)", "-S")
    assert proc.returncode == 0, proc.stderr
    assert not proc.stdout.strip().startswith(str(ROOT / "operator"))


def test_odradek_operator_imports_from_the_checkout_root():
    proc = run_in_root("import operator, odradek.operator.probe as p; operator.eq; print(p.__file__)")
    assert proc.returncode == 0, proc.stderr
    assert Path(proc.stdout.strip()).resolve() == ROOT / "operator" / "probe.py"

"""What a broker and a controller import at start-up: libraries only some configurations use are
imported when used, since every process start (a pod's restart, each test's cluster) pays for what
is imported at the top (aiohttp about a third of a second of CPU here, cryptography's X.509 a tenth)."""

import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration  # starts a Python process of its own

DEFERRED = ("aiohttp", "cryptography.x509")
"""aiohttp serves /metrics and the probes (metrics.port set); X.509 maps a client certificate's
subject (TLS listeners with client authentication)."""


@pytest.mark.parametrize("module", ["odradek.broker.server", "odradek.controller.main"])
def test_a_process_without_metrics_or_certificates_imports_neither(module):
    probe = f"import sys, {module}; print(' '.join(m for m in {DEFERRED!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "", f"{module} imports {out.stdout.strip()} at start-up"

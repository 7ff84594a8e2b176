"""e2e/run.sh cannot run here (no Docker engine): check what can be checked without a cluster."""

import re
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration  # runs bash -n

SCRIPT = Path(__file__).resolve().parents[1] / "e2e" / "run.sh"


def test_the_script_parses_and_every_pod_run_is_quiet():
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True, timeout=30)
    text = SCRIPT.read_text()
    runs = [line for line in text.splitlines() if re.search(r"kubectl .*\brun\b.*--rm", line)]
    assert runs and all("--quiet" in r for r in runs), "kubectl run --rm -i prints 'pod deleted' unless --quiet"
    for check in ("dump", "config-hash", "cluster.brokers=4", "cluster.brokers=3", "condition=Ready",
                  "helm uninstall", "a dynamic config change rolled", "kafkauser/e2e-app", "SASL_SSL",
                  "kafka-cluster-ca-cert"):
        assert check in text, check

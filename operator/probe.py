"""Pod-derived ids, run inside the image (`python -m odradek.operator.probe controller-id`).

The pod probes themselves are httpGet requests on each process's own health endpoint
(common/metrics.MetricsServer: /healthz, /readyz), not processes started by the kubelet.
"""

import argparse
import os
import socket
import sys
import zlib

from odradek.common.config import CONTROLLER_ID_BASE


def controller_id_for(pod_name: str) -> int:
    """Distinct from broker ids (dev uses 1000+j too); collisions need equal crc32 values."""
    return CONTROLLER_ID_BASE + zlib.crc32(pod_name.encode()) % 1_000_000


def ordinal(pod_name: str) -> int:
    return int(pod_name.rsplit("-", 1)[1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="odradek.operator.probe", description=__doc__)
    p.add_argument("what", choices=["controller-id"])
    p.add_argument("--pod-name", default=os.environ.get("POD_NAME") or socket.gethostname())
    args = p.parse_args(argv)
    print(controller_id_for(args.pod_name))
    return 0


if __name__ == "__main__":
    sys.exit(main())

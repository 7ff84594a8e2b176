"""Pod probes and pod-derived ids, run inside the image (`python -m odradek.operator.probe`).

- `broker --config F`: ready when the listener accepts connections and `/brokers/ids/<ordinal>`
  exists in ZooKeeper (registered and serving); serving is enough while ZooKeeper is unreachable.
- `controller --config F`: ready when ZooKeeper is reachable and an active controller exists or
  this pod is it; prints "active" or "standby" (a healthy standby is ready).
- `controller-id`: this pod's controller.id, derived from its name (stable across probe calls).
"""

import argparse
import os
import socket
import sys
import zlib
from typing import Any

from odradek.common import zk_data
from odradek.common.config import CONTROLLER_ID_BASE, load_properties


def controller_id_for(pod_name: str) -> int:
    """Distinct from broker ids (dev uses 1000+j too); collisions need equal crc32 values."""
    return CONTROLLER_ID_BASE + zlib.crc32(pod_name.encode()) % 1_000_000


def ordinal(pod_name: str) -> int:
    return int(pod_name.rsplit("-", 1)[1])


def _zk(connect: str, timeout: float) -> Any:  # a started KazooClient (kazoo is untyped)
    from kazoo.client import KazooClient

    client = KazooClient(hosts=connect, timeout=timeout, connection_retry={"max_tries": 1})
    client.start(timeout=timeout)
    return client


def broker_ready(connect: str, broker_id: int, port: int, timeout: float = 3.0) -> tuple[bool, str]:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout):
            pass
    except OSError as e:
        return False, f"listener 127.0.0.1:{port} not serving: {e}"
    try:
        zk = _zk(connect, timeout)
    except Exception as e:
        # A ZooKeeper outage must not empty the bootstrap Service: the broker still serves its
        # leaders' partitions. (The roll does not rely on this: it asks Metadata who is registered.)
        return True, f"serving; ZooKeeper unreachable, registration not checked: {e}"
    try:
        if zk.exists(zk_data.broker_path(broker_id)) is None:
            return False, f"broker {broker_id} not registered"
        return True, f"broker {broker_id} registered and serving"
    finally:
        zk.stop()
        zk.close()


def controller_role(connect: str, controller_id: int, timeout: float = 3.0) -> tuple[bool, str]:
    import json

    from kazoo.exceptions import NoNodeError

    try:
        zk = _zk(connect, timeout)
    except Exception as e:
        return False, f"ZooKeeper unreachable: {e}"
    try:
        try:
            data, _ = zk.get(zk_data.CONTROLLER)
        except NoNodeError:
            return True, "standby (no active controller yet)"
        active = json.loads(data).get("brokerid")
        return True, "active" if active == controller_id else f"standby (active: {active})"
    finally:
        zk.stop()
        zk.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="odradek.operator.probe", description=__doc__)
    p.add_argument("what", choices=["broker", "controller", "controller-id"])
    p.add_argument("--config")
    p.add_argument("--pod-name", default=os.environ.get("POD_NAME") or socket.gethostname())
    p.add_argument("--port", type=int, default=9092)
    args = p.parse_args(argv)
    if args.what == "controller-id":
        print(controller_id_for(args.pod_name))
        return 0
    connect = load_properties(args.config)["zookeeper.connect"]
    if args.what == "broker":
        ok, message = broker_ready(connect, ordinal(args.pod_name), args.port)
    else:
        ok, message = controller_role(connect, controller_id_for(args.pod_name))
    print(message)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""Opening and closing kazoo clients for `zookeeper.connect`, shared by broker and controller.

kazoo does not create the chroot of a connect string (`host:port/odradek`), so a short-lived
chroot-less client creates it first; and a process asked to exit while ZooKeeper is unreachable
must not hang for the whole connection timeout, so connecting can be given up on a stop event.
"""

from __future__ import annotations

import threading
import time

from kazoo.client import KazooClient


def split_connect(connect: str) -> tuple[str, str]:
    """`h1:p1,h2:p2/chroot` → ("h1:p1,h2:p2", "/chroot") (chroot "" when absent)."""
    hosts, slash, chroot = connect.partition("/")
    return hosts, ("/" + chroot.strip("/")) if slash and chroot.strip("/") else ""


def close_client(zk: KazooClient) -> None:
    """Stop (ends the session: its ephemeral znodes go at once) and release the client."""
    try:
        zk.stop()
    finally:
        zk.close()


def start_client(zk: KazooClient, timeout: float, stop: threading.Event | None = None) -> None:
    """kazoo's start(), but given up at once when `stop` is set. TimeoutError when not connected."""
    connected = zk.start_async()
    deadline = time.monotonic() + timeout
    while not connected.wait(0.1):
        if (stop is not None and stop.is_set()) or time.monotonic() > deadline:
            close_client(zk)
            raise TimeoutError(f"no ZooKeeper connection to {zk.hosts} " + (
                "(stopping)" if stop is not None and stop.is_set() else f"within {timeout:.0f}s"))


def ensure_chroot(connect: str, timeout: float = 10.0, stop: threading.Event | None = None) -> None:
    """Create the chroot of `connect` (if it has one) with a chroot-less client."""
    hosts, chroot = split_connect(connect)
    if not chroot:
        return
    zk = KazooClient(hosts=hosts, timeout=timeout)
    start_client(zk, timeout, stop)
    try:
        zk.ensure_path(chroot)
    finally:
        close_client(zk)

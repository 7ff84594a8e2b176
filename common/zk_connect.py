"""Opening and closing kazoo clients for `zookeeper.connect`, shared by broker and controller.

kazoo does not create the chroot of a connect string (`host:port/odradek`), so a short-lived
chroot-less client creates it first; and a process asked to exit while ZooKeeper is unreachable
must not hang for the whole connection timeout, so connecting can be given up on a stop event.

Reconnecting is bounded: kazoo's default policy doubles the pause between attempts up to an hour,
so after a 20-second outage a client could try again only long after the server was back and
its session had expired. Here a disconnected client tries at least every
RECONNECT_MAX_DELAY_S (plus jitter) for as long as it runs, and no attempt waits much longer
than HANDSHAKE_TIMEOUT_S for an answer, so a session outlives any outage once the server is back
(it restores sessions with a fresh timeout when it starts again).

Security (common/zk_security) is applied here, the one place clients are made: the digest
identity and TLS settings go to kazoo, and every znode created without explicit ACLs gets
Kafka's default ACLs for its path (creates, `ensure_path`, `makepath` and transactions alike).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from typing import Any

from kazoo.client import KazooClient, TransactionRequest
from kazoo.protocol.serialization import Auth
from kazoo.retry import KazooRetry

from .zk_security import NO_SECURITY, ZkSecurity

RECONNECT_MAX_DELAY_S = 1.0
"""Longest pause between two connection attempts (jitter adds at most 20 %)."""
HANDSHAKE_TIMEOUT_S = 2.0
"""About the longest one connection attempt waits for the server's answer to its handshake."""
CLOSE_TIMEOUT_S = 3.0
"""Longest wait for a session to close: past it (ZooKeeper stopped) the client is abandoned and
the server expires the session after its timeout."""


def split_connect(connect: str) -> tuple[str, str]:
    """`h1:p1,h2:p2/chroot` → ("h1:p1,h2:p2", "/chroot") (chroot "" when absent)."""
    hosts, slash, chroot = connect.partition("/")
    return hosts, ("/" + chroot.strip("/")) if slash and chroot.strip("/") else ""


def connection_retry() -> KazooRetry:
    """Retry forever, the pause doubling from 0.1 s to at most RECONNECT_MAX_DELAY_S."""
    return KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=RECONNECT_MAX_DELAY_S, max_jitter=0.2)


def attempt_hosts(connect: str, session_timeout_s: float) -> str:
    """`connect` with each host listed enough times that one connection attempt waits at most
    about HANDSHAKE_TIMEOUT_S for the handshake's answer. kazoo (like ZooKeeper's own client)
    gives a handshake the session timeout divided by the number of hosts listed: with one host,
    an attempt that reached a server still loading its data (port open, no answer yet) or a
    stopped one waited a whole session timeout, and the session could expire meanwhile."""
    hosts, chroot = split_connect(connect)
    copies = max(1, math.ceil(session_timeout_s / len(hosts.split(",")) / HANDSHAKE_TIMEOUT_S))
    return ",".join([hosts] * copies) + chroot


class _HideAuth(logging.Filter):
    """Drops kazoo's DEBUG line of each request when the request is Auth: it prints the digest
    `user:password` in clear."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        return not any(isinstance(a, Auth) for a in args)


KAZOO_LOG = logging.getLogger("kazoo.client")
"""The logger kazoo's clients and connections write to (given explicitly, so the filter is on it)."""
KAZOO_LOG.addFilter(_HideAuth())


class _Transaction(TransactionRequest):
    def create(self, path: str, value: bytes = b"", acl: Any = None, ephemeral: bool = False,
               sequence: bool = False) -> None:
        policy: ZkSecurity = self.client.zk_security
        super().create(path, value, policy.acls(path) if acl is None else acl, ephemeral, sequence)


class SecureKazooClient(KazooClient):
    """A KazooClient whose znodes get `zk_security`'s ACLs for their path unless given others
    (kazoo's `default_acl` is one list for every path; Kafka's depends on the path)."""

    def __init__(self, zk_security: ZkSecurity, **kwargs: Any):
        super().__init__(**kwargs, **zk_security.client_kwargs())
        self.zk_security = zk_security

    def create_async(self, path: str, value: bytes = b"", acl: Any = None, *args: Any, **kwargs: Any) -> Any:
        return super().create_async(path, value, self.zk_security.acls(path) if acl is None else acl,
                                    *args, **kwargs)

    def ensure_path_async(self, path: str, acl: Any = None) -> Any:
        """Every missing ancestor gets the ACLs of its own path, as Kafka's createRecursive does
        (kazoo hands a created znode's ACLs to its parents: `/config` made on the way to a user's
        credentials would lose its world read)."""
        return super().ensure_path_async(path, None)

    def transaction(self) -> TransactionRequest:
        return _Transaction(self)


def new_client(connect: str, session_timeout_s: float, security: ZkSecurity = NO_SECURITY) -> KazooClient:
    """A kazoo client (not started) with the bounded reconnect policy, short handshakes, and
    `security`'s identity, TLS and ACLs."""
    return SecureKazooClient(security, hosts=attempt_hosts(connect, session_timeout_s), timeout=session_timeout_s,
                             connection_retry=connection_retry(), logger=KAZOO_LOG)


def close_client(zk: KazooClient, timeout_s: float = CLOSE_TIMEOUT_S) -> bool:
    """Stop (ends the session: its ephemeral znodes go at once) and release the client, waiting
    at most `timeout_s`; False when it did not finish (its daemon thread is left to end alone)."""

    def close() -> None:
        try:
            zk.stop()
        finally:
            zk.close()

    closer = threading.Thread(target=close, name="zookeeper-close", daemon=True)
    closer.start()
    closer.join(timeout_s)
    return not closer.is_alive()


def start_client(zk: KazooClient, timeout: float, stop: threading.Event | None = None) -> None:
    """kazoo's start(), but given up at once when `stop` is set. TimeoutError when not connected."""
    connected = zk.start_async()
    deadline = time.monotonic() + timeout
    while not connected.wait(0.1):
        if (stop is not None and stop.is_set()) or time.monotonic() > deadline:
            close_client(zk)
            raise TimeoutError(f"no ZooKeeper connection to {zk.hosts} " + (
                "(stopping)" if stop is not None and stop.is_set() else f"within {timeout:.0f}s"))


def ensure_chroot(connect: str, timeout: float = 10.0, stop: threading.Event | None = None,
                  security: ZkSecurity = NO_SECURITY) -> None:
    """Create the chroot of `connect` (if it has one) with a chroot-less client."""
    hosts, chroot = split_connect(connect)
    if not chroot:
        return
    zk = new_client(hosts, timeout, security)
    start_client(zk, timeout, stop)
    try:
        zk.ensure_path_async(chroot).get(timeout=timeout)
    finally:
        close_client(zk)

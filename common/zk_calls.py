"""ZooKeeper calls with a deadline, shared by the broker's and the controller's clients.

kazoo's synchronous calls wait without limit while the client is disconnected: a request queues
until the connection is back, or until the session is found expired. In a worker thread
(asyncio.to_thread) that wait outlives any `asyncio.wait_for` around it and keeps `asyncio.run`
from returning, so SIGTERM during a ZooKeeper outage hung the process. Here every call waits at
most its timeout (TimeoutError, as Kafka's ZooKeeperClient gives up after
zookeeper.connection.timeout.ms) and is given up within a tick once `abort` is set (the process
is stopping: ConnectionError), so no thread is ever left waiting on ZooKeeper.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Literal, TypeVar, overload

from kazoo.client import KazooClient
from kazoo.protocol.states import ZnodeStat

K = TypeVar("K")
Watch = Callable[[Any], None]
"""A one-shot watch: kazoo calls it with a WatchedEvent (kazoo ships no type information)."""

POLL_S = 0.1
"""How often a waiting call looks at `abort`."""

ZOOKEEPER_THREADS = 10
"""Worker threads of a process's ZooKeeper client (common/executors), so blocking calls at once:
Kafka's zookeeper.max.in.flight.requests default."""
THREADS_STOP_S = 2.0
"""How long a stopping client waits for calls still running (they give up within POLL_S of the abort)."""


class ZooKeeperTimeoutError(TimeoutError):
    """ZooKeeper did not answer in time (disconnected, or the server is stopped)."""


class BoundedCalls:
    """The kazoo calls this project makes, each bounded by `timeout_s` (or the one given)."""

    def __init__(self, zk: KazooClient, timeout_s: float, abort: threading.Event | None = None):
        self.zk = zk
        self.timeout_s = timeout_s
        self.abort = abort if abort is not None else threading.Event()

    def wait(self, result: Any, timeout_s: float | None = None) -> Any:
        """The value of a kazoo async result (or its exception) within the deadline.

        `Any` in and out: kazoo is untyped, and the value's type depends on the call that made
        the result; the typed methods below say what each returns."""
        limit = self.timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + max(0.0, limit)
        while not result.ready():
            if self.abort.is_set():
                raise ConnectionError("ZooKeeper call given up: stopping")
            left = deadline - time.monotonic()
            if left <= 0:
                raise ZooKeeperTimeoutError(f"ZooKeeper did not answer within {limit:.1f}s")
            result.wait(min(POLL_S, left))
        return result.get(block=False)

    def settle(self, pending: Mapping[K, Any]) -> dict[K, Any]:
        """key → the value or the exception of each pending kazoo result, all awaited within one
        timeout (those left when it runs out get ZooKeeperTimeoutError at once)."""
        deadline = time.monotonic() + self.timeout_s
        out: dict[K, Any] = {}
        for key, result in pending.items():
            try:
                out[key] = self.wait(result, deadline - time.monotonic())
            except Exception as e:
                out[key] = e
        return out

    def get(self, path: str, watch: Watch | None = None, timeout_s: float | None = None) -> tuple[bytes, ZnodeStat]:
        data, stat = self.wait(self.zk.get_async(path, watch=watch), timeout_s)
        return data, stat

    def exists(self, path: str, watch: Watch | None = None, timeout_s: float | None = None) -> ZnodeStat | None:
        return self.wait(self.zk.exists_async(path, watch=watch), timeout_s)

    def get_children(self, path: str, watch: Watch | None = None, timeout_s: float | None = None) -> list[str]:
        children: list[str] = self.wait(self.zk.get_children_async(path, watch=watch), timeout_s)
        return children

    @overload
    def create(self, path: str, value: bytes = b"", *, ephemeral: bool = False, sequence: bool = False,
               makepath: bool = False, include_data: Literal[False] = False, timeout_s: float | None = None) -> str: ...
    @overload
    def create(self, path: str, value: bytes = b"", *, ephemeral: bool = False, sequence: bool = False,
               makepath: bool = False, include_data: Literal[True], timeout_s: float | None = None
               ) -> tuple[str, ZnodeStat]: ...
    def create(self, path: str, value: bytes = b"", *, ephemeral: bool = False, sequence: bool = False,
               makepath: bool = False, include_data: bool = False, timeout_s: float | None = None
               ) -> str | tuple[str, ZnodeStat]:
        """The created path (with `sequence`, its suffix included); with `include_data`, and its stat."""
        created: str | tuple[str, ZnodeStat] = self.wait(
            self.zk.create_async(path, value, ephemeral=ephemeral, sequence=sequence, makepath=makepath,
                                 include_data=include_data), timeout_s)
        return created

    def set(self, path: str, value: bytes, version: int = -1, timeout_s: float | None = None) -> ZnodeStat:
        return self.wait(self.zk.set_async(path, value, version=version), timeout_s)

    def delete(self, path: str, version: int = -1, timeout_s: float | None = None) -> None:
        self.wait(self.zk.delete_async(path, version=version), timeout_s)

    def ensure_path(self, path: str, timeout_s: float | None = None) -> None:
        self.wait(self.zk.ensure_path_async(path), timeout_s)

    def commit(self, transaction: Any, timeout_s: float | None = None) -> list[Any]:
        """A transaction's per-operation results (exceptions for the failed ones); `transaction`
        is kazoo's TransactionRequest (untyped)."""
        results: list[Any] = self.wait(transaction.commit_async(), timeout_s)
        return results

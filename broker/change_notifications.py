"""Kafka's ZkNodeChangeNotificationListener, shared by the config manager and the ACL authorizer.

A change is announced by a sequential znode (`config_change_N`, `acl_changes_N`) under a folder
every broker watches. The rules (which notifications are new, which are old enough to delete) are
plain functions; `ChangeFollower` is the loop: it waits for a watch or a new ZooKeeper session,
runs the owner's sync (a full one after a new session, whose lost watch may have missed changes
and whose absence may have outlived purged notifications), and retries after a failure.
"""

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable

log = logging.getLogger(__name__)

CHANGE_EXPIRATION_MS = 15 * 60 * 1000
"""Kafka's changeExpirationMs: whichever broker sees an older notification deletes it."""
RETRY_S = 1.0
"""Pause before trying again after ZooKeeper failed us."""


def new_notifications(children: Iterable[str], last_seen: int,
                      sequence: Callable[[str], int | None]) -> list[tuple[int, str]]:
    """(sequence, name) of the notifications after `last_seen`, in sequence order; `sequence`
    gives a child's N, None for anything that is not a notification."""
    found = ((sequence(c), c) for c in children)
    return sorted((seq, name) for seq, name in found if seq is not None and seq > last_seen)


def obsolete(created: dict[str, int], now: int) -> list[str]:
    """Notifications (name → creation time, ms) created more than CHANGE_EXPIRATION_MS ago."""
    return [name for name, ctime in created.items() if now - ctime > CHANGE_EXPIRATION_MS]


class ChangeFollower:
    """Runs `sync(full)` on the event loop each time it is woken, one at a time."""

    def __init__(self, sync: Callable[[bool], Awaitable[None]], session_id: Callable[[], int | None], what: str):
        self._sync = sync
        self._session_id = session_id
        self._what = what
        self._wake = asyncio.Event()
        self._full_sync = False
        self._session: int | None = None
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping = False

    async def start(self) -> None:
        """A full sync now (its failure is the caller's), then follow the wake-ups in a task."""
        self._loop = asyncio.get_running_loop()
        self._session = self._session_id()
        await self._sync(True)
        self._task = self._loop.create_task(self._run(), name=self._what)

    async def stop(self) -> None:
        self._stopping = True
        self._wake.set()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def wake(self) -> None:
        """On the loop: a watch fired."""
        self._wake.set()

    def wake_threadsafe(self, _event: object = None) -> None:
        """From kazoo's thread (a watch callback): wake the loop."""
        loop = self._loop
        if loop is not None and not loop.is_closed() and not self._stopping:
            try:
                loop.call_soon_threadsafe(self._wake.set)
            except RuntimeError:
                pass

    def on_registration(self, _broker_epoch: int) -> None:
        """After a new ZooKeeper session the one-shot watches are gone and notifications may have
        expired meanwhile: read everything again."""
        session = self._session_id()
        if session != self._session:
            self._session = session
            self._full_sync = True
            self._wake.set()

    async def _run(self) -> None:
        while not self._stopping:
            await self._wake.wait()
            self._wake.clear()
            full, self._full_sync = self._full_sync, False
            try:
                await self._sync(full)
            except Exception:
                log.warning("processing %s failed; retrying in %.0f s", self._what, RETRY_S, exc_info=True)
                self._full_sync |= full
                await asyncio.sleep(RETRY_S)
                self._wake.set()

"""Certificates reloaded without a restart (Kubernetes updates a mounted Secret's files in place).

A ReloadingSslContext holds the SSLContext built from one SslConfig and the fingerprint (content
hash) of the files it was built from. `check()` hashes the files again; when they changed and a
new context builds, the new one is `current()`: new connections take it, open ones keep theirs.
A half-written or broken replacement keeps the old context (and says so once, until the files
change again). CertificateWatcher polls every context of the process every few seconds.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import ssl
from collections.abc import Callable

from .ssl_factory import SslConfig

log = logging.getLogger(__name__)

RELOAD_INTERVAL_S = 5.0
"""How often certificate files are checked: a replaced certificate is served within seconds."""


def fingerprint(paths: tuple[str, ...]) -> str:
    """A hash of the files' contents; a missing or unreadable file hashes as such."""
    h = hashlib.sha256()
    for path in paths:
        h.update(path.encode() + b"\0")
        try:
            with open(path, "rb") as f:
                h.update(hashlib.sha256(f.read()).digest())
        except OSError as e:
            h.update(f"unreadable:{e.errno}".encode())
    return h.hexdigest()


class ReloadingSslContext:
    """The current SSLContext of one listener or client, rebuilt when its files change."""

    def __init__(self, config: SslConfig, build: Callable[[SslConfig], ssl.SSLContext], name: str = ""):
        self.config = config
        self.name = name
        self._build = build
        self._fingerprint = fingerprint(config.files())
        self._context = build(config)
        self._failed: str | None = None
        """The fingerprint of files that failed to load (not retried until they change)."""
        self.reloads = 0

    def current(self) -> ssl.SSLContext:
        return self._context

    def check(self) -> bool:
        """Rebuilds the context if its files changed; True when a new context is now current."""
        files = self.config.files()
        if not files:
            return False
        now = fingerprint(files)
        if now == self._fingerprint or now == self._failed:
            return False
        try:
            context = self._build(self.config)
        except ValueError as e:  # ConfigException: a file mid-update, or a bad replacement
            self._failed = now
            log.warning("%s: certificate files changed but do not load (%s); keeping the previous ones",
                        self.name or "TLS", e)
            return False
        self._context = context
        self._fingerprint = now
        self._failed = None
        self.reloads += 1
        log.info("%s: certificate files changed; new connections use the new certificates", self.name or "TLS")
        return True


    def reconfigure(self, config: SslConfig) -> bool:
        """New settings (a listener's key store changed dynamically): the context built from
        them is current, True; False when they are the same. ValueError (ConfigException),
        keeping the current context, when they do not load."""
        if config == self.config:
            return False
        context = self._build(config)
        self.config, self._context = config, context
        self._fingerprint, self._failed = fingerprint(config.files()), None
        self.reloads += 1
        log.info("%s: new certificate settings; new connections use them", self.name or "TLS")
        return True


class CertificateWatcher:
    """Polls a process's reloading contexts (one task for all of them)."""

    def __init__(self, interval_s: float = RELOAD_INTERVAL_S):
        self.interval_s = interval_s
        self.contexts: list[ReloadingSslContext] = []
        self._task: asyncio.Task[None] | None = None

    def watch(self, context: ReloadingSslContext) -> ReloadingSslContext:
        if context not in self.contexts:
            self.contexts.append(context)
        return context

    def poll(self) -> int:
        """Checks every context once; returns how many were reloaded."""
        return sum(1 for c in self.contexts if c.check())

    def start(self) -> None:
        if self._task is None and self.contexts:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="certificate-watcher")

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                await asyncio.to_thread(self.poll)
            except Exception:
                log.exception("checking certificate files failed")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass

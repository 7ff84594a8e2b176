"""AclAuthorizer: Kafka's ZooKeeper-mode authorizer, the shell around the decision core.

Decisions come from an in-memory snapshot (decision.AclSnapshot), so a check on the produce or
fetch path costs a few dictionary look-ups (and repeated checks one, from a decision cache that
each new snapshot empties). The snapshot is loaded from ZooKeeper at start-up and kept current
from the change notifications, as Kafka's ZkNodeChangeNotificationListener does: each broker
watches `/kafka-acl-changes` and `/kafka-acl-extended-changes`, re-reads each resource named by a
new notification and swaps the snapshot; after a new ZooKeeper session (watches lost,
notifications maybe purged) it reloads everything. Notifications older than 15 minutes are
deleted by whichever broker sees them first. Changes made through this broker's CreateAcls and
DeleteAcls are compare-and-set updates of the resource znode (zk_acl_store.update_resource) and
land in this broker's snapshot at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from odradek.common.clock import Clock, now_ms
from odradek.common.executors import BlockingExecutor
from odradek.common.network.request_context import ANONYMOUS, RequestContext
from odradek.common.zk_calls import BoundedCalls

from ..change_notifications import ChangeFollower, new_notifications, obsolete
from . import zk_acl_store as store
from .acl import (
    CLUSTER_NAME,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    ResourcePattern,
    ResourceType,
)
from .decision import AclSnapshot, Settings, authorize, authorize_by_type, parse_super_users

log = logging.getLogger(__name__)
audit = logging.getLogger("kafka.authorizer.logger")
"""Kafka's audit logger name: denials at INFO, grants at DEBUG."""

ACL_AUTHORIZER = "kafka.security.authorizer.AclAuthorizer"
DECISION_CACHE_MAX = 100_000


def host_of(context: RequestContext) -> str:
    """The client address as Kafka's authorizer compares it: the IP, without Kafka's "/"."""
    return context.client_host.lstrip("/")


class AclAuthorizer:
    enabled = True

    def __init__(self, settings: Settings, calls: Callable[[], BoundedCalls],
                 session_id: Callable[[], int | None] = lambda: None, clock: Clock = now_ms,
                 threads: BlockingExecutor | None = None):
        """`threads`: the ZooKeeper client's worker threads (tests without one: asyncio's)."""
        self.settings = settings
        self.clock = clock
        self._calls = calls
        self._run: Callable[..., Awaitable[Any]] = asyncio.to_thread if threads is None else threads.run
        self.snapshot = AclSnapshot()
        self._decisions: dict[tuple[str, str, AclOperation, ResourceType, str | None], bool] = {}
        self._last_seen: dict[str, int] = dict.fromkeys(store.CHANGE_PATHS, -1)
        self._created: dict[str, dict[str, int]] = {folder: {} for folder in store.CHANGE_PATHS}
        """Per folder, the creation times of the notifications seen and not yet deleted."""
        self._follower = ChangeFollower(self._sync, session_id, "ACL changes")
        self._write_lock = asyncio.Lock()

    @classmethod
    def from_config(cls, class_name: str, super_users: str | None, allow_everyone: bool,
                    calls: Callable[[], BoundedCalls], session_id: Callable[[], int | None],
                    clock: Clock = now_ms, threads: BlockingExecutor | None = None) -> AclAuthorizer:
        if class_name != ACL_AUTHORIZER:
            log.warning("authorizer.class.name=%s: using Odradek's AclAuthorizer (%s's rules)", class_name,
                        ACL_AUTHORIZER)
        return cls(Settings(parse_super_users(super_users), allow_everyone), calls, session_id, clock, threads)

    # --- decisions ------------------------------------------------------------------------------

    def authorize(self, context: RequestContext, op: AclOperation, resource_type: ResourceType, name: str) -> bool:
        principal, host = str(context.principal), host_of(context)
        key = (principal, host, op, resource_type, name)
        allowed = self._decisions.get(key)
        if allowed is None:
            allowed = authorize(self.snapshot, self.settings, principal, host, op, resource_type, name)
            if len(self._decisions) >= DECISION_CACHE_MAX:
                self._decisions.clear()
            self._decisions[key] = allowed
            if not allowed:
                audit.info("Principal = %s is Denied Operation = %s from host = %s on resource = %s:LITERAL:%s",
                           principal, op.name, host, resource_type.name, name[:200])
        return allowed

    def authorize_by_type(self, context: RequestContext, op: AclOperation, resource_type: ResourceType) -> bool:
        """Walks every ACL of the type (once per snapshot: the answer is cached with the others)."""
        principal, host = str(context.principal), host_of(context)
        key = (principal, host, op, resource_type, None)
        allowed = self._decisions.get(key)
        if allowed is None:
            allowed = authorize_by_type(self.snapshot, self.settings, principal, host, op, resource_type)
            if len(self._decisions) >= DECISION_CACHE_MAX:
                self._decisions.clear()
            self._decisions[key] = allowed
        return allowed

    def unauthenticated_peers_refused(self, listeners: dict[str, str]) -> list[str]:
        """The PLAINTEXT/SSL listeners among `listeners` (name → security protocol, those the
        cluster's own requests use) whose User:ANONYMOUS may not CLUSTER_ACTION: the brokers' and the
        controller's requests arriving there would all be refused (a start-up hint, as Kafka gives none)."""
        if authorize(self.snapshot, self.settings, ANONYMOUS, "127.0.0.1", AclOperation.CLUSTER_ACTION,
                     ResourceType.CLUSTER, CLUSTER_NAME):
            return []
        return sorted(name for name, protocol in listeners.items() if protocol == "PLAINTEXT")

    def acls(self, binding_filter: AclBindingFilter) -> list[AclBinding]:
        """The bindings a DescribeAcls filter matches, from the snapshot (AclAuthorizer.acls)."""
        out: list[AclBinding] = []
        for pattern, entries in self.snapshot.acls.items():
            if binding_filter.pattern.matches(pattern):
                out.extend(AclBinding(pattern, e) for e in entries if binding_filter.entry.matches(e))
        return out

    def _replace(self, changes: dict[ResourcePattern, frozenset[AccessControlEntry]]) -> None:
        self.snapshot = self.snapshot.updated(changes)
        self._decisions = {}

    # --- changes through this broker ------------------------------------------------------------

    async def create_acls(self, bindings: Sequence[AclBinding]) -> list[Exception | None]:
        """Store valid bindings, one compare-and-set write per resource; one result per binding."""
        by_resource: dict[ResourcePattern, list[int]] = {}
        for i, b in enumerate(bindings):
            by_resource.setdefault(b.pattern, []).append(i)

        def adder(added: frozenset[AccessControlEntry]) -> store.Change:
            return lambda current: current | added

        changes = {p: adder(frozenset(bindings[i].entry for i in ix)) for p, ix in by_resource.items()}
        results: list[Exception | None] = [None] * len(bindings)
        async with self._write_lock:
            done = await self._run(store.update_resources, self._calls(), changes)
            self._replace({p: acls for p, acls in done.items() if not isinstance(acls, Exception)})
        for pattern, outcome in done.items():
            if isinstance(outcome, Exception):
                log.warning("creating ACLs on %s failed: %s", pattern, outcome)
                for i in by_resource[pattern]:
                    results[i] = outcome
        return results

    async def delete_acls(self, filters: Sequence[AclBindingFilter]
                          ) -> list[list[tuple[AclBinding, Exception | None]]]:
        """Delete what each filter matches (AclAuthorizer.deleteAcls): resources from the snapshot
        plus those a filter names exactly; per filter, the bindings deleted (or failed)."""
        results: list[list[tuple[AclBinding, Exception | None]]] = [[] for _ in filters]
        removed: dict[ResourcePattern, dict[AccessControlEntry, int]] = {}

        def remover(pattern: ResourcePattern, matching: list[tuple[int, AclBindingFilter]]) -> store.Change:
            def change(current: frozenset[AccessControlEntry]) -> frozenset[AccessControlEntry]:
                gone = removed[pattern] = {}
                for entry in current:
                    for i, f in matching:
                        if f.entry.matches(entry):
                            gone.setdefault(entry, i)
                return current - gone.keys()
            return change

        async with self._write_lock:
            resources = set(self.snapshot.acls)
            for f in filters:
                resources.update(f.pattern.exact_patterns())
            changes = {}
            for pattern in sorted(resources):
                matching = [(i, f) for i, f in enumerate(filters) if f.pattern.matches(pattern)]
                if matching:
                    changes[pattern] = remover(pattern, matching)
            done = await self._run(store.update_resources, self._calls(), changes) if changes else {}
            self._replace({p: acls for p, acls in done.items() if not isinstance(acls, Exception)})
        for pattern, outcome in done.items():
            error = outcome if isinstance(outcome, Exception) else None
            if error is not None:
                log.warning("deleting ACLs on %s failed: %s", pattern, error)
            for entry, i in removed.get(pattern, {}).items():
                results[i].append((AclBinding(pattern, entry), error))
        return results

    # --- start, stop, change notifications ------------------------------------------------------

    async def start(self) -> None:
        """Create Kafka's ACL paths, arm the change watches, load every ACL, then follow changes."""
        await self._run(store.ensure_paths, self._calls())
        await self._follower.start()
        log.info("authorizer loaded %d ACLs on %d resources (super users: %s, allow.everyone.if.no.acl.found=%s)",
                 sum(len(a) for a in self.snapshot.acls.values()), len(self.snapshot.acls),
                 ",".join(sorted(self.settings.super_users)) or "none", self.settings.allow_everyone_if_no_acl_found)

    async def stop(self) -> None:
        await self._follower.stop()

    def on_registration(self, broker_epoch: int) -> None:
        self._follower.on_registration(broker_epoch)

    async def _sync(self, full: bool) -> None:
        loaded, changed = await self._run(self._sync_blocking, full)
        if loaded is not None:
            self.snapshot = loaded
            self._decisions = {}
        elif changed:
            self._replace(changed)

    def _sync_blocking(self, full: bool
                       ) -> tuple[AclSnapshot | None, dict[ResourcePattern, frozenset[AccessControlEntry]]]:
        """Re-arm the watches and read what changed: everything when `full` (the notifications seen
        so far are then skipped), else the resources new notifications name."""
        calls = self._calls()
        named: set[ResourcePattern] = set()
        for folder in store.CHANGE_PATHS:
            children = store.changes(calls, folder, watch=self._follower.wake_threadsafe)
            fresh = new_notifications(children, self._last_seen[folder], store.change_sequence)
            read = store.read_changes(calls, folder, [c for _, c in fresh])
            for _, child in fresh:
                got = read.get(child)
                if got is None:
                    continue
                self._created[folder][child] = got[1]
                if not full:
                    try:
                        named.add(store.decode_change(folder, got[0]))
                    except ValueError as e:
                        log.warning("ignoring ACL change %s/%s: %s", folder, child, e)
            if fresh:
                self._last_seen[folder] = max(self._last_seen[folder], fresh[-1][0])
            self._purge(calls, folder)
        if full:
            loaded = store.load_all(calls, lambda path, e: log.warning("ignoring ACL znode %s: %s", path, e))
            return AclSnapshot.of(loaded), {}
        out = {}
        for pattern in named:
            try:
                out[pattern] = store.read_resource(calls, pattern)[0]
            except ValueError as e:
                log.warning("ignoring unreadable ACLs of %s: %s", pattern, e)
                out[pattern] = frozenset()
        if out:
            log.info("applied ACL changes on %d resources", len(out))
        return None, out

    def _purge(self, calls: BoundedCalls, folder: str) -> None:
        doomed = obsolete(self._created[folder], self.clock())
        if doomed:
            store.delete_changes(calls, folder, doomed)
            for child in doomed:
                self._created[folder].pop(child, None)

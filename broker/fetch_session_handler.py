"""The fetching side of a fetch session (KIP-227; Kafka's FetchSessionHandler).

Without a session every Fetch lists every partition a follower follows on that leader, and every
answer carries all of them, though most are idle. With one, the leader caches the partitions and
their fetch state: a request lists only what changed since the previous one (a new fetch offset,
a new leader epoch) and what to forget; the answer only the partitions with something to say.

Pure state: `build` says what the next request carries (looking only at the keys the fetcher says
changed, when it says so), `handle_response` / `handle_error` what its outcome means for the one
after.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Generic, NamedTuple, TypeVar, cast

from kio.schema.errors import ErrorCode

from odradek.broker.fetch_session import INITIAL_EPOCH, INVALID_SESSION_ID, next_epoch

Key = tuple[str, int]
"""(topic, partition)."""
V = TypeVar("V")
"""A partition's fetch data: any value compared with ==."""
_MISSING = object()


class FetchRequestData(NamedTuple, Generic[V]):
    session_id: int
    epoch: int
    to_send: dict[Key, V]
    """key → fetch data to put in the request."""
    forgotten: list[Key]
    """keys the session should drop."""
    full: bool


class FetchSessionHandler(Generic[V]):
    """Session state of one fetcher towards one leader."""

    def __init__(self) -> None:
        self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH
        self.session_partitions: dict[Key, V] = {}
        """What the leader caches for us: key → the fetch data last sent."""
        self._pending: FetchRequestData[V] | None = None

    def build(self, partitions: dict[Key, V], changed: Iterable[Key] | None = None) -> FetchRequestData[V]:
        """The next request for `partitions` (key → fetch data).

        `changed`, if given, names every key whose data may differ from what the leader caches
        (added, changed or gone since the last request): an incremental request then looks at
        those only, so a round costs O(changed), not O(partitions). Without it, all are compared.
        """
        if self.epoch == INITIAL_EPOCH:
            data = FetchRequestData(self.session_id, INITIAL_EPOCH, dict(partitions), [], True)
        else:
            cached = self.session_partitions
            to_send: dict[Key, V] = {}
            forgotten: list[Key] = []
            for k in (partitions.keys() | cached.keys()) if changed is None else changed:
                v = partitions.get(k, _MISSING)
                c = cached.get(k, _MISSING)
                if v is _MISSING:
                    if c is not _MISSING:
                        forgotten.append(k)
                elif c is not v and c != v:  # the fetcher reuses unchanged data: identity settles most
                    to_send[k] = cast(V, v)
            data = FetchRequestData(self.session_id, self.epoch, to_send, forgotten, False)
        self._pending = data
        return data

    def handle_response(self, error_code: int, session_id: int) -> None:
        """Outcome of the request `build` made last; a top-level error starts over with a full one."""
        sent, self._pending = self._pending, None
        if sent is None:
            return
        if error_code != 0:
            self._reset(keep_id=error_code != ErrorCode.fetch_session_id_not_found)
            return
        if session_id == INVALID_SESSION_ID:
            # none granted, or the leader closed ours (it emptied): full requests, asking each time
            self._reset(keep_id=False)
            return
        if sent.full:
            self.session_id, self.epoch = session_id, next_epoch(INITIAL_EPOCH)
            self.session_partitions = sent.to_send  # build's own copy
            return
        self.epoch = next_epoch(self.epoch)
        cached = self.session_partitions
        cached.update(sent.to_send)
        for k in sent.forgotten:
            cached.pop(k, None)

    def handle_error(self) -> None:
        """The request got no answer (connection lost or abandoned): the leader may or may not have
        applied it, so the next request is a full one that replaces the session."""
        self._pending = None
        self._reset(keep_id=True)

    def _reset(self, *, keep_id: bool) -> None:
        # Naming the old session in the full request lets the leader free its slot at once.
        if not keep_id:
            self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH
        self.session_partitions = {}


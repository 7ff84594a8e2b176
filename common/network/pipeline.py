"""Which requests of one connection may start, and which answers may go out: the policy alone.

Kafka answers a connection's requests in order. Odradek pipelines Produce (see socket_server):
up to `window` pipelined requests run at once, so an acks=all client with many requests in flight
waits one replication round trip per window instead of per request. Every other request is a
barrier: it starts only when nothing is in flight, and nothing starts until it is answered.
Answers leave in request order, the finished ones at the head together.

Pure bookkeeping over opaque tokens (the shell's tasks), so the rules are tested without sockets
or sleeps.
"""

from __future__ import annotations

import collections
from typing import Generic, TypeVar

T = TypeVar("T")


class RequestPipeline(Generic[T]):
    def __init__(self, window: int):
        if window < 1:
            raise ValueError("window must be at least 1")
        self.window = window
        self._started: collections.deque[T] = collections.deque()
        self._barrier = False
        """A barrier request is among the started ones."""
        self._finished: set[int] = set()

    def __len__(self) -> int:
        """Requests started and not yet handed out by `answerable`."""
        return len(self._started)

    def may_start(self, pipelined: bool) -> bool:
        """Whether the next request (pipelined or a barrier) may start now."""
        if not self._started:
            return True
        return pipelined and not self._barrier and len(self._started) < self.window

    def start(self, token: T, pipelined: bool) -> None:
        if not self.may_start(pipelined):
            raise RuntimeError("request started against the pipeline's policy")
        self._started.append(token)
        if not pipelined:
            self._barrier = True

    def finish(self, token: T) -> None:
        """`token`'s answer is ready (or it failed); it leaves with `answerable` in its turn."""
        self._finished.add(id(token))

    def answerable(self) -> list[T]:
        """The finished requests at the head, in request order; they leave the pipeline."""
        out = []
        while self._started and id(self._started[0]) in self._finished:
            token = self._started.popleft()
            self._finished.discard(id(token))
            out.append(token)
        if not self._started:
            self._barrier = False
        return out

    def abandon(self) -> list[T]:
        """Every request still in the pipeline (the connection is closing)."""
        out = list(self._started)
        self._started.clear()
        self._finished.clear()
        self._barrier = False
        return out

"""A stand-in broker for controller tests: it registers in /brokers/ids like a broker, records the
LeaderAndIsr / UpdateMetadata / StopReplica it receives and answers them (STALE_CONTROLLER_EPOCH
for an epoch lower than one it has seen, success otherwise). Its server runs in a thread of its
own so that tests stay synchronous."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass

from kazoo.client import KazooClient
from kio.schema.errors import ErrorCode

from odradek.common import messages as m
from odradek.common import wire
from odradek.common import zk_data as z
from odradek.controller.zk_client import ensure_chroot

STALE_CONTROLLER_EPOCH = 11


@dataclass(frozen=True)
class Received:
    payload: object
    accepted: bool
    at: float


class FakeBroker:
    def __init__(self, zk_connect: str, broker_id: int):
        self.zk_connect = zk_connect
        self.broker_id = broker_id
        self.port = 0
        self.received: list[Received] = []
        self.max_epoch = -1
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True, name=f"fake-broker-{broker_id}")
        self._server: asyncio.AbstractServer | None = None
        self._zk: KazooClient | None = None
        self._handlers: set[asyncio.Task] = set()

    # --- lifecycle -----------------------------------------------------------------------------

    def start(self) -> FakeBroker:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._serve(), self._loop).result(10)
        self.register()
        return self

    async def _serve(self):
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    def register(self) -> None:
        """Register /brokers/ids/<id> in a new session (a new broker epoch)."""
        ensure_chroot(self.zk_connect)
        self._zk = KazooClient(hosts=self.zk_connect, timeout=10)
        self._zk.start(timeout=10)
        self._zk.ensure_path(z.BROKER_IDS)
        info = z.BrokerInfo(self.broker_id, (z.EndPoint("127.0.0.1", self.port),
                                             z.EndPoint("127.0.0.1", self.port, "CONTROLLER")))
        self._zk.create(z.broker_path(self.broker_id), z.encode_broker(info), ephemeral=True)

    def unregister(self) -> None:
        """Close the session: the registration vanishes at once, as when a broker stops."""
        zk, self._zk = self._zk, None
        if zk is not None:
            zk.stop()
            zk.close()

    def stop(self) -> None:
        self.unregister()
        if self._thread.is_alive():
            async def shutdown():
                self._server.close()
                for task in list(self._handlers):
                    task.cancel()
                await asyncio.gather(*self._handlers, return_exceptions=True)
                await self._server.wait_closed()

            try:
                asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(5)
            finally:
                self._loop.call_soon_threadsafe(self._loop.stop)
                self._thread.join(5)
                if not self._thread.is_alive():
                    self._loop.close()

    # --- serving -------------------------------------------------------------------------------

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        task = asyncio.current_task()
        self._handlers.add(task)
        try:
            while True:
                size = wire.SIZE.unpack(await reader.readexactly(4))[0]
                frame = await reader.readexactly(size)
                header, payload, _ = wire.decode_request(frame)
                response = self._answer(payload)
                writer.write(wire.encode_response(response, header.correlation_id, flexible_header=False))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            self._handlers.discard(task)
            writer.close()

    def _answer(self, payload):
        with self._lock:
            accepted = payload.controller_epoch >= self.max_epoch
            if accepted:
                self.max_epoch = payload.controller_epoch
            self.received.append(Received(payload, accepted, time.monotonic()))
        code = ErrorCode(0 if accepted else STALE_CONTROLLER_EPOCH)
        if isinstance(payload, m.LeaderAndIsrRequest):
            return m.LeaderAndIsrResponse(error_code=code, partition_errors=tuple(
                m.LeaderAndIsrPartitionError(topic_name=t.topic_name, partition_index=p.partition_index, error_code=code)
                for t in payload.topic_states for p in t.partition_states))
        if isinstance(payload, m.UpdateMetadataRequest):
            return m.UpdateMetadataResponse(error_code=code)
        if isinstance(payload, m.StopReplicaRequest):
            return m.StopReplicaResponse(error_code=code, partition_errors=tuple(
                m.StopReplicaPartitionError(topic_name=t.name, partition_index=p, error_code=code)
                for t in payload.topics for p in t.partition_indexes))
        raise ValueError(f"unexpected request {payload!r}")

    # --- inspection ----------------------------------------------------------------------------

    def requests(self, kind: type | None = None, since: float = 0.0) -> list[object]:
        with self._lock:
            return [r.payload for r in self.received if r.at >= since and (kind is None or isinstance(r.payload, kind))]

    def wait_for(self, predicate, timeout: float = 20.0, what: str = "condition"):
        """Poll `predicate(self)` until truthy (returned) or fail after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            result = predicate(self)
            if result:
                return result
            if time.monotonic() > deadline:
                raise AssertionError(f"broker {self.broker_id}: no {what} within {timeout}s; got {self.requests()}")
            time.sleep(0.05)


def partition_states(request) -> dict[tuple[str, int], object]:
    """(topic, partition) → partition state of a LeaderAndIsr or UpdateMetadata request."""
    return {(t.topic_name, p.partition_index): p for t in request.topic_states for p in t.partition_states}

"""ControllerChannelManager: requests are encoded off the event loop, once whatever the retries, and
go out in order with the connection's correlation ids (an in-process stand-in broker answers)."""

from __future__ import annotations

import asyncio
import threading

from kio.schema.errors import ErrorCode
from kio.static.primitive import i32, i64

from odradek.common import messages as m
from odradek.common import wire
from odradek.common.zk_data import BrokerInfo, EndPoint
from odradek.controller import channel_manager


def stop_replica(epoch: int, partitions: int = 3) -> m.StopReplicaRequest:
    return m.StopReplicaRequest(controller_id=i32(0), controller_epoch=i32(epoch), broker_epoch=i64(7),
                                delete_partitions=False,
                                topics=(m.StopReplicaTopic(name="t", partition_indexes=tuple(
                                    i32(p) for p in range(partitions))),))


class StandIn:
    """Answers StopReplica; drops the connection of the first `drop` requests unanswered."""

    def __init__(self, drop: int = 0) -> None:
        self.drop = drop
        self.received: list[tuple[int, m.StopReplicaRequest]] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                size = wire.SIZE.unpack(await reader.readexactly(4))[0]
                header, payload, _ = wire.decode_request(await reader.readexactly(size))
                if self.drop > 0:
                    self.drop -= 1
                    writer.close()
                    return
                self.received.append((int(header.correlation_id), payload))
                writer.write(wire.encode_response(
                    m.StopReplicaResponse(error_code=ErrorCode.none, partition_errors=()),
                    int(header.correlation_id), flexible_header=False))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


async def run_channel(stand_in: StandIn, payloads: list[m.StopReplicaRequest], monkeypatch) -> list[str]:
    """Send `payloads` to the stand-in; the names of the threads that encoded them."""
    threads: list[str] = []
    encode = wire.encode_request

    def recording(payload: object, correlation_id: int, client_id: str | None) -> bytes:
        threads.append(threading.current_thread().name)
        return encode(payload, correlation_id, client_id)

    monkeypatch.setattr(wire, "encode_request", recording)
    server = await asyncio.start_server(stand_in.handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    answered = asyncio.Event()
    manager = channel_manager.ControllerChannelManager(
        0, listener="CONTROLLER", backoff_ms=1, backoff_max_ms=5,
        on_response=lambda b, request, response: answered.set() if request is payloads[-1] else None)
    try:
        manager.update_brokers({1: BrokerInfo(1, (EndPoint("127.0.0.1", port, "CONTROLLER"),), epoch=7)})
        for payload in payloads:
            assert manager.send(1, payload)
        await asyncio.wait_for(answered.wait(), 10)
    finally:
        await manager.close()
        server.close()
        await server.wait_closed()
    return threads


def test_requests_are_encoded_off_the_loop_in_order(monkeypatch):
    stand_in = StandIn()
    payloads = [stop_replica(epoch) for epoch in (1, 2, 3)]
    threads = asyncio.run(run_channel(stand_in, payloads, monkeypatch))
    assert threads and all(name.startswith("controller-encode") for name in threads)
    assert [p for _, p in stand_in.received] == payloads
    ids = [cid for cid, _ in stand_in.received]
    assert ids == sorted(ids) and len(set(ids)) == 3


def test_a_retried_request_is_encoded_once(monkeypatch):
    stand_in = StandIn(drop=2)
    payload = stop_replica(1, partitions=1000)
    threads = asyncio.run(run_channel(stand_in, [payload], monkeypatch))
    assert len(threads) == 1
    assert [p for _, p in stand_in.received] == [payload]


def test_correlation_id_is_replaced_in_an_encoded_frame():
    frame = wire.encode_request(stop_replica(1), 0, "controller-0")
    again = wire.with_correlation_id(frame, 12345)
    assert wire.peek_api(again[4:]) == (5, 1, 12345)
    assert wire.decode_request(again[4:])[1] == wire.decode_request(frame[4:])[1]

"""BootstrapConnections: a tool reaches the cluster while the first bootstrap server is down."""

import asyncio

from kio.schema.errors import ErrorCode

from odradek.common import messages as m
from odradek.common import wire
from odradek.common.network.bootstrap import BootstrapConnections, parse_bootstrap
from odradek.dev.zookeeper import free_port


def request(epoch: int) -> m.UpdateMetadataRequest:
    return m.UpdateMetadataRequest(controller_id=1000, controller_epoch=epoch, broker_epoch=1, topic_states=(), live_brokers=())


async def answering_server(connections: list):
    """Answers each request with error_code = its controller_epoch; counts connections."""
    async def handle(reader, writer):
        connections.append(1)
        try:
            while True:
                size = wire.SIZE.unpack(await reader.readexactly(4))[0]
                header, payload, _ = wire.decode_request(await reader.readexactly(size))
                response = m.UpdateMetadataResponse(error_code=ErrorCode(payload.controller_epoch))
                writer.write(wire.encode_response(response, header.correlation_id, flexible_header=False))
        except asyncio.IncompleteReadError:
            pass
        finally:
            writer.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


def test_parse_bootstrap_reads_every_server_and_defaults_the_host():
    assert parse_bootstrap("a:1, :2,,b:3") == [("a", 1), ("127.0.0.1", 2), ("b", 3)]


def test_send_any_skips_a_dead_server_and_asks_the_live_one_first_afterwards():
    dead = ("127.0.0.1", free_port())
    connections: list = []

    async def scenario():
        server = await answering_server(connections)
        live = ("127.0.0.1", server.sockets[0].getsockname()[1])
        tool = BootstrapConnections(f"{dead[0]}:{dead[1]},{live[0]}:{live[1]}", 2.0, "test")
        try:
            first = await tool.send_any(request(7))
            order = list(tool.bootstraps)
            second = await tool.send_any(request(8))
        finally:
            await tool.close()
            server.close()
            await server.wait_closed()
        return int(first.error_code), int(second.error_code), order, live

    first, second, order, live = run(scenario())
    assert (first, second) == (7, 8)
    assert order == [live, dead]
    assert len(connections) == 1


def test_send_any_raises_the_last_error_when_no_server_answers():
    async def scenario():
        tool = BootstrapConnections(f"127.0.0.1:{free_port()},127.0.0.1:{free_port()}", 1.0, "test")
        try:
            await tool.send_any(request(1))
        except ConnectionError as e:
            return str(e)
        finally:
            await tool.close()
        return ""

    assert "cannot connect" in run(scenario())


def test_no_bootstrap_server_is_a_connection_error():
    async def scenario():
        try:
            await BootstrapConnections("", 1.0, "test").send_any(request(1))
        except ConnectionError as e:
            return str(e)
        return ""

    assert run(scenario()) == "no bootstrap server given"

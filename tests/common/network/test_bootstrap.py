"""AdminConnections: a tool (or the operator) reaches the cluster while the first bootstrap server is down."""

import asyncio

import pytest
from kio.schema.errors import ErrorCode
from test_client import EchoServer, run, update_metadata

from odradek.common import wire
from odradek.common.api_key import ApiKey
from odradek.common.network.bootstrap import AdminConnections, parse_bootstrap
from odradek.dev.zookeeper import free_port


def test_parse_bootstrap_reads_every_server_and_defaults_the_host():
    assert parse_bootstrap("a:1, :2,,b:3") == [("a", 1), ("127.0.0.1", 2), ("b", 3)]


def test_send_any_skips_a_dead_server_and_asks_the_live_one_first_afterwards():
    dead = ("127.0.0.1", free_port())

    async def scenario():
        server = await EchoServer().start()
        live = ("127.0.0.1", server.port)
        tool = AdminConnections([dead, live], 2.0, "test")
        try:
            first = await tool.send_any(update_metadata(7))
            order = list(tool.bootstraps)
            second = await tool.send_any(update_metadata(8))
        finally:
            await tool.close()
            await server.stop()
        return int(first.error_code), int(second.error_code), order, live, server.connections

    first, second, order, live, connections = run(scenario())
    assert (first, second) == (7, 8)
    assert order == [live, dead]
    assert connections == 1


def test_send_any_raises_the_last_error_when_no_server_answers():
    async def scenario():
        tool = AdminConnections([("127.0.0.1", free_port()), ("127.0.0.1", free_port())], 1.0, "test")
        try:
            await tool.send_any(update_metadata(1))
        except ConnectionError as e:
            return str(e)
        finally:
            await tool.close()
        return ""

    assert "cannot connect" in run(scenario())


def test_no_bootstrap_server_is_a_connection_error():
    async def scenario():
        try:
            await AdminConnections([], 1.0, "test").send_any(update_metadata(1))
        except ConnectionError as e:
            return str(e)
        return ""

    assert run(scenario()) == "no bootstrap server given"


def test_error_answers_read_as_the_tools_print_them_and_the_operator_keeps_them():
    from kio.schema.errors import ErrorCode

    from odradek.common.network.bootstrap import ToolError, error_name, error_text, raise_for_error

    assert error_name(ErrorCode.none) is None and error_text(0, "ignored") is None
    assert error_name(ErrorCode.unknown_topic_or_partition) == "unknown_topic_or_partition"
    assert error_text(ErrorCode.no_reassignment_in_progress) == "NO_REASSIGNMENT_IN_PROGRESS"
    assert error_text(41, "not the controller") == "NOT_CONTROLLER: not the controller"
    raise_for_error(0)
    with pytest.raises(ToolError, match=r"^broker 1: COORDINATOR_NOT_AVAILABLE$"):
        raise_for_error(ErrorCode.coordinator_not_available, None, "broker 1")


class VersionsServer(EchoServer):
    """Answers ApiVersions v3 offering Metadata v0-v12 only; counts connections and ApiVersions."""

    def __init__(self):
        super().__init__()
        self.api_versions = 0

    async def handle(self, reader, writer):
        from kio.schema.api_versions.v3 import response as r
        from kio.static.primitive import i16

        self.connections += 1
        try:
            while True:
                size = wire.SIZE.unpack(await reader.readexactly(4))[0]
                header, _, _ = wire.decode_request(await reader.readexactly(size))
                self.api_versions += 1
                answer = r.ApiVersionsResponse(
                    error_code=ErrorCode.none, api_keys=(r.ApiVersion(api_key=i16(3), min_version=i16(0),
                                                                      max_version=i16(12)),),
                    throttle_time=wire.NO_THROTTLE, supported_features=(), finalized_features_epoch=-1,
                    finalized_features=(), zk_migration_ready=False)
                writer.write(wire.encode_response(answer, header.correlation_id, flexible_header=False))
        except asyncio.IncompleteReadError:
            pass
        finally:
            writer.close()


def test_connect_any_negotiates_once_per_lane_and_moves_past_failed_brokers():
    """The operator's way: one connection per lane to the first server that answers ApiVersions,
    kept until it fails; a version per API agreed with that server."""
    dead = ("127.0.0.1", free_port())

    async def scenario():
        server = await VersionsServer().start()
        live = ("127.0.0.1", server.port)
        conns = AdminConnections([dead, live], 2.0, "test", connect_attempts=1, connect_timeout_s=1.0,
                                 software_name="odradek-test")
        try:
            look, first = await conns.connect_any("look")
            order = list(conns.bootstraps)
            change, other = await conns.connect_any("change")
            again = (await conns.connect_any("look"))[1]
            versions = (conns.version(live, ApiKey.METADATA, (1, 20)), conns.version(live, ApiKey.METADATA, (13, 20)),
                        conns.version(live, ApiKey.CREATE_TOPICS, (2, 7)))
            await conns.failed(live, "look")
            after = list(conns.bootstraps)
        finally:
            await conns.close()
            await server.stop()
        return (look, change, first is again, first is other, order, versions, after, server.connections,
                server.api_versions, live)

    look, change, same, shared, order, versions, after, connections, asked, live = run(scenario())
    assert (look, change) == (live, live)
    assert same and not shared
    assert order == [live, dead]
    assert versions == (12, None, None)
    assert after == [dead, live]
    assert (connections, asked) == (2, 2)


def test_connect_any_with_no_server_answering_names_each_one():
    async def scenario():
        conns = AdminConnections([("127.0.0.1", free_port())], 1.0, "test", connect_attempts=1,
                                 software_name="odradek-test")
        try:
            await conns.connect_any()
        except ConnectionError as e:
            return str(e)
        finally:
            await conns.close()
        return ""

    assert run(scenario()).startswith("no broker answered: 127.0.0.1:")


def test_a_tool_is_told_of_a_version_the_broker_does_not_offer_instead_of_sending_it():
    from odradek.common.network.bootstrap import ToolError

    async def scenario():
        server = await VersionsServer().start()
        live = ("127.0.0.1", server.port)
        tool = AdminConnections([live], 2.0, "test", software_name="odradek-test")
        try:
            await tool.send_any(update_metadata(1))  # UpdateMetadata: not offered
        except ToolError as e:
            return str(e), server.api_versions
        finally:
            await tool.close()
            await server.stop()
        return "", server.api_versions

    message, asked = run(scenario())
    assert "does not support UpdateMetadataRequest" in message and asked == 1

"""BootstrapConnections: a tool reaches the cluster while the first bootstrap server is down."""

import pytest
from test_client import EchoServer, run, update_metadata

from odradek.common.network.bootstrap import BootstrapConnections, parse_bootstrap
from odradek.dev.zookeeper import free_port


def test_parse_bootstrap_reads_every_server_and_defaults_the_host():
    assert parse_bootstrap("a:1, :2,,b:3") == [("a", 1), ("127.0.0.1", 2), ("b", 3)]


def test_send_any_skips_a_dead_server_and_asks_the_live_one_first_afterwards():
    dead = ("127.0.0.1", free_port())

    async def scenario():
        server = await EchoServer().start()
        live = ("127.0.0.1", server.port)
        tool = BootstrapConnections(f"{dead[0]}:{dead[1]},{live[0]}:{live[1]}", 2.0, "test")
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
        tool = BootstrapConnections(f"127.0.0.1:{free_port()},127.0.0.1:{free_port()}", 1.0, "test")
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
            await BootstrapConnections("", 1.0, "test").send_any(update_metadata(1))
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

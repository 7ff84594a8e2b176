"""common/network/request_context.py: what handlers learn about a request besides its body."""

from types import SimpleNamespace

from odradek.common.network.request_context import ANONYMOUS, RequestContext, client_host


def test_client_host_is_printed_as_kafka_does():
    assert client_host(("10.1.2.3", 51234)) == "/10.1.2.3"
    assert client_host(("::1", 51234, 0, 0)) == "/::1"
    assert client_host(None) == "/127.0.0.1"


def test_context_reads_the_header():
    header = SimpleNamespace(request_api_version=7, client_id=None, correlation_id=3)
    context = RequestContext(header, client_host(("10.0.0.9", 1)), "INTERNAL")
    assert (context.api_version, context.client_id, context.client_host) == (7, "", "/10.0.0.9")
    assert (context.listener, context.principal) == ("INTERNAL", ANONYMOUS)

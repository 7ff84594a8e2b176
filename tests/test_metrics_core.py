"""The Prometheus core: text format, latency quantiles, the endpoint's refusals (pure or loopback)."""

import asyncio
import math

from odradek.broker.metrics import RequestStats, api_name, metered
from odradek.common.metrics import Family, Latency, MetricsServer, Registry, render


def test_text_format_escapes_labels_and_types_each_family():
    text = render([Family("a_total", "counter", "A.").add(3, (("topic", 'x"y\\z'),)).add(1),
                   Family("b", "gauge", "B.").add(float("nan"))])
    assert text == ('# HELP a_total A.\n# TYPE a_total counter\na_total{topic="x\\"y\\\\z"} 3.0\na_total 1.0\n'
                    '# HELP b B.\n# TYPE b gauge\nb NaN\n')


def test_a_counter_is_named_total_and_a_family_has_a_known_type():
    """prometheus-client names a counter's samples ..._total: a counter named otherwise would
    expose a TYPE line for a name no sample has."""
    for bad in (("a", "counter"), ("a_total", "histogram")):
        try:
            Family(bad[0], bad[1], "A.")
            raise AssertionError(f"{bad} accepted")
        except ValueError:
            pass


def test_every_family_the_processes_export_is_a_valid_family():
    """The broker's, controller's and operator's collectors on empty state: each name once, the
    counters ..._total, the summaries with _count; the exposition parses back."""
    from prometheus_client.parser import text_string_to_metric_families

    from odradek.broker.metrics import BrokerTopicStats
    from odradek.operator.metrics import ReconcileStats

    stats = BrokerTopicStats()
    stats.record_in("t", 2, 100)
    families = [*stats.families(), *RequestStats().families(), *ReconcileStats().families()]
    names = [f.name for f in families]
    assert len(names) == len(set(names))
    parsed = {f.name: f.type for f in text_string_to_metric_families(render(families))}
    assert parsed["kafka_server_brokertopicmetrics_messagesin"] == "counter"
    assert "kafka_network_requestmetrics_totaltimems" in parsed


def test_latency_quantiles_are_bucket_bounds_within_a_fifth():
    lat = Latency()
    for ms in range(1, 101):
        lat.observe(ms / 1000)
    assert 0.050 <= lat.quantile(0.5) <= 0.050 * 1.2
    assert 0.099 <= lat.quantile(0.99) <= 0.099 * 1.2
    assert lat.total == 100 and math.isclose(lat.sum_s, 5.05)
    assert math.isnan(Latency().quantile(0.5))
    tiny, huge = Latency(), Latency()
    tiny.observe(0.0)
    huge.observe(1e9)
    assert tiny.quantile(0.5) > 0 and huge.total == 1


def test_metered_counts_every_request_by_api_and_ignores_garbage_keys():
    stats = RequestStats()

    async def handle(frame, conn):
        if frame[:2] == b"\x00\x03":
            raise ValueError("refused")
        return ["answer"]

    wrapped = metered(handle, stats)

    async def run():
        assert await wrapped(b"\x00\x00rest", None) == ["answer"]
        try:
            await wrapped(b"\x00\x03", None)
        except ValueError:
            pass
        await wrapped(b"\xff\xff", None)
        await wrapped(b"", None)
    asyncio.run(run())
    assert {k: v.total for k, v in stats.latency.items()} == {0: 1, 3: 1}
    assert stats.in_flight == 0
    assert api_name(0) == "Produce" and api_name(3) == "Metadata"
    text = render(stats.families())
    assert 'kafka_network_requestmetrics_requests_total{request="Produce"} 1.0' in text


def test_endpoint_serves_get_metrics_only():
    registry = Registry()
    registry.register(lambda: [Family("up", "gauge", "Up.").add(1)])
    registry.register(lambda: 1 / 0)  # a broken collector leaves the others served

    async def ask(server, raw: bytes) -> bytes:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(raw)
        await writer.drain()
        data = await asyncio.wait_for(reader.read(), 5)
        writer.close()
        return data

    async def run():
        server = MetricsServer(registry, "127.0.0.1", 0, idle_timeout_s=0.5)
        await server.start()
        try:
            ok = await ask(server, b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            assert ok.startswith(b"HTTP/1.1 200 OK") and b"\nup 1.0\n" in ok
            assert b"process_resident_memory_bytes" in ok or b"process_" not in ok  # Linux: the process's own
            close = b"Host: x\r\nConnection: close\r\n\r\n"
            assert (await ask(server, b"GET / HTTP/1.1\r\n" + close)).startswith(b"HTTP/1.1 404")
            assert (await ask(server, b"POST /metrics HTTP/1.1\r\n" + close)).startswith(b"HTTP/1.1 405")
            assert b" 400 " in (await ask(server, b"nonsense\r\n\r\n")).split(b"\r\n", 1)[0]
            huge = await ask(server, b"GET /metrics HTTP/1.1\r\nHost: x\r\nX: " + b"a" * 20000 + b"\r\n\r\n")
            assert b" 400 " in huge.split(b"\r\n", 1)[0], huge[:100]
            # a request head never finished: the connection is closed after idle_timeout_s
            assert await ask(server, b"GET /metrics HTTP/1.1\r\nHost: x\r\n") == b""
            # OpenMetrics when the scraper asks for it
            om = await ask(server, b"GET /metrics HTTP/1.1\r\nAccept: application/openmetrics-text; version=1.0.0\r\n"
                           + close)
            assert b"application/openmetrics-text" in om and om.endswith(b"# EOF\n")
        finally:
            await server.stop()
    asyncio.run(run())


def test_health_endpoints_answer_from_the_event_loop_only():
    """/healthz is 200 while the loop runs; /readyz says ready or 503 with why; a blocked loop
    answers nothing, so a probe's timeout sees it (issue 28: a TCP connect passed while hung)."""
    import json
    import threading
    import time
    import urllib.error
    import urllib.request

    state = {"ready": False}

    def readiness():
        if state.get("boom"):
            raise RuntimeError("broken check")
        return state["ready"], {"registered": state["ready"]}

    started, loop_box = threading.Event(), {}
    release = threading.Event()

    def serve():
        loop = asyncio.new_event_loop()
        loop_box["loop"] = loop
        server = MetricsServer(Registry(), "127.0.0.1", 0, readiness=readiness)
        loop.run_until_complete(server.start())
        loop_box["server"] = server
        started.set()
        loop.run_forever()
        loop.run_until_complete(server.stop())
        loop.close()

    def get(path, timeout=5.0):
        url = f"http://127.0.0.1:{loop_box['server'].port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=timeout) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    assert started.wait(10)
    loop = loop_box["loop"]
    try:
        assert get("/healthz") == (200, {"status": "alive"})
        assert get("/readyz") == (503, {"status": "not ready", "registered": False})
        state["ready"] = True
        assert get("/readyz") == (200, {"status": "ready", "registered": True})
        state["boom"] = True
        assert get("/readyz") == (503, {"status": "not ready", "error": "RuntimeError"})
        del state["boom"]

        loop.call_soon_threadsafe(release.wait, 30)  # the loop hangs (a blocking call in a handler)
        begun = time.monotonic()
        try:
            get("/healthz", timeout=1.0)
            raise AssertionError("a hung loop answered its liveness probe")
        except (TimeoutError, urllib.error.URLError):
            pass
        assert time.monotonic() - begun < 2.0, "the probe failed within its timeout"
        release.set()
        assert get("/healthz")[0] == 200, "alive again once the loop runs"
    finally:
        release.set()
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)

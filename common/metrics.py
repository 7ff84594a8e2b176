"""Prometheus metrics: plain-int counters on the hot paths, everything else computed at scrape.

The hot paths only add to ints in dicts and lists (no locks, no objects per event: every process
is one asyncio thread); collectors turn them, and the process's state at that moment (partitions,
purgatories, groups), into plain `Family` values at each scrape. prometheus-client writes the
exposition (text 0.0.4, or OpenMetrics when the scraper asks for it) and adds the process's own
`process_*` metrics; aiohttp serves it from the process's event loop, with the pod probes.

Names are those Strimzi's JMX-exporter rules give Kafka's JMX metrics, so Strimzi's dashboards and
alerts apply unchanged: `kafka.server:type=BrokerTopicMetrics,name=MessagesInPerSec,topic=t` is
`kafka_server_brokertopicmetrics_messagesin_total{topic="t"}` (a *PerSec meter is a counter named
without PerSec, with `_total`; Prometheus takes the rate), a gauge keeps its lower-cased name.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.core import Metric
from prometheus_client.exposition import choose_encoder, generate_latest

if TYPE_CHECKING:
    from aiohttp import web

log = logging.getLogger(__name__)

Labels = tuple[tuple[str, str], ...]

TYPES = ("counter", "gauge", "summary")


@dataclass
class Family:
    """One metric family at scrape time: name, type (counter, gauge, summary), help, samples.
    A counter's name ends in `_total` (the exposition formats require it of a counter's sample)."""
    name: str
    type: str
    help: str
    samples: list[tuple[str, Labels, float]] = field(default_factory=list)  # (name suffix, labels, value)

    def __post_init__(self) -> None:
        if self.type not in TYPES:
            raise ValueError(f"{self.name}: type {self.type!r} is not one of {TYPES}")
        if self.type == "counter" and not self.name.endswith("_total"):
            raise ValueError(f"counter {self.name} must be named ..._total")

    def add(self, value: float, labels: Labels = (), suffix: str = "") -> Family:
        self.samples.append((suffix, labels, value))
        return self


def to_metric(family: Family) -> Metric:
    """prometheus-client's form of a family (its counters are named without `_total`)."""
    metric = Metric(family.name.removesuffix("_total") if family.type == "counter" else family.name,
                    family.help, family.type)
    for suffix, labels, value in family.samples:
        metric.add_sample(family.name + suffix, dict(labels), value)
    return metric


class _Collected:
    """Collectors as prometheus-client calls them; one that raises is logged and left out, so a
    broken collector cannot take the endpoint down."""

    def __init__(self, collectors: list[Collector]) -> None:
        self.collectors = collectors

    def collect(self) -> Iterator[Metric]:
        for collector in self.collectors:
            try:
                families = list(collector())
            except Exception:
                log.exception("metrics collector %r failed", collector)
                continue
            yield from map(to_metric, families)


def render(families: Iterable[Family]) -> str:
    """The Prometheus text exposition format (version 0.0.4) of `families`."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collected([lambda: families]))
    return generate_latest(registry).decode()


class Latency:
    """Latencies in log-scale buckets (four per doubling, from 1 µs): p50/p99 within ~19 % at the
    cost of one log2 and two int additions per observation."""
    BUCKETS = 128

    __slots__ = ("counts", "sum_s", "total")

    def __init__(self) -> None:
        self.counts = [0] * self.BUCKETS
        self.total = 0
        self.sum_s = 0.0

    def observe(self, seconds: float) -> None:
        us = seconds * 1e6
        index = int(math.log2(us) * 4) + 1 if us >= 1 else 0
        self.counts[index if index < self.BUCKETS else self.BUCKETS - 1] += 1
        self.total += 1
        self.sum_s += seconds

    @staticmethod
    def upper_bound_s(index: int) -> float:
        return 2 ** (index / 4) / 1e6

    def quantile(self, q: float) -> float:
        """The upper bound (seconds) of the bucket holding the q-quantile; NaN when empty."""
        if not self.total:
            return math.nan
        rank, seen = q * self.total, 0
        for index, count in enumerate(self.counts):
            seen += count
            if seen >= rank and count:
                return self.upper_bound_s(index)
        return self.upper_bound_s(self.BUCKETS - 1)


def latency_family(name: str, help_: str, latencies: dict[Labels, Latency], unit_scale: float = 1000.0) -> Family:
    """A summary with p50 and p99 (Kafka's RequestMetrics report milliseconds: unit_scale 1000)."""
    family = Family(name, "summary", help_)
    for labels, lat in sorted(latencies.items()):
        for q in (0.5, 0.99):
            family.add(lat.quantile(q) * unit_scale, labels + (("quantile", str(q)),))
        family.add(lat.sum_s * unit_scale, labels, "_sum").add(lat.total, labels, "_count")
    return family


Collector = Callable[[], Iterable[Family]]


class Registry:
    """Collectors called at each scrape, in registration order, and the process's own metrics
    (prometheus-client's `process_*`: CPU, memory, open files)."""

    def __init__(self) -> None:
        self.collectors: list[Collector] = []
        self.prometheus = CollectorRegistry(auto_describe=False)
        self.prometheus.register(_Collected(self.collectors))
        ProcessCollector(registry=self.prometheus)

    def register(self, collector: Collector) -> None:
        self.collectors.append(collector)

    def exposition(self, accept: str = "") -> tuple[bytes, str]:
        """The body and its content type for a scraper's Accept header (OpenMetrics if asked)."""
        encoder, content_type = choose_encoder(accept)
        return encoder(self.prometheus), content_type

    def render(self) -> str:
        return generate_latest(self.prometheus).decode()


MAX_REQUEST_HEAD = 8192
HEAD_TIMEOUT_S = 5.0

Readiness = Callable[[], tuple[bool, dict[str, Any]]]
"""(ready, what the process says about itself) for GET /readyz: a broker registered and caught up,
a controller connected to ZooKeeper (active or standby)."""


class MetricsServer:
    """GET /metrics and the pod probes, served by aiohttp on the process's own event loop:
    /healthz (liveness: 200 whenever the event loop runs, since the loop itself answers: a hung
    loop answers nothing and the kubelet's timeout sees it) and /readyz (200 or 503 from
    `readiness`, a JSON body saying why). Anything else is 404/405; a request line or header
    longer than 8 KiB is a 400, a connection idle (or its request head unfinished) for 5 s is closed."""

    def __init__(self, registry: Registry, host: str, port: int, readiness: Readiness | None = None,
                 idle_timeout_s: float = HEAD_TIMEOUT_S) -> None:
        self.registry, self.host, self.port = registry, host, port
        self.readiness = readiness
        self.idle_timeout_s = idle_timeout_s
        self._runner: web.AppRunner | None = None

    async def start(self) -> int:
        from aiohttp import web  # here: a third of a second of start-up that a process without metrics skips

        app = web.Application(client_max_size=MAX_REQUEST_HEAD)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0, keepalive_timeout=self.idle_timeout_s,
                               max_line_size=MAX_REQUEST_HEAD, max_field_size=MAX_REQUEST_HEAD)
        await runner.setup()
        try:
            await web.TCPSite(runner, self.host, self.port).start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        self.port = runner.addresses[0][1]
        return self.port

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    async def stop(self) -> None:
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()

    async def _metrics(self, request: web.Request) -> web.Response:
        from aiohttp import web

        body, content_type = self.registry.exposition(request.headers.get("Accept", ""))
        return web.Response(body=body, headers={"Content-Type": content_type})

    async def _healthz(self, request: web.Request) -> web.Response:
        from aiohttp import web

        return web.json_response({"status": "alive"})

    async def _readyz(self, request: web.Request) -> web.Response:
        from aiohttp import web

        if self.readiness is None:  # nothing to wait for: ready once alive
            return web.json_response({"status": "alive"})
        try:
            ready, detail = self.readiness()
        except Exception as e:  # a failing check is an unready process, never a dropped probe
            log.exception("readiness check failed")
            ready, detail = False, {"error": type(e).__name__}
        return web.json_response({"status": "ready" if ready else "not ready", **detail}, status=200 if ready else 503)

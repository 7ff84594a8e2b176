"""The broker's client quota managers (Kafka's QuotaManagers), kept current from ZooKeeper, and
their metrics.

Every quota config is read at start-up and again after each change notification that names a
user, client-id or user/client-id entity (quota changes are rare; a full re-read keeps the
precedence rules in one place, client_quota_manager.resolve). Metrics follow Kafka's per-entity
quota sensors, as the JMX exporter names them: `kafka_server_produce_byte_rate`,
`kafka_server_produce_throttle_time`, `kafka_server_fetch_byte_rate`,
`kafka_server_fetch_throttle_time`, `kafka_server_request_request_time` (percent) and
`kafka_server_request_throttle_time`, labelled by `user` and `client_id` (empty when the quota
that applies has no such dimension).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from odradek.common.clock import Clock
from odradek.common.metrics import Family

from . import request_time
from .client_quota_manager import ClientQuotaManager, QuotaConfig
from .connection_quotas import ConnectionQuotas, ip_configs
from .controller_mutation_quota import ControllerMutationQuotaManager, MutationQuota
from .quota_entity import (
    CONSUMER_BYTE_RATE,
    CONTROLLER_MUTATION_RATE,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    quota_values,
)
from .zk_quota_store import QuotaConfigs, ZkQuotaStore

log = logging.getLogger(__name__)

QuotaKey = tuple[str | None, str | None]


def configs_by_type(configs: QuotaConfigs) -> dict[str, dict[QuotaKey, float]]:
    """quota key → {(user or None, client id or None) (znode names): value}."""
    out: dict[str, dict[QuotaKey, float]] = {PRODUCER_BYTE_RATE: {}, CONSUMER_BYTE_RATE: {}, REQUEST_PERCENTAGE: {},
                                             CONTROLLER_MUTATION_RATE: {}}
    entries: list[tuple[QuotaKey, dict[str, str]]] = []
    entries += [((u, None), c) for u, c in configs.users.items()]
    entries += [((u, c), conf) for (u, c), conf in configs.user_clients.items()]
    entries += [((None, c), conf) for c, conf in configs.clients.items()]
    for key, conf in entries:
        for name, value in quota_values(conf).items():
            if name in out and value > 0:  # a hand-written znode's 0 or less: ignored, never divided by
                out[name][key] = value
    return out


class QuotaManagers:
    """Produce, Fetch and Request quota managers on one clock."""

    def __init__(self, store: ZkQuotaStore | None, config: QuotaConfig, clock: Clock):
        self.store = store
        self.clock = clock
        self.produce = ClientQuotaManager(PRODUCER_BYTE_RATE, config)
        self.fetch = ClientQuotaManager(CONSUMER_BYTE_RATE, config)
        self.request = ClientQuotaManager(REQUEST_PERCENTAGE, config, max_throttle_ms=config.window_ms)
        self.controller_mutation = ControllerMutationQuotaManager(config)
        self.connections = ConnectionQuotas(config)
        """connection_creation_rate per IP (KIP-612), consulted by the socket servers' accept."""

    def connection_throttle_ms(self, ip: str) -> int:
        """A new connection from `ip`: how long to hold it before closing it, 0 to serve it."""
        return self.connections.record(ip, self.clock())

    def mutation_quota(self, user: str, client_id: str, strict: bool) -> MutationQuota | None:
        """A CreateTopics/CreatePartitions/DeleteTopics request's controller mutation quota."""
        if not self.controller_mutation.enabled:
            return None
        return self.controller_mutation.new_quota(user, client_id, strict)

    def request_throttle(self, user: str, client_id: str, timing: request_time.RequestTime | None = None) -> int:
        """Charge the running request's handler time (request_time.CURRENT) to the request quota,
        once per request: its throttle time in ms, 0 within the quota, without one, or outside a
        timed request (Kafka's ClientRequestQuotaManager.maybeRecordAndGetThrottleTimeMs).
        `timing`: the request's RequestTime, when charged after its handler returned."""
        time = timing or request_time.CURRENT.get()
        if time is None or time.recorded:
            return 0
        time.recorded = True
        if not self.request.enabled:
            return 0
        return self.request.record(user, client_id, time.percentage(), self.clock())

    @staticmethod
    def exempt_request() -> None:
        """The running request is exempt from the request quota (maybeRecordExempt): a follower's
        Fetch, the controller's requests."""
        time = request_time.CURRENT.get()
        if time is not None:
            time.recorded = True

    def update(self, configs: QuotaConfigs) -> None:
        by_type = configs_by_type(configs)
        for manager in (self.produce, self.fetch, self.request):
            manager.update_configs(by_type[manager.quota_type])
        self.controller_mutation.update_configs(by_type[CONTROLLER_MUTATION_RATE])
        self.connections.update(ip_configs(configs.ips))

    async def load_all(self) -> None:
        if self.store is None:
            return
        self.update(await self.store.read_all())
        log.info("client quotas loaded: %d produce, %d fetch, %d request, %d controller mutation, %d ip",
                 len(self.produce.configs), len(self.fetch.configs), len(self.request.configs),
                 len(self.controller_mutation.configs), len(self.connections.quotas))

    async def on_entity_changes(self, entity_paths: list[str] | None) -> None:
        """DynamicConfigManager's listener: entity paths named by new notifications (None: all)."""
        if entity_paths is None or any(p.partition("/")[0] in ("users", "clients", "ips") for p in entity_paths):
            await self.load_all()

    def families(self) -> Iterable[Family]:
        for manager, name, rate_name, what in (
                (self.produce, "produce", "produce_byte_rate", "Bytes per second"),
                (self.fetch, "fetch", "fetch_byte_rate", "Bytes per second"),
                (self.request, "request", "request_request_time", "Percent of request-handling time")):
            rate = Family(f"kafka_server_{rate_name}", "gauge",
                          f"{what} of a {name} quota entity, over the quota window.")
            throttle = Family(f"kafka_server_{name}_throttle_time", "gauge",
                              f"Throttle time (ms) last answered to a {name} quota entity.")
            now = self.clock()
            for (user, client_id), stats in sorted(manager.stats.items()):
                labels = (("user", user), ("client_id", client_id))
                rate.add(stats.rate.rate(now), labels)
                throttle.add(stats.throttle_time_ms, labels)
            yield rate
            yield throttle

"""IP connection-rate quotas (KIP-612): Kafka's ConnectionQuotas for `connection_creation_rate`,
sans I/O.

The quota of an address is `/config/ips/<ip>`'s, else `/config/ips/<default>`'s, else none. Every
new connection from a quota'd address is recorded in that address's sampled rate (Kafka's Rate
over `quota.window.num` windows of `quota.window.size.seconds`), and when the rate is over the
quota the connection is throttled: the socket server holds it unread for the throttle time and
then closes it (Kafka's Acceptor delays the close of a ConnectionThrottledException's socket so
a client does not reconnect at once). The throttle time is Kafka's, at most one quota window
(ConnectionQuotas.maxThrottleTimeMs). Throttled attempts count in the rate, as in Kafka (the
sensor records before it checks).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping

from odradek.common.zk_data import DEFAULT_ENTITY

from .client_quota_manager import MAX_IDLE_CHECK, QuotaConfig, SampledRate
from .quota_entity import CONNECTION_CREATION_RATE, IP_QUOTA_KEYS, quota_values


def ip_configs(ips: Mapping[str, Mapping[str, str]]) -> dict[str, float]:
    """{ip or `<default>`: connection_creation_rate} from the ip znodes' configs (unreadable,
    non-positive values and non-address names ignored)."""
    out = {}
    for name, conf in ips.items():
        value = quota_values(conf, IP_QUOTA_KEYS).get(CONNECTION_CREATION_RATE)
        if value is None or value <= 0:
            continue
        if name != DEFAULT_ENTITY:
            try:
                name = str(ipaddress.ip_address(name))
            except ValueError:
                continue
        out[name] = value
    return out


class ConnectionQuotas:
    def __init__(self, config: QuotaConfig):
        self.config = config
        self.quotas: dict[str, float] = {}
        self.rates: dict[str, SampledRate] = {}
        self.throttled = 0
        """Connections throttled so far (a metric)."""

    def update(self, quotas: Mapping[str, float]) -> None:
        self.quotas = dict(quotas)

    def quota(self, ip: str) -> float | None:
        found = self.quotas.get(ip)
        return self.quotas.get(DEFAULT_ENTITY) if found is None else found

    def record(self, ip: str, now_ms: int) -> int:
        """A new connection from `ip`: the ms to hold it before closing it, 0 to serve it."""
        if not self.quotas:
            return 0
        bound = self.quota(ip)
        if bound is None:
            return 0
        rate = self.rates.get(ip)
        if rate is None:
            if len(self.rates) >= MAX_IDLE_CHECK:
                horizon = self.config.max_throttle_ms
                self.rates = {k: r for k, r in self.rates.items() if r.samples and now_ms - r.samples[-1][0] < horizon}
            rate = self.rates[ip] = SampledRate(self.config)
        rate.record(1, now_ms)
        value = rate.rate(now_ms)
        if value <= bound:
            return 0
        self.throttled += 1
        return min(max(round((value - bound) / bound * rate.window_ms(now_ms)), 1), self.config.window_ms)

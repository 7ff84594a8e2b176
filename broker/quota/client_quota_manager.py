"""Client quota enforcement (Kafka's ClientQuotaManager with its DefaultQuotaCallback), sans I/O.

One manager per quota type (`producer_byte_rate`, `consumer_byte_rate`, `request_percentage`):
`record(user, client_id, value, now_ms)` adds to the entity's rate and answers the throttle time
in ms (0 when within the quota). The quota of a (user, client id) comes from the most specific
config, in Kafka's order: user+client-id, user+default client-id, user, default user+client-id,
default user+default client-id, default user, client-id, default client-id. The entity that
matched also names the rate (Kafka's quota metric tags): a user quota is shared by all the user's
client ids, a client-id quota by every user of that client id.

A rate is Kafka's sampled Rate: `quota.window.num` samples of `quota.window.size.seconds`, divided
by the time they span, but never by less than (samples - 1) full windows (so a new client is not
throttled on its first bytes). Over the quota, the throttle time is how long the client must stay
silent for the rate to fall back to the bound, (rate - bound) / bound × window, bounded by the
whole quota window (quota.window.num × quota.window.size.seconds).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from odradek.common.zk_data import DEFAULT_ENTITY

from .quota_entity import sanitized_name

MAX_IDLE_CHECK = 10_000
"""With this many rates kept, idle ones are dropped before a new one is added."""

Tags = tuple[str, str]
"""(user tag, client-id tag) of a rate, "" for a dimension the matched quota does not have."""


@dataclass(frozen=True)
class QuotaConfig:
    samples: int = 11
    window_ms: int = 1000

    @property
    def max_throttle_ms(self) -> int:
        return self.samples * self.window_ms


@dataclass
class SampledRate:
    """Kafka's Rate over a SampledStat of sums: [start_ms, total] per sample, oldest first."""

    config: QuotaConfig
    samples: list[list[float]] = field(default_factory=list)
    """[start ms, total]; totals are bytes, or percentage-seconds for the request quota."""

    def _purge(self, now_ms: int) -> None:
        horizon = self.config.samples * self.config.window_ms
        self.samples = [s for s in self.samples if now_ms - s[0] < horizon]

    def record(self, value: float, now_ms: int) -> None:
        self._purge(now_ms)
        if not self.samples or now_ms - self.samples[-1][0] >= self.config.window_ms:
            self.samples.append([now_ms, 0.0])
            del self.samples[:-self.config.samples]
        self.samples[-1][1] += value

    def window_ms(self, now_ms: int) -> int:
        """Rate.windowSize: the span of the kept samples, at least samples - 1 full windows."""
        self._purge(now_ms)
        oldest = int(self.samples[0][0]) if self.samples else now_ms
        elapsed = now_ms - oldest
        full = elapsed // self.config.window_ms
        minimum = self.config.samples - 1
        if full < minimum:
            elapsed += (minimum - full) * self.config.window_ms
        return max(elapsed, 1)

    def rate(self, now_ms: int) -> float:
        """Per second."""
        window = self.window_ms(now_ms)
        return sum(s[1] for s in self.samples) * 1000.0 / window


def resolve(configs: Mapping[tuple[str | None, str | None], float], user: str,
            client_id: str) -> tuple[float, Tags] | None:
    """The quota of (user, client id) and its rate's tags, from the configs of one quota type
    keyed by (sanitized user or `<default>` or None, sanitized client id or `<default>` or None);
    None when no config applies (unlimited)."""
    u, c, d = sanitized_name(user), sanitized_name(client_id), DEFAULT_ENTITY
    for key, tags in (((u, c), (u, client_id)), ((u, d), (u, client_id)), ((u, None), (u, "")),
                      ((d, c), (u, client_id)), ((d, d), (u, client_id)), ((d, None), (u, "")),
                      ((None, c), ("", client_id)), ((None, d), ("", client_id))):
        value = configs.get(key)
        if value is not None:
            return value, tags
    return None


@dataclass
class EntityStats:
    """One rate's metrics: the last throttle time answered, and the rate itself."""

    rate: SampledRate
    throttle_time_ms: int = 0
    throttled: int = 0
    """Requests answered with a throttle time."""


class ClientQuotaManager:
    """One quota type's configs and rates."""

    def __init__(self, quota_type: str, config: QuotaConfig, max_throttle_ms: int | None = None):
        self.quota_type = quota_type
        self.config = config
        self.max_throttle_ms = config.max_throttle_ms if max_throttle_ms is None else max_throttle_ms
        """The longest throttle answered: the whole quota window, one window for the request quota
        (ClientRequestQuotaManager.maxThrottleTimeMs)."""
        self.configs: dict[tuple[str | None, str | None], float] = {}
        self.stats: dict[Tags, EntityStats] = {}
        self._resolved: dict[tuple[str, str], tuple[float, Tags] | None] = {}

    def update_configs(self, configs: Mapping[tuple[str | None, str | None], float]) -> None:
        """Replace the quota configs of this type (each change: the loader re-reads)."""
        self.configs = dict(configs)
        self._resolved.clear()

    @property
    def enabled(self) -> bool:
        return bool(self.configs)

    def quota(self, user: str, client_id: str) -> tuple[float, Tags] | None:
        key = (user, client_id)
        if key not in self._resolved:
            if len(self._resolved) > 100_000:  # many client ids: start over rather than grow
                self._resolved.clear()
            self._resolved[key] = resolve(self.configs, user, client_id)
        return self._resolved[key]

    def max_value_in_quota_window(self, user: str, client_id: str) -> int | None:
        """Kafka's getMaxValueInQuotaWindow: what the quota allows over (samples - 1) windows (a
        consumer's fetch is cut to it), None when unlimited."""
        found = self.quota(user, client_id)
        if found is None:
            return None
        return int(min(found[0] * (self.config.samples - 1) * self.config.window_ms / 1000.0, 2**31 - 1))

    def record(self, user: str, client_id: str, value: float, now_ms: int) -> int:
        """Add `value` to the entity's rate; the throttle time (ms) it earned, 0 within the quota."""
        found = self.quota(user, client_id)
        if found is None:
            return 0
        bound, tags = found
        stats = self.stats.get(tags)
        if stats is None:
            if len(self.stats) >= MAX_IDLE_CHECK:
                self._forget_idle(now_ms)
            stats = self.stats[tags] = EntityStats(SampledRate(self.config))
        stats.rate.record(value, now_ms)
        rate = stats.rate.rate(now_ms)
        throttle = 0
        if rate > bound:
            window = stats.rate.window_ms(now_ms)
            throttle = min(round((rate - bound) / bound * window), self.max_throttle_ms)
        stats.throttle_time_ms = throttle
        if throttle:
            stats.throttled += 1
        return throttle

    def _forget_idle(self, now_ms: int) -> None:
        """Drop the rates with nothing left in their window (Kafka expires idle quota sensors):
        many client ids under a default quota must not grow the broker's memory for ever."""
        horizon = self.config.samples * self.config.window_ms
        self.stats = {tags: s for tags, s in self.stats.items()
                      if s.rate.samples and now_ms - s.rate.samples[-1][0] < horizon}

    def unrecord(self, user: str, client_id: str, value: int, now_ms: int) -> None:
        """Take back a recorded value (a throttled fetch answers no data: Kafka's unrecordQuotaSensor)."""
        found = self.quota(user, client_id)
        stats = self.stats.get(found[1]) if found is not None else None
        if stats is not None and stats.rate.samples:
            stats.rate.samples[-1][1] -= value

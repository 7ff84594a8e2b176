"""`controller_mutation_rate` (KIP-599): Kafka's ControllerMutationQuotaManager, sans I/O.

CreateTopics, CreatePartitions and DeleteTopics charge the partitions they create or delete to the
(user, client id)'s quota, resolved with the same precedence as the other client quotas. The rate
is Kafka's TokenBucket: a bucket of `quota × quota.window.num × quota.window.size.seconds` tokens
(the burst), refilled at `quota` per second; a mutation takes its partitions' worth and may drive
the bucket below zero. The throttle time is how long the bucket needs to climb back to zero,
-tokens / quota seconds.

Two behaviours, chosen by the request version as KafkaApis does (`strict`: CreateTopics v6+,
CreatePartitions v3+, DeleteTopics v5+): a strict quota refuses a topic whose mutation arrives
while the bucket is below zero (THROTTLING_QUOTA_EXCEEDED for that topic, nothing done; the check
comes before the charge, so one large topic may overdraw the bucket); a permissive one (older
clients, which know no such error) lets everything through and only throttles the answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .client_quota_manager import MAX_IDLE_CHECK, QuotaConfig, Tags, resolve

THROTTLING_QUOTA_EXCEEDED_MESSAGE = "The throttling quota has been exceeded."
"""Kafka's Errors.THROTTLING_QUOTA_EXCEEDED message."""


@dataclass
class TokenBucket:
    tokens: float
    last_ms: int

    def refill(self, rate: float, burst: float, now_ms: int) -> None:
        elapsed = max(now_ms - self.last_ms, 0)
        self.tokens = min(burst, self.tokens + rate * elapsed / 1000.0)
        self.last_ms = now_ms


class ThrottlingQuotaExceeded(Exception):
    def __init__(self, throttle_ms: int):
        super().__init__(THROTTLING_QUOTA_EXCEEDED_MESSAGE)
        self.throttle_ms = throttle_ms


class MutationQuota:
    """One request's view of its entity's bucket (Kafka's Strict/PermissiveControllerMutationQuota);
    `throttle_ms`: what the answer carries, the largest throttle time met."""

    def __init__(self, manager: ControllerMutationQuotaManager, bound: float, tags: Tags, strict: bool):
        self.manager = manager
        self.bound = bound
        self.tags = tags
        self.strict = strict
        self.throttle_ms = 0

    def _bucket(self, now_ms: int) -> TokenBucket:
        bucket = self.manager.bucket(self.tags, self.bound, now_ms)
        bucket.refill(self.bound, self.manager.burst(self.bound), now_ms)
        return bucket

    def _throttle(self, bucket: TokenBucket) -> int:
        throttle = round(-bucket.tokens / self.bound * 1000) if bucket.tokens < 0 else 0
        self.throttle_ms = max(self.throttle_ms, throttle)
        self.manager.throttle_time_ms[self.tags] = throttle
        return throttle

    def record(self, permits: float, now_ms: int) -> None:
        """Charge `permits` partitions; a strict quota already overdrawn raises
        ThrottlingQuotaExceeded (nothing charged) instead."""
        bucket = self._bucket(now_ms)
        if self.strict and bucket.tokens < 0:
            raise ThrottlingQuotaExceeded(self._throttle(bucket))
        bucket.tokens -= permits
        if not self.strict:
            self._throttle(bucket)

    def admit(self, mutations: list[tuple[str, float]], now_ms: int) -> set[str]:
        """Charge each (topic, partitions) in turn; the topics a strict quota refused."""
        refused = set()
        for name, permits in mutations:
            try:
                self.record(permits, now_ms)
            except ThrottlingQuotaExceeded:
                refused.add(name)
        return refused

    def refund(self, permits: float, now_ms: int) -> None:
        """Give back what a mutation that then failed (an invalid topic) was charged: Kafka
        charges only mutations that pass validation."""
        bucket = self._bucket(now_ms)
        bucket.tokens = min(self.manager.burst(self.bound), bucket.tokens + permits)

    def finish(self, now_ms: int) -> int:
        """The answer's throttle time: for a strict quota, also the overdraft its last charge
        left (Kafka's throttleTime after the request)."""
        if self.strict:
            bucket = self._bucket(now_ms)
            if bucket.tokens < 0:
                self._throttle(bucket)
        return self.throttle_ms


class ControllerMutationQuotaManager:
    def __init__(self, config: QuotaConfig):
        self.config = config
        self.configs: dict[tuple[str | None, str | None], float] = {}
        self.buckets: dict[Tags, TokenBucket] = {}
        self.throttle_time_ms: dict[Tags, int] = {}

    def update_configs(self, configs: Mapping[tuple[str | None, str | None], float]) -> None:
        self.configs = dict(configs)

    @property
    def enabled(self) -> bool:
        return bool(self.configs)

    def burst(self, bound: float) -> float:
        return bound * self.config.samples * self.config.window_ms / 1000.0

    def bucket(self, tags: Tags, bound: float, now_ms: int) -> TokenBucket:
        bucket = self.buckets.get(tags)
        if bucket is None:
            if len(self.buckets) >= MAX_IDLE_CHECK:  # full buckets say nothing: forget them
                self.buckets = {t: b for t, b in self.buckets.items() if b.tokens < self.burst(bound)}
            bucket = self.buckets[tags] = TokenBucket(self.burst(bound), now_ms)
        return bucket

    def new_quota(self, user: str, client_id: str, strict: bool) -> MutationQuota | None:
        """The request's quota (Kafka's newQuotaFor), None when no quota applies (unbounded)."""
        found = resolve(self.configs, user, client_id)
        if found is None:
            return None
        bound, tags = found
        return MutationQuota(self, bound, tags, strict)

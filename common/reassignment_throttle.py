"""Kafka's reassignment throttle as plain data: what kafka-reassign-partitions --throttle sets.

A move is throttled by two dynamic broker configs on every broker it touches
(`leader.replication.throttled.rate`, `follower.replication.throttled.rate`, bytes/s) and two
topic configs naming the moving replicas: the current replicas as leaders
(`leader.replication.throttled.replicas`) and the added ones as followers
(`follower.replication.throttled.replicas`), `partition:broker,...`. Brokers apply them through
broker/replication_quota.py (in-sync replicas are never throttled). Whoever sets them removes
them once the move is complete: left behind, they would throttle a follower catching up later.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

BROKER_THROTTLES = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")
TOPIC_THROTTLES = ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas")

Plan = Mapping[tuple[str, int], tuple[int, ...]]


@dataclass(frozen=True)
class Throttle:
    topics: dict[str, dict[str, str]]
    """topic → {leader/follower.replication.throttled.replicas: "p:b,..."}"""
    brokers: frozenset[int]
    """Brokers whose throttled rates are set: every replica of a moving partition, before and after."""

    def broker_configs(self, rate: int) -> dict[str, str | None]:
        return dict.fromkeys(BROKER_THROTTLES, str(rate))


def throttled_replicas(current: Plan, plan: Plan) -> Throttle:
    """The throttle settings for moving `current` to `plan` (partitions whose replica set does not
    change are left out)."""
    leaders: dict[str, list[str]] = {}
    followers: dict[str, list[str]] = {}
    brokers: set[int] = set()
    for (t, p), target in sorted(plan.items()):
        existing = tuple(current.get((t, p), ()))
        if set(existing) == set(target):
            continue
        leaders.setdefault(t, []).extend(f"{p}:{b}" for b in existing)
        followers.setdefault(t, []).extend(f"{p}:{b}" for b in target if b not in existing)
        brokers |= set(existing) | set(target)
    topics = {t: {TOPIC_THROTTLES[0]: ",".join(leaders.get(t, [])), TOPIC_THROTTLES[1]: ",".join(followers.get(t, []))}
              for t in sorted(set(leaders) | set(followers))}
    return Throttle(topics, frozenset(brokers))


def cleared() -> tuple[dict[str, str | None], dict[str, str | None]]:
    """The deletions that remove a throttle: (per broker, per topic)."""
    return dict.fromkeys(BROKER_THROTTLES), dict.fromkeys(TOPIC_THROTTLES)

"""controller_mutation_rate's token bucket (KIP-599), strict and permissive."""

import pytest

from odradek.broker.quota.client_quota_manager import QuotaConfig
from odradek.broker.quota.controller_mutation_quota import ControllerMutationQuotaManager, ThrottlingQuotaExceeded


def manager(rate: float = 2.0) -> ControllerMutationQuotaManager:
    m = ControllerMutationQuotaManager(QuotaConfig(samples=3, window_ms=1000))  # burst: 6 partitions
    m.update_configs({(None, "admin"): rate})
    return m


def test_strict_checks_before_charging_and_refuses_once_overdrawn():
    m = manager()
    quota = m.new_quota("u", "admin", strict=True)
    assert quota.admit([("a", 4), ("b", 4), ("c", 1)], 0) == {"c"}  # b overdraws the bucket to -2
    assert quota.finish(0) == 1000  # -(-2) / 2 per s
    later = m.new_quota("u", "admin", strict=True)
    assert later.admit([("d", 1)], 999) == {"d"}  # still below zero
    assert m.new_quota("u", "admin", strict=True).admit([("e", 1)], 1001) == set()  # back above zero
    assert m.new_quota("u", "other", strict=True) is None  # no quota applies: unbounded


def test_permissive_lets_everything_through_and_throttles():
    m = manager()
    quota = m.new_quota("u", "admin", strict=False)
    quota.record(10, 0)
    assert quota.finish(0) == 2000
    with pytest.raises(ThrottlingQuotaExceeded):
        m.new_quota("u", "admin", strict=True).record(1, 0)


def test_refund_and_refill_never_exceed_the_burst():
    m = manager()
    quota = m.new_quota("u", "admin", strict=True)
    quota.record(5, 0)
    quota.refund(5, 0)
    assert m.buckets[("", "admin")].tokens == 6
    quota.record(1, 100_000)
    assert m.buckets[("", "admin")].tokens == 5

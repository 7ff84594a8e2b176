"""IP connection-rate quotas (KIP-612): which quota applies, and when a new connection is held."""

from odradek.broker.quota.client_quota_manager import QuotaConfig
from odradek.broker.quota.connection_quotas import ConnectionQuotas, ip_configs

D = "<default>"


def test_ip_configs_skip_unreadable_and_non_positive_values():
    assert ip_configs({D: {"connection_creation_rate": "5"}, "10.0.0.1": {"connection_creation_rate": "x"},
                       "10.0.0.2": {"connection_creation_rate": "0"}, "garbage": {"connection_creation_rate": "3"},
                       "10.0.0.3": {"connection_creation_rate": "7", "other": "1"}}) == {D: 5.0, "10.0.0.3": 7.0}


def test_specific_ip_before_default_and_throttle_bounded_by_a_window():
    quotas = ConnectionQuotas(QuotaConfig(samples=2, window_ms=1000))
    assert quotas.record("10.0.0.1", 0) == 0  # no quotas: nothing recorded
    quotas.update({D: 2.0, "10.0.0.9": 100.0})
    held = [quotas.record("10.0.0.1", 0) for _ in range(5)]
    assert held[:2] == [0, 0] and all(0 < h <= 1000 for h in held[2:])  # 2 per s over at least 1 s
    assert all(quotas.record("10.0.0.9", 0) == 0 for _ in range(50))
    assert quotas.throttled == 3
    assert quotas.record("10.0.0.1", 5000) == 0  # the window has passed

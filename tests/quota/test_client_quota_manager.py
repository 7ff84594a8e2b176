"""The quota core (broker/quota/client_quota_manager): Kafka's precedence, sampled rates and
throttle times, driven by a ManualClock (no sleeping)."""

from odradek.broker.quota.client_quota_manager import ClientQuotaManager, QuotaConfig, SampledRate, resolve
from odradek.broker.quota.quota_managers import configs_by_type
from odradek.broker.quota.zk_quota_store import QuotaConfigs
from odradek.common.clock import ManualClock

D = "<default>"


def test_precedence_is_kafkas():
    every = {("u", "c"): 1.0, ("u", D): 2.0, ("u", None): 3.0, (D, "c"): 4.0, (D, D): 5.0, (D, None): 6.0,
             (None, "c"): 7.0, (None, D): 8.0}
    expected = [(("u", "c"), (1.0, ("u", "c"))), (("u", D), (2.0, ("u", "c"))), (("u", None), (3.0, ("u", ""))),
                ((D, "c"), (4.0, ("u", "c"))), ((D, D), (5.0, ("u", "c"))), ((D, None), (6.0, ("u", ""))),
                ((None, "c"), (7.0, ("", "c"))), ((None, D), (8.0, ("", "c")))]
    configs = dict(every)
    for key, answer in expected:  # remove the most specific each time: the next one applies
        assert resolve(configs, "u", "c") == answer
        del configs[key]
    assert resolve(configs, "u", "c") is None
    assert resolve({("User%3Ax", None): 9.0}, "User:x", "c") == (9.0, ("User%3Ax", ""))  # sanitized names


def test_rate_spans_at_least_samples_minus_one_windows():
    config = QuotaConfig(samples=11, window_ms=1000)
    rate = SampledRate(config)
    rate.record(10_000, 0)
    assert rate.window_ms(0) == 10_000 and rate.rate(0) == 1000.0
    for t in range(1, 20):
        rate.record(1000, t * 1000)
    # after 19 s only the last 11 samples count, spanning 10 s (+ the current one's start)
    assert rate.window_ms(19_000) == 10_000
    assert rate.rate(19_000) == 1100.0


def test_throttle_time_brings_the_rate_back_to_the_bound():
    clock = ManualClock(0)
    manager = ClientQuotaManager("producer_byte_rate", QuotaConfig(samples=11, window_ms=1000))
    manager.update_configs({(None, "flood"): 1000.0})
    assert manager.record("ANONYMOUS", "other", 10**9, clock()) == 0  # no quota for it
    assert manager.record("ANONYMOUS", "flood", 10_000, clock()) == 0  # exactly the bound over 10 s
    throttle = manager.record("ANONYMOUS", "flood", 5_000, clock())
    assert throttle == 5_000  # 15,000 bytes need 15 s at 1,000/s: 5 s more than the 10 s window
    assert 15_000 * 1000 / (10_000 + throttle) == 1000.0  # silent that long, the bytes span the bound
    clock.advance(11_000)  # the whole quota window later the old sample has expired
    assert manager.record("ANONYMOUS", "flood", 1, clock()) == 0
    assert manager.record("ANONYMOUS", "flood", 10**9, clock()) == 11_000  # capped: the whole quota window


def test_a_user_quota_is_shared_by_its_client_ids_and_unrecord():
    manager = ClientQuotaManager("consumer_byte_rate", QuotaConfig(samples=2, window_ms=1000))
    manager.update_configs({("alice", None): 100.0})
    assert manager.record("alice", "a", 100, 0) == 0
    assert manager.record("alice", "b", 100, 0) > 0  # same rate: ("alice", "")
    manager.unrecord("alice", "b", 100, 0)
    assert manager.stats[("alice", "")].rate.rate(0) == 100.0
    manager.update_configs({})
    assert not manager.enabled and manager.record("alice", "a", 10**9, 0) == 0


def test_configs_by_type_from_the_znodes():
    configs = QuotaConfigs(users={"alice": {"producer_byte_rate": "10", "SCRAM-SHA-256": "x"}},
                           user_clients={("alice", D): {"consumer_byte_rate": "20"}},
                           clients={D: {"request_percentage": "5.5", "producer_byte_rate": "bad"},
                                    "zero": {"controller_mutation_rate": "0", "consumer_byte_rate": "-3"}})
    assert configs_by_type(configs) == {"producer_byte_rate": {("alice", None): 10.0},
                                        "consumer_byte_rate": {("alice", D): 20.0},
                                        "request_percentage": {(None, D): 5.5}, "controller_mutation_rate": {}}


def test_metrics_per_quota_entity():
    from odradek.broker.quota.client_quota_manager import QuotaConfig as Config
    from odradek.broker.quota.quota_managers import QuotaManagers

    clock = ManualClock(0)
    managers = QuotaManagers(None, Config(samples=2, window_ms=1000), clock)
    managers.update(QuotaConfigs(clients={"flood": {"producer_byte_rate": "100"}}))
    assert managers.produce.record("ANONYMOUS", "flood", 300, clock()) == 2000
    families = {f.name: f.samples for f in managers.families()}
    labels = (("user", ""), ("client_id", "flood"))
    assert families["kafka_server_produce_byte_rate"] == [("", labels, 300.0)]
    assert families["kafka_server_produce_throttle_time"] == [("", labels, 2000)]
    assert families["kafka_server_fetch_byte_rate"] == []


def test_a_consumer_fetch_is_cut_to_its_quota_window():
    manager = ClientQuotaManager("consumer_byte_rate", QuotaConfig(samples=11, window_ms=1000))
    assert manager.max_value_in_quota_window("u", "c") is None
    manager.update_configs({(None, "c"): 1000.0})
    assert manager.max_value_in_quota_window("u", "c") == 10_000


def test_idle_rates_are_forgotten(monkeypatch):
    from odradek.broker.quota import client_quota_manager

    monkeypatch.setattr(client_quota_manager, "MAX_IDLE_CHECK", 3)
    manager = ClientQuotaManager("producer_byte_rate", QuotaConfig(samples=2, window_ms=1000))
    manager.update_configs({(None, D): 100.0})
    for i in range(3):
        manager.record("u", f"c{i}", 1, 0)
    manager.record("u", "late", 1, 5000)  # the others' windows ended long ago
    assert set(manager.stats) == {("", "late")}

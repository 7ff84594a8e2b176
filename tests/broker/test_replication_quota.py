"""Replication throttles: which replicas a list names, and the windowed rate (a fake clock)."""

from odradek.broker.replication_quota import SAMPLE_S, SAMPLES, ReplicationQuota, is_throttled


def test_throttled_replica_lists():
    assert is_throttled("*", 3, 9) and is_throttled(" * ", 0, 0)
    assert is_throttled("0:1, 3:9", 3, 9) and not is_throttled("0:1,3:9", 3, 1) and not is_throttled("", 0, 0)
    assert not is_throttled("13:9", 3, 9)


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_rate_over_the_window_and_dynamic_bound():
    clock, bound = Clock(), [1000]
    q = ReplicationQuota(lambda: bound[0], clock)
    assert not q.is_exceeded()
    q.record(900)
    assert not q.is_exceeded()  # a young window counts as one sample long
    q.record(200)
    assert q.is_exceeded()
    bound[0] = 5000  # a dynamic config change applies at the next check
    assert not q.is_exceeded()
    bound[0] = 1000
    clock.now += 2 * SAMPLE_S
    assert q.rate() == 1100 / (2 * SAMPLE_S) and not q.is_exceeded()
    clock.now += (SAMPLES + 1) * SAMPLE_S  # the old samples leave the window
    assert q.rate() == 0


def test_the_default_bound_never_throttles():
    q = ReplicationQuota(lambda: 2**63 - 1, Clock())
    q.record(10**12)
    assert not q.is_exceeded()

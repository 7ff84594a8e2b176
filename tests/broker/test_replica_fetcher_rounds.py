"""A replica fetcher's round looks only at the partitions that changed (issue 31): the fetch set
is kept between rounds, and answers, truncations, backoffs and removals mark what to look at."""

from types import SimpleNamespace

from kio.schema.errors import ErrorCode

from odradek.broker.replica_fetcher import SWEEP_S, ReplicaFetcher
from odradek.common.config import BrokerConfig


class Host:
    """The replica manager as the fetcher sees it, counting partition look-ups."""

    def __init__(self, keys):
        self.follower_quota = None
        self.lookups = 0
        self.partitions = {k: SimpleNamespace(key=k, partition=k[1], isr=[0], log=SimpleNamespace(
            log_end_offset=0, log_start_offset=0, config=SimpleNamespace(follower_replication_throttled_replicas="")))
            for k in keys}

    def get_partition(self, key):
        self.lookups += 1
        return self.partitions.get(key)

    def complete_delayed_requests(self, key):
        pass


def fetcher_following(n: int) -> tuple[ReplicaFetcher, Host, list]:
    config = BrokerConfig.from_properties({"broker.id": "1", "zookeeper.connect": "x", "log.dirs": "/tmp/x"})
    keys = [("t", i) for i in range(n)]
    host = Host(keys)
    fetcher = ReplicaFetcher(SimpleNamespace(replica_manager=host, config=config, broker_id=1), 0, "127.0.0.1", 9)
    for k in keys:
        fetcher.add(k, leader_epoch=3)
    for k in keys:
        fetcher._end_truncation(k, fetcher.partitions[k])
    return fetcher, host, keys


def next_round(fetcher: ReplicaFetcher, now: float) -> set:
    """What do_work does before a Fetch, without the I/O: the keys the next request must look at."""
    fetcher._release_delays(now)
    fetcher._update_fetch_set(now)
    unsent, fetcher._unsent = fetcher._unsent, set()
    return unsent


def test_a_round_costs_the_changed_partitions_not_the_followed_ones():
    fetcher, host, keys = fetcher_following(1000)
    assert next_round(fetcher, 0.0) == set(keys) and len(fetcher._fetching) == 1000
    host.lookups = 0
    assert next_round(fetcher, 0.1) == set() and host.lookups == 0  # an idle round looks at nothing

    # The leader answered one partition with records: only it is looked at, and sent.
    host.partitions[keys[7]].log.log_end_offset = 5
    fetcher._changed.update([keys[7], keys[8]])  # 8 answered a new high watermark only
    assert next_round(fetcher, 0.2) == {keys[7]} and host.lookups == 2
    assert fetcher._fetching[keys[7]].fetch_offset == 5 and fetcher._fetching[keys[8]].fetch_offset == 0


def test_backoffs_leave_the_fetch_set_and_come_back_when_due():
    fetcher, host, keys = fetcher_following(10)
    next_round(fetcher, 0.0)
    state = fetcher.partitions[keys[2]]
    fetcher.retry_after(state, keys[2], ErrorCode.not_leader_or_follower, now=1.0, what="fetch")
    assert next_round(fetcher, 1.0) == {keys[2]} and keys[2] not in fetcher._fetching  # forgotten
    assert next_round(fetcher, 1.01) == set()
    host.lookups = 0
    assert next_round(fetcher, 1.0 + 0.05) == {keys[2]} and keys[2] in fetcher._fetching and host.lookups == 1


def test_removed_and_retruncating_partitions_leave_the_fetch_set():
    fetcher, _, keys = fetcher_following(10)
    next_round(fetcher, 0.0)
    fetcher.remove(keys[0])
    fetcher._truncate_again(keys[1], fetcher.partitions[keys[1]])
    assert next_round(fetcher, 0.1) == {keys[0], keys[1]}
    assert keys[0] not in fetcher._fetching and keys[1] not in fetcher._fetching
    assert fetcher._truncating == {keys[1]}


def test_the_sweep_catches_what_no_answer_announces():
    fetcher, host, keys = fetcher_following(10)
    next_round(fetcher, 0.0)
    host.partitions[keys[4]].log.log_start_offset = 3  # retention on our side
    assert next_round(fetcher, SWEEP_S / 2) == set()
    assert next_round(fetcher, SWEEP_S) == {keys[4]}


class Quota:
    def __init__(self):
        self.exceeded = False

    def is_exceeded(self):
        return self.exceeded


def test_a_throttled_replica_back_from_its_backoff_waits_again_while_the_quota_is_exceeded():
    fetcher, host, keys = fetcher_following(3)
    host.follower_quota = quota = Quota()
    host.partitions[keys[1]].log.config.follower_replication_throttled_replicas = "*"  # a moving replica
    next_round(fetcher, 0.0)
    quota.exceeded = True
    next_round(fetcher, 0.1)
    assert set(fetcher._fetching) == {keys[0], keys[2]}  # held back, the others fetch
    backoff = fetcher.backoff_s
    next_round(fetcher, 0.1 + backoff)  # its backoff ends, the quota still exceeded
    assert keys[1] not in fetcher._fetching
    quota.exceeded = False
    next_round(fetcher, 0.1 + 2 * backoff)
    assert keys[1] in fetcher._fetching

import pytest

from odradek.broker.log import LogConfig
from odradek.broker.log.leader_epoch import LeaderEpochFileCache
from odradek.common.config import BrokerConfig


def broker_config(**props):
    return BrokerConfig.from_properties({"broker.id": "0", "zookeeper.connect": "127.0.0.1:1", **props})


def test_defaults_come_from_the_broker_and_overrides_win():
    bc = broker_config(**{"log.segment.bytes": "4096", "log.retention.ms": "1000", "log.flush.interval.ms": "50"})
    config = LogConfig.from_broker(bc, {"retention.ms": "2000", "cleanup.policy": "compact,delete"})
    assert (config.segment_bytes, config.retention_ms, config.flush_ms) == (4096, 2000, 50)
    described = config.describe()
    assert described["segment.bytes"] == ("4096", True)
    assert described["retention.ms"] == ("2000", False)
    assert described["cleanup.policy"] == ("compact,delete", False)
    assert described["unclean.leader.election.enable"] == ("false", True)
    assert described["message.timestamp.type"] == ("CreateTime", True)
    assert config.deletes


def test_flush_ms_falls_back_to_the_scheduler_interval():
    assert LogConfig.from_broker(broker_config(), {}).flush_ms == 2**63 - 1


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"no.such.key": "1"}, "Unknown topic config name: no.such.key"),
        ({"segment.bytes": "abc"}, "segment.bytes"),
        ({"segment.bytes": "10"}, "at least 14"),
        ({"retention.ms": "-2"}, "retention.ms"),
        ({"message.timestamp.type": "Wallclock"}, "message.timestamp.type"),
        ({"cleanup.policy": "shred"}, "cleanup.policy"),
        ({"min.insync.replicas": "0"}, "min.insync.replicas"),
        ({"unclean.leader.election.enable": "yes"}, "unclean"),
    ],
)
def test_validate_overrides_rejects(overrides, message):
    with pytest.raises(ValueError, match=message):
        LogConfig.validate_overrides(overrides)


def test_validate_accepts_kafka_values():
    LogConfig.validate_overrides(
        {"retention.ms": "-1", "retention.bytes": "-1", "message.timestamp.type": "LogAppendTime",
         "max.message.bytes": "2000000", "flush.messages": "1", "segment.ms": "60000"}
    )


def test_leader_epoch_cache_assign_and_end_offsets(tmp_path):
    leo = [100]
    cache = LeaderEpochFileCache(tmp_path / "leader-epoch-checkpoint", lambda: leo[0])
    assert cache.latest_epoch == -1 and cache.end_offset_for(0) == (-1, -1)
    cache.assign(1, 0)
    cache.assign(1, 5)  # same epoch: ignored
    cache.assign(0, 7)  # older epoch: ignored
    cache.assign(3, 20)
    cache.assign(5, 60)
    assert cache.entries == [(1, 0), (3, 20), (5, 60)]
    assert cache.end_offset_for(5) == (5, 100)
    assert cache.end_offset_for(3) == (3, 60)
    assert cache.end_offset_for(4) == (3, 60)
    assert cache.end_offset_for(2) == (1, 20)
    assert cache.end_offset_for(0) == (0, 0)
    assert cache.end_offset_for(9) == (-1, -1)
    assert cache.end_offset_for(-1) == (-1, -1)
    # changes are made in memory; a flush writes Kafka's format, which survives a reload
    assert not (tmp_path / "leader-epoch-checkpoint").exists() and cache.dirty
    cache.flush()
    assert not cache.dirty
    assert (tmp_path / "leader-epoch-checkpoint").read_text() == "0\n3\n1 0\n3 20\n5 60\n"
    again = LeaderEpochFileCache(tmp_path / "leader-epoch-checkpoint", lambda: 0)
    assert again.entries == cache.entries


def test_leader_epoch_cache_truncation(tmp_path):
    cache = LeaderEpochFileCache(tmp_path / "c", lambda: 0)
    for epoch, start in [(1, 0), (2, 10), (4, 30)]:
        cache.assign(epoch, start)
    cache.truncate_from_end(30)
    assert cache.entries == [(1, 0), (2, 10)]
    cache.truncate_from_start(15)
    assert cache.entries == [(2, 15)]
    cache.assign(6, 12)  # a newer epoch starting below existing entries replaces them
    assert cache.entries == [(6, 12)]
    cache.flush()
    assert LeaderEpochFileCache(tmp_path / "c", lambda: 0).entries == [(6, 12)]
    cache.clear()
    cache.flush()
    assert LeaderEpochFileCache(tmp_path / "c", lambda: 0).entries == []


def test_leader_epoch_stale_snapshots_never_undo_a_newer_write(tmp_path):
    path = tmp_path / "c"
    cache = LeaderEpochFileCache(path, lambda: 0)
    assert cache.assign(1, 0) and not path.exists()  # written later (leader_epoch's docstring)
    old = cache.snapshot()
    cache.assign(2, 10)
    cache.flush()
    cache.write(old)  # an older snapshot arriving late (a worker thread) must not undo it
    assert LeaderEpochFileCache(path, lambda: 0).entries == [(1, 0), (2, 10)]
    assert not cache.assign(2, 20) and not cache.dirty  # not newer: nothing to write
    cache.assign(3, 20)
    cache.write(cache.snapshot())
    assert LeaderEpochFileCache(path, lambda: 0).entries == [(1, 0), (2, 10), (3, 20)]


def test_unreadable_epoch_checkpoint_is_ignored(tmp_path):
    (tmp_path / "c").write_text("garbage")
    assert LeaderEpochFileCache(tmp_path / "c", lambda: 0).entries == []


def test_from_broker_skips_bad_keys_from_zookeeper_but_validation_rejects_them():
    config = LogConfig.from_broker(None, {"retention.ms": "nope", "segment.bytes": "2048", "weird.key": "1"})
    assert config.retention_ms == LogConfig().retention_ms and config.segment_bytes == 2048
    assert config.overrides == {"segment.bytes": "2048"}


def test_compaction_keys_are_accepted_and_described():
    config = LogConfig.from_broker(None, {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.1"})
    assert not config.deletes
    assert config.describe()["min.cleanable.dirty.ratio"] == ("0.1", False)
    assert config.describe()["delete.retention.ms"] == ("86400000", True)
    with pytest.raises(ValueError):
        LogConfig.validate_overrides({"min.cleanable.dirty.ratio": "2"})

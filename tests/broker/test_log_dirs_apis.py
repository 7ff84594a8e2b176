"""DescribeLogDirs answers built from a snapshot of plain data, in every served version."""

from kio.schema.errors import ErrorCode

from odradek.broker.log.log_manager import LogManager
from odradek.broker.log_dirs_apis import LogDirView, ReplicaView, describe, snapshot
from odradek.common import wire
from odradek.common.config import BrokerConfig

VIEWS = [
    LogDirView("/d1", False, [ReplicaView("t", 1, 300, 0), ReplicaView("t", 0, 100, 2), ReplicaView("u", 0, 5, 0)],
               1000, 400),
    LogDirView("/d2", True),
]


def test_every_replica_and_the_offline_dir():
    for version in range(1, 5):
        r = describe(VIEWS, None, version)
        d1, d2 = r.results
        assert d1.error_code == ErrorCode.none and d1.log_dir == "/d1"
        assert [(t.name, [(int(p.partition_index), int(p.partition_size), int(p.offset_lag)) for p in t.partitions])
                for t in d1.topics] == [("t", [(0, 100, 2), (1, 300, 0)]), ("u", [(0, 5, 0)])]
        assert d2.error_code == ErrorCode.kafka_storage_error and d2.topics == ()
        if version >= 4:
            assert (d1.total_bytes, d1.usable_bytes, d2.total_bytes) == (1000, 400, -1)
        wire.encode_response(r, 7, flexible_header=version >= 2)  # encodable in its version


def test_only_what_was_asked():
    (d1, _) = describe(VIEWS, {"t": {1, 9}, "nope": {0}}, 4).results
    assert [(t.name, [int(p.partition_index) for p in t.partitions]) for t in d1.topics] == [("t", [1])]
    (d1, _) = describe(VIEWS, {}, 4).results
    assert d1.topics == ()


def test_snapshot_of_a_real_log_manager(tmp_path):
    config = BrokerConfig.from_properties({"broker.id": "0", "zookeeper.connect": "127.0.0.1:1"})
    lm = LogManager([tmp_path / "a"], config)
    lm.startup()
    plog = lm.get_or_create_log("t", 0, lm.log_config("t"))
    (view,) = snapshot(lm)
    assert view.path == str(tmp_path / "a") and not view.offline and view.total_bytes > 0
    assert view.replicas == [ReplicaView("t", 0, plog.size, 0)]
    lm.shutdown()

"""The pure parts of the group coordinator's storage: `__consumer_offsets` codecs in Kafka's byte
layout, group → partition (Java's String.hashCode), replay of a record sequence into the cache,
offset retention, and the hand decoder of OffsetCommit v1."""

import datetime
import struct

import pytest

from odradek.broker.group import records
from odradek.broker.group.group_apis import decode_offset_commit_v1
from odradek.broker.group.group_metadata import GroupMetadata, GroupState, MemberMetadata, OffsetAndMetadata
from odradek.broker.group.group_metadata_manager import GroupMetadataManager
from odradek.broker.group.offsets_topic import java_string_hash, kafka_abs, partition_for
from odradek.broker.log.record_batch import Record

# --- partitioning -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("s", "expected"),
    [
        ("", 0),
        ("a", 97),
        ("hello", 99162322),
        ("polygenelubricants", -(1 << 31)),  # Java's famous Integer.MIN_VALUE hash
        ("é", 0xE9),  # one UTF-16 unit
        ("😀", 0xD83D * 31 + 0xDE00),  # a surrogate pair: two units, as Java hashes it
    ],
)
def test_java_string_hash(s, expected):
    assert java_string_hash(s) == expected


def _oracle_hash(s: str) -> int:
    """Java's definition, spelled out: sum of s[i]·31^(n-1-i) over UTF-16 units, in two's complement."""
    data = s.encode("utf-16-be")
    units = [int.from_bytes(data[i : i + 2], "big") for i in range(0, len(data), 2)]
    n = len(units)
    h = sum(u * pow(31, n - 1 - i, 1 << 32) for i, u in enumerate(units)) % (1 << 32)
    return h - (1 << 32) if h >= 1 << 31 else h


def test_java_hash_wraps_to_negative_and_kafka_abs():
    assert java_string_hash("hello world") == 1794106052  # overflows int32 once, stays positive
    negatives = [s for s in (f"group-{i}" for i in range(200)) if _oracle_hash(s) < 0]
    assert negatives  # about half of all strings hash negative
    for s in negatives[:20] + ["x" * 50, "consumer-🙂"]:
        h = java_string_hash(s)
        assert h == _oracle_hash(s)
        assert partition_for(s, 50) == kafka_abs(h) % 50 >= 0
    assert kafka_abs(-5) == 5
    assert kafka_abs(-(1 << 31)) == 0  # Utils.abs, not Math.abs (which stays negative)
    assert partition_for("polygenelubricants", 50) == 0


def test_partition_for_matches_kafka_formula():
    for group in ("hello", "my-group", "g-resume", "x" * 40, "Ünïcödé"):
        assert partition_for(group, 50) == kafka_abs(java_string_hash(group)) % 50
    assert partition_for("hello", 50) == 99162322 % 50 == 22


# --- key/value codecs ---------------------------------------------------------------------------


def test_offset_key_bytes_are_kafkas_v1_layout():
    assert records.offset_key("g", "t", 3) == b"\x00\x01" + b"\x00\x01g" + b"\x00\x01t" + b"\x00\x00\x00\x03"
    assert records.decode_key(records.offset_key("grp", "topic", 7)) == records.OffsetKey("grp", "topic", 7)
    # Version 0 keys (old brokers) have the same body.
    v0 = b"\x00\x00" + records.offset_key("grp", "topic", 7)[2:]
    assert records.decode_key(v0) == records.OffsetKey("grp", "topic", 7)


def test_group_key_bytes_and_unknown_key_versions():
    assert records.group_key("g") == b"\x00\x02\x00\x01g"
    assert records.decode_key(records.group_key("grp")) == records.GroupKey("grp")
    assert records.decode_key(b"\x00\x05\x00\x01g") is None  # Kafka skips unknown key versions


def test_offset_value_v3_layout_and_round_trip():
    om = OffsetAndMetadata(offset=42, leader_epoch=5, metadata="meta", commit_timestamp=1_700_000_000_000)
    data = records.offset_value(om)
    assert data == struct.pack(">hqih4sq", 3, 42, 5, 4, b"meta", 1_700_000_000_000)
    assert records.decode_offset_value(data) == om


def test_offset_value_old_versions_decode():
    v0 = struct.pack(">hqh2sq", 0, 10, 2, b"md", 111)
    assert records.decode_offset_value(v0) == OffsetAndMetadata(10, -1, "md", 111)
    v1 = struct.pack(">hqhqq", 1, 11, -1, 222, 333)  # null metadata, expire timestamp
    assert records.decode_offset_value(v1) == OffsetAndMetadata(11, -1, "", 222, 333)
    v2 = struct.pack(">hqh0sq", 2, 12, 0, b"", 444)
    assert records.decode_offset_value(v2) == OffsetAndMetadata(12, -1, "", 444)
    with pytest.raises(ValueError):
        records.decode_offset_value(struct.pack(">h", 9) + b"\x00" * 20)


def _member(mid, instance=None, protocols=(("range", b"sub-" + b"x"),), assignment=b""):
    return MemberMetadata(mid, instance, "client-" + mid, "/127.0.0.1", 30000, 10000, "consumer",
                          list(protocols), assignment)


def test_group_value_v3_round_trip():
    g = GroupMetadata("grp", protocol_type="consumer", protocol_name="range", generation_id=4, state_timestamp=99)
    g.add(_member("m1", assignment=b"a1"))
    g.add(_member("m2", instance="i2", assignment=b"a2"))
    g.state = GroupState.STABLE
    data = records.group_value(g)
    assert struct.unpack_from(">h", data)[0] == 3
    back = records.decode_group_value("grp", data)
    assert back.state == GroupState.STABLE
    assert (back.protocol_type, back.protocol_name, back.generation_id, back.leader_id, back.state_timestamp) == (
        "consumer", "range", 4, "m1", 99)
    assert list(back.members) == ["m1", "m2"]
    m2 = back.members["m2"]
    assert (m2.group_instance_id, m2.client_id, m2.rebalance_timeout_ms, m2.session_timeout_ms, m2.assignment) == (
        "i2", "client-m2", 30000, 10000, b"a2")
    assert m2.supported_protocols == [("range", b"sub-x")]
    assert back.static_members == {"i2": "m2"}


def test_empty_group_value_decodes_as_empty():
    g = GroupMetadata("grp", protocol_type="consumer", generation_id=7, state_timestamp=5)
    back = records.decode_group_value("grp", records.group_value(g))
    assert back.state == GroupState.EMPTY and back.generation_id == 7 and not back.members
    assert back.protocol_name is None and back.leader_id is None


def test_group_value_v0_decodes():
    # v0: protocol_type, generation, protocol, leader, members[member_id, client_id, client_host,
    # session_timeout, subscription, assignment]
    def s(x):
        return struct.pack(">h", len(x)) + x

    data = (struct.pack(">h", 0) + s(b"consumer") + struct.pack(">i", 2) + s(b"range") + s(b"m1")
            + struct.pack(">i", 1) + s(b"m1") + s(b"cid") + s(b"/h") + struct.pack(">i", 6000)
            + struct.pack(">i", 3) + b"sub" + struct.pack(">i", 3) + b"asg")
    g = records.decode_group_value("old", data)
    m = g.members["m1"]
    assert g.state == GroupState.STABLE and g.leader_id == "m1" and g.generation_id == 2
    assert (m.session_timeout_ms, m.rebalance_timeout_ms, m.assignment, m.group_instance_id) == (6000, 6000, b"asg", None)


# --- replay ---------------------------------------------------------------------------------------


def _manager(partitions=1) -> GroupMetadataManager:
    return GroupMetadataManager(broker_id=0, replica_manager=None, partition_count=partitions)


def _recs(pairs):
    return [Record(i, 0, k, v, []) for i, (k, v) in enumerate(pairs)]


def test_replay_applies_records_in_order_and_tombstones_delete():
    stable = GroupMetadata("g1", protocol_type="consumer", protocol_name="range", generation_id=3)
    stable.add(_member("m1", assignment=b"x"))
    mgr = _manager()
    mgr.replay(0, _recs([
        (records.offset_key("g1", "t", 0), records.offset_value(OffsetAndMetadata(5, commit_timestamp=1))),
        (records.offset_key("g1", "t", 1), records.offset_value(OffsetAndMetadata(6, commit_timestamp=1))),
        (records.group_key("g1"), records.group_value(stable)),
        (records.offset_key("g1", "t", 0), records.offset_value(OffsetAndMetadata(9, commit_timestamp=2))),
        (records.offset_key("g1", "t", 1), None),  # tombstone: offset deleted
        (records.offset_key("g2", "u", 0), records.offset_value(OffsetAndMetadata(1))),
        (records.group_key("g2"), records.group_value(GroupMetadata("g2", protocol_type="consumer"))),
        (records.offset_key("g2", "u", 0), None),
        (records.group_key("g2"), None),  # group tombstone: the group is gone
        (None, b"ignored: no key"),
        (b"\x00\x07junk", b"unknown key version"),
    ]))
    assert set(mgr.groups) == {"g1"}
    g1 = mgr.groups["g1"]
    assert g1.state == GroupState.STABLE and g1.generation_id == 3 and g1.members["m1"].assignment == b"x"
    assert {k: v.offset for k, v in g1.offsets.items()} == {("t", 0): 9}


def test_replay_group_tombstone_keeps_offsets_committed_after_it():
    mgr = _manager()
    mgr.replay(0, _recs([
        (records.group_key("g"), records.group_value(GroupMetadata("g", protocol_type="consumer"))),
        (records.offset_key("g", "t", 0), records.offset_value(OffsetAndMetadata(3))),
        (records.group_key("g"), None),
    ]))
    assert mgr.groups["g"].state == GroupState.EMPTY
    assert mgr.groups["g"].offsets[("t", 0)].offset == 3


# --- retention ------------------------------------------------------------------------------------

DAY = 24 * 3600 * 1000


def test_expired_offsets_of_an_empty_group_count_from_when_it_became_empty():
    g = GroupMetadata("g", protocol_type="consumer", state_timestamp=10 * DAY)
    g.offsets[("t", 0)] = OffsetAndMetadata(1, commit_timestamp=1 * DAY)
    g.offsets[("t", 1)] = OffsetAndMetadata(1, commit_timestamp=12 * DAY)
    retention = 7 * DAY
    assert g.expired_offsets(16 * DAY, retention) == []  # 6 days empty
    assert g.expired_offsets(17 * DAY, retention) == [("t", 0)]  # 7 days empty; t-1 committed later
    assert sorted(g.expired_offsets(19 * DAY, retention)) == [("t", 0), ("t", 1)]


def test_expired_offsets_of_a_standalone_committer_count_from_the_commit():
    g = GroupMetadata("g", state_timestamp=50 * DAY)  # no protocol type: only commits, no membership
    g.offsets[("t", 0)] = OffsetAndMetadata(1, commit_timestamp=1 * DAY)
    assert g.expired_offsets(8 * DAY, 7 * DAY) == [("t", 0)]


def test_live_group_offsets_expire_only_for_topics_it_no_longer_consumes():
    g = GroupMetadata("g", protocol_type="consumer", state=GroupState.STABLE)
    g.offsets[("kept", 0)] = OffsetAndMetadata(1, commit_timestamp=0)
    g.offsets[("gone", 0)] = OffsetAndMetadata(1, commit_timestamp=0)
    assert g.expired_offsets(100 * DAY, DAY) == []  # subscription unknown: keep everything
    assert g.expired_offsets(100 * DAY, DAY, subscribed={"kept"}) == [("gone", 0)]


def test_explicit_expire_timestamp_wins():
    g = GroupMetadata("g", protocol_type="consumer", state=GroupState.STABLE)
    g.offsets[("t", 0)] = OffsetAndMetadata(1, commit_timestamp=0, expire_timestamp=5)
    assert g.expired_offsets(4, DAY) == [] and g.expired_offsets(5, DAY) == [("t", 0)]


# --- OffsetCommit v1 ------------------------------------------------------------------------------


def _s(x: bytes | None) -> bytes:
    return struct.pack(">h", -1) if x is None else struct.pack(">h", len(x)) + x


def _offset_commit_v1(group=b"grp", generation=3, member=b"m-1", topics=((b"t", ((0, 10, -1, b"md"), (2, 20, 7, None))),)):
    body = struct.pack(">hhi", 8, 1, 77) + _s(b"rdkafka")
    body += _s(group) + struct.pack(">i", generation) + _s(member) + struct.pack(">i", len(topics))
    for name, parts in topics:
        body += _s(name) + struct.pack(">i", len(parts))
        for index, offset, ts, md in parts:
            body += struct.pack(">iqq", index, offset, ts) + _s(md)
    return body


def test_offset_commit_v1_decodes_into_the_v2_request():
    header, req, schema = decode_offset_commit_v1(_offset_commit_v1())
    assert (int(header.request_api_key), int(header.request_api_version), int(header.correlation_id)) == (8, 1, 77)
    assert header.client_id == "rdkafka"
    assert (req.group_id, int(req.generation_id_or_member_epoch), req.member_id) == ("grp", 3, "m-1")
    assert req.retention_time == datetime.timedelta(milliseconds=-1) and req.__version__ == 2 and schema is type(req)
    (topic,) = req.topics
    assert topic.name == "t"
    assert [(int(p.partition_index), int(p.committed_offset), p.committed_metadata) for p in topic.partitions] == [
        (0, 10, "md"), (2, 20, None)]


def test_offset_commit_v1_rejects_trailing_and_truncated_bodies():
    body = _offset_commit_v1()
    with pytest.raises(ValueError):
        decode_offset_commit_v1(body + b"\x00")
    with pytest.raises(ValueError):
        decode_offset_commit_v1(body[:-3])

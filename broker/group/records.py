"""Kafka's key/value schemas for `__consumer_offsets` records (pure codecs).

Keys: OffsetCommitKey (version 0/1: group, topic, partition) and GroupMetadataKey (version 2:
group). Values: OffsetCommitValue v1 (with expire timestamp) / v3 (with leader epoch), written as
v3; GroupMetadataValue v0–v3, written as v3. A null value is a tombstone. Byte-compatible with
Kafka's, so tools that read the topic (kafka-console-consumer's formatter) understand it.
"""

import struct
from dataclasses import dataclass

from .group_metadata import GroupMetadata, GroupState, MemberMetadata, OffsetAndMetadata

_H, _I, _Q = struct.Struct(">h"), struct.Struct(">i"), struct.Struct(">q")


class _Reader:
    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def _take(self, st: struct.Struct) -> int:
        (v,) = st.unpack_from(self.data, self.pos)
        self.pos += st.size
        return int(v)

    def int16(self) -> int:
        return self._take(_H)

    def int32(self) -> int:
        return self._take(_I)

    def int64(self) -> int:
        return self._take(_Q)

    def string(self) -> str | None:
        n = self.int16()
        if n < 0:
            return None
        s = self.data[self.pos : self.pos + n].decode()
        self.pos += n
        return s

    def required_string(self) -> str:
        """A non-nullable STRING (group and topic names): a null one makes the record corrupt."""
        s = self.string()
        if s is None:
            raise ValueError("null where a non-nullable string is required")
        return s

    def bytes_(self) -> bytes | None:
        n = self.int32()
        if n < 0:
            return None
        b = bytes(self.data[self.pos : self.pos + n])
        self.pos += n
        return b


def _string(value: str | None) -> bytes:
    if value is None:
        return _H.pack(-1)
    data = value.encode()
    return _H.pack(len(data)) + data


def _bytes(value: bytes | None) -> bytes:
    if value is None:
        return _I.pack(-1)
    return _I.pack(len(value)) + value


@dataclass(frozen=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True)
class GroupKey:
    group: str


def offset_key(group: str, topic: str, partition: int) -> bytes:
    return _H.pack(1) + _string(group) + _string(topic) + _I.pack(partition)


def group_key(group: str) -> bytes:
    return _H.pack(2) + _string(group)


def decode_key(data: bytes) -> OffsetKey | GroupKey | None:
    """None for key versions we do not know (Kafka skips them too)."""
    r = _Reader(data)
    version = r.int16()
    if version in (0, 1):
        return OffsetKey(r.required_string(), r.required_string(), r.int32())
    if version == 2:
        return GroupKey(r.required_string())
    return None


def offset_value(om: OffsetAndMetadata) -> bytes:
    return _H.pack(3) + _Q.pack(om.offset) + _I.pack(om.leader_epoch) + _string(om.metadata or "") + _Q.pack(om.commit_timestamp)


def decode_offset_value(data: bytes) -> OffsetAndMetadata:
    r = _Reader(data)
    version = r.int16()
    if version == 0:
        offset, metadata, ts = r.int64(), r.string(), r.int64()
        return OffsetAndMetadata(offset, -1, metadata or "", ts)
    if version == 1:
        offset, metadata, ts, expire = r.int64(), r.string(), r.int64(), r.int64()
        return OffsetAndMetadata(offset, -1, metadata or "", ts, expire)
    if version in (2, 3):
        offset = r.int64()
        epoch = r.int32() if version == 3 else -1
        metadata, ts = r.string(), r.int64()
        return OffsetAndMetadata(offset, epoch, metadata or "", ts)
    raise ValueError(f"unknown offset commit value version {version}")


def group_value(group: GroupMetadata) -> bytes:
    out = [
        _H.pack(3),
        _string(group.protocol_type or ""),
        _I.pack(group.generation_id),
        _string(group.protocol_name),
        _string(group.leader_id),
        _Q.pack(group.state_timestamp),
        _I.pack(len(group.members)),
    ]
    for m in group.members.values():
        out += [
            _string(m.member_id),
            _string(m.group_instance_id),
            _string(m.client_id),
            _string(m.client_host),
            _I.pack(m.rebalance_timeout_ms),
            _I.pack(m.session_timeout_ms),
            _bytes(m.metadata(group.protocol_name) if group.protocol_name else b""),
            _bytes(m.assignment or b""),
        ]
    return b"".join(out)


def decode_group_value(group_id: str, data: bytes) -> GroupMetadata:
    """The stored group, Empty or Stable as Kafka reloads it (members only if it had any)."""
    r = _Reader(data)
    version = r.int16()
    if not 0 <= version <= 3:
        raise ValueError(f"unknown group metadata value version {version}")
    protocol_type = r.string()
    generation = r.int32()
    protocol = r.string()
    leader = r.string()
    state_ts = r.int64() if version >= 2 else 0
    if state_ts < 0:
        state_ts = 0
    group = GroupMetadata(group_id, protocol_type=protocol_type or None, generation_id=generation,
                          protocol_name=protocol, state_timestamp=state_ts)
    for _ in range(r.int32()):
        member_id = r.required_string()
        instance_id = r.string() if version >= 3 else None
        client_id, client_host = r.string(), r.string()
        rebalance = r.int32() if version >= 1 else -1
        session = r.int32()
        subscription, assignment = r.bytes_(), r.bytes_()
        if rebalance < 0:
            rebalance = session
        member = MemberMetadata(
            member_id, instance_id, client_id or "", client_host or "", rebalance, session,
            protocol_type or "", [(protocol or "", subscription or b"")], assignment or b"",
        )
        group.add(member)
    group.leader_id = leader if leader in group.members else group.leader_id
    group.state = GroupState.STABLE if group.members else GroupState.EMPTY
    return group

"""Kafka's key/value schemas for `__transaction_state` records (TransactionLogKey/Value), pure.

Key v0: transactional id. Value v0: producer id, epoch, timeout, state id, the partitions
(null when Empty), last update and start timestamps. A null value is a tombstone (the id
expired). Byte-compatible with Kafka's, so its tools can read the topic.
"""

import struct

from .transaction_metadata import TransactionState, TxnTransit

_H, _I, _Q, _B = struct.Struct(">h"), struct.Struct(">i"), struct.Struct(">q"), struct.Struct(">b")
KEY_VERSION = 0
VALUE_VERSION = 0


def _string(value: str) -> bytes:
    data = value.encode()
    return _H.pack(len(data)) + data


def key(transactional_id: str) -> bytes:
    return _H.pack(KEY_VERSION) + _string(transactional_id)


def value(transit: TxnTransit) -> bytes:
    out = [_H.pack(VALUE_VERSION), _Q.pack(transit.producer_id), _H.pack(transit.producer_epoch),
           _I.pack(transit.txn_timeout_ms), _B.pack(transit.state.value)]
    if transit.state == TransactionState.EMPTY:
        out.append(_I.pack(-1))
    else:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(transit.partitions):
            by_topic.setdefault(topic, []).append(partition)
        out.append(_I.pack(len(by_topic)))
        for topic, partitions in by_topic.items():
            out.append(_string(topic))
            out.append(_I.pack(len(partitions)))
            out.extend(_I.pack(p) for p in partitions)
    out.append(_Q.pack(transit.txn_last_update_timestamp))
    out.append(_Q.pack(transit.txn_start_timestamp))
    return b"".join(out)


class _Reader:
    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def take(self, st: struct.Struct) -> int:
        (v,) = st.unpack_from(self.data, self.pos)
        self.pos += st.size
        return int(v)  # every struct here is an integer format

    def string(self) -> str:
        n = self.take(_H)
        if n < 0 or self.pos + n > len(self.data):
            raise ValueError("bad string length")
        s = self.data[self.pos : self.pos + n].decode()
        self.pos += n
        return s

    def count(self) -> int:
        n = self.take(_I)
        if n > len(self.data) - self.pos:
            raise ValueError("array longer than the record")
        return n


def decode_key(data: bytes) -> str | None:
    """The transactional id; None for a key version this broker does not know (skipped)."""
    r = _Reader(data)
    try:
        if r.take(_H) != KEY_VERSION:
            return None
        return r.string()
    except (struct.error, UnicodeDecodeError) as e:
        raise ValueError(f"malformed transaction log key: {e}") from None


def decode_value(data: bytes) -> TxnTransit:
    """ValueError for a malformed value or an unknown version."""
    r = _Reader(data)
    try:
        version = r.take(_H)
        if version != VALUE_VERSION:
            raise ValueError(f"unknown transaction log value version {version}")
        producer_id, epoch, timeout, state_id = r.take(_Q), r.take(_H), r.take(_I), r.take(_B)
        state = TransactionState(state_id)
        partitions = set()
        n = r.count()
        for _ in range(max(0, n)):
            topic = r.string()
            for _ in range(r.count()):
                partitions.add((topic, r.take(_I)))
        last_update, start = r.take(_Q), r.take(_Q)
    except (struct.error, UnicodeDecodeError) as e:
        raise ValueError(f"malformed transaction log value: {e}") from None
    return TxnTransit(producer_id, -1, epoch, -1, timeout, state, frozenset(partitions), start, last_update)

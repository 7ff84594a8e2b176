"""The consumer protocol's subscription (Kafka's ConsumerProtocolSubscription.json, v0–v3), as a
"consumer" group's members put it in their JoinGroup metadata.

The broker reads only the topics: a live group's committed offsets for topics no member subscribes
to any more expire like an idle group's (Kafka's offset retention since 2.1, KIP-211).
"""

import struct

CONSUMER_PROTOCOL_TYPE = "consumer"

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


def subscription_topics(metadata: bytes) -> list[str]:
    """The topics of a subscription of any version: in all of them they follow the version.

    Raises ValueError when the bytes are not a subscription."""
    try:
        (version,) = _I16.unpack_from(metadata, 0)
        (count,) = _I32.unpack_from(metadata, 2)
        if version < 0 or count < 0:
            raise ValueError(f"version {version}, {count} topics")
        pos, topics = 6, []
        for _ in range(count):
            (length,) = _I16.unpack_from(metadata, pos)
            pos += 2
            if length < 0 or pos + length > len(metadata):
                raise ValueError(f"topic name of {length} bytes at {pos}")
            topics.append(bytes(metadata[pos : pos + length]).decode())
            pos += length
    except (struct.error, UnicodeDecodeError) as e:
        raise ValueError(f"not a consumer protocol subscription: {e}") from None
    return topics

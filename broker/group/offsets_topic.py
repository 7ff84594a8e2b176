"""The offsets topic, `__consumer_offsets`: its name and config, which partition holds a group
(Kafka's partitionFor over Java's String.hashCode), and what a committer sees when an append to it
fails. Shared by the group manager, transactional offsets and the transaction coordinator.
"""

import functools

from kio.schema.errors import ErrorCode

GROUP_METADATA_TOPIC_NAME = "__consumer_offsets"
GROUP_METADATA_TOPIC_CONFIG = {"cleanup.policy": "compact", "compression.type": "producer", "segment.bytes": "104857600"}
"""Kafka's groupMetadataTopicConfigs: how the offsets topic is created, wherever that happens."""


@functools.lru_cache(maxsize=4096)
def java_string_hash(s: str) -> int:
    """Java's String.hashCode (over UTF-16 code units), as a signed 32-bit int."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def kafka_abs(n: int) -> int:
    """Kafka's Utils.abs: Integer.MIN_VALUE maps to 0."""
    return 0 if n == -(1 << 31) else abs(n)


def partition_for(group_id: str, partition_count: int) -> int:
    return kafka_abs(java_string_hash(group_id)) % partition_count


def append_error_to_commit_error(code: ErrorCode) -> ErrorCode:
    """Kafka's mapping of a failed __consumer_offsets append to what the committer sees."""
    if code in (ErrorCode.unknown_topic_or_partition, ErrorCode.not_enough_replicas,
                ErrorCode.not_enough_replicas_after_append, ErrorCode.request_timed_out):
        return ErrorCode.coordinator_not_available
    if code in (ErrorCode.not_leader_or_follower, ErrorCode.kafka_storage_error):
        return ErrorCode.not_coordinator
    if code in (ErrorCode.message_too_large, ErrorCode.record_list_too_large, ErrorCode.invalid_fetch_size):
        return ErrorCode.invalid_commit_offset_size
    return code

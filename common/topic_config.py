"""Kafka's topic-level config keys (Kafka 3.9's LogConfig definitions): each key's type, default,
validator and documentation, and the broker key it defaults to (its synonym).

The broker (LogConfig, CreateTopics, AlterConfigs, DescribeConfigs) and the operator (a Topic's
spec.config) both use this one table, so a value one accepts the other accepts too. Pure data and
parsers: the operator imports it without any broker runtime.
"""

import re
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from odradek.common.config_def import (
    INT_MAX,
    LONG_MAX,
    ConfigException,
    ConfigKey,
    ConfigType,
    Validator,
    at_least,
    between,
    list_of,
    one_of,
)

DAY_MS = 24 * 3600 * 1000
COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
"""Kafka's BrokerCompressionType names: the topic-level compression.type values."""
_THROTTLED_REPLICA = re.compile(r"([0-9]+:[0-9]+)?")
_METADATA_VERSION = re.compile(r"(0\.(8\.[0-2]|9\.0|10\.[0-2]|11\.0)|[1-3]\.[0-9])(\.[0-9]+)?(-IV[0-9]+)?")


def _gzip_level(name: str, value: Any) -> None:
    if value != -1 and not 1 <= value <= 9:
        raise ConfigException(name, value, "Value must be between 1 and 9, or -1 (the codec's default)")


def _throttled_replicas(name: str, value: Any) -> None:
    if "".join(value) == "*" or all(_THROTTLED_REPLICA.fullmatch(item.strip()) for item in value):
        return
    raise ConfigException(name, ",".join(value), f"{name} must be the literal '*' or a list of replicas in the "
                          "following format: [partitionId]:[brokerId],[partitionId]:[brokerId],...")


def _metadata_version(name: str, value: Any) -> None:
    if not _METADATA_VERSION.fullmatch(value):
        raise ConfigException(name, value, "Version must be one of the Kafka releases, such as 2.8 or 3.0-IV1")


class TopicKey(NamedTuple):
    """A topic-level key: its definition, the LogConfig attribute, the broker key it defaults to
    (Kafka's ServerTopicConfigSynonyms; None when it has none) and how to read that default from
    a BrokerConfig (the broker's effective value, alternative keys resolved)."""

    key: ConfigKey
    attr: str
    synonym: str | None
    broker_default: Callable[[Any], Any] | None


def _key(name: str, ctype: ConfigType, default: Any, doc: str, validator: Validator | None = None) -> ConfigKey:
    return ConfigKey(name, ctype, default, doc, validator)


def _from(synonym: str) -> Callable[[Any], Any]:
    return lambda b: b.value_of(synonym)


_L, _I, _B, _S = ConfigType.LONG, ConfigType.INT, ConfigType.BOOLEAN, ConfigType.STRING
_D, _LIST = ConfigType.DOUBLE, ConfigType.LIST

TOPIC_KEYS: tuple[TopicKey, ...] = (
    TopicKey(_key("segment.bytes", _I, 1 << 30, "Size of a log segment file; a new one is rolled when it is full.",
                  at_least(14)), "segment_bytes", "log.segment.bytes", _from("log.segment.bytes")),
    TopicKey(_key("segment.ms", _L, 7 * DAY_MS, "Time after which a segment is rolled even if not full, so that "
                  "retention can delete or compact it.", at_least(1)),
             "segment_ms", "log.roll.ms", lambda b: b.log_roll_time_millis),
    TopicKey(_key("segment.jitter.ms", _L, 0, "Maximum random jitter subtracted from segment.ms.", at_least(0)),
             "segment_jitter_ms", "log.roll.jitter.ms", lambda b: b.log_roll_time_jitter_millis),
    TopicKey(_key("segment.index.bytes", _I, 10 * 1024 * 1024, "Size of the offset index of a segment.",
                  at_least(4)), "segment_index_bytes", "log.index.size.max.bytes", _from("log.index.size.max.bytes")),
    TopicKey(_key("flush.messages", _L, LONG_MAX, "Records appended between forced fsyncs of the log.", at_least(1)),
             "flush_messages", "log.flush.interval.messages", _from("log.flush.interval.messages")),
    TopicKey(_key("flush.ms", _L, LONG_MAX, "Milliseconds between forced fsyncs of the log.", at_least(0)),
             "flush_ms", "log.flush.interval.ms", lambda b: b.log_flush_interval_millis),
    TopicKey(_key("retention.bytes", _L, -1, "Largest size a partition may grow to before old segments are "
                  "deleted (cleanup.policy delete); -1: no limit."),
             "retention_bytes", "log.retention.bytes", _from("log.retention.bytes")),
    TopicKey(_key("retention.ms", _L, 7 * DAY_MS, "Time a segment is kept before it is deleted (cleanup.policy "
                  "delete); -1: no limit.", at_least(-1)),
             "retention_ms", "log.retention.ms", lambda b: b.log_retention_time_millis),
    TopicKey(_key("max.message.bytes", _I, 1048588, "Largest record batch the topic accepts (after compression).",
                  at_least(0)), "max_message_bytes", "message.max.bytes", _from("message.max.bytes")),
    TopicKey(_key("index.interval.bytes", _I, 4096, "Bytes of records between two offset index entries.",
                  at_least(0)), "index_interval_bytes", "log.index.interval.bytes", _from("log.index.interval.bytes")),
    TopicKey(_key("delete.retention.ms", _L, DAY_MS, "Time delete tombstones are kept in compacted topics.",
                  at_least(0)), "delete_retention_ms", "log.cleaner.delete.retention.ms",
             _from("log.cleaner.delete.retention.ms")),
    TopicKey(_key("min.compaction.lag.ms", _L, 0, "Minimum time a record stays uncompacted.", at_least(0)),
             "min_compaction_lag_ms", "log.cleaner.min.compaction.lag.ms", _from("log.cleaner.min.compaction.lag.ms")),
    TopicKey(_key("max.compaction.lag.ms", _L, LONG_MAX, "Maximum time a record stays ineligible for compaction.",
                  at_least(1)), "max_compaction_lag_ms", "log.cleaner.max.compaction.lag.ms",
             _from("log.cleaner.max.compaction.lag.ms")),
    TopicKey(_key("file.delete.delay.ms", _L, 60000, "Time a deleted segment's files stay on disk.", at_least(0)),
             "file_delete_delay_ms", "log.segment.delete.delay.ms", _from("log.segment.delete.delay.ms")),
    TopicKey(_key("min.cleanable.dirty.ratio", _D, 0.5, "Share of a compacted log that must be uncompacted "
                  "before the cleaner compacts it.", between(0, 1)),
             "min_cleanable_dirty_ratio", "log.cleaner.min.cleanable.ratio", _from("log.cleaner.min.cleanable.ratio")),
    TopicKey(_key("cleanup.policy", _LIST, ["delete"], "delete (retention by time and size) and/or compact.",
                  list_of("compact", "delete")), "cleanup_policy", "log.cleanup.policy", _from("log.cleanup.policy")),
    TopicKey(_key("unclean.leader.election.enable", _B, False, "Whether a replica outside the ISR may become "
                  "leader when none in it is alive, at the risk of losing data."),
             "unclean_leader_election_enable", "unclean.leader.election.enable",
             _from("unclean.leader.election.enable")),
    TopicKey(_key("min.insync.replicas", _I, 1, "Replicas that must be in sync for an acks=all write to be "
                  "accepted (else NOT_ENOUGH_REPLICAS).", at_least(1)),
             "min_insync_replicas", "min.insync.replicas", _from("min.insync.replicas")),
    TopicKey(_key("compression.type", _S, "producer", "Final compression of the topic's batches: a codec, "
                  "uncompressed, or producer (as the producer sent them).", one_of(*COMPRESSION_TYPES)),
             "compression_type", "compression.type", _from("compression.type")),
    TopicKey(_key("compression.gzip.level", _I, -1, "gzip level when compression.type is gzip.", _gzip_level),
             "compression_gzip_level", "compression.gzip.level", _from("compression.gzip.level")),
    TopicKey(_key("compression.lz4.level", _I, 9, "lz4 level when compression.type is lz4.", between(1, 17)),
             "compression_lz4_level", "compression.lz4.level", _from("compression.lz4.level")),
    TopicKey(_key("compression.zstd.level", _I, 3, "zstd level when compression.type is zstd.",
                  between(-131072, 22)), "compression_zstd_level", "compression.zstd.level",
             _from("compression.zstd.level")),
    TopicKey(_key("preallocate", _B, False, "Whether segment files are preallocated."),
             "preallocate", "log.preallocate", _from("log.preallocate")),
    TopicKey(_key("message.format.version", _S, "3.0-IV1", "Deprecated: ignored since Kafka 3.0 (record "
                  "batches v2 only).", _metadata_version),
             "message_format_version", "log.message.format.version", _from("log.message.format.version")),
    TopicKey(_key("message.timestamp.type", _S, "CreateTime", "CreateTime (the producer's timestamp) or "
                  "LogAppendTime (the broker's clock at append).", one_of("CreateTime", "LogAppendTime")),
             "message_timestamp_type", "log.message.timestamp.type", _from("log.message.timestamp.type")),
    TopicKey(_key("message.timestamp.difference.max.ms", _L, LONG_MAX, "Deprecated: largest difference "
                  "between a record's timestamp and the broker's clock.", at_least(0)),
             "message_timestamp_difference_max_ms", "log.message.timestamp.difference.max.ms",
             _from("log.message.timestamp.difference.max.ms")),
    TopicKey(_key("message.timestamp.before.max.ms", _L, LONG_MAX, "How far a record's timestamp may lie in "
                  "the past of the broker's clock.", at_least(0)),
             "message_timestamp_before_max_ms", "log.message.timestamp.before.max.ms",
             _from("log.message.timestamp.before.max.ms")),
    TopicKey(_key("message.timestamp.after.max.ms", _L, LONG_MAX, "How far a record's timestamp may lie in "
                  "the future of the broker's clock.", at_least(0)),
             "message_timestamp_after_max_ms", "log.message.timestamp.after.max.ms",
             _from("log.message.timestamp.after.max.ms")),
    TopicKey(_key("leader.replication.throttled.replicas", _LIST, [], "Replicas ([partition]:[broker],... or *) "
                  "whose leader side is throttled by leader.replication.throttled.rate.", _throttled_replicas),
             "leader_replication_throttled_replicas", None, None),
    TopicKey(_key("follower.replication.throttled.replicas", _LIST, [], "Replicas ([partition]:[broker],... or "
                  "*) whose follower side is throttled by follower.replication.throttled.rate.",
                  _throttled_replicas), "follower_replication_throttled_replicas", None, None),
    TopicKey(_key("message.downconversion.enable", _B, True, "Whether old consumers get records down-converted "
                  "to their message format."), "message_downconversion_enable", "log.message.downconversion.enable",
             _from("log.message.downconversion.enable")),
    TopicKey(_key("remote.storage.enable", _B, False, "Tiered storage for the topic; this cluster has none."),
             "remote_storage_enable", None, None),
    TopicKey(_key("local.retention.ms", _L, -2, "With tiered storage: time a segment stays on local disk; -2: "
                  "retention.ms.", at_least(-2)),
             "local_retention_ms", "log.local.retention.ms", _from("log.local.retention.ms")),
    TopicKey(_key("local.retention.bytes", _L, -2, "With tiered storage: local size limit; -2: retention.bytes.",
                  at_least(-2)), "local_retention_bytes", "log.local.retention.bytes",
             _from("log.local.retention.bytes")),
    TopicKey(_key("remote.log.copy.disable", _B, False, "With tiered storage: stop copying segments to remote "
                  "storage."), "remote_log_copy_disable", None, None),
    TopicKey(_key("remote.log.delete.on.disable", _B, False, "With tiered storage: delete remote segments when "
                  "tiering is disabled."), "remote_log_delete_on_disable", None, None),
)
TOPIC_CONFIGS: dict[str, TopicKey] = {k.key.name: k for k in TOPIC_KEYS}
"""Kafka key → its definition."""
TOPIC_CONFIG_SYNONYMS = {k.key.name: k.synonym for k in TOPIC_KEYS if k.synonym is not None}
"""Topic key → the broker key it defaults to (Kafka's ServerTopicConfigSynonyms)."""




def config_text(value: Any) -> str:
    """A config value as Kafka writes it (booleans in lower case); a spec may hold numbers and
    booleans where Kafka holds text."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def parse_topic_config(key: str, text: str | None) -> Any:
    """The value of `key=text` as the broker reads it; ConfigException (a ValueError, with Kafka's
    message) when refused."""
    topic_key = TOPIC_CONFIGS.get(key)
    if topic_key is None:
        raise ConfigException(key, message=f"Unknown topic config name: {key}")
    if text is None:
        raise ConfigException(key, message=f"Invalid value null for configuration {key}")
    return topic_key.key.parse(str(text))


def validate_topic_config(overrides: Mapping[str, str | None], broker_config: Any = None) -> None:
    """ConfigException (a ValueError) naming the first unknown key or invalid value, or a
    combination Kafka refuses (its LogConfig.validate); defaults come from `broker_config` when
    given, else from Kafka's own defaults."""
    values = {key: parse_topic_config(key, text) for key, text in overrides.items()}

    def effective(key: str) -> Any:
        if key in values:
            return values[key]
        topic_key = TOPIC_CONFIGS[key]
        if broker_config is not None and topic_key.broker_default is not None:
            return topic_key.broker_default(broker_config)
        return topic_key.key.default

    low, high = effective("min.compaction.lag.ms"), effective("max.compaction.lag.ms")
    if low > high:
        raise ConfigException("min.compaction.lag.ms", message=(
            f"conflict topic config setting min.compaction.lag.ms ({low}) > max.compaction.lag.ms ({high})"))
    if values.get("remote.storage.enable"):
        raise ConfigException("remote.storage.enable", message=(
            "Tiered Storage functionality is disabled in the broker. Topic cannot be configured with "
            "remote log storage."))


assert all(k.key.type != ConfigType.INT or k.key.default is None or k.key.default <= INT_MAX for k in TOPIC_KEYS)

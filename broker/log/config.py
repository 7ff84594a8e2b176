"""LogConfig: a topic's settings under Kafka's topic-level keys (Kafka 3.9's LogConfig).

Each key (common/topic_config) defaults to the broker's setting of its synonym (`retention.ms` ←
`log.retention.ms`, `max.message.bytes` ← `message.max.bytes`, ...) and may be overridden per
topic (`/config/topics/<t>`, CreateTopics, AlterConfigs). `validate_overrides` accepts what Kafka
accepts and refuses what it refuses, with Kafka's messages; CreateTopics and AlterConfigs use it
before anything is written.

Every key Kafka 3.9 lists is accepted and described. Those this broker does not act on yet are
kept for Kafka tooling (Streams and Connect set several):
compression.type and its levels (batches are stored as produced, never recompressed), preallocate,
segment jitter, timestamp bounds, down-conversion, replication throttles, tiered storage.
"""

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from odradek.common.config_def import LONG_MAX, ConfigException, ConfigType, to_text
from odradek.common.topic_config import (
    DAY_MS,
    TOPIC_CONFIG_SYNONYMS,
    TOPIC_CONFIGS,
    TOPIC_KEYS,
    TopicKey,
    validate_topic_config,
)

log = logging.getLogger(__name__)

__all__ = ["TOPIC_CONFIG_SYNONYMS", "TOPIC_KEYS", "LogConfig", "TopicKey"]


@dataclass(frozen=True)
class LogConfig:
    """A topic's effective settings; the defaults are Kafka's own."""

    segment_bytes: int = 1 << 30
    segment_ms: int = 7 * DAY_MS
    segment_jitter_ms: int = 0
    segment_index_bytes: int = 10 * 1024 * 1024
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    retention_bytes: int = -1
    retention_ms: int = 7 * DAY_MS
    max_message_bytes: int = 1048588
    index_interval_bytes: int = 4096
    delete_retention_ms: int = DAY_MS
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    file_delete_delay_ms: int = 60000
    min_cleanable_dirty_ratio: float = 0.5
    cleanup_policy: str = "delete"
    """Comma-separated, as Kafka prints the list."""
    unclean_leader_election_enable: bool = False
    min_insync_replicas: int = 1
    compression_type: str = "producer"
    compression_gzip_level: int = -1
    compression_lz4_level: int = 9
    compression_zstd_level: int = 3
    preallocate: bool = False
    message_format_version: str = "3.0-IV1"
    message_timestamp_type: str = "CreateTime"
    message_timestamp_difference_max_ms: int = LONG_MAX
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = LONG_MAX
    leader_replication_throttled_replicas: str = ""
    follower_replication_throttled_replicas: str = ""
    message_downconversion_enable: bool = True
    remote_storage_enable: bool = False
    local_retention_ms: int = -2
    local_retention_bytes: int = -2
    remote_log_copy_disable: bool = False
    remote_log_delete_on_disable: bool = False
    overrides: dict[str, str] = field(default_factory=dict, compare=False, hash=False)
    """The topic-level keys that were set explicitly (everything else is a default)."""

    @classmethod
    def from_broker(cls, broker_config: Any = None, overrides: Mapping[str, str | None] | None = None) -> "LogConfig":
        """Broker defaults (Kafka's when `broker_config` is None), then topic overrides.

        Lenient, because the overrides come from ZooKeeper where any tool may have written them:
        an unknown key or bad value is logged and left at its default (CreateTopics and
        AlterConfigs reject them up front with `validate_overrides`)."""
        values: dict[str, Any] = {}
        if broker_config is not None:
            for k in TOPIC_KEYS:
                if k.broker_default is not None:
                    values[k.attr] = _attr_value(k, k.broker_default(broker_config))
        kept = {}
        for name, text in (overrides or {}).items():
            if text is None:
                continue
            topic_key = TOPIC_CONFIGS.get(name)
            if topic_key is None:
                log.warning("ignoring unknown topic config %s", name)
                continue
            try:
                values[topic_key.attr] = _attr_value(topic_key, topic_key.key.parse(str(text)))
            except ConfigException as exc:
                log.warning("ignoring topic config: %s", exc)
                continue
            kept[name] = str(text)
        return cls(**values, overrides=kept)

    @staticmethod
    def validate_overrides(overrides: Mapping[str, str | None], broker_config: Any = None) -> None:
        """ConfigException (a ValueError) naming the first unknown key or invalid value, or a
        combination Kafka refuses (LogConfig.validate)."""
        validate_topic_config(overrides, broker_config)

    def with_overrides(self, overrides: dict[str, str]) -> "LogConfig":
        """This config with more topic-level keys set (validated)."""
        self.validate_overrides(overrides)
        values: dict[str, Any] = {}
        for name, text in overrides.items():
            topic_key = TOPIC_CONFIGS[name]
            values[topic_key.attr] = _attr_value(topic_key, topic_key.key.parse(str(text)))
        return replace(self, **values, overrides={**self.overrides, **overrides})

    def value_text(self, name: str) -> str | None:
        """A key's effective value as Kafka prints it."""
        return to_text(TOPIC_CONFIGS[name].key.type, getattr(self, TOPIC_CONFIGS[name].attr))

    def describe(self) -> dict[str, tuple[str | None, bool]]:
        """Kafka key → (value as Kafka prints it, is_default), every key Kafka lists."""
        return {k.key.name: (self.value_text(k.key.name), k.key.name not in self.overrides) for k in TOPIC_KEYS}

    @property
    def deletes(self) -> bool:
        """Whether retention deletes segments (cleanup.policy contains delete)."""
        return "delete" in self.cleanup_policy.split(",")

    @property
    def compacts(self) -> bool:
        """Whether the log cleaner compacts this log (cleanup.policy contains compact)."""
        return "compact" in self.cleanup_policy.split(",")

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    @property
    def max_index_entries(self) -> int:
        return max(1, self.segment_index_bytes // 8)

    @staticmethod
    def keys() -> list[str]:
        return list(TOPIC_CONFIGS)

    @staticmethod
    def key(name: str) -> TopicKey | None:
        return TOPIC_CONFIGS.get(name)


def _attr_value(topic_key: TopicKey, value: Any) -> Any:
    """A parsed value as the dataclass keeps it: lists as Kafka prints them."""
    if topic_key.key.type == ConfigType.LIST:
        if isinstance(value, str):
            value = topic_key.key.parse(value)
        return to_text(ConfigType.LIST, value if value is not None else [])
    return value


assert {f.name for f in fields(LogConfig)} == {k.attr for k in TOPIC_KEYS} | {"overrides"}

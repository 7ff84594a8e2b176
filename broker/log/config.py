"""LogConfig: a topic's storage settings under Kafka's topic-level keys.

Each key defaults to the broker's `log.*` setting and may be overridden per topic
(`/config/topics/<t>`, CreateTopics configs). `validate_overrides` is what CreateTopics uses to
reject an unknown key or a bad value before anything is written.
"""

import logging
from dataclasses import dataclass, field, fields, replace
from typing import Any

from odradek.common.config import DAY_MS, BrokerConfig
from odradek.common.topic_config import LONG_MAX, TOPIC_CONFIGS, config_text, validate_topic_config

log = logging.getLogger(__name__)

@dataclass(frozen=True)
class LogConfig:
    """A topic's effective storage settings; defaults are Kafka's own."""

    segment_bytes: int = 1 << 30
    segment_ms: int = 7 * DAY_MS
    retention_ms: int = 7 * DAY_MS
    retention_bytes: int = -1
    segment_index_bytes: int = 10 * 1024 * 1024
    index_interval_bytes: int = 4096
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    max_message_bytes: int = 1048588
    message_timestamp_type: str = "CreateTime"
    min_insync_replicas: int = 1
    cleanup_policy: str = "delete"
    file_delete_delay_ms: int = 60000
    unclean_leader_election_enable: bool = False
    compression_type: str = "producer"
    delete_retention_ms: int = DAY_MS
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    min_cleanable_dirty_ratio: float = 0.5
    segment_jitter_ms: int = 0
    preallocate: bool = False
    message_downconversion_enable: bool = True
    overrides: dict[str, str] = field(default_factory=dict, compare=False, hash=False)
    """The topic-level keys that were set explicitly (everything else is a default)."""

    @classmethod
    def from_broker(cls, broker_config: BrokerConfig | None = None, overrides: dict[str, str] | None = None) -> "LogConfig":
        """Broker `log.*` defaults (Kafka's when `broker_config` is None), then topic overrides.

        Lenient, because the overrides come from ZooKeeper where any tool may have written them:
        an unknown key or bad value is logged and left at its default (CreateTopics and
        AlterConfigs reject them up front with `validate_overrides`).
        """
        overrides = {k: str(v) for k, v in (overrides or {}).items() if v is not None}
        for key in list(overrides):
            try:
                cls.validate_overrides({key: overrides[key]})
            except ValueError as exc:
                log.warning("ignoring topic config: %s", exc)
                del overrides[key]
        values: dict[str, Any] = {}
        if broker_config is not None:
            values = {attr: default(broker_config) for attr, _, default in TOPIC_CONFIGS.values()}
        for key, text in overrides.items():
            attr, parse, _ = TOPIC_CONFIGS[key]
            values[attr] = parse(text)
        return cls(**values, overrides=overrides)

    @staticmethod
    def validate_overrides(overrides: dict[str, str]) -> None:
        """ValueError naming the first unknown key or unparseable value."""
        validate_topic_config(overrides)

    def with_overrides(self, overrides: dict[str, str]) -> "LogConfig":
        """This config with more topic-level keys set (validated)."""
        self.validate_overrides(overrides)
        values: dict[str, Any] = {TOPIC_CONFIGS[k][0]: TOPIC_CONFIGS[k][1](str(v)) for k, v in overrides.items()}
        return replace(self, **values, overrides={**self.overrides, **overrides})

    def describe(self) -> dict[str, tuple[str, bool]]:
        """Kafka key -> (value as Kafka prints it, is_default) for DescribeConfigs."""
        return {key: (config_text(getattr(self, attr)), key not in self.overrides)
                for key, (attr, _, _) in TOPIC_CONFIGS.items()}

    @property
    def deletes(self) -> bool:
        """Whether retention deletes segments (cleanup.policy contains delete)."""
        return "delete" in self.cleanup_policy.split(",")

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    @property
    def max_index_entries(self) -> int:
        return max(1, self.segment_index_bytes // 8)

    @staticmethod
    def keys() -> list[str]:
        return list(TOPIC_CONFIGS)


assert {f.name for f in fields(LogConfig)} == {a for a, _, _ in TOPIC_CONFIGS.values()} | {"overrides"}

"""Kafka's topic-level config keys (its TopicConfig): how each value is parsed and checked, and
which broker setting supplies its default.

The broker (LogConfig, CreateTopics, AlterConfigs) and the operator (a Topic's spec.config) both
use this one table, so a value one accepts the other accepts too. Pure data and parsers: the
operator imports it without any broker runtime.
"""

from collections.abc import Callable
from typing import NamedTuple

from odradek.common.config import DAY_MS, BrokerConfig

LONG_MAX = 2**63 - 1


def _long(minimum: int | None = None) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            raise ValueError(f"{text!r} is not an integer") from None
        if not -(2**63) <= value <= LONG_MAX:
            raise ValueError(f"{text!r} is out of range for a long")
        if minimum is not None and value < minimum:
            raise ValueError(f"value {value} must be at least {minimum}")
        return value

    return parse


def _int(minimum: int) -> Callable[[str], int]:
    parse_long = _long(minimum)

    def parse(text: str) -> int:
        value = parse_long(text)
        if value > 2**31 - 1:
            raise ValueError(f"value {value} is out of range for an int")
        return value

    return parse


def _choice(*allowed: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        value = text.strip()
        if value not in allowed:
            raise ValueError(f"{value!r} is not one of {', '.join(allowed)}")
        return value

    return parse


def _ratio(text: str) -> float:
    try:
        value = float(text.strip())
    except ValueError:
        raise ValueError(f"{text!r} is not a number") from None
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"value {value} must be between 0 and 1")
    return value


def _bool(text: str) -> bool:
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise ValueError(f"{text!r} is not true or false")
    return value == "true"


def _cleanup_policy(text: str) -> str:
    items = [item.strip() for item in text.split(",") if item.strip()]
    if not items or any(item not in ("delete", "compact") for item in items):
        raise ValueError(f"{text!r} is not a list of delete, compact")
    return ",".join(items)


class TopicConfigKey(NamedTuple):
    attr: str
    """LogConfig's attribute for the key."""
    parse: Callable[[str], object]
    """Text → value; ValueError saying why the text is refused."""
    broker_default: Callable[[BrokerConfig], object]
    """The default from a BrokerConfig (its `log.*` setting, or Kafka's fixed default)."""


TOPIC_CONFIGS: dict[str, TopicConfigKey] = {
    "segment.bytes": TopicConfigKey("segment_bytes", _int(14), lambda b: b.log_segment_bytes),
    "segment.ms": TopicConfigKey("segment_ms", _long(1), lambda b: b.log_roll_ms),
    "retention.ms": TopicConfigKey("retention_ms", _long(-1), lambda b: b.log_retention_ms),
    "retention.bytes": TopicConfigKey("retention_bytes", _long(), lambda b: b.log_retention_bytes),
    "segment.index.bytes": TopicConfigKey("segment_index_bytes", _int(8), lambda b: b.log_index_size_max_bytes),
    "index.interval.bytes": TopicConfigKey("index_interval_bytes", _int(0), lambda b: b.log_index_interval_bytes),
    "flush.messages": TopicConfigKey("flush_messages", _long(1), lambda b: b.log_flush_interval_messages),
    "flush.ms": TopicConfigKey(
        "flush_ms",
        _long(0),
        lambda b: b.log_flush_interval_ms
        if b.log_flush_interval_ms is not None
        else b.log_flush_scheduler_interval_ms,
    ),
    "max.message.bytes": TopicConfigKey("max_message_bytes", _int(0), lambda b: b.message_max_bytes),
    "message.timestamp.type": TopicConfigKey(
        "message_timestamp_type",
        _choice("CreateTime", "LogAppendTime"),
        lambda b: getattr(b, "log_message_timestamp_type", "CreateTime"),
    ),
    "min.insync.replicas": TopicConfigKey("min_insync_replicas", _int(1), lambda b: b.min_insync_replicas),
    "cleanup.policy": TopicConfigKey("cleanup_policy", _cleanup_policy, lambda b: getattr(b, "log_cleanup_policy", "delete")),
    "file.delete.delay.ms": TopicConfigKey("file_delete_delay_ms", _long(0), lambda b: 60000),
    "unclean.leader.election.enable": TopicConfigKey(
        "unclean_leader_election_enable",
        _bool,
        lambda b: b.unclean_leader_election_enable,
    ),
    "compression.type": TopicConfigKey("compression_type", _choice("producer"), lambda b: "producer"),
    # Accepted and described for Kafka tooling (Streams and Connect set them); no effect yet:
    # there is no log cleaner, no preallocation, no jitter, no down-conversion.
    "delete.retention.ms": TopicConfigKey("delete_retention_ms", _long(0), lambda b: DAY_MS),
    "min.compaction.lag.ms": TopicConfigKey("min_compaction_lag_ms", _long(0), lambda b: 0),
    "max.compaction.lag.ms": TopicConfigKey("max_compaction_lag_ms", _long(1), lambda b: LONG_MAX),
    "min.cleanable.dirty.ratio": TopicConfigKey("min_cleanable_dirty_ratio", _ratio, lambda b: 0.5),
    "segment.jitter.ms": TopicConfigKey("segment_jitter_ms", _long(0), lambda b: 0),
    "preallocate": TopicConfigKey("preallocate", _bool, lambda b: False),
    "message.downconversion.enable": TopicConfigKey("message_downconversion_enable", _bool, lambda b: True),
}


def config_text(value) -> str:
    """A config value as Kafka writes it (booleans in lower case); a spec may hold numbers and
    booleans where Kafka holds text."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def parse_topic_config(key: str, text: str) -> object:
    """The value of `key=text` as the broker reads it; ValueError (Kafka's message) when refused."""
    validate_topic_config({key: text})
    return TOPIC_CONFIGS[key].parse(str(text))


def validate_topic_config(overrides: dict[str, str]) -> None:
    """ValueError naming the first unknown key or unparseable value (Kafka's messages)."""
    for key, text in overrides.items():
        if key not in TOPIC_CONFIGS:
            raise ValueError(f"Unknown topic config name: {key}")
        if text is None:
            raise ValueError(f"Invalid value null for configuration {key}")
        try:
            TOPIC_CONFIGS[key].parse(str(text))
        except ValueError as exc:
            raise ValueError(f"Invalid value {text} for configuration {key}: {exc}") from None

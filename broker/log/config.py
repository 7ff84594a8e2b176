"""LogConfig: a topic's storage settings under Kafka's topic-level keys.

Each key defaults to the broker's `log.*` setting and may be overridden per topic
(`/config/topics/<t>`, CreateTopics configs). `validate_overrides` is what CreateTopics uses to
reject an unknown key or a bad value before anything is written.
"""

import logging
from dataclasses import dataclass, field, fields, replace
from typing import Callable

log = logging.getLogger(__name__)

LONG_MAX = 2**63 - 1
DAY_MS = 24 * 3600 * 1000


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


def _fmt(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


# Kafka key -> (attribute, parser, default from a BrokerConfig or None for Kafka's defaults)
_KEYS: dict[str, tuple[str, Callable[[str], object], Callable[[object], object]]] = {
    "segment.bytes": ("segment_bytes", _int(14), lambda b: b.log_segment_bytes),
    "segment.ms": ("segment_ms", _long(1), lambda b: b.log_roll_ms),
    "retention.ms": ("retention_ms", _long(-1), lambda b: b.log_retention_ms),
    "retention.bytes": ("retention_bytes", _long(), lambda b: b.log_retention_bytes),
    "segment.index.bytes": ("segment_index_bytes", _int(8), lambda b: b.log_index_size_max_bytes),
    "index.interval.bytes": ("index_interval_bytes", _int(0), lambda b: b.log_index_interval_bytes),
    "flush.messages": ("flush_messages", _long(1), lambda b: b.log_flush_interval_messages),
    "flush.ms": (
        "flush_ms",
        _long(0),
        lambda b: b.log_flush_interval_ms
        if b.log_flush_interval_ms is not None
        else b.log_flush_scheduler_interval_ms,
    ),
    "max.message.bytes": ("max_message_bytes", _int(0), lambda b: b.message_max_bytes),
    "message.timestamp.type": (
        "message_timestamp_type",
        _choice("CreateTime", "LogAppendTime"),
        lambda b: getattr(b, "log_message_timestamp_type", "CreateTime"),
    ),
    "min.insync.replicas": ("min_insync_replicas", _int(1), lambda b: b.min_insync_replicas),
    "cleanup.policy": ("cleanup_policy", _cleanup_policy, lambda b: getattr(b, "log_cleanup_policy", "delete")),
    "file.delete.delay.ms": ("file_delete_delay_ms", _long(0), lambda b: 60000),
    "unclean.leader.election.enable": (
        "unclean_leader_election_enable",
        _bool,
        lambda b: b.unclean_leader_election_enable,
    ),
    "compression.type": ("compression_type", _choice("producer"), lambda b: "producer"),
    # Accepted and described for Kafka tooling (Streams and Connect set them); no effect yet:
    # there is no log cleaner, no preallocation, no jitter, no down-conversion.
    "delete.retention.ms": ("delete_retention_ms", _long(0), lambda b: DAY_MS),
    "min.compaction.lag.ms": ("min_compaction_lag_ms", _long(0), lambda b: 0),
    "max.compaction.lag.ms": ("max_compaction_lag_ms", _long(1), lambda b: LONG_MAX),
    "min.cleanable.dirty.ratio": ("min_cleanable_dirty_ratio", _ratio, lambda b: 0.5),
    "segment.jitter.ms": ("segment_jitter_ms", _long(0), lambda b: 0),
    "preallocate": ("preallocate", _bool, lambda b: False),
    "message.downconversion.enable": ("message_downconversion_enable", _bool, lambda b: True),
}


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
    def from_broker(cls, broker_config=None, overrides: dict[str, str] | None = None) -> "LogConfig":
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
        values = {}
        if broker_config is not None:
            values = {attr: default(broker_config) for attr, _, default in _KEYS.values()}
        for key, text in overrides.items():
            attr, parse, _ = _KEYS[key]
            values[attr] = parse(text)
        return cls(**values, overrides=overrides)

    @staticmethod
    def validate_overrides(overrides: dict[str, str]) -> None:
        """ValueError naming the first unknown key or unparseable value."""
        for key, text in overrides.items():
            if key not in _KEYS:
                raise ValueError(f"Unknown topic config name: {key}")
            if text is None:
                raise ValueError(f"Invalid value null for configuration {key}")
            try:
                _KEYS[key][1](str(text))
            except ValueError as exc:
                raise ValueError(f"Invalid value {text} for configuration {key}: {exc}") from None

    def with_overrides(self, overrides: dict[str, str]) -> "LogConfig":
        """This config with more topic-level keys set (validated)."""
        self.validate_overrides(overrides)
        values = {_KEYS[k][0]: _KEYS[k][1](str(v)) for k, v in overrides.items()}
        return replace(self, **values, overrides={**self.overrides, **overrides})

    def describe(self) -> dict[str, tuple[str, bool]]:
        """Kafka key -> (value as Kafka prints it, is_default) for DescribeConfigs."""
        return {key: (_fmt(getattr(self, attr)), key not in self.overrides) for key, (attr, _, _) in _KEYS.items()}

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
        return list(_KEYS)


assert {f.name for f in fields(LogConfig)} == {a for a, _, _ in _KEYS.values()} | {"overrides"}

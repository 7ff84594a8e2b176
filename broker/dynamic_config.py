"""DynamicBrokerConfig: the broker's configuration as static file + dynamic overrides (Kafka's).

Three layers, the later winning key by key: the static properties (server.properties and
--override), the cluster-wide dynamic defaults (`/config/brokers/<default>`) and this broker's own
dynamic configs (`/config/brokers/<id>`). Only the keys Kafka lets change at runtime may be set
dynamically: the broker-level defaults of topic configs (`log.retention.ms`, `log.segment.bytes`,
`message.max.bytes`, `min.insync.replicas`, `compression.type`, ...; the primary key of each,
not its alternatives such as `log.retention.hours`) and the replication throttles. `current` is
the effective BrokerConfig; the config manager recomputes it when a notification arrives and
hands it to the log manager.
"""

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from odradek.broker.log.log_cleaner import validate_threads
from odradek.common.config import BrokerConfig
from odradek.common.config_def import ConfigException, to_text
from odradek.common.topic_config import TOPIC_CONFIG_SYNONYMS

log = logging.getLogger(__name__)

DYNAMIC_LOG_CONFIGS = frozenset(TOPIC_CONFIG_SYNONYMS.values()) - {"log.message.format.version"}
"""Kafka's DynamicLogConfig.ReconfigurableConfigs: the primary broker synonym of every topic
config (message.format.version excluded, as Kafka excludes it)."""
DYNAMIC_REPLICATION_CONFIGS = frozenset({
    "leader.replication.throttled.rate",
    "follower.replication.throttled.rate",
    "replica.alter.log.dirs.io.max.bytes.per.second",
})
DYNAMIC_CLEANER_CONFIGS = frozenset({
    "log.cleaner.threads",
    "log.cleaner.dedupe.buffer.size",
    "log.cleaner.io.max.bytes.per.second",
    "log.cleaner.backoff.ms",
})
"""Kafka's LogCleaner.ReconfigurableConfigs: they take effect at the next cleaning; a new thread
count starts or retires cleaner loops."""
DYNAMIC_CONFIGS = DYNAMIC_LOG_CONFIGS | DYNAMIC_REPLICATION_CONFIGS | DYNAMIC_CLEANER_CONFIGS
"""Every broker key AlterConfigs may set (Kafka's DynamicBrokerConfig.AllDynamicConfigs, the
part this broker has)."""


@dataclass(frozen=True)
class ConfigSources:
    """Where each broker key's value comes from, as strings, for DescribeConfigs' sources and
    synonyms: dynamic per-broker, dynamic default, static (the file, unknown keys included), and
    the defaults (keys with a default value)."""

    dynamic_broker: Mapping[str, str]
    dynamic_default: Mapping[str, str]
    static: Mapping[str, str]
    defaults: Mapping[str, str]


class DynamicBrokerConfig:
    def __init__(self, static_props: Mapping[str, object]):
        self.static_props = {k: str(v) for k, v in static_props.items() if v is not None}
        self.static_config = BrokerConfig.from_properties(self.static_props)
        self.broker_id = self.static_config.broker_id
        self.dynamic_default: dict[str, str] = {}
        self.dynamic_broker: dict[str, str] = {}
        self.current = self.static_config

    @classmethod
    def from_config(cls, config: BrokerConfig) -> "DynamicBrokerConfig":
        """From a BrokerConfig made elsewhere: its explicitly set keys are the static props."""
        keys = BrokerConfig.config_keys()
        props = config.model_dump(by_alias=True, exclude_unset=True)
        return cls({k: to_text(keys[k].type, v) for k, v in props.items() if k in keys})

    # --- the layers ----------------------------------------------------------------------------

    def update(self, *, default: Mapping[str, str] | None = None, broker: Mapping[str, str] | None = None) -> bool:
        """New dynamic configs as read from ZooKeeper (None: that layer unchanged). Keys that may
        not change at runtime, and values that do not parse, are logged and left out: any tool
        may have written the znode. True when the effective config changed."""
        if default is not None:
            self.dynamic_default = self._usable(default, "<default>")
        if broker is not None:
            self.dynamic_broker = self._usable(broker, str(self.broker_id))
        before = self.current
        self.current = self._effective(self.dynamic_default, self.dynamic_broker)
        return self.current != before

    def _usable(self, props: Mapping[str, str], entity: str) -> dict[str, str]:
        out = {}
        for key, value in props.items():
            if key not in DYNAMIC_CONFIGS:
                log.warning("ignoring dynamic broker config %s of /config/brokers/%s: it cannot change at runtime",
                            key, entity)
                continue
            try:
                BrokerConfig.config_keys()[key].parse(value)
            except ConfigException as e:
                log.warning("ignoring dynamic broker config of /config/brokers/%s: %s", entity, e)
                continue
            out[key] = str(value)
        return out

    def _effective(self, default: Mapping[str, str], broker: Mapping[str, str]) -> BrokerConfig:
        props = {**self.static_props, **default, **broker}
        try:
            return BrokerConfig.from_properties(props)
        except ConfigException as e:
            # Each value parses alone; a combination the broker refuses keeps the static config.
            log.warning("dynamic broker configs refused (%s); keeping the static configuration", e)
            return self.static_config

    def validate(self, props: Mapping[str, str], per_broker: bool) -> None:
        """ConfigException unless `props` may replace the dynamic configs of this broker
        (`per_broker`) or of the cluster default: every key dynamic, every value valid, and the
        resulting configuration one this broker accepts (Kafka's DynamicBrokerConfig.validate)."""
        refused = sorted(k for k in props if k not in DYNAMIC_CONFIGS)
        if refused:
            raise ConfigException(refused[0], message=f"Cannot update these configs dynamically: {set(refused)}")
        keys = BrokerConfig.config_keys()
        for key, value in props.items():
            keys[key].parse(value)
        default, broker = (self.dynamic_default, dict(props)) if per_broker else (dict(props), self.dynamic_broker)
        new = BrokerConfig.from_properties({**self.static_props, **default, **broker})
        if new.log_cleaner_threads != self.current.log_cleaner_threads:
            validate_threads(self.current.log_cleaner_threads, new.log_cleaner_threads)

    # --- describing ----------------------------------------------------------------------------

    def sources(self) -> ConfigSources:
        defaults = {name: text for name, key in BrokerConfig.config_keys().items()
                    if (text := key.default_text) is not None}
        return ConfigSources(dict(self.dynamic_broker), dict(self.dynamic_default), dict(self.static_props), defaults)

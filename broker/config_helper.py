"""What DescribeConfigs answers for a topic or a broker, as plain data (Kafka's ConfigHelper).

A topic lists every topic config Kafka lists. An override's source is DYNAMIC_TOPIC_CONFIG;
otherwise the value comes from the broker setting of the config's synonym, and the source is the
first of that setting's synonyms found, in Kafka's order: this broker's dynamic config, the
cluster's dynamic default, the static file, the built-in default. A broker (by its id) lists every
key it knows with the same sources; the default resource ("") lists only the cluster's dynamic
defaults. Keys that can change at runtime are not read-only.
"""

from collections.abc import Iterable
from dataclasses import dataclass

from odradek.common.config import BrokerConfig
from odradek.common.config_def import ConfigType, to_text
from odradek.common.topic_config import TOPIC_CONFIG_SYNONYMS, TOPIC_KEYS

from .dynamic_config import KAFKA_BROKER_KEYS, ConfigSources, is_password, is_reconfigurable
from .log.config import LogConfig

# DescribeConfigsResponse.ConfigSource
TOPIC_CONFIG, DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG = 1, 2, 3
STATIC_BROKER_CONFIG, DEFAULT_CONFIG, DYNAMIC_BROKER_LOGGER_CONFIG = 4, 5, 6

_SYNONYM_GROUPS = (
    ("log.roll.ms", "log.roll.hours"),
    ("log.roll.jitter.ms", "log.roll.jitter.hours"),
    ("log.flush.interval.ms", "log.flush.scheduler.interval.ms"),
    ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
)


@dataclass(frozen=True)
class Synonym:
    name: str
    value: str | None
    source: int


@dataclass(frozen=True)
class DescribedConfig:
    name: str
    value: str | None
    source: int
    read_only: bool
    synonyms: tuple[Synonym, ...]
    config_type: ConfigType
    documentation: str | None
    sensitive: bool = False


def broker_synonyms(name: str) -> tuple[str, ...]:
    """The broker keys that set the same value, by precedence (Kafka's brokerConfigSynonyms)."""
    if name == "log.flush.interval.ms":
        return _SYNONYM_GROUPS[2]
    for group in _SYNONYM_GROUPS:
        if name in group and name != "log.flush.scheduler.interval.ms":
            return group
    return (name,)


def config_synonyms(name: str, synonyms: tuple[str, ...], sources: ConfigSources) -> list[Synonym]:
    """Every synonym set in some layer, layer by layer (dynamic broker, dynamic default, static,
    default), dropping those before the first occurrence of `name` itself, as Kafka does."""
    found = []
    for layer, source in ((sources.dynamic_broker, DYNAMIC_BROKER_CONFIG),
                          (sources.dynamic_default, DYNAMIC_DEFAULT_BROKER_CONFIG),
                          (sources.static, STATIC_BROKER_CONFIG),
                          (sources.defaults, DEFAULT_CONFIG)):
        found += [Synonym(s, layer[s], source) for s in synonyms if s in layer]
    while found and found[0].name != name:
        found.pop(0)
    return found


def describe_topic(log_config: LogConfig, overrides: dict[str, str], sources: ConfigSources,
                   include_synonyms: bool = False, include_documentation: bool = False) -> list[DescribedConfig]:
    """Every topic config Kafka lists, in Kafka's definition order (createTopicConfigEntry)."""
    out = []
    for topic_key in TOPIC_KEYS:
        name = topic_key.key.name
        value = log_config.value_text(name)
        synonym = TOPIC_CONFIG_SYNONYMS.get(name)
        chain = config_synonyms(synonym, broker_synonyms(synonym), sources) if synonym else []
        if name in overrides:
            chain.insert(0, Synonym(name, value, TOPIC_CONFIG))
        out.append(DescribedConfig(
            name, value, chain[0].source if chain else DEFAULT_CONFIG, False,
            tuple(chain) if include_synonyms else (), topic_key.key.type,
            topic_key.key.doc if include_documentation else None,
        ))
    return out


def describe_broker(config: BrokerConfig, sources: ConfigSources, include_synonyms: bool = False,
                    include_documentation: bool = False) -> list[DescribedConfig]:
    """A broker described by its own id: every key it knows, and the unknown keys of its file."""
    keys = BrokerConfig.config_keys()
    values = {name: to_text(key.type, config.value_of(name)) for name, key in keys.items()}
    for layer in (sources.dynamic_broker, sources.dynamic_default, sources.static):
        for name, text in layer.items():
            values.setdefault(name, text)
    return [_broker_entry(name, value, sources, True, include_synonyms, include_documentation)
            for name, value in sorted(values.items())]


def describe_broker_default(sources: ConfigSources, include_synonyms: bool = False,
                            include_documentation: bool = False) -> list[DescribedConfig]:
    """The default broker resource (""): the cluster-wide dynamic defaults only."""
    return [_broker_entry(name, value, sources, False, include_synonyms, include_documentation)
            for name, value in sorted(sources.dynamic_default.items())]


def _broker_entry(name: str, value: str | None, sources: ConfigSources, per_broker: bool,
                  include_synonyms: bool, include_documentation: bool) -> DescribedConfig:
    key = KAFKA_BROKER_KEYS.get(name)
    chain = config_synonyms(name, broker_synonyms(name), sources)
    if not per_broker:
        chain = [s for s in chain if s.source == DYNAMIC_DEFAULT_BROKER_CONFIG]
    sensitive = is_password(name) or (key is not None and key.type == ConfigType.PASSWORD)
    if sensitive:  # Kafka never describes a password's value
        value = None
        chain = [Synonym(s.name, None, s.source) for s in chain]
    return DescribedConfig(
        name, value, chain[0].source if chain else DEFAULT_CONFIG, not is_reconfigurable(name),
        tuple(chain) if include_synonyms else (), key.type if key else ConfigType.UNKNOWN,
        (key.doc if key else None) if include_documentation else None, sensitive,
    )


def select(entries: list[DescribedConfig], keys: Iterable[str] | None) -> list[DescribedConfig]:
    """The entries a request's configuration_keys ask for (null or empty: all of them)."""
    if not keys:
        return entries
    wanted = set(keys)
    return [e for e in entries if e.name in wanted]

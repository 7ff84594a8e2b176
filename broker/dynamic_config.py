"""DynamicBrokerConfig: the broker's configuration as static file + dynamic overrides (Kafka's).

Three layers, the later winning key by key: the static properties (server.properties and
--override), the cluster-wide dynamic defaults (`/config/brokers/<default>`) and this broker's own
dynamic configs (`/config/brokers/<id>`). AlterConfigs accepts what Kafka 3.9's
DynamicBrokerConfig accepts: every key of its AllDynamicConfigs (the broker-level defaults of topic
configs, throttles, cleaner, thread pools, listener, SSL and SASL keys, ...), per-listener keys
(`listener.name.<l>.<key>`), and keys Kafka does not know; it refuses Kafka's known non-dynamic
keys (`log.dirs`, `log.retention.hours`, ...) with Kafka's messages. Of these, this broker acts on
DYNAMIC_CONFIGS (topic defaults, throttles, cleaner, connection limits, producer-id expiration)
and, in its own configs, its listeners' key and trust stores (`listener.name.<l>.ssl.keystore.*`);
the rest are stored and described only.
`current` is the effective BrokerConfig; the config manager recomputes it when a notification
arrives and hands it to the log manager."""

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass

from odradek.broker.log.log_cleaner import validate_threads
from odradek.common.config import BrokerConfig, parse_listeners
from odradek.common.config_def import ConfigException, ConfigKey, ConfigType, to_text
from odradek.common.dynamic_broker_keys import LIVE_BROKER_CONFIGS, is_live_per_broker
from odradek.common.security.ssl_factory import SSL_KEYS, TLS_SECURITY_PROTOCOLS, SslConfig, server_context

log = logging.getLogger(__name__)

DYNAMIC_CONFIGS = LIVE_BROKER_CONFIGS
"""The dynamic broker keys this broker applies live (the effective BrokerConfig changes; see
common/dynamic_broker_keys.py, which the operator reads too)."""

_T = ConfigType
SECURITY_CONFIGS: dict[str, ConfigType] = {
    "ssl.keystore.type": _T.STRING, "ssl.keystore.location": _T.STRING, "ssl.keystore.password": _T.PASSWORD,
    "ssl.key.password": _T.PASSWORD, "ssl.truststore.type": _T.STRING, "ssl.truststore.location": _T.STRING,
    "ssl.truststore.password": _T.PASSWORD, "ssl.keystore.certificate.chain": _T.PASSWORD,
    "ssl.keystore.key": _T.PASSWORD, "ssl.truststore.certificates": _T.PASSWORD,
}
"""Kafka's SslConfigs.RECONFIGURABLE_CONFIGS: dynamic only per listener (listener.name.<l>.<key>)."""
LISTENER_CONFIGS: dict[str, ConfigType] = {
    **SECURITY_CONFIGS,
    "advertised.listeners": _T.STRING, "listeners": _T.STRING, "listener.security.protocol.map": _T.STRING,
    "principal.builder.class": _T.CLASS, "ssl.protocol": _T.STRING, "ssl.provider": _T.STRING,
    "ssl.cipher.suites": _T.LIST, "ssl.enabled.protocols": _T.LIST, "ssl.keymanager.algorithm": _T.STRING,
    "ssl.trustmanager.algorithm": _T.STRING, "ssl.endpoint.identification.algorithm": _T.STRING,
    "ssl.secure.random.implementation": _T.STRING, "ssl.client.auth": _T.STRING,
    "ssl.engine.factory.class": _T.CLASS, "sasl.mechanism.inter.broker.protocol": _T.STRING,
    "sasl.jaas.config": _T.PASSWORD, "sasl.enabled.mechanisms": _T.LIST, "sasl.kerberos.service.name": _T.STRING,
    "sasl.kerberos.kinit.cmd": _T.STRING, "sasl.kerberos.ticket.renew.window.factor": _T.DOUBLE,
    "sasl.kerberos.ticket.renew.jitter": _T.DOUBLE, "sasl.kerberos.min.time.before.relogin": _T.LONG,
    "sasl.kerberos.principal.to.local.rules": _T.LIST, "sasl.login.refresh.window.factor": _T.DOUBLE,
    "sasl.login.refresh.window.jitter": _T.DOUBLE, "sasl.login.refresh.min.period.seconds": _T.SHORT,
    "sasl.login.refresh.buffer.seconds": _T.SHORT, "max.connections": _T.INT,
    "max.connection.creation.rate": _T.INT, "num.network.threads": _T.INT,
}
"""Kafka's DynamicListenerConfig.ReconfigurableConfigs (with the security ones)."""
THREAD_POOL_CONFIGS: dict[str, int] = {
    "num.io.threads": 8, "num.replica.fetchers": 1, "num.recovery.threads.per.data.dir": 2,
    "background.threads": 10, "num.network.threads": 3,
}
"""Kafka's DynamicThreadPool.ReconfigurableConfigs (and num.network.threads), with Kafka's defaults:
a new size must be at least 1, at most double and at least half the current one."""
OTHER_DYNAMIC_CONFIGS: dict[str, ConfigType] = {
    "log.cleaner.dedupe.buffer.load.factor": _T.DOUBLE, "log.cleaner.io.buffer.size": _T.INT,
    "metric.reporters": _T.LIST, "max.connections.per.ip": _T.INT, "max.connections.per.ip.overrides": _T.STRING,
    "producer.id.expiration.ms": _T.INT, "transaction.partition.verification.enable": _T.BOOLEAN,
    "remote.log.index.file.cache.total.size.bytes": _T.LONG, "remote.fetch.max.wait.ms": _T.INT,
    "remote.log.manager.copy.max.bytes.per.second": _T.LONG, "remote.log.manager.fetch.max.bytes.per.second": _T.LONG,
    **dict.fromkeys(THREAD_POOL_CONFIGS, _T.INT),
}
"""The rest of Kafka 3.9's DynamicBrokerConfig.AllDynamicConfigs (cleaner, thread pools, socket
server, producer state, remote log, metric reporters)."""
ALL_DYNAMIC_CONFIGS = DYNAMIC_CONFIGS | LISTENER_CONFIGS.keys() | OTHER_DYNAMIC_CONFIGS.keys()
"""Kafka 3.9's DynamicBrokerConfig.AllDynamicConfigs: every broker key AlterConfigs accepts. The
keys outside DYNAMIC_CONFIGS are stored and described, but this broker does not act on them."""
CLUSTER_LEVEL_LISTENER_CONFIGS = frozenset({"max.connections", "max.connection.creation.rate", "num.network.threads"})
PER_BROKER_CONFIGS = frozenset(LISTENER_CONFIGS) - CLUSTER_LEVEL_LISTENER_CONFIGS
"""Kafka's PerBrokerConfigs: refused at the cluster-wide default."""
LISTENER_CONFIG = re.compile(r"listener\.name\.[^.]*\.(.*)")
"""listener.name.<listener>.<key>: a per-listener value of <key> (any key; Kafka validates the
known dynamic ones by the base key's type)."""


def _kafka_keys() -> dict[str, ConfigKey]:
    extra = {**LISTENER_CONFIGS, **OTHER_DYNAMIC_CONFIGS}
    keys = {name: ConfigKey(name, ctype, None, "") for name, ctype in extra.items()}
    return {**keys, **BrokerConfig.config_keys()}


KAFKA_BROKER_KEYS = _kafka_keys()
"""The broker keys known here: this broker's own and the dynamic ones Kafka has besides."""


def is_dynamic(name: str) -> bool:
    """Whether AlterConfigs may set `name` on a broker: a dynamic key, a per-listener key, or one
    Kafka does not know (Kafka refuses only its known, non-dynamic keys)."""
    return is_reconfigurable(name) or name not in KAFKA_BROKER_KEYS


def is_reconfigurable(name: str) -> bool:
    """A dynamic key Kafka knows, or a per-listener one (what DescribeConfigs calls not read-only)."""
    return name in ALL_DYNAMIC_CONFIGS or LISTENER_CONFIG.fullmatch(name) is not None


def is_password(name: str) -> bool:
    """Kafka's isPasswordConfig: the key (or a listener's copy of it) is a dynamic password."""
    return any(name.endswith(k) for k, t in LISTENER_CONFIGS.items() if t == _T.PASSWORD)


def validate_configs(props: Mapping[str, str], per_broker: bool, current: Mapping[str, str] | None = None) -> None:
    """Kafka's DynamicBrokerConfig.validateConfigs: ConfigException (with Kafka's message) for a
    known non-dynamic key, a security key without its listener prefix, a value its key's type or
    validator refuses, a per-broker key or a password at the cluster-wide default, or a thread
    pool resized by more than twice (`current`: the thread pools' present sizes)."""
    def check(names: set[str], message: str) -> None:
        if names:
            raise ConfigException(sorted(names)[0], message=f"{message}: Set({', '.join(sorted(names))})")

    check({k for k in props if not is_dynamic(k)}, "Cannot update these configs dynamically")
    check({k for k in props if k in SECURITY_CONFIGS},
          "These security configs can be dynamically updated only per-listener using the listener prefix")
    for name, value in props.items():
        match = LISTENER_CONFIG.fullmatch(name)
        base = match.group(1) if match else name
        if base in ALL_DYNAMIC_CONFIGS and base in KAFKA_BROKER_KEYS:
            parsed = KAFKA_BROKER_KEYS[base].parse(value)
            if base in THREAD_POOL_CONFIGS and parsed is not None:
                _check_pool_size(base, parsed, int((current or {}).get(base, THREAD_POOL_CONFIGS[base])))
    if not per_broker:
        check({k for k in props if k in PER_BROKER_CONFIGS or (
            (m := LISTENER_CONFIG.fullmatch(k)) is not None and m.group(1) not in CLUSTER_LEVEL_LISTENER_CONFIGS)},
            "Cannot update these configs at default cluster level, broker id must be specified")


def _check_pool_size(name: str, new: int, old: int) -> None:
    """Kafka's DynamicThreadPool.validateReconfiguration."""
    if new <= 0:
        raise ConfigException(name, new, "Value must be at least 1")
    if new > 2 * old:
        raise ConfigException(name, new, "Value must not be more than double the current value")
    if new < old / 2:
        raise ConfigException(name, new, "Value must not be less than half the current value")


def applied_configs(default: Mapping[str, str], broker: Mapping[str, str]) -> dict[str, str]:
    """The dynamic configs this broker acts on: the live keys of both layers, and a listener's
    key store settings of its own layer (per broker only, as Kafka)."""
    applied = {k: v for k, v in {**default, **broker}.items() if k in DYNAMIC_CONFIGS}
    return {**applied, **{k: v for k, v in broker.items() if is_live_per_broker(k)}}


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
            if not is_dynamic(key):
                log.warning("ignoring dynamic broker config %s of /config/brokers/%s: it cannot change at runtime",
                            key, entity)
                continue
            try:
                if key in KAFKA_BROKER_KEYS:
                    KAFKA_BROKER_KEYS[key].parse(value)
            except ConfigException as e:
                log.warning("ignoring dynamic broker config of /config/brokers/%s: %s", entity, e)
                continue
            out[key] = str(value)
        return out

    def _effective(self, default: Mapping[str, str], broker: Mapping[str, str]) -> BrokerConfig:
        props = {**self.static_props, **applied_configs(default, broker)}
        try:
            return BrokerConfig.from_properties(props)
        except ConfigException as e:
            # Each value parses alone; a combination the broker refuses keeps the static config.
            log.warning("dynamic broker configs refused (%s); keeping the static configuration", e)
            return self.static_config

    def validate(self, props: Mapping[str, str], per_broker: bool, own: bool = False) -> None:
        """ConfigException unless `props` may replace the dynamic configs of a broker
        (`per_broker`; `own`: this one) or of the cluster default: every key dynamic, every value
        valid, and the resulting configuration one this broker accepts (Kafka's
        DynamicBrokerConfig.validate); this broker's listeners' new key stores must load."""
        current = {**self.static_props, **self.dynamic_default, **self.dynamic_broker}
        validate_configs(props, per_broker, current)
        if not per_broker:
            passwords = sorted(k for k in props if is_password(k))
            if passwords:
                raise ConfigException(passwords[0], message="Password config can be defined only at broker level")
        default, broker = (self.dynamic_default, dict(props)) if per_broker else (dict(props), self.dynamic_broker)
        new = BrokerConfig.from_properties({**self.static_props, **applied_configs(default, broker)})
        if new.log_cleaner_threads != self.current.log_cleaner_threads:
            validate_threads(self.current.log_cleaner_threads, new.log_cleaner_threads)
        if own:
            for listener, _, _ in parse_listeners(new.listeners):
                if new.security_protocol(listener) not in TLS_SECURITY_PROTOCOLS:
                    continue
                settings = SslConfig.from_values(new.listener_values(listener, SSL_KEYS))
                if settings != SslConfig.from_values(self.current.listener_values(listener, SSL_KEYS)):
                    server_context(settings)  # ConfigException when the new stores do not load

    # --- describing ----------------------------------------------------------------------------

    def sources(self) -> ConfigSources:
        defaults = {name: text for name, key in BrokerConfig.config_keys().items()
                    if (text := key.default_text) is not None}
        return ConfigSources(dict(self.dynamic_broker), dict(self.dynamic_default), dict(self.static_props), defaults)

"""Which broker config keys change without a restart: the ones Odradek's broker applies live.

Kafka's DynamicBrokerConfig accepts more keys (listeners, SSL stores, thread pools, ...; see
broker/dynamic_config.py, which stores and describes them); this set is the part of them that
this broker acts on when `/config/brokers/<default>` or `/config/brokers/<id>` changes. The broker
recomputes its effective config from them, and the operator sends changes of these keys through
IncrementalAlterConfigs instead of rolling the brokers (Strimzi's KafkaBrokerConfigurationDiff).
Every key here may be set at the cluster-wide default (none is one of Kafka's per-broker keys);
a listener's key and trust stores (`is_live_per_broker`) change live only per broker, as in Kafka.
"""

import re

from odradek.common.topic_config import TOPIC_CONFIG_SYNONYMS

LIVE_LOG_CONFIGS = frozenset(TOPIC_CONFIG_SYNONYMS.values()) - {"log.message.format.version"}
"""Kafka's DynamicLogConfig.ReconfigurableConfigs: the primary broker synonym of every topic
config (message.format.version excluded, as Kafka excludes it); every log's config follows."""
LIVE_REPLICATION_CONFIGS = frozenset({
    "leader.replication.throttled.rate",
    "follower.replication.throttled.rate",
    "replica.alter.log.dirs.io.max.bytes.per.second",
})
LIVE_CLEANER_CONFIGS = frozenset({
    "log.cleaner.threads",
    "log.cleaner.dedupe.buffer.size",
    "log.cleaner.io.max.bytes.per.second",
    "log.cleaner.backoff.ms",
})
"""Kafka's LogCleaner.ReconfigurableConfigs: they take effect at the next cleaning; a new thread
count starts or retires cleaner loops."""
LIVE_CONNECTION_CONFIGS = frozenset({"max.connections", "max.connections.per.ip"})
"""Kafka's DynamicConnectionQuota keys: checked for each new connection (open ones stay)."""
LIVE_PRODUCER_STATE_CONFIGS = frozenset({"producer.id.expiration.ms"})
"""Kafka's ProducerStateManagerConfig reconfigurable: read at the next expiration check."""

LIVE_BROKER_CONFIGS = (LIVE_LOG_CONFIGS | LIVE_REPLICATION_CONFIGS | LIVE_CLEANER_CONFIGS
                       | LIVE_CONNECTION_CONFIGS | LIVE_PRODUCER_STATE_CONFIGS)
"""Every broker key applied without a restart."""


def is_live(name: str) -> bool:
    """Whether a change of broker key `name` takes effect without restarting the broker."""
    return name in LIVE_BROKER_CONFIGS


LIVE_LISTENER_SSL_CONFIGS = frozenset({
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password",
    "ssl.keystore.certificate.chain", "ssl.keystore.key", "ssl.truststore.type", "ssl.truststore.location",
    "ssl.truststore.password", "ssl.truststore.certificates",
})
"""Kafka's SslConfigs.RECONFIGURABLE_CONFIGS: with a listener's prefix, in a broker's own dynamic
configs (`/config/brokers/<id>`; Kafka refuses them at the default), they rebuild that listener's
TLS context: new connections take it, open ones keep theirs. A listener's SASL keys
(`listener.name.<l>.<mechanism>.sasl.jaas.config`, ...) are not live, as in Kafka, whose
SaslChannelBuilder reconfigures only these SSL keys: they need a restart."""
_LISTENER_KEY = re.compile(r"listener\.name\.[^.]+\.(.+)")


def is_live_per_broker(name: str) -> bool:
    """Whether `name` is a listener's key or trust store setting (`listener.name.<l>.<key>`),
    applied without a restart when set for one broker."""
    match = _LISTENER_KEY.fullmatch(name)
    return match is not None and match.group(1) in LIVE_LISTENER_SSL_CONFIGS

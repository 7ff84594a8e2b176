"""Configuration with Kafka's keys: pydantic models whose aliases are the dotted Kafka names.

A process reads a Java-style properties file and `--override key=value` pairs (as
`kafka-server-start.sh` does). Values are parsed and checked as Kafka's ConfigDef does (types,
ranges, choices: common/config_def); a bad value is one ConfigException naming the key, which the
process reports in one line before it exits. A key the process does not know is logged as a
warning and otherwise ignored. Kafka's alternative keys resolve as Kafka resolves them:
`log.retention.ms` over `.minutes` over `.hours`, `log.roll.ms` over `log.roll.hours`, ...
"""

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Annotated, Any, Self, get_args

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, model_validator

from .config_def import (
    LONG_MAX,
    ConfigException,
    ConfigKey,
    ConfigType,
    Validator,
    at_least,
    between,
    list_of,
    one_of,
    parse_value,
)

log = logging.getLogger(__name__)

DAY_MS = 24 * 3600 * 1000
HOUR_MS = 3600 * 1000
COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")


@dataclass(frozen=True)
class Kafka:
    """A field's Kafka type (INT and LONG differ in range; plain `int` fields are LONG) and its
    ConfigDef validator, for `Annotated[...]` field types."""

    type: ConfigType | None = None
    validator: Validator | None = None


def _kafka(ctype: ConfigType | None = None, validator: Validator | None = None) -> Kafka:
    return Kafka(ctype, validator)


INT, LONG, SHORT, DOUBLE, LIST = ConfigType.INT, ConfigType.LONG, ConfigType.SHORT, ConfigType.DOUBLE, ConfigType.LIST
Int = Annotated[int, Kafka(INT)]


class _KafkaKeys(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="ignore", frozen=True, use_attribute_docstrings=True)

    @classmethod
    def from_properties(cls, props: dict[str, str]) -> Self:
        """The config of `props` (Kafka's keys); ConfigException when a value is invalid, a
        warning in the log for every key this process does not know."""
        known = cls.config_keys()
        for key in props:
            if key not in known and not key.startswith(LISTENER_PREFIX):
                log.warning("unknown configuration key %s is ignored", key)
        try:
            return cls.model_validate(props)
        except ValidationError as e:
            error = _config_exception(e)
            definition = known.get(error.name)
            if definition is not None and definition.type == ConfigType.PASSWORD:
                error = ConfigException(error.name, "[hidden]")  # Kafka's Password.toString: no secret in a message
            raise error from None

    @model_validator(mode="before")
    @classmethod
    def _parse_as_kafka(cls, data: object) -> object:
        """Parse and check every known key as Kafka's ConfigDef would (strict integers and
        booleans, ranges, choices), before pydantic's own (laxer) coercion."""
        if not isinstance(data, dict):
            return data
        specs = cls._specs()
        out = dict(data)
        for key, value in data.items():
            spec = specs.get(key)
            if spec is None or value is None:
                continue
            alias, ctype, validator = spec
            parsed = parse_value(alias, ctype, value)
            if validator is not None:
                validator(alias, parsed)
            out[key] = ",".join(parsed) if ctype == LIST else parsed
        return out

    @classmethod
    @cache
    def _specs(cls) -> dict[str, tuple[str, ConfigType, Validator | None]]:
        specs = {}
        for name, f in cls.model_fields.items():
            alias = f.alias or name
            marker = next((m for m in f.metadata if isinstance(m, Kafka)), Kafka())
            ctype = marker.type or _python_type(f.annotation)
            specs[alias] = specs[name] = (alias, ctype, marker.validator)
        return specs

    @classmethod
    @cache
    def config_keys(cls) -> dict[str, ConfigKey]:
        """Kafka key → its definition (type, default, documentation): what DescribeConfigs lists."""
        out = {}
        for name, f in cls.model_fields.items():
            alias, ctype, validator = cls._specs()[name]
            default = None if f.is_required() else f.default
            if ctype == LIST and isinstance(default, str):
                default = parse_value(alias, LIST, default)
            out[alias] = ConfigKey(alias, ctype, default, f.description or "", validator)
        return out

    def value_of(self, key: str) -> object:
        """The value of a Kafka key (None when unset and without default)."""
        alias, ctype, _ = self._specs()[key]
        value = getattr(self, type(self).field_name(alias))
        return parse_value(alias, LIST, value) if ctype == LIST and isinstance(value, str) else value

    @classmethod
    @cache
    def field_name(cls, key: str) -> str:
        for name, f in cls.model_fields.items():
            if (f.alias or name) == key:
                return name
        raise KeyError(key)

    def kafka_items(self) -> dict[str, object]:
        """This configuration under Kafka's key names (for DescribeConfigs)."""
        return {key: self.value_of(key) for key in self.config_keys()}


def _python_type(annotation: object) -> ConfigType:
    args = [a for a in get_args(annotation) if a is not type(None)] or [annotation]
    base = args[0]
    if base is bool:
        return ConfigType.BOOLEAN
    if base is int:
        return ConfigType.LONG
    if base is float:
        return ConfigType.DOUBLE
    return ConfigType.STRING


def _config_exception(error: ValidationError) -> ConfigException:
    """The first problem of a pydantic ValidationError as Kafka's one-line ConfigException."""
    first = error.errors()[0]
    cause = (first.get("ctx") or {}).get("error")
    if isinstance(cause, ConfigException):
        return cause
    where = ".".join(str(part) for part in first.get("loc", ())) or "configuration"
    if first.get("type") == "missing":
        return ConfigException(where, message=f'Missing required configuration "{where}" which has no default value.')
    return ConfigException(where, first.get("input"), first.get("msg"))


class ZkClientConfig(_KafkaKeys):
    zookeeper_connect: str = Field(alias="zookeeper.connect")
    """host:port[,host:port]/chroot; the chroot is applied by kazoo."""
    zookeeper_session_timeout_ms: Int = Field(18000, alias="zookeeper.session.timeout.ms")
    """ZooKeeper session timeout: a silent broker loses its registration after this long."""
    zookeeper_connection_timeout_ms: Int = Field(18000, alias="zookeeper.connection.timeout.ms")
    """How long to wait for a connection to ZooKeeper."""
    zookeeper_set_acl: bool = Field(False, alias="zookeeper.set.acl")
    """Znodes this process creates get Kafka's secure ACLs (common/zk_security): only the
    cluster's identity writes them, the world reads them except credentials."""
    java_security_auth_login_config: str | None = Field(None, alias="java.security.auth.login.config")
    """A JAAS file (as Kafka's JVM property of that name) whose Client section's username and
    password are this process's ZooKeeper digest identity."""
    zookeeper_sasl_clientconfig: str = Field("Client", alias="zookeeper.sasl.clientconfig")
    """The JAAS file's section for ZooKeeper."""
    zookeeper_ssl_client_enable: bool = Field(False, alias="zookeeper.ssl.client.enable")
    """Connect to ZooKeeper over TLS (its secureClientPort)."""
    zookeeper_ssl_keystore_location: str | None = Field(None, alias="zookeeper.ssl.keystore.location")
    """PEM key and certificate chain presented to ZooKeeper (its x509 identity)."""
    zookeeper_ssl_keystore_type: str | None = Field(None, alias="zookeeper.ssl.keystore.type")
    """PEM only."""
    zookeeper_ssl_keystore_password: Annotated[str | None, Kafka(ConfigType.PASSWORD)] = Field(
        None, alias="zookeeper.ssl.keystore.password")
    """The password of an encrypted private key in the key store."""
    zookeeper_ssl_truststore_location: str | None = Field(None, alias="zookeeper.ssl.truststore.location")
    """PEM CA certificates that ZooKeeper's certificate must chain to."""
    zookeeper_ssl_truststore_type: str | None = Field(None, alias="zookeeper.ssl.truststore.type")
    """PEM only."""
    zookeeper_ssl_endpoint_identification_algorithm: str = Field(
        "HTTPS", alias="zookeeper.ssl.endpoint.identification.algorithm")
    """HTTPS: ZooKeeper's certificate must name the host connected to; empty turns the check off."""
    metrics_port: Int = Field(-1, alias="metrics.port")
    """Port of the Prometheus endpoint (GET /metrics); -1 = none, 0 = any free port. Kafka has no
    such key (it exposes JMX, read by an exporter agent); here the process serves the metrics."""
    metrics_host: str = Field("127.0.0.1", alias="metrics.host")
    """Address the Prometheus endpoint binds (0.0.0.0 in a pod)."""


def _ms(ctype: ConfigType, minimum: int | None = None) -> Kafka:
    return Kafka(ctype, at_least(minimum) if minimum is not None else None)


LISTENER_PREFIX = "listener.name."
"""Kafka's per-listener keys: `listener.name.<listener in lower case>.<key>` overrides `<key>`."""
PASSWORD = ConfigType.PASSWORD


class SecurityConfig(ZkClientConfig):
    """Kafka's `ssl.*` keys and listener security protocols, shared by brokers and controllers.

    Every `ssl.*` key may be set per listener with Kafka's prefix (`listener.name.ssl.ssl.client.auth`);
    `listener_values` resolves them. Only PEM key and trust stores are supported
    (common/security/ssl_factory)."""

    listener_security_protocol_map: str = Field(
        "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
        alias="listener.security.protocol.map",
    )
    """Listener name → security protocol; every listener's name must be here (Kafka's rule)."""
    ssl_keystore_type: str | None = Field(None, alias="ssl.keystore.type")
    """PEM (the only type supported; Kafka's JKS and PKCS12 are not)."""
    ssl_keystore_location: str | None = Field(None, alias="ssl.keystore.location")
    """A PEM file with the private key and the certificate chain."""
    ssl_keystore_certificate_chain: Annotated[str | None, Kafka(PASSWORD)] = Field(
        None, alias="ssl.keystore.certificate.chain")
    """The certificate chain in PEM, inline (with ssl.keystore.key)."""
    ssl_keystore_key: Annotated[str | None, Kafka(PASSWORD)] = Field(None, alias="ssl.keystore.key")
    """The private key in PEM, inline (with ssl.keystore.certificate.chain)."""
    ssl_keystore_password: Annotated[str | None, Kafka(PASSWORD)] = Field(None, alias="ssl.keystore.password")
    """Unused with PEM key stores (Kafka's meaning for JKS/PKCS12)."""
    ssl_key_password: Annotated[str | None, Kafka(PASSWORD)] = Field(None, alias="ssl.key.password")
    """The password of an encrypted private key."""
    ssl_truststore_type: str | None = Field(None, alias="ssl.truststore.type")
    """PEM (the only type supported)."""
    ssl_truststore_location: str | None = Field(None, alias="ssl.truststore.location")
    """A PEM file of trusted CA certificates."""
    ssl_truststore_certificates: Annotated[str | None, Kafka(PASSWORD)] = Field(
        None, alias="ssl.truststore.certificates")
    """Trusted CA certificates in PEM, inline."""
    ssl_truststore_password: Annotated[str | None, Kafka(PASSWORD)] = Field(None, alias="ssl.truststore.password")
    """Unused with PEM trust stores."""
    ssl_enabled_protocols: Annotated[str, Kafka(LIST, list_of("TLSv1.2", "TLSv1.3"))] = Field(
        "TLSv1.2,TLSv1.3", alias="ssl.enabled.protocols")
    """TLS versions accepted and offered."""
    ssl_protocol: str = Field("TLSv1.3", alias="ssl.protocol")
    """Kafka's SSLContext protocol; the versions used are ssl.enabled.protocols."""
    ssl_cipher_suites: Annotated[str, Kafka(LIST)] = Field("", alias="ssl.cipher.suites")
    """TLS 1.2 cipher suites (IANA or OpenSSL names); empty: OpenSSL's defaults."""
    ssl_client_auth: Annotated[str, Kafka(None, one_of("none", "requested", "required"))] = Field(
        "none", alias="ssl.client.auth")
    """Whether TLS listeners ask clients for a certificate (mTLS)."""
    ssl_endpoint_identification_algorithm: str = Field("https", alias="ssl.endpoint.identification.algorithm")
    """https: outgoing connections verify the server's host name against its certificate; empty: not."""
    ssl_principal_mapping_rules: str = Field("DEFAULT", alias="ssl.principal.mapping.rules")
    """Client certificate subject → principal name (Kafka's rules, RULE:pattern/replacement/[LU],DEFAULT)."""

    sasl_enabled_mechanisms: Annotated[str, Kafka(LIST)] = Field(
        "SCRAM-SHA-256,SCRAM-SHA-512", alias="sasl.enabled.mechanisms")
    """Mechanisms SASL listeners offer (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512). Kafka's default is
    GSSAPI, which is not supported here."""
    sasl_jaas_config: Annotated[str | None, Kafka(PASSWORD)] = Field(None, alias="sasl.jaas.config")
    """A JAAS login module with this process's own username and password (and PLAIN's users);
    per listener and mechanism: listener.name.<l>.<mechanism>.sasl.jaas.config."""
    sasl_mechanism_inter_broker_protocol: str = Field("GSSAPI", alias="sasl.mechanism.inter.broker.protocol")
    """The mechanism brokers authenticate with on a SASL inter-broker listener."""
    sasl_mechanism_controller_protocol: str | None = Field(None, alias="sasl.mechanism.controller.protocol")
    """The mechanism of controller traffic on a SASL control-plane listener (else the inter-broker one)."""
    connections_max_reauth_ms: Annotated[int, Kafka(LONG, at_least(0))] = Field(0, alias="connections.max.reauth.ms")
    """KIP-368: SASL sessions last this long; 0: forever."""
    connection_failed_authentication_delay_ms: Annotated[int, Kafka(INT, at_least(0))] = Field(
        100, alias="connection.failed.authentication.delay.ms")
    """How long the answer to a failed authentication (and the close) waits."""
    sasl_server_max_receive_size: Annotated[int, Kafka(INT, at_least(1))] = Field(
        524288, alias="sasl.server.max.receive.size")
    """The largest frame a connection may send before it has authenticated."""

    _listener_prefixed: dict[str, str] = PrivateAttr(default_factory=dict)

    @model_validator(mode="wrap")
    @classmethod
    def _keep_listener_prefixed(cls, data: Any, handler: Any) -> Any:
        """Keeps `listener.name.*` keys, which are not fields (any listener, any key)."""
        model = handler(data)
        if isinstance(data, dict):
            model._listener_prefixed = {k: str(v) for k, v in data.items()
                                        if isinstance(k, str) and k.startswith(LISTENER_PREFIX) and v is not None}
        return model

    @property
    def listener_prefixed(self) -> dict[str, str]:
        return dict(self._listener_prefixed)

    def listener_value(self, listener: str, key: str) -> object:
        """`key` for `listener`: `listener.name.<listener>.<key>` when set, else `key`."""
        prefixed = f"{LISTENER_PREFIX}{listener.lower()}.{key}"
        if prefixed in self._listener_prefixed:
            return self._listener_prefixed[prefixed]
        try:
            return self.value_of(key)
        except KeyError:
            return None

    def listener_values(self, listener: str, keys: tuple[str, ...]) -> dict[str, object]:
        return {key: self.listener_value(listener, key) for key in keys}

    def security_protocol(self, listener: str) -> str:
        """The listener's security protocol (listener.security.protocol.map)."""
        return parse_protocol_map(self.listener_security_protocol_map).get(listener, listener)


class BrokerConfig(SecurityConfig):
    broker_id: Annotated[int, Kafka(INT, at_least(0))] = Field(alias="broker.id")
    """This broker's id, unique in the cluster."""
    broker_rack: str | None = Field(None, alias="broker.rack")
    """The broker's rack (rack-aware replica assignment)."""
    log_dirs: Annotated[str, Kafka(LIST)] = Field("/tmp/kafka-logs", alias="log.dirs")
    """Directories of the partition logs."""
    listeners: Annotated[str, Kafka(LIST)] = Field("PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9091",
                                                   alias="listeners")
    """Where the broker listens: NAME://host:port,... (the control-plane listener among them)."""
    advertised_listeners: Annotated[str | None, Kafka(LIST)] = Field(None, alias="advertised.listeners")
    """What the broker publishes for clients, when not its listeners."""
    inter_broker_listener_name: str | None = Field(None, alias="inter.broker.listener.name")
    """The listener brokers replicate through (and send transaction markers to); when unset, the
    listener named after security.inter.broker.protocol. Only one of the two may be set."""
    security_inter_broker_protocol: str | None = Field(None, alias="security.inter.broker.protocol")
    """Kafka's older key: the inter-broker listener is the one named after this protocol (default PLAINTEXT)."""
    connections_max_idle_ms: int = Field(600_000, alias="connections.max.idle.ms")
    max_connections: int = Field(2147483647, alias="max.connections")
    max_connections_per_ip: int = Field(2147483647, alias="max.connections.per.ip")
    queued_max_request_bytes: int = Field(512 * 1024 * 1024, alias="queued.max.request.bytes")
    """Bytes received and not yet handled, per listener; reading pauses beyond it. Kafka's
    default is -1 (unbounded); bounded here so that clients cannot run the broker out of memory."""
    control_plane_listener_name: str = Field("CONTROLLER", alias="control.plane.listener.name")
    """The one listener that takes controller requests (LeaderAndIsr, StopReplica, UpdateMetadata);
    required here, where Kafka falls back to the inter-broker listener: on any other listener a
    client could change replica state (see broker/control_plane)."""

    num_partitions: Annotated[int, _ms(INT, 1)] = Field(1, alias="num.partitions")
    """Partitions of a topic created without a count (auto-creation, CreateTopics -1)."""
    default_replication_factor: Int = Field(1, alias="default.replication.factor")
    """Replication factor of a topic created without one."""
    min_insync_replicas: Annotated[int, _ms(INT, 1)] = Field(1, alias="min.insync.replicas")
    """Default of the topic config min.insync.replicas."""
    auto_create_topics_enable: bool = Field(True, alias="auto.create.topics.enable")
    """Whether Metadata for an unknown topic creates it."""
    delete_topic_enable: bool = Field(True, alias="delete.topic.enable")
    """Whether DeleteTopics deletes topics."""

    log_segment_bytes: Annotated[int, _ms(INT, 14)] = Field(1 << 30, alias="log.segment.bytes")
    """Default of the topic config segment.bytes."""
    log_roll_ms: Annotated[int | None, _ms(LONG)] = Field(None, alias="log.roll.ms")
    """Default of segment.ms; when unset, log.roll.hours applies."""
    log_roll_hours: Annotated[int, _ms(INT, 1)] = Field(168, alias="log.roll.hours")
    """Default of segment.ms in hours, when log.roll.ms is unset."""
    log_roll_jitter_ms: Annotated[int | None, _ms(LONG)] = Field(None, alias="log.roll.jitter.ms")
    """Default of segment.jitter.ms; when unset, log.roll.jitter.hours applies."""
    log_roll_jitter_hours: Annotated[int, _ms(INT, 0)] = Field(0, alias="log.roll.jitter.hours")
    """Default of segment.jitter.ms in hours, when log.roll.jitter.ms is unset."""
    log_retention_ms: Annotated[int | None, _ms(LONG)] = Field(None, alias="log.retention.ms")
    """Default of retention.ms; when unset, log.retention.minutes, then log.retention.hours apply."""
    log_retention_minutes: Annotated[int | None, _ms(INT)] = Field(None, alias="log.retention.minutes")
    """Default of retention.ms in minutes, when log.retention.ms is unset."""
    log_retention_hours: Int = Field(168, alias="log.retention.hours")
    """Default of retention.ms in hours, when neither log.retention.ms nor .minutes is set."""
    log_retention_bytes: int = Field(-1, alias="log.retention.bytes")
    """Default of the topic config retention.bytes."""
    log_retention_check_interval_ms: Annotated[int, _ms(LONG, 1)] = Field(300_000, alias="log.retention.check.interval.ms")
    """How often retention runs over the logs."""
    log_cleanup_policy: Annotated[str, Kafka(LIST, list_of("compact", "delete"))] = Field(
        "delete", alias="log.cleanup.policy")
    """Default of the topic config cleanup.policy."""
    log_index_size_max_bytes: Annotated[int, _ms(INT, 4)] = Field(10 * 1024 * 1024, alias="log.index.size.max.bytes")
    """Default of the topic config segment.index.bytes."""
    log_index_interval_bytes: Annotated[int, _ms(INT, 0)] = Field(4096, alias="log.index.interval.bytes")
    """Default of the topic config index.interval.bytes."""
    log_flush_interval_messages: Annotated[int, _ms(LONG, 1)] = Field(LONG_MAX, alias="log.flush.interval.messages")
    """Default of the topic config flush.messages."""
    log_flush_interval_ms: int | None = Field(None, alias="log.flush.interval.ms")
    """Default of flush.ms; when unset, log.flush.scheduler.interval.ms applies."""
    log_flush_scheduler_interval_ms: int = Field(LONG_MAX, alias="log.flush.scheduler.interval.ms")
    """How often logs are checked for a time-based flush."""
    log_segment_delete_delay_ms: Annotated[int, _ms(LONG, 0)] = Field(60000, alias="log.segment.delete.delay.ms")
    """Default of the topic config file.delete.delay.ms."""
    log_preallocate: bool = Field(False, alias="log.preallocate")
    """Default of the topic config preallocate."""
    log_message_format_version: str = Field("3.0-IV1", alias="log.message.format.version")
    """Default of the topic config message.format.version (ignored since Kafka 3.0)."""
    log_message_timestamp_type: Annotated[str, Kafka(None, one_of("CreateTime", "LogAppendTime"))] = Field(
        "CreateTime", alias="log.message.timestamp.type")
    """Default of the topic config message.timestamp.type."""
    log_message_timestamp_difference_max_ms: Annotated[int, _ms(LONG, 0)] = Field(
        LONG_MAX, alias="log.message.timestamp.difference.max.ms")
    """Default of the topic config message.timestamp.difference.max.ms."""
    log_message_timestamp_before_max_ms: Annotated[int, _ms(LONG, 0)] = Field(
        LONG_MAX, alias="log.message.timestamp.before.max.ms")
    """Default of the topic config message.timestamp.before.max.ms."""
    log_message_timestamp_after_max_ms: Annotated[int, _ms(LONG, 0)] = Field(
        LONG_MAX, alias="log.message.timestamp.after.max.ms")
    """Default of the topic config message.timestamp.after.max.ms."""
    log_message_downconversion_enable: bool = Field(True, alias="log.message.downconversion.enable")
    """Default of the topic config message.downconversion.enable."""
    log_cleaner_delete_retention_ms: Annotated[int, _ms(LONG, 0)] = Field(DAY_MS, alias="log.cleaner.delete.retention.ms")
    """Default of the topic config delete.retention.ms."""
    log_cleaner_min_compaction_lag_ms: Annotated[int, _ms(LONG, 0)] = Field(0, alias="log.cleaner.min.compaction.lag.ms")
    """Default of the topic config min.compaction.lag.ms."""
    log_cleaner_max_compaction_lag_ms: Annotated[int, _ms(LONG, 1)] = Field(
        LONG_MAX, alias="log.cleaner.max.compaction.lag.ms")
    """Default of the topic config max.compaction.lag.ms."""
    log_cleaner_min_cleanable_ratio: Annotated[float, Kafka(DOUBLE, between(0, 1))] = Field(
        0.5, alias="log.cleaner.min.cleanable.ratio")
    """Default of the topic config min.cleanable.dirty.ratio."""
    log_cleaner_enable: bool = Field(True, alias="log.cleaner.enable")
    """Run the log cleaner (compaction of cleanup.policy=compact topics, __consumer_offsets too)."""
    log_cleaner_threads: Annotated[int, _ms(INT, 0)] = Field(1, alias="log.cleaner.threads")
    """Logs cleaned at once, each in its own worker process."""
    log_cleaner_dedupe_buffer_size: Annotated[int, _ms(LONG, 1024 * 1024)] = Field(
        128 * 1024 * 1024, alias="log.cleaner.dedupe.buffer.size")
    """Bytes of offset map (24 a key) shared by the cleaner threads: bounds the dirty section one cleaning covers."""
    log_cleaner_io_max_bytes_per_second: Annotated[float, Kafka(DOUBLE)] = Field(
        1.7976931348623157e308, alias="log.cleaner.io.max.bytes.per.second")
    """Read and write throughput of the cleaner threads together."""
    log_cleaner_backoff_ms: Annotated[int, _ms(LONG, 0)] = Field(15_000, alias="log.cleaner.backoff.ms")
    """Sleep when no log needs cleaning."""
    log_local_retention_ms: Annotated[int, _ms(LONG, -2)] = Field(-2, alias="log.local.retention.ms")
    """Default of the topic config local.retention.ms (tiered storage)."""
    log_local_retention_bytes: Annotated[int, _ms(LONG, -2)] = Field(-2, alias="log.local.retention.bytes")
    """Default of the topic config local.retention.bytes (tiered storage)."""
    compression_type: Annotated[str, Kafka(None, one_of(*COMPRESSION_TYPES))] = Field(
        "producer", alias="compression.type")
    """Default of the topic config compression.type."""
    compression_gzip_level: Int = Field(-1, alias="compression.gzip.level")
    """Default of the topic config compression.gzip.level."""
    compression_lz4_level: Annotated[int, Kafka(INT, between(1, 17))] = Field(9, alias="compression.lz4.level")
    """Default of the topic config compression.lz4.level."""
    compression_zstd_level: Annotated[int, Kafka(INT, between(-131072, 22))] = Field(3, alias="compression.zstd.level")
    """Default of the topic config compression.zstd.level."""
    message_max_bytes: Annotated[int, _ms(INT, 0)] = Field(1048588, alias="message.max.bytes")
    """Default of the topic config max.message.bytes: the largest record batch accepted."""
    socket_request_max_bytes: Annotated[int, _ms(INT, 1)] = Field(104857600, alias="socket.request.max.bytes")
    """The largest request the broker reads."""

    leader_replication_throttled_rate: Annotated[int, _ms(LONG, 0)] = Field(
        LONG_MAX, alias="leader.replication.throttled.rate")
    """Bytes/s a leader serves to throttled followers (leader.replication.throttled.replicas)."""
    follower_replication_throttled_rate: Annotated[int, _ms(LONG, 0)] = Field(
        LONG_MAX, alias="follower.replication.throttled.rate")
    """Bytes/s a follower fetches for throttled replicas (follower.replication.throttled.replicas)."""
    replica_alter_log_dirs_io_max_bytes_per_second: Annotated[int, _ms(LONG, 0)] = Field(
        LONG_MAX, alias="replica.alter.log.dirs.io.max.bytes.per.second")
    """Bytes/s for moving replicas between log dirs."""

    quota_window_num: Annotated[int, _ms(INT, 1)] = Field(11, alias="quota.window.num")
    """Samples the client quotas' rates are measured over (broker/quota)."""
    quota_window_size_seconds: Annotated[int, _ms(INT, 1)] = Field(1, alias="quota.window.size.seconds")
    """Length of one client quota sample."""

    producer_id_expiration_ms: Annotated[int, _ms(INT, 1)] = Field(86_400_000, alias="producer.id.expiration.ms")
    """Idle producer ids are forgotten after this long (KIP-854; broker-wide, no topic override in Kafka)."""
    producer_id_expiration_check_interval_ms: Annotated[int, _ms(INT, 1)] = Field(
        600_000, alias="producer.id.expiration.check.interval.ms")
    """How often expired producer ids are removed."""

    replica_lag_time_max_ms: int = Field(30000, alias="replica.lag.time.max.ms")
    """A follower not caught up for this long leaves the ISR."""
    replica_fetch_wait_max_ms: Int = Field(500, alias="replica.fetch.wait.max.ms")
    """Longest wait of a follower's fetch at its leader."""
    replica_fetch_min_bytes: Int = Field(1, alias="replica.fetch.min.bytes")
    """Bytes a follower's fetch waits for."""
    replica_fetch_max_bytes: Annotated[int, _ms(INT, 0)] = Field(1048576, alias="replica.fetch.max.bytes")
    """Bytes a follower fetches per partition."""
    replica_fetch_response_max_bytes: Annotated[int, _ms(INT, 0)] = Field(10485760, alias="replica.fetch.response.max.bytes")
    """Bytes a follower fetches per response."""
    replica_fetch_backoff_ms: Annotated[int, _ms(INT, 0)] = Field(1000, alias="replica.fetch.backoff.ms")
    """A follower's pause after a fetch error."""
    replica_socket_timeout_ms: Int = Field(30000, alias="replica.socket.timeout.ms")
    """Socket timeout of a follower's fetches."""
    replica_high_watermark_checkpoint_interval_ms: int = Field(
        5000, alias="replica.high.watermark.checkpoint.interval.ms"
    )
    """How often high watermarks are checkpointed."""
    unclean_leader_election_enable: bool = Field(False, alias="unclean.leader.election.enable")
    """Default of the topic config unclean.leader.election.enable."""
    max_incremental_fetch_session_cache_slots: Annotated[int, _ms(INT, 0)] = Field(
        1000, alias="max.incremental.fetch.session.cache.slots")
    """Fetch sessions (KIP-227) the broker keeps; a full cache evicts by Kafka's rules or refuses."""
    min_incremental_fetch_session_eviction_ms: Annotated[int, _ms(INT, 0)] = Field(
        120_000, alias="min.incremental.fetch.session.eviction.ms")
    """A fetch session unused (or, against a newcomer, existing) this long may be evicted."""
    request_timeout_ms: Int = Field(30000, alias="request.timeout.ms")
    """Timeout of the broker's own requests."""
    controlled_shutdown_enable: bool = Field(True, alias="controlled.shutdown.enable")
    """Whether SIGTERM first asks the controller to move the broker's leaderships away."""
    controlled_shutdown_max_retries: Int = Field(3, alias="controlled.shutdown.max.retries")
    """Attempts of the controlled shutdown."""
    controlled_shutdown_retry_backoff_ms: int = Field(5000, alias="controlled.shutdown.retry.backoff.ms")
    """Pause between attempts of the controlled shutdown."""
    controller_socket_timeout_ms: Int = Field(30000, alias="controller.socket.timeout.ms")
    """Bound of one request to the controller (AlterPartition, ControlledShutdown)."""

    offsets_topic_num_partitions: Annotated[int, _ms(INT, 1)] = Field(50, alias="offsets.topic.num.partitions")
    """Partitions of __consumer_offsets."""
    offsets_topic_replication_factor: Annotated[int, _ms(SHORT, 1)] = Field(3, alias="offsets.topic.replication.factor")
    """Replication factor of __consumer_offsets."""
    offsets_topic_segment_bytes: Annotated[int, _ms(INT, 1)] = Field(
        104857600, alias="offsets.topic.segment.bytes")
    """segment.bytes of __consumer_offsets: small segments are cleaned (compacted) sooner."""
    offsets_commit_timeout_ms: Annotated[int, _ms(INT, 1)] = Field(5000, alias="offsets.commit.timeout.ms")
    """How long an offset commit waits for its replication."""
    offsets_retention_minutes: Annotated[int, _ms(INT, 1)] = Field(7 * 24 * 60, alias="offsets.retention.minutes")
    """Committed offsets of an empty group are kept this long."""
    offsets_retention_check_interval_ms: Annotated[int, _ms(LONG, 1)] = Field(
        600_000, alias="offsets.retention.check.interval.ms")
    """How often expired offsets are removed."""
    offset_metadata_max_bytes: Int = Field(4096, alias="offset.metadata.max.bytes")
    """Largest metadata string of a committed offset."""
    group_min_session_timeout_ms: Int = Field(6000, alias="group.min.session.timeout.ms")
    """Smallest session timeout a group member may ask for."""
    group_max_session_timeout_ms: Int = Field(1_800_000, alias="group.max.session.timeout.ms")
    """Largest session timeout a group member may ask for."""
    group_initial_rebalance_delay_ms: Int = Field(3000, alias="group.initial.rebalance.delay.ms")
    """How long a new group waits for more members before its first rebalance."""
    group_max_size: Annotated[int, _ms(INT, 1)] = Field(2147483647, alias="group.max.size")
    """Members a group may have."""

    @model_validator(mode="after")
    def _check_combinations(self) -> Self:
        """Kafka's KafkaConfig.validateValues, the checks that concern this broker."""
        if self.inter_broker_listener_name and self.security_inter_broker_protocol:
            raise ConfigException("inter.broker.listener.name", message=(
                "Only one of inter.broker.listener.name and security.inter.broker.protocol should be set."))
        if not [d for d in self.log_dirs.split(",") if d.strip()]:
            raise ConfigException("log.dirs", message="At least one log directory must be defined via log.dirs")
        if self.replica_fetch_wait_max_ms > self.replica_socket_timeout_ms:
            raise ConfigException("replica.socket.timeout.ms", message=(
                "replica.socket.timeout.ms should always be at least replica.fetch.wait.max.ms to prevent "
                "unnecessary socket timeouts"))
        if self.replica_fetch_wait_max_ms > self.replica_lag_time_max_ms:
            raise ConfigException("replica.fetch.wait.max.ms", message=(
                "replica.fetch.wait.max.ms should always be less than or equal to replica.lag.time.max.ms to "
                "prevent frequent changes in ISR"))
        if self.compression_gzip_level != -1 and not 1 <= self.compression_gzip_level <= 9:
            raise ConfigException("compression.gzip.level", self.compression_gzip_level,
                                  "Value must be between 1 and 9, or -1 (the codec's default)")
        return self

    # --- Kafka's resolution of alternative keys -------------------------------------------------

    @property
    def inter_broker_listener(self) -> str:
        """inter.broker.listener.name, else the listener named after security.inter.broker.protocol."""
        return self.inter_broker_listener_name or self.security_inter_broker_protocol or "PLAINTEXT"

    @property
    def log_retention_time_millis(self) -> int:
        """log.retention.ms, else .minutes, else .hours; any negative value means no limit (-1)."""
        if self.log_retention_ms is not None:
            millis = self.log_retention_ms
        elif self.log_retention_minutes is not None:
            millis = self.log_retention_minutes * 60_000
        else:
            millis = self.log_retention_hours * HOUR_MS
        return -1 if millis < 0 else millis

    @property
    def log_roll_time_millis(self) -> int:
        return self.log_roll_ms if self.log_roll_ms is not None else self.log_roll_hours * HOUR_MS

    @property
    def log_roll_time_jitter_millis(self) -> int:
        return self.log_roll_jitter_ms if self.log_roll_jitter_ms is not None else self.log_roll_jitter_hours * HOUR_MS

    @property
    def log_flush_interval_millis(self) -> int:
        return self.log_flush_interval_ms if self.log_flush_interval_ms is not None else self.log_flush_scheduler_interval_ms

    transaction_state_log_num_partitions: int = Field(50, alias="transaction.state.log.num.partitions")
    transaction_state_log_replication_factor: int = Field(3, alias="transaction.state.log.replication.factor")
    transaction_state_log_min_isr: int = Field(2, alias="transaction.state.log.min.isr")
    transaction_state_log_segment_bytes: int = Field(104857600, alias="transaction.state.log.segment.bytes")
    transaction_max_timeout_ms: int = Field(900_000, alias="transaction.max.timeout.ms")
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = Field(
        10_000, alias="transaction.abort.timed.out.transaction.cleanup.interval.ms")
    transactional_id_expiration_ms: int = Field(7 * DAY_MS, alias="transactional.id.expiration.ms")
    transaction_remove_expired_transaction_cleanup_interval_ms: int = Field(
        3_600_000, alias="transaction.remove.expired.transaction.cleanup.interval.ms")
    transaction_partition_verification_enable: bool = Field(True, alias="transaction.partition.verification.enable")
    """KIP-890 part 1: leaders ask the coordinator before a producer's first transactional append."""

    authorizer_class_name: str = Field("", alias="authorizer.class.name")
    """Empty: every request is allowed (Kafka without an authorizer). Set (Kafka's
    kafka.security.authorizer.AclAuthorizer, or any other name): ACLs from ZooKeeper decide."""
    super_users: str = Field("", alias="super.users")
    """Principals (User:name), separated by semicolons, allowed everything whatever the ACLs say."""
    allow_everyone_if_no_acl_found: bool = Field(False, alias="allow.everyone.if.no.acl.found")
    """With the authorizer on: a resource no ACL applies to is open to everyone (else to no one)."""


CONTROLLER_ID_BASE = 1000
"""Controller ids start here (`odradek dev` numbers them 1000+j, the operator derives them from pod
names above it), apart from broker ids, which are StatefulSet ordinals and small."""


class ControllerConfig(SecurityConfig):
    controller_id: int = Field(alias="controller.id")
    control_plane_listener_name: str = Field("CONTROLLER", alias="control.plane.listener.name")
    """The brokers' listener the controller sends its requests to, found in each broker's
    registration (as Kafka's controller does)."""
    listeners: str = Field("PLAINTEXT://127.0.0.1:9190", alias="listeners")
    """Where brokers send AlterPartition and ControlledShutdown; not 9093, which `odradek dev` brokers use."""
    inter_broker_listener_name: str = Field("PLAINTEXT", alias="inter.broker.listener.name")
    """The brokers' listener named to followers as their leader's address (LeaderAndIsr live
    leaders): replication goes through it. Must match the brokers' inter-broker listener."""
    default_replication_factor: int = Field(1, alias="default.replication.factor")
    unclean_leader_election_enable: bool = Field(False, alias="unclean.leader.election.enable")
    auto_leader_rebalance_enable: bool = Field(True, alias="auto.leader.rebalance.enable")
    leader_imbalance_check_interval_seconds: int = Field(
        300, alias="leader.imbalance.check.interval.seconds"
    )
    leader_imbalance_per_broker_percentage: int = Field(10, alias="leader.imbalance.per.broker.percentage")
    """Auto rebalance moves a broker's preferred leaderships back only above this share not led."""


def parse_properties(text: str) -> dict[str, str]:
    """Java properties, the subset people write: `key=value` or `key: value`, # and ! comments."""
    props: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        sep = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if sep < 0:
            props[line] = ""
        else:
            props[line[:sep].strip()] = line[sep + 1 :].strip()
    return props


def load_properties(path: str | Path | None, overrides: Sequence[str] = ()) -> dict[str, str]:
    props = parse_properties(Path(path).read_text()) if path else {}
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--override wants key=value, got {item!r}")
        props[key.strip()] = value.strip()
    return props


def parse_protocol_map(value: str) -> dict[str, str]:
    """`listener.security.protocol.map` (`NAME:PROTOCOL,...`) → {NAME: PROTOCOL}."""
    out = {}
    for item in filter(None, (v.strip() for v in value.split(","))):
        name, sep, protocol = item.partition(":")
        if not sep:
            raise ValueError(f"listener.security.protocol.map entry {item!r} is not NAME:PROTOCOL")
        out[name.strip()] = protocol.strip()
    return out


def parse_listeners(value: str) -> list[tuple[str, str, int]]:
    """`PLAINTEXT://host:port,...` → [(listener, host, port)]."""
    out = []
    for item in filter(None, (v.strip() for v in value.split(","))):
        name, rest = item.split("://", 1)
        host, port = rest.rsplit(":", 1)
        out.append((name, host.strip("[]"), int(port)))
    return out

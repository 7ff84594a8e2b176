"""The pure parts of configuration: Kafka's parsing rules, broker and topic validation, alternative
keys, incremental operations, DescribeConfigs sources and synonyms, change notifications."""

import pytest

from odradek.broker import config_admin as ca
from odradek.broker import config_helper as ch
from odradek.broker import dynamic_config as dynamic_config_module
from odradek.broker.admin_manager import ApiError
from odradek.broker.change_notifications import new_notifications, obsolete
from odradek.broker.config_manager import parse_entity_path
from odradek.broker.dynamic_config import DYNAMIC_CONFIGS, DynamicBrokerConfig
from odradek.broker.log.config import LogConfig
from odradek.common import zk_data
from odradek.common.config import BrokerConfig, ControllerConfig
from odradek.common.config_def import ConfigException, ConfigType, parse_value
from odradek.common.zk_data import config_change_sequence

BASE = {"broker.id": "0", "zookeeper.connect": "127.0.0.1:2181"}


def broker(**props) -> BrokerConfig:
    return BrokerConfig.from_properties({**BASE, **props})


# --- parsing as Kafka parses -------------------------------------------------------------------------


@pytest.mark.parametrize(("ctype", "text", "value"), [
    (ConfigType.INT, " 42 ", 42), (ConfigType.INT, "+7", 7), (ConfigType.LONG, "-1", -1),
    (ConfigType.LONG, str(2**63 - 1), 2**63 - 1), (ConfigType.BOOLEAN, "TRUE", True),
    (ConfigType.BOOLEAN, " false", False), (ConfigType.DOUBLE, "0.5", 0.5), (ConfigType.DOUBLE, "1e-3", 0.001),
    (ConfigType.LIST, "a, b ,c", ["a", "b", "c"]), (ConfigType.LIST, "", []), (ConfigType.LIST, "a,", ["a", ""]),
    (ConfigType.STRING, "  x ", "x"),
])
def test_values_parse_as_kafka_parses_them(ctype, text, value):
    assert parse_value("k", ctype, text) == value


@pytest.mark.parametrize(("ctype", "text"), [
    (ConfigType.INT, "1_000"), (ConfigType.INT, "0x10"), (ConfigType.INT, "١٢"), (ConfigType.INT, str(2**31)),
    (ConfigType.INT, "1.0"), (ConfigType.LONG, str(2**63)), (ConfigType.LONG, ""), (ConfigType.BOOLEAN, "yes"),
    (ConfigType.BOOLEAN, "1"), (ConfigType.DOUBLE, "NaN"), (ConfigType.DOUBLE, "1_0.5"), (ConfigType.DOUBLE, "inf"),
])
def test_values_kafka_refuses_are_refused(ctype, text):
    with pytest.raises(ConfigException, match=r"Invalid value .* for configuration k"):
        parse_value("k", ctype, text)


# --- broker configuration -----------------------------------------------------------------------------


@pytest.mark.parametrize(("props", "message"), [
    ({"num.partitions": "-1"}, "Invalid value -1 for configuration num.partitions: Value must be at least 1"),
    ({"message.max.bytes": "-5"}, "Invalid value -5 for configuration message.max.bytes: Value must be at least 0"),
    ({"num.partitions": "many"}, "Not a number of type INT"),
    ({"log.segment.bytes": "10"}, "log.segment.bytes: Value must be at least 14"),
    ({"auto.create.topics.enable": "yes"}, "Expected value to be either true or false"),
    ({"log.cleanup.policy": "shred"}, "String must be one of: compact, delete"),
    ({"compression.type": "brotli"}, "compression.type"),
    ({"log.cleaner.min.cleanable.ratio": "1.5"}, "Value must be no more than 1"),
    ({"broker.id": "-3"}, "broker.id"),
    ({"replica.fetch.wait.max.ms": "40000"}, "replica.socket.timeout.ms should always be at least"),
    ({"log.dirs": " , "}, "At least one log directory"),
])
def test_broker_config_is_validated_as_kafka_validates_it(props, message):
    with pytest.raises(ConfigException) as e:
        broker(**props)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_a_refused_password_value_is_hidden():
    """Kafka prints a Password as [hidden]: a broker's start-up error, and the operator's condition
    built from it, never hold the secret."""
    with pytest.raises(ConfigException) as e:
        BrokerConfig.from_properties({**BASE, "ssl.keystore.password": ["s3cret-value"]})
    assert str(e.value) == "Invalid value [hidden] for configuration ssl.keystore.password"


def test_missing_required_key_is_one_line():
    with pytest.raises(ConfigException, match=r'Missing required configuration "zookeeper\.connect"'):
        BrokerConfig.from_properties({"broker.id": "0"})


def test_unknown_keys_are_warned_about(caplog):
    broker(**{"no.such.thing": "1", "num.partitions": "3"})
    assert "unknown configuration key no.such.thing is ignored" in caplog.text
    assert "num.partitions" not in caplog.text
    ControllerConfig.from_properties({"controller.id": "1000", "zookeeper.connect": "x", "typo.key": "1"})
    assert "typo.key" in caplog.text


def test_alternative_keys_resolve_as_kafka_resolves_them():
    assert broker().log_retention_time_millis == 168 * 3600 * 1000
    assert broker(**{"log.retention.hours": "2"}).log_retention_time_millis == 2 * 3600 * 1000
    assert broker(**{"log.retention.hours": "2", "log.retention.minutes": "3"}).log_retention_time_millis == 180_000
    assert broker(**{"log.retention.minutes": "3", "log.retention.ms": "5"}).log_retention_time_millis == 5
    assert broker(**{"log.retention.ms": "-7"}).log_retention_time_millis == -1
    assert broker(**{"log.roll.hours": "1"}).log_roll_time_millis == 3600 * 1000
    assert broker(**{"log.roll.hours": "1", "log.roll.ms": "99"}).log_roll_time_millis == 99
    assert broker(**{"log.roll.jitter.hours": "1"}).log_roll_time_jitter_millis == 3600 * 1000
    assert broker().log_flush_interval_millis == 2**63 - 1
    assert broker(**{"log.flush.interval.ms": "50"}).log_flush_interval_millis == 50
    config = LogConfig.from_broker(broker(**{"log.retention.minutes": "10", "log.roll.hours": "2"}), {})
    assert (config.retention_ms, config.segment_ms) == (600_000, 7_200_000)


# --- topic configuration --------------------------------------------------------------------------------


@pytest.mark.parametrize("overrides", [
    {"compression.type": c} for c in ("lz4", "zstd", "snappy", "gzip", "producer", "uncompressed")
] + [
    {"compression.gzip.level": "-1"}, {"compression.gzip.level": "9"}, {"compression.zstd.level": "-5"},
    {"cleanup.policy": ""}, {"cleanup.policy": "compact, delete"}, {"leader.replication.throttled.replicas": "*"},
    {"follower.replication.throttled.replicas": "0:1,1:2"}, {"message.format.version": "2.8"},
    {"message.timestamp.after.max.ms": "3600000"}, {"local.retention.ms": "-2"}, {"segment.index.bytes": "4"},
])
def test_topic_configs_kafka_accepts(overrides):
    LogConfig.validate_overrides(overrides)


@pytest.mark.parametrize(("overrides", "message"), [
    ({"compression.type": "brotli"}, "String must be one of"),
    ({"compression.gzip.level": "0"}, "compression.gzip.level"),
    ({"compression.lz4.level": "18"}, "no more than 17"),
    ({"leader.replication.throttled.replicas": "0-1"}, "must be the literal '*'"),
    ({"cleanup.policy": "delete,"}, "cleanup.policy"),
    ({"remote.storage.enable": "true"}, "Tiered Storage"),
    ({"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"}, "conflict topic config setting"),
    ({"local.retention.bytes": "-3"}, "at least -2"),
])
def test_topic_configs_kafka_refuses(overrides, message):
    with pytest.raises(ConfigException, match=message):
        LogConfig.validate_overrides(overrides)


def test_every_topic_key_defaults_to_its_broker_synonym():
    b = broker(**{"compression.type": "zstd", "log.cleanup.policy": "compact", "log.preallocate": "true",
                  "log.message.timestamp.type": "LogAppendTime", "message.max.bytes": "2000"})
    config = LogConfig.from_broker(b, {})
    assert (config.compression_type, config.cleanup_policy, config.preallocate) == ("zstd", "compact", True)
    assert (config.message_timestamp_type, config.max_message_bytes) == ("LogAppendTime", 2000)
    assert len(LogConfig.keys()) == 36


# --- AlterConfigs and IncrementalAlterConfigs -------------------------------------------------------------


def change(rtype, name, *ops):
    return ca.ResourceChange(rtype, name, tuple(ca.ConfigOp(*op) for op in ops))


def test_preprocess_flags_what_kafka_flags():
    changes = [
        change(ca.TOPIC, "t", ("retention.ms", ca.SET, "1")),
        change(ca.TOPIC, "t", ("retention.ms", ca.SET, "2")),
        change(ca.TOPIC, "u", ("a", ca.SET, "1"), ("a", ca.DELETE, None)),
        change(ca.TOPIC, "v", ("a", ca.DELETE, None)),
        change(ca.BROKER, "", ("log.retention.ms", ca.SET, "1")),
        change(ca.BROKER, "0", ("log.retention.ms", ca.SET, "1")),
        change(ca.BROKER, "1", ("log.retention.ms", ca.SET, "1")),
        change(ca.BROKER_LOGGER, "0", ("root", ca.SET, "INFO")),
    ]
    incremental = [e and e.error_code for e in ca.preprocess(changes, 0, incremental=True)]
    assert incremental[:7] == [ca.ErrorCode.invalid_request] * 3 + [None, None, None, ca.ErrorCode.invalid_request]
    legacy = [e and e.error_code for e in ca.preprocess(changes, 0, incremental=False)]
    assert legacy[3] == ca.ErrorCode.invalid_request  # AlterConfigs has no null values
    assert legacy[7] == ca.ErrorCode.invalid_request


def test_incremental_operations():
    ops = [ca.ConfigOp("retention.ms", ca.SET, "5"), ca.ConfigOp("segment.ms", ca.DELETE, None),
           ca.ConfigOp("cleanup.policy", ca.APPEND, "compact"),
           ca.ConfigOp("leader.replication.throttled.replicas", ca.APPEND, "0:1,1:1")]
    assert ca.apply_ops({"segment.ms": "9"}, ops, ca.TOPIC) == {
        "retention.ms": "5", "cleanup.policy": "delete,compact", "leader.replication.throttled.replicas": "0:1,1:1"}
    assert ca.apply_ops({"cleanup.policy": "delete,compact"}, [ca.ConfigOp("cleanup.policy", ca.SUBTRACT, "delete")],
                        ca.TOPIC) == {"cleanup.policy": "compact"}
    with pytest.raises(ApiError) as e:
        ca.apply_ops({}, [ca.ConfigOp("retention.ms", ca.APPEND, "1")], ca.TOPIC)
    assert e.value.error_code == ca.ErrorCode.invalid_request
    with pytest.raises(ApiError) as e:
        ca.apply_ops({}, [ca.ConfigOp("no.such", ca.SUBTRACT, "1")], ca.TOPIC)
    assert e.value.error_code == ca.ErrorCode.invalid_config


# --- dynamic broker configs ----------------------------------------------------------------------------------


def test_dynamic_layers_win_key_by_key_and_bad_entries_from_zookeeper_are_skipped(caplog):
    dynamic = DynamicBrokerConfig({**BASE, "log.retention.hours": "24", "message.max.bytes": "5000"})
    assert dynamic.current.log_retention_time_millis == 24 * 3600 * 1000
    assert dynamic.update(default={"log.retention.ms": "1000", "message.max.bytes": "6000", "num.partitions": "9",
                                   "log.segment.bytes": "bogus"},
                          broker={"message.max.bytes": "7000"})
    assert dynamic.current.log_retention_time_millis == 1000  # .ms over .hours, whatever the layer
    assert dynamic.current.message_max_bytes == 7000
    assert dynamic.current.num_partitions == 1 and dynamic.current.log_segment_bytes == 1 << 30
    assert "num.partitions" in caplog.text and "bogus" in caplog.text
    assert not dynamic.update(broker={"message.max.bytes": "7000"})
    dynamic.validate({"log.segment.bytes": "1000000"}, per_broker=False)
    for props in ({"num.partitions": "2"}, {"log.retention.hours": "1"}, {"log.segment.bytes": "1"}):
        with pytest.raises(ConfigException):
            dynamic.validate(props, per_broker=True)
    assert "leader.replication.throttled.rate" in DYNAMIC_CONFIGS and "log.retention.ms" in DYNAMIC_CONFIGS


def test_describe_sources_and_synonyms_follow_kafka():
    dynamic = DynamicBrokerConfig({**BASE, "log.retention.ms": "5000", "log.roll.hours": "2"})
    dynamic.update(default={"min.insync.replicas": "2"}, broker={"log.segment.bytes": "100000"})
    sources = dynamic.sources()
    log_config = LogConfig.from_broker(dynamic.current, {"retention.ms": "10"})
    entries = {e.name: e for e in ch.describe_topic(log_config, {"retention.ms": "10"}, sources, True, True)}
    assert [(s.name, s.value, s.source) for s in entries["retention.ms"].synonyms] == [
        ("retention.ms", "10", ch.TOPIC_CONFIG), ("log.retention.ms", "5000", ch.STATIC_BROKER_CONFIG),
        ("log.retention.hours", "168", ch.DEFAULT_CONFIG)]
    assert entries["min.insync.replicas"].source == ch.DYNAMIC_DEFAULT_BROKER_CONFIG
    assert entries["segment.bytes"].source == ch.DYNAMIC_BROKER_CONFIG
    # Kafka drops synonyms before the first occurrence of the primary key (log.roll.ms unset).
    assert (entries["segment.ms"].value, entries["segment.ms"].source, entries["segment.ms"].synonyms) == (
        str(2 * 3600 * 1000), ch.DEFAULT_CONFIG, ())
    assert entries["remote.storage.enable"].source == ch.DEFAULT_CONFIG
    described = {e.name: e for e in ch.describe_broker(dynamic.current, sources, True)}
    assert described["log.roll.hours"].source == ch.STATIC_BROKER_CONFIG
    assert described["log.roll.hours"].read_only and not described["log.roll.ms"].read_only
    assert described["log.segment.bytes"].value == "100000"
    assert [e.name for e in ch.describe_broker_default(sources)] == ["min.insync.replicas"]
    assert ch.select(list(entries.values()), ["segment.ms", "nope"])[0].name == "segment.ms"
    assert len(ch.select(list(entries.values()), [])) == len(entries)


# --- change notifications -----------------------------------------------------------------------------------


def test_notifications_in_kafkas_json_and_order():
    assert zk_data.decode_config_change(zk_data.encode_config_change("topics/t")) == "topics/t"
    assert zk_data.decode_config_change(b'{"version":1,"entity_type":"topics","entity_name":"u"}') == "topics/u"
    for bad in (b"[]", b'{"version":2,"entity_path":5}', b"{"):
        with pytest.raises((ValueError, KeyError)):
            zk_data.decode_config_change(bad)
    children = ["config_change_0000000010", "config_change_0000000002", "lock", "config_change_x"]
    assert new_notifications(children, 2, config_change_sequence) == [(10, "config_change_0000000010")]
    assert [n for _, n in new_notifications(children, -1, config_change_sequence)] == [
        "config_change_0000000002", "config_change_0000000010"]
    assert obsolete({"a": 0, "b": 10 * 60_000}, 16 * 60_000) == ["a"]
    assert parse_entity_path("topics/t") == ("topics", "t")
    assert parse_entity_path("brokers/<default>") == ("brokers", "<default>")
    assert parse_entity_path("brokers/3") == ("brokers", "3")
    for path in ("users/x", "topics/", "topics/a/b", "topics/../x", "brokers/x", "nonsense"):
        assert parse_entity_path(path) is None


def test_dynamic_broker_keys_are_kafkas_all_dynamic_configs():
    """Kafka 3.9's DynamicBrokerConfig.validateConfigs: only known non-dynamic keys are refused;
    listener and SASL keys, and keys Kafka does not know, are accepted; security keys need their
    listener prefix; per-broker keys and passwords are refused at the cluster default."""
    dynamic = DynamicBrokerConfig(dict(BASE))
    accepted = {"sasl.kerberos.min.time.before.relogin": "60000", "listener.name.plain.ssl.keystore.location": "/k",
                "listener.name.plain.max.connections": "10", "made.up.key": "x", "num.io.threads": "16",
                "listener.name.plain.plain.sasl.jaas.config": "secret"}
    dynamic.validate(accepted, per_broker=True)
    dynamic.validate({"made.up.key": "x", "max.connections": "100", "num.io.threads": "4"}, per_broker=False)
    refusals = [
        ({"log.dirs": "/x"}, True, "Cannot update these configs dynamically: Set(log.dirs)"),
        ({"ssl.keystore.location": "/k"}, True, "only per-listener using the listener prefix"),
        ({"sasl.kerberos.min.time.before.relogin": "soon"}, True, "sasl.kerberos.min.time.before.relogin"),
        ({"listener.name.plain.sasl.kerberos.ticket.renew.jitter": "x"}, True, "renew.jitter"),
        ({"sasl.enabled.mechanisms": "PLAIN"}, False, "broker id must be specified"),
        ({"listener.name.plain.ssl.keystore.location": "/k"}, False, "broker id must be specified"),
        ({"num.io.threads": "17"}, True, "double"),
        ({"num.io.threads": "0"}, True, "at least 1"),
    ]
    for props, per_broker, message in refusals:
        with pytest.raises(ConfigException, match=message.replace("(", r"\(").replace(")", r"\)")):
            dynamic.validate(props, per_broker=per_broker)
    stored = {k: v for k, v in accepted.items() if k != "listener.name.plain.ssl.keystore.location"}
    assert dynamic.update(broker=stored) is False  # stored, not applied: nothing this broker acts on
    assert dynamic.dynamic_broker == stored
    assert dynamic.update(broker=accepted) is True  # a listener's key store: applied (test below)
    assert dynamic.dynamic_broker == accepted


def test_a_listeners_key_store_applies_live_per_broker_only(tmp_path):
    """Kafka's listener.name.<l>.ssl.keystore.* (SslConfigs.RECONFIGURABLE_CONFIGS): in the
    broker's own dynamic configs they are in the effective config (the listener rebuilds its TLS
    context from it); for this broker, AlterConfigs refuses stores that do not load."""
    from odradek.common.dynamic_broker_keys import is_live, is_live_per_broker

    key = "listener.name.ssl.ssl.keystore.location"
    assert is_live_per_broker(key) and not is_live(key)
    assert not is_live_per_broker("listener.name.ssl.ssl.client.auth") and not is_live_per_broker("ssl.keystore.location")
    dynamic = DynamicBrokerConfig({**BASE, "listeners": "SSL://127.0.0.1:9093", "ssl.keystore.location": "/old"})
    assert dynamic.update(default={key: "/default"}) is False  # Kafka refuses it there: not applied
    assert dynamic.update(broker={key: "/new"}) is True
    assert dynamic.current.listener_value("SSL", "ssl.keystore.location") == "/new"
    missing = str(tmp_path / "missing.pem")
    dynamic.validate({key: missing}, per_broker=True)  # another broker's: its files are not here
    with pytest.raises(ConfigException, match=r"missing\.pem"):
        dynamic.validate({key: missing}, per_broker=True, own=True)


def test_connection_limits_and_producer_expiration_apply_live():
    """Kafka's DynamicConnectionQuota and ProducerStateManagerConfig keys are in the effective
    config (the listeners and the log manager read it), at either dynamic level."""
    from odradek.broker.server import connection_limits
    from odradek.common.dynamic_broker_keys import LIVE_BROKER_CONFIGS, is_live

    dynamic = DynamicBrokerConfig(dict(BASE))
    assert dynamic.update(default={"max.connections": "50", "producer.id.expiration.ms": "60000"},
                          broker={"max.connections.per.ip": "7"})
    limits = connection_limits(dynamic.current)
    assert (limits.max_connections, limits.max_connections_per_ip) == (50, 7)
    assert dynamic.current.producer_id_expiration_ms == 60000
    dynamic.validate({"max.connections": "10", "max.connections.per.ip": "3"}, per_broker=False)
    assert DYNAMIC_CONFIGS == LIVE_BROKER_CONFIGS and is_live("log.retention.ms") and not is_live("num.partitions")
    # every live key may be set at the cluster-wide default (what the operator sends)
    keys = dynamic_config_module.KAFKA_BROKER_KEYS
    for name in LIVE_BROKER_CONFIGS:
        assert dynamic_config_module.is_reconfigurable(name) and name in keys, name
        assert name not in dynamic_config_module.PER_BROKER_CONFIGS, name

"""The data source's options, with the names, defaults and refusals of Spark's Kafka source and
sink (KafkaSourceProvider), checked before any query runs. Pure: a dict of options in, plain
data or a ValueError with Spark's message out.

Spark hands a Python data source its options with lower-cased keys; Kafka's and librdkafka's
configuration keys are lower case too, so `kafka.*` options pass to the client unchanged.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .offsets import EARLIEST, LATEST, PartitionOffsets, TopicPartition, parse_assign, parse_partition_offsets

ClientConfig = dict[str, Any]
"""A librdkafka configuration as confluent-kafka takes it: strings, numbers, booleans, and the
callbacks (error_cb, on_delivery) the sink adds."""

SUBSCRIBE, SUBSCRIBE_PATTERN, ASSIGN = "subscribe", "subscribepattern", "assign"
STRATEGIES = (SUBSCRIBE, SUBSCRIBE_PATTERN, ASSIGN)

STARTING_OFFSETS, ENDING_OFFSETS = "startingoffsets", "endingoffsets"
STARTING_TIMESTAMP, ENDING_TIMESTAMP = "startingtimestamp", "endingtimestamp"
STARTING_BY_TIMESTAMP, ENDING_BY_TIMESTAMP = "startingoffsetsbytimestamp", "endingoffsetsbytimestamp"
BY_TIMESTAMP_STRATEGY = "startingoffsetsbytimestampstrategy"
FAIL_ON_DATA_LOSS = "failondataloss"
MIN_PARTITIONS = "minpartitions"
MAX_OFFSETS_PER_TRIGGER = "maxoffsetspertrigger"
INCLUDE_HEADERS = "includeheaders"
GROUP_ID_PREFIX = "groupidprefix"
POLL_TIMEOUT_MS = "kafkaconsumer.polltimeoutms"
FETCH_OFFSET_RETRIES = "fetchoffset.numretries"
FETCH_OFFSET_RETRY_INTERVAL_MS = "fetchoffset.retryintervalms"
COMMIT_OFFSETS_TO_GROUP = "commitoffsetstogroup"
TOPIC = "topic"
DELIVERY_GUARANTEE = "deliveryguarantee"
EXACTLY_ONCE, AT_LEAST_ONCE = "exactly-once", "at-least-once"

CUSTOM_GROUP_ID_WARNING = (
    "Kafka option 'kafka.group.id' has been set on this query, it is not recommended to set this "
    "option. This option is unsafe to use since multiple concurrent queries or sources using the "
    "same group id will interfere with each other as they are part of the same consumer group. "
    "Restarted queries may also suffer interference from the previous run having the same group id."
)
AUTO_OFFSET_RESET_REFUSAL = (
    "Kafka option 'auto.offset.reset' is not supported. Instead set the source option "
    "'startingoffsets' to 'earliest' or 'latest' to specify where to start. Structured Streaming "
    "manages which offsets are consumed internally, rather than relying on the kafkaConsumer to do "
    "it. This will ensure that no data is missed when new topics/partitions are dynamically "
    "subscribed. Note that 'startingoffsets' only applies when a new Streaming query is started, "
    "and that resuming will always pick up from where the query left off."
)


# --- where a read starts or ends ----------------------------------------------------------------------


@dataclass(frozen=True)
class OffsetLimit:
    """One end of a read, Spark's KafkaOffsetRangeLimit: "earliest", "latest", specific offsets
    (-2/-1 allowed per partition), one timestamp for every partition, or a timestamp per
    partition. `no_match_latest`: a timestamp with no offset at or after it means latest instead
    of an error (startingOffsetsByTimestampStrategy=latest; always so for ending timestamps)."""

    kind: str  # "earliest" | "latest" | "offsets" | "timestamp" | "timestamps"
    offsets: PartitionOffsets = field(default_factory=dict)
    timestamp: int | None = None
    no_match_latest: bool = False


def offset_limit(options: Mapping[str, str], global_ts_key: str, by_ts_key: str, offsets_key: str,
                 default: str, is_start: bool) -> OffsetLimit:
    """Spark's getKafkaOffsetRangeLimit: a global timestamp wins over per-partition timestamps,
    which win over offsets."""
    strategy = options.get(BY_TIMESTAMP_STRATEGY, "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise ValueError(f"{BY_TIMESTAMP_STRATEGY} must be 'error' or 'latest', got {strategy!r}")
    no_match_latest = strategy == "latest" or not is_start
    if global_ts_key in options:
        given = options[global_ts_key].strip()
        try:
            ts = int(given)
        except ValueError as e:
            raise ValueError(f"Expected a single long value, got {given}") from e
        return OffsetLimit("timestamp", timestamp=ts, no_match_latest=no_match_latest)
    if by_ts_key in options:
        return OffsetLimit("timestamps", offsets=parse_partition_offsets(options[by_ts_key].strip(), by_ts_key),
                           no_match_latest=no_match_latest)
    text = options.get(offsets_key)
    if text is None:
        return OffsetLimit(default)
    text = text.strip()
    if text.lower() in ("earliest", "latest"):
        return OffsetLimit(text.lower())
    return OffsetLimit("offsets", offsets=parse_partition_offsets(text, offsets_key))


# --- reading ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReadOptions:
    strategy: str
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assigned: tuple[TopicPartition, ...] = ()
    starting: OffsetLimit = OffsetLimit("earliest")
    ending: OffsetLimit = OffsetLimit("latest")
    fail_on_data_loss: bool = True
    include_headers: bool = False
    min_partitions: int | None = None
    max_offsets_per_trigger: int | None = None
    poll_timeout_ms: int = 120_000
    fetch_offset_retries: int = 3
    fetch_offset_retry_interval_ms: int = 1000
    commit_offsets_to_group: str | None = None
    kafka_params: ClientConfig = field(default_factory=dict)
    group_id: str = ""
    warnings: tuple[str, ...] = ()

    def client_config(self) -> ClientConfig:
        """The librdkafka configuration for the driver's and executors' clients."""
        return dict(self.kafka_params)

    def consumer_config(self) -> ClientConfig:
        """Executors read exactly what the driver planned: no group membership, no commits, no
        offset reset (Spark sets auto.offset.reset=none; librdkafka's word for it is error)."""
        conf: ClientConfig = dict(self.kafka_params)
        conf.setdefault("group.id", self.group_id)
        conf.update({
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "error",
            "enable.partition.eof": True,
        })
        return conf

    @property
    def read_committed(self) -> bool:
        return bool(self.kafka_params.get("isolation.level", "read_uncommitted") == "read_committed")

    def matches(self, topic: str) -> bool:
        return self.pattern is not None and re.fullmatch(self.pattern, topic) is not None


def _bool(options: Mapping[str, str], key: str, default: bool) -> bool:
    text = options.get(key)
    if text is None:
        return default
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise ValueError(f"{key} must be true or false, got {text!r}")
    return value == "true"


def _int(options: Mapping[str, str], key: str) -> int | None:
    text = options.get(key)
    if text is None:
        return None
    try:
        return int(text.strip())
    except ValueError as e:
        raise ValueError(f"{key} must be an integer, got {text!r}") from e


def _int_or(options: Mapping[str, str], key: str, default: int) -> int:
    """`key` as an integer, `default` only when it is not given (0 is a value)."""
    value = _int(options, key)
    return default if value is None else value


def kafka_params(options: Mapping[str, str]) -> ClientConfig:
    """Every `kafka.*` option without its prefix: the client's own configuration."""
    return {k[len("kafka."):]: v for k, v in options.items() if k.startswith("kafka.")}


def read_options(raw: Mapping[str, str], streaming: bool) -> ReadOptions:
    """Spark's validateStreamOptions/validateBatchOptions and validateGeneralOptions."""
    options = {k.lower(): v for k, v in raw.items()}
    warnings = []
    if streaming:
        if ENDING_OFFSETS in options:
            raise ValueError("ending offset not valid in streaming queries")
        if ENDING_BY_TIMESTAMP in options or ENDING_TIMESTAMP in options:
            raise ValueError("ending timestamp not valid in streaming queries")

    given = [k for k in STRATEGIES if k in options]
    if not given:
        raise ValueError("One of the following options must be specified for Kafka source: "
                         "subscribe, subscribepattern, assign. See the docs for more details.")
    if len(given) > 1:
        raise ValueError("Only one of the following options can be specified for Kafka source: "
                         "subscribe, subscribepattern, assign. See the docs for more details.")
    strategy = given[0]
    value = options[strategy]
    topics: tuple[str, ...] = ()
    pattern = None
    assigned: tuple[TopicPartition, ...] = ()
    if strategy == ASSIGN:
        if not value.strip().startswith("{"):
            raise ValueError(f"No topicpartitions to assign as specified value for option 'assign' is '{value}'")
        assigned = tuple(parse_assign(value))
    elif strategy == SUBSCRIBE:
        topics = tuple(t.strip() for t in value.split(",") if t.strip())
        if not topics:
            raise ValueError(f"No topics to subscribe to as specified value for option 'subscribe' is '{value}'")
    else:
        pattern = value.strip()
        if not pattern:
            raise ValueError(f"Pattern to subscribe is empty as specified value for option 'subscribePattern' is '{value}'")
        try:
            re.compile(pattern)
        except re.error as e:
            raise ValueError(f"subscribePattern {pattern!r} is not a valid pattern: {e}") from e

    min_partitions = _int(options, MIN_PARTITIONS)
    if min_partitions is not None and min_partitions <= 0:
        raise ValueError("minPartitions must be positive")
    max_per_trigger = _int(options, MAX_OFFSETS_PER_TRIGGER)
    if max_per_trigger is not None and max_per_trigger <= 0:
        raise ValueError("maxOffsetsPerTrigger must be positive")

    params = kafka_params(options)
    if "group.id" in params:
        warnings.append(CUSTOM_GROUP_ID_WARNING)
        if GROUP_ID_PREFIX in options:
            warnings.append("Option groupIdPrefix will be ignored as option kafka.group.id has been set.")
    if "auto.offset.reset" in params:
        raise ValueError(AUTO_OFFSET_RESET_REFUSAL)
    if "key.deserializer" in params:
        raise ValueError("Kafka option 'key.deserializer' is not supported as keys are deserialized as byte "
                         "arrays with ByteArrayDeserializer. Use DataFrame operations to explicitly deserialize the keys.")
    if "value.deserializer" in params:
        raise ValueError("Kafka option 'value.deserializer' is not supported as values are deserialized as byte "
                         "arrays with ByteArrayDeserializer. Use DataFrame operations to explicitly deserialize the values.")
    for unsupported in ("enable.auto.commit", "interceptor.classes"):
        if unsupported in params:
            raise ValueError(f"Kafka option '{unsupported}' is not supported")
    if "bootstrap.servers" not in params:
        raise ValueError("Option 'kafka.bootstrap.servers' must be specified for configuring Kafka consumer")
    isolation = params.get("isolation.level", "read_uncommitted")
    if isolation not in ("read_uncommitted", "read_committed"):
        raise ValueError(f"kafka.isolation.level must be read_uncommitted or read_committed, got {isolation!r}")

    if streaming:
        starting = offset_limit(options, STARTING_TIMESTAMP, STARTING_BY_TIMESTAMP, STARTING_OFFSETS, "latest", True)
        ending = OffsetLimit("latest")
    else:
        starting = offset_limit(options, STARTING_TIMESTAMP, STARTING_BY_TIMESTAMP, STARTING_OFFSETS, "earliest", True)
        ending = offset_limit(options, ENDING_TIMESTAMP, ENDING_BY_TIMESTAMP, ENDING_OFFSETS, "latest", False)
        if starting.kind == "latest":
            raise ValueError("starting offset can't be latest for batch queries on Kafka")
        for (t, p), off in starting.offsets.items():
            if starting.kind == "offsets" and off == LATEST:
                raise ValueError(f"startingOffsets for {t}-{p} can't be latest for batch queries on Kafka")
        if ending.kind == "earliest":
            raise ValueError("ending offset can't be earliest for batch queries on Kafka")
        for (t, p), off in ending.offsets.items():
            if ending.kind == "offsets" and off == EARLIEST:
                raise ValueError(f"ending offset for {t}-{p} can't be earliest for batch queries on Kafka")
        _check_limit_pair(starting, ending)
        if max_per_trigger is not None:
            warnings.append("maxOffsetsPerTrigger option ignored in batch queries")

    prefix = options.get(GROUP_ID_PREFIX, "spark-kafka-source" if streaming else "spark-kafka-relation")
    return ReadOptions(
        strategy=strategy, topics=topics, pattern=pattern, assigned=assigned,
        starting=starting, ending=ending,
        fail_on_data_loss=_bool(options, FAIL_ON_DATA_LOSS, True),
        include_headers=_bool(options, INCLUDE_HEADERS, False),
        min_partitions=min_partitions,
        max_offsets_per_trigger=max_per_trigger,
        poll_timeout_ms=_int(options, POLL_TIMEOUT_MS) or 120_000,
        fetch_offset_retries=max(1, _int(options, FETCH_OFFSET_RETRIES) or 3),
        fetch_offset_retry_interval_ms=max(0, _int_or(options, FETCH_OFFSET_RETRY_INTERVAL_MS, 1000)),  # 0: no wait
        commit_offsets_to_group=options.get(COMMIT_OFFSETS_TO_GROUP) or None,
        kafka_params=params,
        group_id=f"{prefix}-{uuid.uuid4()}-executor",
        warnings=tuple(warnings),
    )


def _check_limit_pair(start: OffsetLimit, end: OffsetLimit) -> None:
    """Spark's checkOffsetLimitValidity: the same partitions on both sides, start not after end."""
    if start.kind == end.kind and start.kind in ("offsets", "timestamps"):
        if set(start.offsets) != set(end.offsets):
            raise ValueError(
                "The specified start and end offsets have different topic partitions: "
                f"start {sorted(start.offsets)}, end {sorted(end.offsets)}")
        for tp, s in start.offsets.items():
            e = end.offsets[tp]
            if s > e and s >= 0 and e >= 0:
                what = "offset" if start.kind == "offsets" else "timestamp"
                raise ValueError(f"The specified starting {what} ({s}) is greater than the ending {what} ({e}) "
                                 f"for topic partition {tp[0]}-{tp[1]}")


# --- writing ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WriteOptions:
    topic: str | None
    kafka_params: ClientConfig
    delivery_guarantee: str | None  # None: exactly-once when the cluster has transactions

    def producer_config(self) -> ClientConfig:
        # delivery reports of failed records only: the sink counts failures, and a Python callback
        # for each of a task's records would cost more than producing it. Keys go where Kafka's Java
        # producer (Spark's Kafka sink) puts them, murmur2(key) % partitions; librdkafka's own
        # default hashes with CRC32 and would scatter a key's records away from other writers'.
        conf: ClientConfig = {"enable.idempotence": True, "linger.ms": 5, "delivery.report.only.error": True,
                              "partitioner": "murmur2_random"}
        conf.update(self.kafka_params)
        return conf


def write_options(raw: Mapping[str, str]) -> WriteOptions:
    options = {k.lower(): v for k, v in raw.items()}
    params = kafka_params(options)
    if "key.serializer" in params:
        raise ValueError("Kafka option 'key.serializer' is not supported as keys are serialized with ByteArraySerializer.")
    if "value.serializer" in params:
        raise ValueError("Kafka option 'value.serializer' is not supported as value are serialized with ByteArraySerializer.")
    if "bootstrap.servers" not in params:
        raise ValueError("Option 'kafka.bootstrap.servers' must be specified for configuring Kafka producer")
    if "transactional.id" in params:
        raise ValueError("Kafka option 'transactional.id' is not supported: with deliveryGuarantee=exactly-once "
                         "each write task gets a transactional id of its own")
    guarantee = options.get(DELIVERY_GUARANTEE)
    if guarantee is not None:
        guarantee = guarantee.strip().lower()
        if guarantee not in (EXACTLY_ONCE, AT_LEAST_ONCE):
            raise ValueError(f"deliveryGuarantee must be {EXACTLY_ONCE} or {AT_LEAST_ONCE}, got {options[DELIVERY_GUARANTEE]!r}")
    topic = options.get(TOPIC)
    return WriteOptions(topic=topic.strip() if topic is not None else None, kafka_params=params,
                        delivery_guarantee=guarantee)

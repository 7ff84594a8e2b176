"""Configuration with Kafka's keys: pydantic models whose aliases are the dotted Kafka names.

A process reads a Java-style properties file and `--override key=value` pairs (as
`kafka-server-start.sh` does); unknown keys are kept for the future but do not fail start-up.
"""

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

DAY_MS = 24 * 3600 * 1000


class _KafkaKeys(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="ignore", frozen=True)

    @classmethod
    def from_properties(cls, props: dict[str, str]):
        return cls.model_validate(props)

    def kafka_items(self) -> dict[str, object]:
        """This configuration under Kafka's key names (for DescribeConfigs)."""
        return self.model_dump(by_alias=True)


class ZkClientConfig(_KafkaKeys):
    zookeeper_connect: str = Field(alias="zookeeper.connect")
    """host:port[,host:port]/chroot; the chroot is applied by kazoo."""
    zookeeper_session_timeout_ms: int = Field(18000, alias="zookeeper.session.timeout.ms")
    zookeeper_connection_timeout_ms: int = Field(18000, alias="zookeeper.connection.timeout.ms")


class BrokerConfig(ZkClientConfig):
    broker_id: int = Field(alias="broker.id")
    broker_rack: str | None = Field(None, alias="broker.rack")
    log_dirs: str = Field("/tmp/kafka-logs", alias="log.dirs")
    listeners: str = Field("PLAINTEXT://127.0.0.1:9092", alias="listeners")
    advertised_listeners: str | None = Field(None, alias="advertised.listeners")

    num_partitions: int = Field(1, alias="num.partitions")
    default_replication_factor: int = Field(1, alias="default.replication.factor")
    min_insync_replicas: int = Field(1, alias="min.insync.replicas")
    auto_create_topics_enable: bool = Field(True, alias="auto.create.topics.enable")
    delete_topic_enable: bool = Field(True, alias="delete.topic.enable")

    log_segment_bytes: int = Field(1 << 30, alias="log.segment.bytes")
    log_roll_ms: int = Field(7 * DAY_MS, alias="log.roll.ms")
    log_retention_ms: int = Field(7 * DAY_MS, alias="log.retention.ms")
    log_retention_bytes: int = Field(-1, alias="log.retention.bytes")
    log_retention_check_interval_ms: int = Field(300_000, alias="log.retention.check.interval.ms")
    producer_id_expiration_ms: int = Field(86_400_000, alias="producer.id.expiration.ms")
    """Idle producer ids are forgotten after this long (KIP-854; broker-wide, no topic override in Kafka)."""
    producer_id_expiration_check_interval_ms: int = Field(600_000, alias="producer.id.expiration.check.interval.ms")
    log_index_interval_bytes: int = Field(4096, alias="log.index.interval.bytes")
    log_index_size_max_bytes: int = Field(10 * 1024 * 1024, alias="log.index.size.max.bytes")
    log_flush_interval_messages: int = Field(2**63 - 1, alias="log.flush.interval.messages")
    log_flush_interval_ms: int | None = Field(None, alias="log.flush.interval.ms")
    log_flush_scheduler_interval_ms: int = Field(2**63 - 1, alias="log.flush.scheduler.interval.ms")
    message_max_bytes: int = Field(1048588, alias="message.max.bytes")
    socket_request_max_bytes: int = Field(104857600, alias="socket.request.max.bytes")

    replica_lag_time_max_ms: int = Field(30000, alias="replica.lag.time.max.ms")
    replica_fetch_wait_max_ms: int = Field(500, alias="replica.fetch.wait.max.ms")
    replica_fetch_min_bytes: int = Field(1, alias="replica.fetch.min.bytes")
    replica_fetch_max_bytes: int = Field(1048576, alias="replica.fetch.max.bytes")
    replica_fetch_response_max_bytes: int = Field(10485760, alias="replica.fetch.response.max.bytes")
    replica_fetch_backoff_ms: int = Field(1000, alias="replica.fetch.backoff.ms")
    replica_socket_timeout_ms: int = Field(30000, alias="replica.socket.timeout.ms")
    replica_high_watermark_checkpoint_interval_ms: int = Field(
        5000, alias="replica.high.watermark.checkpoint.interval.ms"
    )
    unclean_leader_election_enable: bool = Field(False, alias="unclean.leader.election.enable")
    max_incremental_fetch_session_cache_slots: int = Field(1000, alias="max.incremental.fetch.session.cache.slots")
    """Fetch sessions (KIP-227) the broker keeps; a full cache evicts by Kafka's rules or refuses."""
    min_incremental_fetch_session_eviction_ms: int = Field(120_000, alias="min.incremental.fetch.session.eviction.ms")
    """A fetch session unused (or, against a newcomer, existing) this long may be evicted."""
    request_timeout_ms: int = Field(30000, alias="request.timeout.ms")
    controlled_shutdown_enable: bool = Field(True, alias="controlled.shutdown.enable")
    controlled_shutdown_max_retries: int = Field(3, alias="controlled.shutdown.max.retries")
    controlled_shutdown_retry_backoff_ms: int = Field(5000, alias="controlled.shutdown.retry.backoff.ms")
    controller_socket_timeout_ms: int = Field(30000, alias="controller.socket.timeout.ms")
    """Bound of one request to the controller (AlterPartition, ControlledShutdown)."""

    offsets_topic_num_partitions: int = Field(50, alias="offsets.topic.num.partitions")
    offsets_topic_replication_factor: int = Field(3, alias="offsets.topic.replication.factor")
    offsets_commit_timeout_ms: int = Field(5000, alias="offsets.commit.timeout.ms")
    offsets_retention_minutes: int = Field(7 * 24 * 60, alias="offsets.retention.minutes")
    offsets_retention_check_interval_ms: int = Field(600_000, alias="offsets.retention.check.interval.ms")
    offset_metadata_max_bytes: int = Field(4096, alias="offset.metadata.max.bytes")
    group_min_session_timeout_ms: int = Field(6000, alias="group.min.session.timeout.ms")
    group_max_session_timeout_ms: int = Field(1_800_000, alias="group.max.session.timeout.ms")
    group_initial_rebalance_delay_ms: int = Field(3000, alias="group.initial.rebalance.delay.ms")
    group_max_size: int = Field(2147483647, alias="group.max.size")


CONTROLLER_ID_BASE = 1000
"""Controller ids start here (`odradek dev` numbers them 1000+j, the operator derives them from pod
names above it), apart from broker ids, which are StatefulSet ordinals and small."""


class ControllerConfig(ZkClientConfig):
    controller_id: int = Field(alias="controller.id")
    listeners: str = Field("PLAINTEXT://127.0.0.1:9190", alias="listeners")
    """Where brokers send AlterPartition and ControlledShutdown; not 9093, which `odradek dev` brokers use."""
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


def load_properties(path: str | Path | None, overrides: list[str] = ()) -> dict[str, str]:
    props = parse_properties(Path(path).read_text()) if path else {}
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--override wants key=value, got {item!r}")
        props[key.strip()] = value.strip()
    return props


def parse_listeners(value: str) -> list[tuple[str, str, int]]:
    """`PLAINTEXT://host:port,...` → [(listener, host, port)]."""
    out = []
    for item in filter(None, (v.strip() for v in value.split(","))):
        name, rest = item.split("://", 1)
        host, port = rest.rsplit(":", 1)
        out.append((name, host.strip("[]"), int(port)))
    return out

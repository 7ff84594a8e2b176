"""The ZooKeeper-era inter-broker messages kio lacks, in kio's dataclass style.

LeaderAndIsr (4), StopReplica (5), UpdateMetadata (6) and ControlledShutdown (7) at the versions
Kafka 2.x used (LeaderAndIsr v2, StopReplica v1, UpdateMetadata v5, ControlledShutdown v2): all
non-flexible, so they travel with request header v1 and response header v0. Only Odradek's own
controller and brokers speak them, so one version of each is enough.
"""

from dataclasses import dataclass, field
from typing import ClassVar

from kio.schema.errors import ErrorCode
from kio.schema.request_header.v1.header import RequestHeader
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v0.header import ResponseHeader
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.static.constants import EntityType
from kio.static.primitive import i8, i16, i32, i64

# Each field's kio wire type, as `field(metadata=...)` inline so mypy's dataclass plugin sees
# the fields as required (a helper returning `field(...)` would read to it as a default value).
_INT32 = {"kafka_type": "int32"}
_INT64 = {"kafka_type": "int64"}
_STRING = {"kafka_type": "string"}
_ERRORS = {"kafka_type": "error_code"}


class _Message:
    __flexible__: ClassVar[bool] = False
    __header_schema__: ClassVar[type] = RequestHeader


# --- LeaderAndIsr v2 -----------------------------------------------------------------------------


class _LeaderAndIsr(_Message):
    __api_key__: ClassVar[i16] = i16(4)
    __version__: ClassVar[i16] = i16(2)


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaderAndIsrPartitionState(_LeaderAndIsr):
    __type__: ClassVar[EntityType] = EntityType.nested
    partition_index: i32 = field(metadata=_INT32)
    controller_epoch: i32 = field(metadata=_INT32)
    leader: i32 = field(metadata=_INT32)
    leader_epoch: i32 = field(metadata=_INT32)
    isr: tuple[i32, ...] = field(metadata=_INT32)
    zk_version: i32 = field(metadata=_INT32)
    """The version of the partition state znode: the partition epoch AlterPartition compares."""
    replicas: tuple[i32, ...] = field(metadata=_INT32)
    is_new: bool = field(metadata={"kafka_type": "bool"}, default=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaderAndIsrTopicState(_LeaderAndIsr):
    __type__: ClassVar[EntityType] = EntityType.nested
    topic_name: str = field(metadata=_STRING)
    partition_states: tuple[LeaderAndIsrPartitionState, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaderAndIsrLiveLeader(_LeaderAndIsr):
    __type__: ClassVar[EntityType] = EntityType.nested
    broker_id: i32 = field(metadata=_INT32)
    host_name: str = field(metadata=_STRING)
    port: i32 = field(metadata=_INT32)


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaderAndIsrRequest(_LeaderAndIsr):
    __type__: ClassVar[EntityType] = EntityType.request
    controller_id: i32 = field(metadata=_INT32)
    controller_epoch: i32 = field(metadata=_INT32)
    broker_epoch: i64 = field(metadata=_INT64)
    topic_states: tuple[LeaderAndIsrTopicState, ...]
    live_leaders: tuple[LeaderAndIsrLiveLeader, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaderAndIsrPartitionError(_LeaderAndIsr):
    __type__: ClassVar[EntityType] = EntityType.nested
    __header_schema__: ClassVar[type] = ResponseHeader
    topic_name: str = field(metadata=_STRING)
    partition_index: i32 = field(metadata=_INT32)
    error_code: ErrorCode = field(metadata=_ERRORS)


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaderAndIsrResponse(_LeaderAndIsr):
    __type__: ClassVar[EntityType] = EntityType.response
    __header_schema__: ClassVar[type] = ResponseHeader
    error_code: ErrorCode = field(metadata=_ERRORS)
    partition_errors: tuple[LeaderAndIsrPartitionError, ...]


# --- StopReplica v1 ------------------------------------------------------------------------------


class _StopReplica(_Message):
    __api_key__: ClassVar[i16] = i16(5)
    __version__: ClassVar[i16] = i16(1)


@dataclass(frozen=True, slots=True, kw_only=True)
class StopReplicaTopic(_StopReplica):
    __type__: ClassVar[EntityType] = EntityType.nested
    name: str = field(metadata=_STRING)
    partition_indexes: tuple[i32, ...] = field(metadata=_INT32)


@dataclass(frozen=True, slots=True, kw_only=True)
class StopReplicaRequest(_StopReplica):
    __type__: ClassVar[EntityType] = EntityType.request
    controller_id: i32 = field(metadata=_INT32)
    controller_epoch: i32 = field(metadata=_INT32)
    broker_epoch: i64 = field(metadata=_INT64)
    delete_partitions: bool = field(metadata={"kafka_type": "bool"})
    topics: tuple[StopReplicaTopic, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class StopReplicaPartitionError(_StopReplica):
    __type__: ClassVar[EntityType] = EntityType.nested
    __header_schema__: ClassVar[type] = ResponseHeader
    topic_name: str = field(metadata=_STRING)
    partition_index: i32 = field(metadata=_INT32)
    error_code: ErrorCode = field(metadata=_ERRORS)


@dataclass(frozen=True, slots=True, kw_only=True)
class StopReplicaResponse(_StopReplica):
    __type__: ClassVar[EntityType] = EntityType.response
    __header_schema__: ClassVar[type] = ResponseHeader
    error_code: ErrorCode = field(metadata=_ERRORS)
    partition_errors: tuple[StopReplicaPartitionError, ...]


# --- UpdateMetadata v5 ---------------------------------------------------------------------------


class _UpdateMetadata(_Message):
    __api_key__: ClassVar[i16] = i16(6)
    __version__: ClassVar[i16] = i16(5)


LEADER_DURING_DELETE = -2
"""A partition state with this leader tells brokers the topic is being deleted (Kafka's marker)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class UpdateMetadataPartitionState(_UpdateMetadata):
    __type__: ClassVar[EntityType] = EntityType.nested
    partition_index: i32 = field(metadata=_INT32)
    controller_epoch: i32 = field(metadata=_INT32)
    leader: i32 = field(metadata=_INT32)
    leader_epoch: i32 = field(metadata=_INT32)
    isr: tuple[i32, ...] = field(metadata=_INT32)
    zk_version: i32 = field(metadata=_INT32)
    replicas: tuple[i32, ...] = field(metadata=_INT32)
    offline_replicas: tuple[i32, ...] = field(metadata=_INT32)


@dataclass(frozen=True, slots=True, kw_only=True)
class UpdateMetadataTopicState(_UpdateMetadata):
    __type__: ClassVar[EntityType] = EntityType.nested
    topic_name: str = field(metadata=_STRING)
    partition_states: tuple[UpdateMetadataPartitionState, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class UpdateMetadataEndpoint(_UpdateMetadata):
    __type__: ClassVar[EntityType] = EntityType.nested
    port: i32 = field(metadata=_INT32)
    host: str = field(metadata=_STRING)
    listener: str = field(metadata=_STRING)
    security_protocol: i16 = field(metadata={"kafka_type": "int16"})


@dataclass(frozen=True, slots=True, kw_only=True)
class UpdateMetadataBroker(_UpdateMetadata):
    __type__: ClassVar[EntityType] = EntityType.nested
    id: i32 = field(metadata=_INT32)
    endpoints: tuple[UpdateMetadataEndpoint, ...]
    rack: str | None = field(metadata=_STRING)


@dataclass(frozen=True, slots=True, kw_only=True)
class UpdateMetadataRequest(_UpdateMetadata):
    """Partition states listed replace the broker's; live_brokers always replaces the whole set."""

    __type__: ClassVar[EntityType] = EntityType.request
    controller_id: i32 = field(metadata=_INT32)
    controller_epoch: i32 = field(metadata=_INT32)
    broker_epoch: i64 = field(metadata=_INT64)
    topic_states: tuple[UpdateMetadataTopicState, ...]
    live_brokers: tuple[UpdateMetadataBroker, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class UpdateMetadataResponse(_UpdateMetadata):
    __type__: ClassVar[EntityType] = EntityType.response
    __header_schema__: ClassVar[type] = ResponseHeader
    error_code: ErrorCode = field(metadata=_ERRORS)


# --- ControlledShutdown v2 -----------------------------------------------------------------------


class _ControlledShutdown(_Message):
    __api_key__: ClassVar[i16] = i16(7)
    __version__: ClassVar[i16] = i16(2)


@dataclass(frozen=True, slots=True, kw_only=True)
class ControlledShutdownRequest(_ControlledShutdown):
    __type__: ClassVar[EntityType] = EntityType.request
    broker_id: i32 = field(metadata=_INT32)
    broker_epoch: i64 = field(metadata=_INT64)


@dataclass(frozen=True, slots=True, kw_only=True)
class RemainingPartition(_ControlledShutdown):
    __type__: ClassVar[EntityType] = EntityType.nested
    __header_schema__: ClassVar[type] = ResponseHeader
    topic_name: str = field(metadata=_STRING)
    partition_index: i32 = field(metadata=_INT32)


@dataclass(frozen=True, slots=True, kw_only=True)
class ControlledShutdownResponse(_ControlledShutdown):
    __type__: ClassVar[EntityType] = EntityType.response
    __header_schema__: ClassVar[type] = ResponseHeader
    error_code: ErrorCode = field(metadata=_ERRORS)
    remaining_partitions: tuple[RemainingPartition, ...]


# --- AlterPartition v1 (Kafka 3.2's; kio has only the topic-id versions 2-3) -----------------------
# Flexible (compact encodings, tagged fields): request header v2, response header v1.


class _AlterPartition(_Message):
    __api_key__: ClassVar[i16] = i16(56)
    __version__: ClassVar[i16] = i16(1)
    __flexible__: ClassVar[bool] = True
    __header_schema__: ClassVar[type] = RequestHeaderV2


@dataclass(frozen=True, slots=True, kw_only=True)
class AlterPartitionRequestPartition(_AlterPartition):
    __type__: ClassVar[EntityType] = EntityType.nested
    partition_index: i32 = field(metadata=_INT32)
    leader_epoch: i32 = field(metadata=_INT32)
    new_isr: tuple[i32, ...] = field(metadata=_INT32)
    leader_recovery_state: i8 = field(metadata={"kafka_type": "int8"}, default=i8(0))
    partition_epoch: i32 = field(metadata=_INT32)
    """The state znode version the leader last saw (LeaderAndIsr's zk_version)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AlterPartitionRequestTopic(_AlterPartition):
    __type__: ClassVar[EntityType] = EntityType.nested
    topic_name: str = field(metadata=_STRING)
    partitions: tuple[AlterPartitionRequestPartition, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class AlterPartitionRequest(_AlterPartition):
    __type__: ClassVar[EntityType] = EntityType.request
    broker_id: i32 = field(metadata=_INT32)
    broker_epoch: i64 = field(metadata=_INT64)
    topics: tuple[AlterPartitionRequestTopic, ...]


class _AlterPartitionResponse(_AlterPartition):
    __header_schema__: ClassVar[type] = ResponseHeaderV1


@dataclass(frozen=True, slots=True, kw_only=True)
class AlterPartitionResponsePartition(_AlterPartitionResponse):
    __type__: ClassVar[EntityType] = EntityType.nested
    partition_index: i32 = field(metadata=_INT32)
    error_code: ErrorCode = field(metadata=_ERRORS)
    leader_id: i32 = field(metadata=_INT32)
    leader_epoch: i32 = field(metadata=_INT32)
    isr: tuple[i32, ...] = field(metadata=_INT32)
    leader_recovery_state: i8 = field(metadata={"kafka_type": "int8"}, default=i8(0))
    partition_epoch: i32 = field(metadata=_INT32)


@dataclass(frozen=True, slots=True, kw_only=True)
class AlterPartitionResponseTopic(_AlterPartitionResponse):
    __type__: ClassVar[EntityType] = EntityType.nested
    topic_name: str = field(metadata=_STRING)
    partitions: tuple[AlterPartitionResponsePartition, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class AlterPartitionResponse(_AlterPartitionResponse):
    __type__: ClassVar[EntityType] = EntityType.response
    throttle_time_ms: i32 = field(metadata=_INT32)
    error_code: ErrorCode = field(metadata=_ERRORS)
    topics: tuple[AlterPartitionResponseTopic, ...]


INTER_BROKER_REQUESTS: dict[int, type] = {
    4: LeaderAndIsrRequest,
    5: StopReplicaRequest,
    6: UpdateMetadataRequest,
    7: ControlledShutdownRequest,
    56: AlterPartitionRequest,
}
"""API key → the one request class Odradek speaks for it."""

INTER_BROKER_RESPONSES: dict[int, type] = {
    4: LeaderAndIsrResponse,
    5: StopReplicaResponse,
    6: UpdateMetadataResponse,
    7: ControlledShutdownResponse,
    56: AlterPartitionResponse,
}

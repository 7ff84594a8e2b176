"""AlterConfigs and IncrementalAlterConfigs as plain data (Kafka's ConfigAdminManager and the
alter part of ZkAdminManager): request checks, the incremental operations, validation.

AlterConfigs replaces a resource's whole set of dynamic configs; IncrementalAlterConfigs changes
keys one by one: SET, DELETE, APPEND and SUBTRACT (the last two for list configs only). Errors
are Kafka's, per resource: INVALID_REQUEST for a resource named twice (both get it), a key named
twice, a null value, an unknown operation or resource type, or a broker id other than this
broker's; INVALID_CONFIG for an unknown key or an invalid value (the message names both).
"""

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from odradek.common.config import BrokerConfig
from odradek.common.config_def import ConfigException, ConfigType

from .admin_manager import ApiError
from .dynamic_config import KAFKA_BROKER_KEYS, DynamicBrokerConfig
from .log.config import LogConfig

# ConfigResource.Type
TOPIC, BROKER, BROKER_LOGGER = 2, 4, 8
RESOURCE_NAMES = {TOPIC: "TOPIC", BROKER: "BROKER", BROKER_LOGGER: "BROKER_LOGGER"}
# AlterConfigOp.OpType
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
MAX_CONFIG_BYTES = 512 * 1024
"""Largest encoded set of configs one resource may have: a znode holds at most 1 MiB
(jute.maxbuffer), and no real config comes near this."""


@dataclass(frozen=True)
class ConfigOp:
    name: str
    op: int
    value: str | None


@dataclass(frozen=True)
class ResourceChange:
    """One resource of an (Incremental)AlterConfigs request; `ops` are all SET for AlterConfigs."""

    type: int
    name: str
    ops: tuple[ConfigOp, ...]

    def describe(self) -> str:
        return f"ConfigResource(type={RESOURCE_NAMES.get(self.type, self.type)}, name='{self.name}')"


def preprocess(changes: Sequence[ResourceChange], broker_id: int, incremental: bool) -> list[ApiError | None]:
    """The request-level checks of each resource, in request order (None: passed)."""
    seen: dict[tuple[int, str], int] = {}
    errors: list[ApiError | None] = [None] * len(changes)
    for i, c in enumerate(changes):
        first = seen.setdefault((c.type, c.name), i)
        if first != i:
            for j in (first, i):
                errors[j] = ApiError(ErrorCode.invalid_request, "Each resource must appear at most once.")
    for i, c in enumerate(changes):
        if errors[i] is None:
            errors[i] = _check_resource(c, broker_id, incremental)
    return errors


def _check_resource(c: ResourceChange, broker_id: int, incremental: bool) -> ApiError | None:
    names = [op.name for op in c.ops]
    if len(set(names)) != len(names):
        return ApiError(ErrorCode.invalid_request, "Error due to duplicate config keys")
    unknown_ops = sorted({op.op for op in c.ops if op.op not in (SET, DELETE, APPEND, SUBTRACT)})
    if unknown_ops:
        return ApiError(ErrorCode.invalid_request, f"Unknown operations type {unknown_ops[0]}")
    nulls = [op.name for op in c.ops if op.value is None and (op.op != DELETE or not incremental)]
    if nulls:
        return ApiError(ErrorCode.invalid_request, "Null value not supported for : " + ", ".join(nulls))
    if c.type == TOPIC:
        if not c.name:
            return ApiError(ErrorCode.invalid_request, "Default topic resources are not allowed.")
        return None
    if c.type == BROKER:
        return None if not c.name else _check_broker_id(c.name, broker_id)
    if c.type == BROKER_LOGGER and not incremental:
        return ApiError(ErrorCode.invalid_request,
                        "AlterConfigs is deprecated and does not support the resource type BROKER_LOGGER")
    return ApiError(ErrorCode.invalid_request, f"Unknown resource type {c.type}")


def _check_broker_id(name: str, broker_id: int) -> ApiError | None:
    try:
        node = int(name)
    except ValueError:
        return ApiError(ErrorCode.invalid_request, f"Node id must be an integer, but it is: {name}")
    if node != broker_id:
        return ApiError(ErrorCode.invalid_request, f"Unexpected broker id, expected {broker_id}, but received {name}")
    return None


# --- the new set of configs -------------------------------------------------------------------------


def list_type(key: str, resource_type: int) -> bool:
    """Whether `key` is a LIST config of the resource type; ApiError INVALID_CONFIG if unknown."""
    if resource_type == TOPIC:
        topic_key = LogConfig.key(key)
        if topic_key is None:
            raise ApiError(ErrorCode.invalid_config, f"Unknown topic config name: {key}")
        return topic_key.key.type == ConfigType.LIST
    broker_key = KAFKA_BROKER_KEYS.get(key)
    if broker_key is None:
        raise ApiError(ErrorCode.invalid_config, f"Unknown broker config name: {key}")
    return broker_key.type == ConfigType.LIST


def _default_list(key: str, resource_type: int) -> list[str]:
    topic_key = LogConfig.key(key)
    definition = topic_key.key if resource_type == TOPIC and topic_key else KAFKA_BROKER_KEYS[key]
    return [str(v) for v in definition.default or []]


def apply_ops(current: Mapping[str, str], ops: Sequence[ConfigOp], resource_type: int) -> dict[str, str]:
    """Kafka's prepareIncrementalConfigs: the resource's configs after `ops`. APPEND and SUBTRACT
    start from the current value, else the default, and only apply to list configs."""
    props = dict(current)
    for op in ops:
        value = op.value or ""  # only DELETE may have none (preprocess)
        if op.op == SET:
            props[op.name] = value
        elif op.op == DELETE:
            props.pop(op.name, None)
        else:
            if not list_type(op.name, resource_type):
                verb = "append" if op.op == APPEND else "subtract"
                raise ApiError(ErrorCode.invalid_request, f"Config value {verb} is not allowed for config key: {op.name}")
            current_value = props.get(op.name)
            old = current_value.split(",") if current_value is not None else _default_list(op.name, resource_type)
            values = value.split(",")
            new = old + values if op.op == APPEND else [v for v in old if v not in values]
            props[op.name] = ",".join(new)
    return props


def replace_all(ops: Sequence[ConfigOp]) -> dict[str, str]:
    """AlterConfigs: the request's configs are the resource's whole new set."""
    return {op.name: op.value or "" for op in ops}  # preprocess refused null values


def validate(change: ResourceChange, props: Mapping[str, str], broker_config: BrokerConfig,
             dynamic: DynamicBrokerConfig) -> None:
    """ApiError INVALID_CONFIG unless `props` is a valid set of dynamic configs for the resource.

    Topics: every key a topic config, every value valid (LogConfig.validate_overrides, defaults from
    `broker_config`). Brokers: as the dynamic broker config accepts them (`dynamic`)."""
    try:
        if change.type == TOPIC:
            LogConfig.validate_overrides(dict(props), broker_config)
        else:
            dynamic.validate(props, per_broker=bool(change.name), own=change.name == str(dynamic.broker_id))
    except ConfigException as e:
        raise ApiError(ErrorCode.invalid_config,
                       f"Invalid config value for resource {change.describe()}: {e}") from None
    size = len(json.dumps(dict(props)))
    if size > MAX_CONFIG_BYTES:
        raise ApiError(ErrorCode.invalid_config,
                       f"The configs of {change.describe()} would take {size} bytes, more than {MAX_CONFIG_BYTES}")

"""Message versions Kafka 3.9 serves that kio (Kafka 4.x schemas) lacks, derived from kio's nearest.

Kafka 4 dropped the oldest versions of many APIs (KIP-896); Kafka 3.9 still serves them. Each one
here differs from a version kio has only by fields it lacks (or, rarely, a field of its own), so
its classes are kio's with those fields removed or added, built once as dataclasses kio's reader,
writer and message_bounds accept. A `translated` version is handled as its base version: the
request is upgraded (missing fields take their defaults) before the handler sees it, and the
answer downgraded (fields the old version lacks dropped, `computed` ones derived), so handlers
need not know it; the others (ListOffsets v0) have a handler of their own.
"""

from __future__ import annotations

import dataclasses
import sys
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.static.primitive import i16, i32, i64

from odradek.common.api_key import ApiKey


@dataclass(frozen=True)
class Added:
    """A field the old version has and its base lacks: inserted after `after` in class `owner`."""

    owner: str
    after: str
    name: str
    type: Any
    kafka_type: str
    default: Any


@dataclass(frozen=True)
class LegacyVersion:
    api_key: int
    version: int
    base: int
    """The kio version it is derived from."""
    request_drop: frozenset[str] = frozenset()
    """`Class.field` names the old request lacks."""
    response_drop: frozenset[str] = frozenset()
    request_add: tuple[Added, ...] = ()
    response_add: tuple[Added, ...] = ()
    flexible: bool | None = None
    """Set when the old version is not flexible and its base is."""
    translated: bool = True
    request_defaults: Mapping[str, Any] = field(default_factory=dict)
    """`Class.field` → value for base fields without a default of their own (on upgrade)."""
    computed: Mapping[str, Callable[[Any], Any]] = field(default_factory=dict)
    """`Class.field` → f(the base-version object) for added response fields (on downgrade)."""


def _drop(*names: str) -> frozenset[str]:
    return frozenset(names)


def _is_default(config: Any) -> bool:
    return int(config.config_source) == 5  # DescribeConfigsResponse.ConfigSource.DEFAULT_CONFIG


LEGACY: dict[tuple[int, int], LegacyVersion] = {
    (v.api_key, v.version): v for v in (
        LegacyVersion(ApiKey.LIST_OFFSETS, 0, 1, translated=False,
                      request_add=(Added("ListOffsetsPartition", "timestamp", "max_num_offsets", i32, "int32", i32(1)),),
                      response_drop=_drop("ListOffsetsPartitionResponse.timestamp", "ListOffsetsPartitionResponse.offset"),
                      response_add=(Added("ListOffsetsPartitionResponse", "error_code", "old_style_offsets",
                                          tuple[i64, ...], "int64", ()),)),
        *(LegacyVersion(ApiKey.FETCH, v, 4, translated=False,
                        request_drop=_drop("FetchRequest.isolation_level", *(("FetchRequest.max_bytes",) if v < 3 else ())),
                        response_drop=_drop("PartitionData.last_stable_offset", "PartitionData.aborted_transactions",
                                            *(("FetchResponse.throttle_time",) if v == 0 else ())))
          for v in range(4)),
        LegacyVersion(ApiKey.CREATE_TOPICS, 0, 2, request_drop=_drop("CreateTopicsRequest.validate_only"),
                      response_drop=_drop("CreateTopicsResponse.throttle_time", "CreatableTopicResult.error_message"),
                      request_defaults={"CreateTopicsRequest.validate_only": False}),
        LegacyVersion(ApiKey.CREATE_TOPICS, 1, 2, response_drop=_drop("CreateTopicsResponse.throttle_time")),
        LegacyVersion(ApiKey.DELETE_TOPICS, 0, 1, response_drop=_drop("DeleteTopicsResponse.throttle_time")),
        LegacyVersion(ApiKey.OFFSET_FOR_LEADER_EPOCH, 0, 2,
                      request_drop=_drop("OffsetForLeaderPartition.current_leader_epoch"),
                      response_drop=_drop("OffsetForLeaderEpochResponse.throttle_time", "EpochEndOffset.leader_epoch"),
                      request_defaults={"OffsetForLeaderPartition.current_leader_epoch": i32(-1)}),
        LegacyVersion(ApiKey.OFFSET_FOR_LEADER_EPOCH, 1, 2,
                      request_drop=_drop("OffsetForLeaderPartition.current_leader_epoch"),
                      response_drop=_drop("OffsetForLeaderEpochResponse.throttle_time"),
                      request_defaults={"OffsetForLeaderPartition.current_leader_epoch": i32(-1)}),
        LegacyVersion(ApiKey.DESCRIBE_CONFIGS, 0, 1, request_drop=_drop("DescribeConfigsRequest.include_synonyms"),
                      response_drop=_drop("DescribeConfigsResourceResult.config_source",
                                          "DescribeConfigsResourceResult.synonyms"),
                      response_add=(Added("DescribeConfigsResourceResult", "read_only", "is_default", bool, "bool",
                                          False),),
                      request_defaults={"DescribeConfigsRequest.include_synonyms": False},
                      computed={"DescribeConfigsResourceResult.is_default": _is_default}),
        # Offsets kept in ZooKeeper (Kafka's version 0): handled by GroupApis itself
        LegacyVersion(ApiKey.OFFSET_COMMIT, 0, 2, translated=False, request_drop=_drop(
            "OffsetCommitRequest.generation_id_or_member_epoch", "OffsetCommitRequest.member_id",
            "OffsetCommitRequest.retention_time")),
        LegacyVersion(ApiKey.OFFSET_FETCH, 0, 1, translated=False),
        LegacyVersion(ApiKey.DESCRIBE_LOG_DIRS, 0, 1),
        *(LegacyVersion(api, 0, 1) for api in (ApiKey.CREATE_DELEGATION_TOKEN, ApiKey.RENEW_DELEGATION_TOKEN,
                                                ApiKey.EXPIRE_DELEGATION_TOKEN, ApiKey.DESCRIBE_DELEGATION_TOKEN)),
        # ACLs before KIP-290's pattern types: every pattern is LITERAL (the field's default)
        LegacyVersion(ApiKey.DESCRIBE_ACLS, 0, 1, request_drop=_drop("DescribeAclsRequest.pattern_type_filter"),
                      response_drop=_drop("DescribeAclsResource.pattern_type")),
        LegacyVersion(ApiKey.CREATE_ACLS, 0, 1, request_drop=_drop("AclCreation.resource_pattern_type")),
        LegacyVersion(ApiKey.DELETE_ACLS, 0, 1, request_drop=_drop("DeleteAclsFilter.pattern_type_filter"),
                      response_drop=_drop("DeleteAclsMatchingAcl.pattern_type")),
        LegacyVersion(ApiKey.WRITE_TXN_MARKERS, 0, 1, flexible=False),
    )
}
"""Every derived version, by (api key, version)."""


def _derive(base: type, spec: LegacyVersion, drop: frozenset[str], add: tuple[Added, ...], module: str,
            memo: dict[type, type]) -> type:
    if base in memo:
        return memo[base]
    hints = typing.get_type_hints(base)
    name = base.__name__
    fields: list[tuple[str, Any, Any]] = []
    for f in dataclasses.fields(base):
        if f"{name}.{f.name}" not in drop:
            tp = hints[f.name]
            args = typing.get_args(tp)
            if typing.get_origin(tp) is tuple and args and isinstance(args[0], type) and dataclasses.is_dataclass(args[0]):
                tp = types.GenericAlias(tuple, (_derive(args[0], spec, drop, add, module, memo), ...))  # tuple[X, ...]
            elif isinstance(tp, type) and dataclasses.is_dataclass(tp):
                tp = _derive(tp, spec, drop, add, module, memo)
            kwargs: dict[str, Any] = {"metadata": f.metadata}
            if f.default is not dataclasses.MISSING:
                kwargs["default"] = f.default
            elif f.default_factory is not dataclasses.MISSING:
                kwargs["default_factory"] = f.default_factory
            fields.append((f.name, tp, dataclasses.field(**kwargs)))
        for a in add:
            if a.owner == name and a.after == f.name:
                fields.append((a.name, a.type, dataclasses.field(metadata={"kafka_type": a.kafka_type},
                                                                  default=a.default)))
    kio: Any = base
    namespace = {
        "__type__": kio.__type__, "__version__": i16(spec.version), "__api_key__": kio.__api_key__,
        "__flexible__": kio.__flexible__ if spec.flexible is None else spec.flexible,
        "__header_schema__": kio.__header_schema__, "__module__": module,
    }
    derived = dataclasses.make_dataclass(name, fields, namespace=namespace, frozen=True, slots=True, kw_only=True)
    memo[base] = derived
    setattr(sys.modules[module], name, derived)
    return derived


def _module(name: str) -> str:
    if name not in sys.modules:
        sys.modules[name] = types.ModuleType(name, "Classes of a message version kio lacks (legacy_schemas).")
    return name


@cache
def request_schema(api_key: int, version: int) -> type:
    """The derived request class; KeyError when the version is not one of LEGACY."""
    spec = LEGACY[(api_key, version)]
    module = _module(f"odradek.common.legacy_schemas.api{api_key}.v{version}.request")
    return _derive(load_request_schema(api_key, spec.base), spec, spec.request_drop, spec.request_add, module, {})


@cache
def response_schema(api_key: int, version: int) -> type:
    spec = LEGACY[(api_key, version)]
    module = _module(f"odradek.common.legacy_schemas.api{api_key}.v{version}.response")
    return _derive(load_response_schema(api_key, spec.base), spec, spec.response_drop, spec.response_add, module, {})


def _convert(value: Any, target: type, defaults: Mapping[str, Any], computed: Mapping[str, Callable[[Any], Any]]) -> Any:
    """`value` (an entity) as an instance of `target`: fields by name, recursively."""
    hints = typing.get_type_hints(target)
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(target):
        key = f"{target.__name__}.{f.name}"
        if key in computed:
            kwargs[f.name] = computed[key](value)
            continue
        if not hasattr(value, f.name):
            if key in defaults:
                kwargs[f.name] = defaults[key]
            continue  # the field's own default
        v = getattr(value, f.name)
        tp = hints[f.name]
        args = typing.get_args(tp)
        if (typing.get_origin(tp) is tuple and args and isinstance(args[0], type) and dataclasses.is_dataclass(args[0])
                and v is not None):
            v = tuple(_convert(item, args[0], defaults, computed) for item in v)
        elif isinstance(tp, type) and dataclasses.is_dataclass(tp) and v is not None:
            v = _convert(v, tp, defaults, computed)
        kwargs[f.name] = v
    return target(**kwargs)


def upgrade(request: Any) -> Any:
    """A derived-version request as its base version's request (the handler's view)."""
    spec = LEGACY[(int(request.__api_key__), int(request.__version__))]
    return _convert(request, load_request_schema(spec.api_key, spec.base), spec.request_defaults, {})


def downgrade(response: Any, api_key: int, version: int) -> Any:
    """A base-version response as the derived version's response (what the old client reads)."""
    spec = LEGACY[(api_key, version)]
    return _convert(response, response_schema(api_key, version), {}, spec.computed)

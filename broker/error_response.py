"""The generic error response: any request's response with every error code set.

Kafka's AbstractRequest.getErrorResponse, done generically over kio's classes: the response's
topics and partitions mirror the request's. Its own module so that handlers (forwarded_apis) and the
authenticator reach it without importing the dispatcher (kafka_apis).
"""

import dataclasses
import types
import typing
import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from odradek.broker.quota import quota_apis
from odradek.broker.security import scram_apis
from odradek.common import wire

_ALIASES = [
    {"name", "topic", "topic_name"},
    {"index", "partition", "partition_index"},
]


def _source_value(source: object, name: str) -> Any:
    if source is None:
        return None
    if hasattr(source, name):
        return getattr(source, name)
    for group in _ALIASES:
        if name in group:
            for alias in group:
                if hasattr(source, alias):
                    return getattr(source, alias)
    return None


def _entity_sequences(source: object) -> list[tuple[Any, ...]]:
    if source is None or not dataclasses.is_dataclass(source):
        return []
    out = []
    for f in dataclasses.fields(source):
        value = getattr(source, f.name)
        if isinstance(value, tuple) and value and dataclasses.is_dataclass(value[0]):
            out.append(value)
    return out


def _strip_optional(tp: Any) -> tuple[Any, bool]:
    """(the type inside `X | None`, whether it was optional). `tp` is a dataclass field's runtime
    annotation, introspected here: Any, as typing.get_args returns."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return args[0] if args else tp, True
    return tp, False


def _build(cls: Any, code: ErrorCode, source: object) -> Any:
    """An instance of kio's dataclass `cls` (picked at run time by API key and version, hence
    Any) with every error code set to `code` and the rest mirrored from `source` or empty."""
    kwargs: dict[str, typing.Any] = {}
    for f in dataclasses.fields(cls):
        kafka_type = f.metadata.get("kafka_type")
        if kafka_type == "error_code":
            kwargs[f.name] = code
            continue
        if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING:
            continue
        tp, optional = _strip_optional(f.type)
        mirrored = _source_value(source, f.name)
        if typing.get_origin(tp) is tuple:
            (elem,) = typing.get_args(tp)[:1]
            if dataclasses.is_dataclass(elem):
                seq = mirrored if isinstance(mirrored, tuple) else None
                if seq is None:
                    candidates = _entity_sequences(source)
                    seq = candidates[0] if candidates else ()
                kwargs[f.name] = tuple(_build(elem, code, s) for s in seq)
            else:
                kwargs[f.name] = ()
        elif dataclasses.is_dataclass(tp):
            kwargs[f.name] = _build(tp, code, mirrored)
        elif kafka_type in ("int8", "int16", "int32", "int64", "uint16", "uint32", "float64"):
            kwargs[f.name] = mirrored if isinstance(mirrored, (int, float)) and f.name != "error_code" else tp(
                -1 if f.name.endswith(("offset", "epoch", "timestamp", "_id")) else 0
            )
        elif kafka_type == "string":
            kwargs[f.name] = mirrored if isinstance(mirrored, str) else (None if optional else "")
        elif kafka_type == "bool":
            kwargs[f.name] = False
        elif kafka_type in ("timedelta_i32", "timedelta_i64"):
            kwargs[f.name] = wire.NO_THROTTLE
        elif kafka_type in ("records", "bytes"):
            kwargs[f.name] = None if optional else b""
        elif kafka_type == "uuid":
            kwargs[f.name] = mirrored if isinstance(mirrored, uuid.UUID) else (None if optional else uuid.UUID(int=0))
        else:
            kwargs[f.name] = None
    return cls(**kwargs)


def error_response(request: Any, error_code: ErrorCode) -> Any:
    """The response to `request` with every error_code field set, mirroring its topics/partitions.

    Kafka's AbstractRequest.getErrorResponse, done generically over kio's classes.
    """
    special = (scram_apis.ERROR_RESPONSES.get(int(request.__api_key__))
               or quota_apis.ERROR_RESPONSES.get(int(request.__api_key__)))
    if special is not None:
        return special(request, error_code)
    cls = wire.response_schema(int(request.__api_key__), int(request.__version__))
    return _build(cls, error_code, request)

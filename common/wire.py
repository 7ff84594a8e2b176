"""Kafka framing: the int32 size prefix, request and response headers, schema lookup.

kio decodes and encodes message bodies but does not frame, and knows only the client-facing APIs;
this module adds both, so the broker's server, the controller's channel and any test client frame
the same way.
"""

import datetime
import io
import struct
import sys
from dataclasses import fields
from functools import cache
from types import ModuleType
from typing import Any, cast

from kio.index import load_request_schema, load_response_schema
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32, i32Timedelta
from kio.static.protocol import Payload

from odradek.common.api_key import ApiKey

from . import legacy_schemas, message_bounds
from .messages import INTER_BROKER_REQUESTS, INTER_BROKER_RESPONSES

SIZE = struct.Struct(">i")
NO_THROTTLE = i32Timedelta.parse(datetime.timedelta(0))
"""throttle_time of every response: this broker has no quotas."""

def _payload_class(cls: type) -> type[Payload]:
    """A schema class seen as kio's Payload protocol (its __api_key__, __version__, __flexible__):
    the lookups below return plain `type`, since own inter-broker classes sit beside kio's."""
    return cast(type[Payload], cls)


read_request_header_v1 = entity_reader(RequestHeaderV1)
_read_header_v2 = entity_reader(RequestHeaderV2)
_write_header_v1 = entity_writer(RequestHeaderV1)
_write_header_v2 = entity_writer(RequestHeaderV2)


@cache
def request_schema(api_key: int, version: int) -> type:
    """The request class for (api_key, version); KeyError when nobody here knows it.

    Cached: kio looks a schema up by importing its module by name on every call."""
    own = INTER_BROKER_REQUESTS.get(api_key)
    if own is not None:
        if _payload_class(own).__version__ != version:
            raise KeyError((api_key, version))
        return own
    if (api_key, version) in legacy_schemas.LEGACY:
        return legacy_schemas.request_schema(api_key, version)
    try:
        return load_request_schema(api_key, version)
    except Exception as e:  # kio raises its own index errors, and ImportError underneath
        raise KeyError((api_key, version)) from e


@cache
def response_schema(api_key: int, version: int) -> type:
    own = INTER_BROKER_RESPONSES.get(api_key)
    if own is not None:
        return own
    if (api_key, version) in legacy_schemas.LEGACY:
        return legacy_schemas.response_schema(api_key, version)
    return load_response_schema(api_key, version)


def peek_api(frame: bytes | bytearray | memoryview) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id) of a request frame body, before any decoding.

    These three fields sit at the same place in every request header version, so an unknown API or
    version can still be answered with the right correlation id.
    """
    if len(frame) < 8:
        raise ValueError("request header truncated")
    api_key, version, correlation_id = struct.unpack_from(">hhi", frame, 0)
    return api_key, version, correlation_id


def decode_request(frame: bytes | memoryview) -> tuple[Any, Any, Any]:
    """(header, payload, schema) of a request frame body (without the size prefix).

    Raises KeyError for an unknown (api_key, version) and ValueError for a malformed body. Every
    length is checked against the frame before kio reads it (message_bounds: kio's reader aborts
    the process on a huge claimed array length), and a duration beyond what kio reads is clamped.
    """
    api_key, version, _ = peek_api(frame)
    schema = request_schema(api_key, version)
    flexible = _payload_class(schema).__flexible__
    header_schema = RequestHeaderV2 if flexible else RequestHeaderV1
    frame = message_bounds.readable(schema, frame, message_bounds.check(header_schema, frame))
    try:
        header: RequestHeaderV1 | RequestHeaderV2
        header, offset = _read_header_v2(frame, 0) if flexible else read_request_header_v1(frame, 0)
        payload, _ = entity_reader(_payload_class(schema))(frame, offset)
    except Exception as e:  # kio raises KeyError on unknown tagged fields, among others
        raise ValueError(f"malformed {schema.__name__}: {e}") from e
    return header, payload, schema


def read_request_header(frame: bytes | bytearray | memoryview, flexible: bool) -> tuple[Any, int]:
    """(request header v2 if `flexible` else v1, where the body starts), bounds checked first (for
    the hand-written request decoders)."""
    header_schema = RequestHeaderV2 if flexible else RequestHeaderV1
    message_bounds.check(header_schema, frame)
    if not isinstance(frame, bytes):
        frame = memoryview(frame).toreadonly()  # kio reads read-only buffers only
    try:
        return _read_header_v2(frame, 0) if flexible else read_request_header_v1(frame, 0)
    except Exception as e:  # kio raises KeyError on unknown tagged fields, among others
        raise ValueError(f"malformed request header: {e}") from e


def response_header_flexible(api_key: int, request_flexible: bool) -> bool:
    """ApiVersions answers with header v0 always, so old clients can read the version list."""
    return request_flexible and api_key != ApiKey.API_VERSIONS


def encode_response(payload: object, correlation_id: int, *, flexible_header: bool) -> bytes:
    """A whole response frame: size prefix, response header, body."""
    buf = io.BytesIO()
    buf.write(b"\0\0\0\0")
    if flexible_header:
        entity_writer(ResponseHeaderV1)(buf, ResponseHeaderV1(correlation_id=i32(correlation_id)))
    else:
        entity_writer(ResponseHeaderV0)(buf, ResponseHeaderV0(correlation_id=i32(correlation_id)))
    _write_payload(buf, payload)
    data = buf.getbuffer()
    SIZE.pack_into(data, 0, len(data) - 4)
    return bytes(data)


def _write_payload(buf: io.BytesIO, payload: object) -> None:
    entity_writer(_payload_class(type(payload)))(buf, cast(Payload, payload))


def encode_request(payload: object, correlation_id: int, client_id: str | None) -> bytes:
    """A whole request frame: size prefix, request header (v1 or v2 by the schema), body."""
    buf = io.BytesIO()
    buf.write(b"\0\0\0\0")
    schema = _payload_class(type(payload))
    api_key, version, corr = i16(schema.__api_key__), i16(schema.__version__), i32(correlation_id)
    if schema.__flexible__:
        _write_header_v2(buf, RequestHeaderV2(request_api_key=api_key, request_api_version=version,
                                              correlation_id=corr, client_id=client_id))
    else:
        _write_header_v1(buf, RequestHeaderV1(request_api_key=api_key, request_api_version=version,
                                              correlation_id=corr, client_id=client_id))
    _write_payload(buf, payload)
    data = buf.getbuffer()
    SIZE.pack_into(data, 0, len(data) - 4)
    return bytes(data)


CORRELATION_ID_AT = 8
"""Where a request frame's correlation id starts: after the size, api key and api version (every
request header version begins so)."""


def with_correlation_id(frame: bytes, correlation_id: int) -> bytes:
    """A copy of the request frame `frame` (from `encode_request`) with another correlation id:
    a request encoded once, ahead of time, is sent with the connection's next id."""
    out = bytearray(frame)
    struct.pack_into(">i", out, CORRELATION_ID_AT, correlation_id)
    return bytes(out)


def decode_response(schema: type, frame: bytes) -> tuple[int, object]:
    """(correlation_id, payload) of a response frame body for a request of `schema`."""
    request = _payload_class(schema)
    api_key = int(request.__api_key__)
    flexible = response_header_flexible(api_key, request.__flexible__)
    header_schema = ResponseHeaderV1 if flexible else ResponseHeaderV0
    payload_schema = response_schema(api_key, int(request.__version__))
    message_bounds.check(payload_schema, frame, message_bounds.check(header_schema, frame))
    header: ResponseHeaderV0 | ResponseHeaderV1
    header, offset = entity_reader(ResponseHeaderV1)(frame, 0) if flexible else entity_reader(ResponseHeaderV0)(frame, 0)
    payload, _ = entity_reader(_payload_class(payload_schema))(frame, offset)
    return int(header.correlation_id), payload


# --- helpers the API handlers share ---------------------------------------------------------------


@cache
def response_module(api_key: int, version: int) -> ModuleType:
    """The kio module of a response version, whose classes (response and nested) build the answer."""
    return sys.modules[response_schema(api_key, version).__module__]


@cache
def _field_names(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in fields(cls))


def make_entity(cls: type, **values: Any) -> Any:
    """An instance of a kio class with the values its version has; the others are dropped."""
    names = _field_names(cls)
    return cls(**{k: v for k, v in values.items() if k in names})


def encode_entity(value: object) -> bytes:
    """A kio entity's bytes, without framing (entity_writer caches its writer per class)."""
    buf = io.BytesIO()
    _write_payload(buf, value)
    return buf.getvalue()


def ms(td: datetime.timedelta | int) -> int:
    """Milliseconds of a kio duration field (a timedelta), or of a plain int."""
    return int(td.total_seconds() * 1000) if isinstance(td, datetime.timedelta) else int(td)

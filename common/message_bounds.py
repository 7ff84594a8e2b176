"""Checks that every length in a Kafka message fits the bytes left, before kio's reader sees it.

kio's native reader reserves a compact array's claimed element count up front; a claim of 2^32-2
elements makes the allocation fail and the Rust runtime aborts the whole process, so no `except`
runs (a 24-byte Metadata v12 frame did it). Kafka's generated readers refuse any array whose count
exceeds the bytes remaining ("Tried to read N elements, but only M bytes remain"); this module
applies that rule, and bounds string, bytes and tagged-field lengths and checks nullable-struct
markers, by walking the schema's field metadata (the same metadata kio reads by) over the frame
without building anything.

A schema is compiled once into a plan of steps; runs of fixed-size fields collapse into one skip,
so walking a Produce or Fetch request costs a few microseconds.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Iterable
from functools import cache
from typing import Any, cast

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    is_optional,
)
from kio.static.protocol import Entity

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")

MAX_DURATION_MS = (2**63 - 1) // 1000
"""The longest duration (timedelta_i64, in ms, either sign) kio reads: its microseconds must fit an
int64. Kafka reads any int64 (292,000 years here or 292 million there: "forever" to every API that
has such a field)."""

FIXED_SIZES = {
    "bool": 1, "int8": 1, "uint8": 1,
    "int16": 2, "uint16": 2, "error_code": 2,
    "int32": 4, "uint32": 4, "timedelta_i32": 4,
    "int64": 8, "uint64": 8, "timedelta_i64": 8, "datetime_i64": 8, "float64": 8,
    "uuid": 16,
}
"""Wire size of each fixed-size kio `kafka_type`."""


class MalformedMessage(ValueError):
    """A length, count or marker that the frame cannot hold: the frame is refused undecoded."""


class DurationOutOfRange(MalformedMessage):
    """A well-formed duration kio cannot read (beyond MAX_DURATION_MS): `readable` clamps it."""

    def __init__(self, pos: int):
        super().__init__(f"duration at byte {pos} beyond what kio reads")
        self.pos = pos


Step = tuple[Any, ...]
"""A plan step: a tuple whose first item says what to read (the opcodes below)."""
Plan = tuple[Step, ...]
Buffer = bytes | bytearray | memoryview

# Plan steps: tuples whose first item says what to read.
_SKIP = 0  # (_SKIP, n): n fixed bytes
_STR16 = 1  # (_STR16, nullable): int16 length + bytes (legacy string)
_STR32 = 2  # (_STR32, nullable): int32 length + bytes (legacy bytes/records)
_CSTR = 3  # (_CSTR, nullable): uvarint length+1 + bytes (compact string/bytes/records)
_ARRAY = 4  # (_ARRAY, compact, element_plan, element_min_size, fixed_element_size or 0)
_NULLABLE = 5  # (_NULLABLE, plan): int8 marker (-1 null, 1 present) then the struct
_TAGS = 6  # (_TAGS, {tag: plan}): a tagged-field section
_DURATION = 7  # (_DURATION,): a timedelta_i64, 8 bytes kio reads only up to MAX_DURATION_MS


def _read_uvarint(buf: Buffer, pos: int, end: int) -> tuple[int, int]:
    if pos < end and buf[pos] < 0x80:  # the usual one-byte case first
        return buf[pos], pos + 1
    value = shift = 0
    for _ in range(5):
        if pos >= end:
            raise MalformedMessage("varint runs past the end of the frame")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
    raise MalformedMessage("varint longer than 5 bytes")


def _string_step(kafka_type: str, flexible: bool, nullable: bool) -> Step:
    if flexible:
        return (_CSTR, nullable)
    return (_STR16, nullable) if kafka_type == "string" else (_STR32, nullable)


def _primitive_step(kafka_type: str, flexible: bool, nullable: bool) -> Step:
    if kafka_type == "timedelta_i64":
        return (_DURATION,)
    size = FIXED_SIZES.get(kafka_type)
    if size is not None:
        return (_SKIP, size)
    if kafka_type in ("string", "bytes", "records"):
        return _string_step(kafka_type, flexible, nullable)
    raise TypeError(f"no bounds rule for kafka_type {kafka_type!r}")


def _field_steps(field: dataclasses.Field[Any], flexible: bool, tagged: bool, header: bool) -> list[Step]:
    """The steps of one field, as kio reads it (kio.serial's writer is the reference layout)."""
    if header and field.name == "client_id":
        return [(_STR16, True)]  # RequestHeader.client_id stays a legacy string in every version
    nullable = False if tagged else is_optional(field)
    kind = classify_field(field)
    if isinstance(kind, PrimitiveField):
        return [_primitive_step(field.metadata["kafka_type"], flexible, nullable)]
    if isinstance(kind, EntityField):
        inner = entity_plan(kind.type_)
        return [(_NULLABLE, inner)] if nullable else list(inner)
    if isinstance(kind, PrimitiveTupleField):
        element = [_primitive_step(field.metadata["kafka_type"], flexible, False)]
    elif isinstance(kind, EntityTupleField):
        element = list(entity_plan(kind.type_))
    else:  # pragma: no cover - kio knows no other kind
        raise TypeError(f"unknown field kind {kind!r}")
    fixed = element[0][1] if len(element) == 1 and element[0][0] == _SKIP else 0
    return [(_ARRAY, flexible, tuple(element), _min_size(element), fixed)]


def _min_size(plan: Iterable[Step]) -> int:
    """The fewest bytes a value of `plan` takes: counts are bounded by what is left / this."""
    size = 0
    for step in plan:
        op = step[0]
        if op == _SKIP:
            size += step[1]
        elif op == _STR16:
            size += 2
        elif op == _STR32:
            size += 4
        elif op == _ARRAY:
            size += 1 if step[1] else 4
        elif op == _DURATION:
            size += 8
        else:  # _CSTR, _NULLABLE, _TAGS: at least one byte
            size += 1
    return size


def _merge(steps: list[Step]) -> Plan:
    out: list[Step] = []
    for step in steps:
        if step[0] == _SKIP and out and out[-1][0] == _SKIP:
            out[-1] = (_SKIP, out[-1][1] + step[1])
        else:
            out.append(step)
    return tuple(out)


@cache
def entity_plan(cls: type) -> Plan:
    """The plan of a kio (or kio-style) entity class: its fields, then its tagged fields."""
    flexible = bool(cast("type[Entity]", cls).__flexible__)
    header = cls.__name__ == "RequestHeader"
    steps: list[Step] = []
    tags: dict[int, Plan] = {}
    for f in dataclasses.fields(cls):
        tag = get_field_tag(f)
        if tag is None:
            steps += _field_steps(f, flexible, False, header)
        else:
            tags[int(tag)] = _merge(_field_steps(f, flexible, True, header))
    if flexible:
        steps.append((_TAGS, tags))
    return _merge(steps)


def walk(plan: Plan, buf: Buffer, pos: int, end: int) -> int:
    """Checks `buf[pos:end]` against `plan`; returns where the value ends. Raises MalformedMessage."""
    for step in plan:
        op = step[0]
        if op == _SKIP:
            pos += step[1]
            if pos > end:
                raise MalformedMessage("field runs past the end of the frame")
        elif op == _CSTR:
            if pos < end and buf[pos] < 0x80:
                n = buf[pos]
                pos += 1
            else:
                n, pos = _read_uvarint(buf, pos, end)
            if n == 0:
                if not step[1]:
                    raise MalformedMessage("null in a non-nullable compact string")
                continue
            pos += n - 1
            if pos > end:
                raise MalformedMessage(f"compact string of {n - 1} bytes runs past the end of the frame")
        elif op == _ARRAY:
            pos = _walk_array(step, buf, pos, end)
        elif op in (_STR16, _STR32):
            width = 2 if op == _STR16 else 4
            if pos + width > end:
                raise MalformedMessage("length runs past the end of the frame")
            (n,) = (_I16 if op == _STR16 else _I32).unpack_from(buf, pos)
            pos += width
            if n < 0:
                if n != -1 or not step[1]:
                    raise MalformedMessage(f"length {n}")
                continue
            pos += n
            if pos > end:
                raise MalformedMessage(f"string of {n} bytes runs past the end of the frame")
        elif op == _TAGS:
            if pos < end and buf[pos] == 0:  # no tagged fields, the usual case
                pos += 1
            else:
                pos = _walk_tags(step[1], buf, pos, end)
        elif op == _NULLABLE:
            if pos >= end:
                raise MalformedMessage("struct marker runs past the end of the frame")
            marker = buf[pos]
            pos += 1
            if marker == 0xFF:
                continue
            if marker != 1:
                raise MalformedMessage(f"nullable struct marker {marker}")
            pos = walk(step[1], buf, pos, end)
        elif op == _DURATION:
            if pos + 8 > end:
                raise MalformedMessage("field runs past the end of the frame")
            if abs(_I64.unpack_from(buf, pos)[0]) > MAX_DURATION_MS:
                raise DurationOutOfRange(pos)
            pos += 8
    return pos


def _walk_array(step: Step, buf: Buffer, pos: int, end: int) -> int:
    compact: bool
    element: Plan
    min_size: int
    fixed: int
    _, compact, element, min_size, fixed = step
    if compact:
        n, pos = _read_uvarint(buf, pos, end)
        if n == 0:
            return pos  # null array
        count = n - 1
    else:
        if pos + 4 > end:
            raise MalformedMessage("array length runs past the end of the frame")
        (count,) = _I32.unpack_from(buf, pos)
        pos += 4
        if count < 0:
            if count != -1:
                raise MalformedMessage(f"array length {count}")
            return pos
    if count * max(1, min_size) > end - pos:
        raise MalformedMessage(f"array of {count} elements but only {end - pos} bytes remain")
    if fixed:
        return pos + count * fixed
    for _ in range(count):
        pos = walk(element, buf, pos, end)
    return pos


def _walk_tags(known: dict[int, Plan], buf: Buffer, pos: int, end: int) -> int:
    count, pos = _read_uvarint(buf, pos, end)
    if count > end - pos:
        raise MalformedMessage(f"{count} tagged fields but only {end - pos} bytes remain")
    for _ in range(count):
        tag, pos = _read_uvarint(buf, pos, end)
        size, pos = _read_uvarint(buf, pos, end)
        stop = pos + size
        if stop > end:
            raise MalformedMessage(f"tagged field {tag} of {size} bytes runs past the end of the frame")
        plan = known.get(tag)
        if plan is not None and walk(plan, buf, pos, stop) != stop:
            raise MalformedMessage(f"tagged field {tag} does not fill its {size} bytes")
        pos = stop
    return pos


def check(cls: type, buf: Buffer, pos: int = 0, end: int | None = None) -> int:
    """Checks one `cls` value at `buf[pos:]`; returns where it ends. Raises MalformedMessage."""
    return walk(entity_plan(cls), buf, pos, len(buf) if end is None else end)


MAX_CLAMPED = 4
"""Durations `readable` clamps in one value (no message has more than one)."""


def readable(cls: type, buf: bytes | memoryview, pos: int = 0) -> bytes | memoryview:
    """`check`, with a duration kio cannot read clamped to MAX_DURATION_MS (same sign) in a copy
    instead of refused: a well-formed request is answered, as Kafka answers it, not dropped with
    its connection. Returns the buffer to decode (`buf` itself when nothing was clamped)."""
    try:
        check(cls, buf, pos)
        return buf
    except DurationOutOfRange as e:
        at = e.pos
    copy = bytearray(buf)
    for _ in range(MAX_CLAMPED):
        (ms,) = _I64.unpack_from(copy, at)
        _I64.pack_into(copy, at, MAX_DURATION_MS if ms > 0 else -MAX_DURATION_MS)
        try:
            check(cls, copy, pos)
            return bytes(copy)
        except DurationOutOfRange as e:
            at = e.pos
    raise MalformedMessage(f"more than {MAX_CLAMPED} durations beyond what kio reads")

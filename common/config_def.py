"""Kafka's ConfigDef, the part broker and topic configs share: value types, parsing as Kafka
parses, validators with Kafka's messages, and values printed as Kafka prints them.

Kafka's rules, not Python's: surrounding blanks are trimmed, integers are ASCII digits with an
optional sign (no `1_000`, no `0x10`, no other scripts' digits) within the type's range, booleans
are `true`/`false` in any case, lists split on commas with the blanks around them.
"""

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Any


class ConfigType(IntEnum):
    """Kafka's ConfigDef.Type, numbered as DescribeConfigs (v3+) reports `config_type`."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class ConfigException(ValueError):
    """Kafka's ConfigException: `Invalid value <v> for configuration <name>[: <reason>]`."""

    def __init__(self, name: str, value: Any = None, reason: str | None = None, *, message: str | None = None):
        self.name = name
        self.value = value
        if message is None:
            message = f"Invalid value {value} for configuration {name}" + (f": {reason}" if reason else "")
        super().__init__(message)


_RANGES = {
    ConfigType.SHORT: (-(2**15), 2**15 - 1),
    ConfigType.INT: (-(2**31), 2**31 - 1),
    ConfigType.LONG: (-(2**63), 2**63 - 1),
}
_INTEGER = re.compile(r"[+-]?[0-9]+")
_DOUBLE = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?[dDfF]?")
_LIST_SEPARATOR = re.compile(r"\s*,\s*")
INT_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1


def parse_value(name: str, ctype: ConfigType, value: Any) -> Any:
    """A raw value (text, or already typed) as the Python value of `ctype`; None stays None.

    Raises ConfigException with Kafka's message when the text is not of the type."""
    if value is None:
        return None
    if not isinstance(value, str):
        return _check_typed(name, ctype, value)
    text = value.strip()
    if ctype == ConfigType.BOOLEAN:
        lowered = text.lower()
        if lowered not in ("true", "false"):
            raise ConfigException(name, value, "Expected value to be either true or false")
        return lowered == "true"
    if ctype in _RANGES:
        low, high = _RANGES[ctype]
        if not _INTEGER.fullmatch(text) or not low <= int(text) <= high:
            raise ConfigException(name, value, f"Not a number of type {ctype.name}")
        return int(text)
    if ctype == ConfigType.DOUBLE:
        if not _DOUBLE.fullmatch(text):
            raise ConfigException(name, value, "Not a number of type DOUBLE")
        return float(text.rstrip("dDfF"))
    if ctype == ConfigType.LIST:
        return [] if not text else _LIST_SEPARATOR.split(text)
    return text


def _check_typed(name: str, ctype: ConfigType, value: Any) -> Any:
    if ctype == ConfigType.BOOLEAN and isinstance(value, bool):
        return value
    if ctype in _RANGES and isinstance(value, int) and not isinstance(value, bool):
        low, high = _RANGES[ctype]
        if low <= value <= high:
            return value
    elif ctype == ConfigType.DOUBLE and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    elif ctype == ConfigType.LIST and isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    elif ctype in (ConfigType.STRING, ConfigType.PASSWORD, ConfigType.CLASS, ConfigType.UNKNOWN):
        return value
    raise ConfigException(name, value, f"Expected value of type {ctype.name}")


def to_text(ctype: ConfigType, value: Any) -> str | None:
    """A typed value as Kafka prints it (ConfigDef.convertToString)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    if isinstance(value, float):
        return repr(value)
    return str(value)


# --- validators: (name, parsed value) → None, or ConfigException -----------------------------------

Validator = Callable[[str, Any], None]


def at_least(minimum: float) -> Validator:
    def check(name: str, value: Any) -> None:
        if value is not None and value < minimum:
            raise ConfigException(name, value, f"Value must be at least {minimum}")

    check.__doc__ = f"[{minimum},...]"
    return check


def between(minimum: float, maximum: float) -> Validator:
    def check(name: str, value: Any) -> None:
        if value is None:
            return
        if value != value:  # NaN passes Kafka's comparisons; a NaN ratio or rate means nothing
            raise ConfigException(name, value, "Not a number")
        if value < minimum:
            raise ConfigException(name, value, f"Value must be at least {minimum}")
        if value > maximum:
            raise ConfigException(name, value, f"Value must be no more than {maximum}")

    check.__doc__ = f"[{minimum},...,{maximum}]"
    return check


def one_of(*allowed: str) -> Validator:
    def check(name: str, value: Any) -> None:
        if value is not None and value not in allowed:
            raise ConfigException(name, value, f"String must be one of: {', '.join(allowed)}")

    check.__doc__ = f"[{', '.join(allowed)}]"
    return check


def list_of(*allowed: str) -> Validator:
    def check(name: str, value: Any) -> None:
        for item in value or ():
            if item not in allowed:
                raise ConfigException(name, item, f"String must be one of: {', '.join(allowed)}")

    check.__doc__ = f"[{', '.join(allowed)}]"
    return check


def all_of(*validators: Validator) -> Validator:
    def check(name: str, value: Any) -> None:
        for v in validators:
            v(name, value)

    return check


@dataclass(frozen=True)
class ConfigKey:
    """One key of a ConfigDef: its type, default (typed; None when it has none), validator, and
    the documentation DescribeConfigs gives when asked."""

    name: str
    type: ConfigType
    default: Any
    doc: str
    validator: Validator | None = None

    def parse(self, value: Any) -> Any:
        parsed = parse_value(self.name, self.type, value)
        if self.validator is not None and parsed is not None:
            self.validator(self.name, parsed)
        return parsed

    @property
    def default_text(self) -> str | None:
        return to_text(self.type, self.default)


def parse_all(keys: Sequence[ConfigKey], props: dict[str, Any]) -> dict[str, Any]:
    """Parse every key of `props` that `keys` defines (the others are left out)."""
    by_name = {k.name: k for k in keys}
    return {name: by_name[name].parse(value) for name, value in props.items() if name in by_name}

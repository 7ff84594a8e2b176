"""Kafka's `sasl.jaas.config` value: `<LoginModule> <flag> key="value" ...;` (JaasConfig's syntax).

Brokers read PLAIN users from it (`user_<name>="<password>"`), clients their username and
password. Only one login module per value, as Kafka requires for `sasl.jaas.config`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
FLAGS = ("required", "requisite", "sufficient", "optional")

_TOKEN = re.compile(r'\s*(?:"((?:[^"\\]|\\.)*)"|([^\s=;"]+)|(=)|(;))')


class JaasConfigError(ValueError):
    """Malformed JAAS config (the message never quotes option values: they hold passwords)."""


@dataclass(frozen=True)
class JaasConfig:
    login_module: str
    flag: str
    options: dict[str, str] = field(repr=False)

    def __repr__(self) -> str:
        return f"JaasConfig({self.login_module} {self.flag}, options={sorted(self.options)})"


def parse(text: str) -> JaasConfig:
    tokens: list[tuple[str, str]] = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise JaasConfigError(f"sasl.jaas.config: unexpected character at {pos}")
        pos = m.end()
        quoted, word, eq, semi = m.groups()
        if quoted is not None:
            tokens.append(("value", re.sub(r"\\(.)", r"\1", quoted)))
        elif word is not None:
            tokens.append(("word", word))
        elif eq:
            tokens.append(("=", "="))
        elif semi:
            tokens.append((";", ";"))
    if len(tokens) < 3 or tokens[0][0] != "word" or tokens[1][0] != "word" or tokens[-1][0] != ";":
        raise JaasConfigError("sasl.jaas.config must be '<LoginModule> <flag> key=value ... ;'")
    module, flag = tokens[0][1], tokens[1][1]
    if flag not in FLAGS:
        raise JaasConfigError(f"sasl.jaas.config: login module control flag {flag!r} is not one of {FLAGS}")
    options: dict[str, str] = {}
    body = tokens[2:-1]
    if len(body) % 3:
        raise JaasConfigError("sasl.jaas.config: options must be key=value pairs, one login module only")
    for i in range(0, len(body), 3):
        (kt, key), (et, _), (vt, value) = body[i:i + 3]
        if kt != "word" or et != "=" or vt not in ("word", "value"):
            raise JaasConfigError("sasl.jaas.config: options must be key=value pairs, one login module only")
        options[key] = value
    return JaasConfig(module, flag, options)


def quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def client_config(mechanism: str, username: str, password: str) -> str:
    """The `sasl.jaas.config` a Java client would be given for these credentials."""
    module = PLAIN_LOGIN_MODULE if mechanism == "PLAIN" else SCRAM_LOGIN_MODULE
    return f"{module} required username={quote(username)} password={quote(password)};"

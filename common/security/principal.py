"""KafkaPrincipal and the mTLS principal: Kafka's SslPrincipalMapper (`ssl.principal.mapping.rules`).

A connection's principal is `User:<name>`: `User:ANONYMOUS` on PLAINTEXT and on TLS without a
client certificate; with one, the certificate's subject in RFC 2253 form (as Java's
X500Principal.getName() prints it) mapped by the rules. The rules are parsed as Kafka parses them
(same splitting, same errors, Java's `$n` replacement syntax), so a rule that works in Kafka works
here.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Protocol

USER_TYPE = "User"
ANONYMOUS_NAME = "ANONYMOUS"
DEFAULT_RULES = "DEFAULT"


@dataclass(frozen=True)
class KafkaPrincipal:
    """Kafka's KafkaPrincipal: a type and a name, printed `type:name`."""

    principal_type: str
    name: str

    def __str__(self) -> str:
        return f"{self.principal_type}:{self.name}"

    @classmethod
    def user(cls, name: str) -> KafkaPrincipal:
        return cls(USER_TYPE, name)

    @classmethod
    def parse(cls, value: str) -> KafkaPrincipal:
        """`User:alice` → KafkaPrincipal("User", "alice") (Kafka's SecurityUtils.parseKafkaPrincipal)."""
        principal_type, sep, name = value.partition(":")
        if not sep or not principal_type or not name:
            raise ValueError(f"expected a principal as 'type:name', got {value!r}")
        return cls(principal_type, name)


ANONYMOUS = KafkaPrincipal(USER_TYPE, ANONYMOUS_NAME)


class NoMatchingRule(ValueError):
    """No rule of `ssl.principal.mapping.rules` applies to a certificate's subject."""


_RULE_PATTERN = r"(DEFAULT)|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_RULE_SPLITTER = re.compile(r"\s*(" + _RULE_PATTERN + r")\s*(,\s*|$)")
_RULE_PARSER = re.compile(_RULE_PATTERN)


@dataclass(frozen=True)
class _Rule:
    pattern: re.Pattern[str] | None = None
    """None: the DEFAULT rule (the subject as it is)."""
    replacement: str = ""
    to_lower: bool = False
    to_upper: bool = False

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        if self.pattern.fullmatch(dn) is None:
            return None
        result = self.pattern.sub(lambda m: _java_replacement(self.replacement, m), dn)
        if self.to_lower:
            return result.lower()
        if self.to_upper:
            return result.upper()
        return result

    def __str__(self) -> str:
        if self.pattern is None:
            return "DEFAULT"
        suffix = "/L" if self.to_lower else "/U" if self.to_upper else ""
        return f"RULE:{self.pattern.pattern}/{self.replacement}{suffix}"


def _java_replacement(replacement: str, m: re.Match[str]) -> str:
    """Java's Matcher.appendReplacement: `$n` is a group (digits taken while the number stays a
    group; a number beyond the groups is literal, as Kafka's escapeLiteralBackReferences makes it),
    `\\x` is x."""
    groups = m.re.groups
    out: list[str] = []
    i = 0
    while i < len(replacement):
        c = replacement[i]
        if c == "\\" and i + 1 < len(replacement):
            out.append(replacement[i + 1])
            i += 2
        elif c == "$" and i + 1 < len(replacement) and replacement[i + 1].isdigit():
            j = i + 2
            number = int(replacement[i + 1])
            while j < len(replacement) and replacement[j].isdigit() and number * 10 + int(replacement[j]) <= groups:
                number = number * 10 + int(replacement[j])
                j += 1
            if number > groups:
                out.append(replacement[i:j])  # literal, as Kafka escapes an invalid back reference
            else:
                out.append(m.group(number) or "")
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


class SslPrincipalMapper:
    """Kafka's SslPrincipalMapper: the first rule that matches names the principal."""

    def __init__(self, rules: str | None = None):
        self.rules = _parse_rules(_split_rules(DEFAULT_RULES if rules is None else rules))

    def name(self, distinguished_name: str) -> str:
        for rule in self.rules:
            name = rule.apply(distinguished_name)
            if name is not None:
                return name
        raise NoMatchingRule(f"No rules apply to {distinguished_name}, rules {self}")

    def __str__(self) -> str:
        return "SslPrincipalMapper(rules = [" + ", ".join(map(str, self.rules)) + "])"


def _split_rules(rules: str) -> list[str]:
    return [m.group(1) for m in _RULE_SPLITTER.finditer(rules.strip())]


def _parse_rules(rules: list[str]) -> list[_Rule]:
    out = []
    for rule in rules:
        m = _RULE_PARSER.match(rule)
        if m is None:
            raise ValueError(f"Invalid rule: {rule}")
        if m.end() != len(rule):
            raise ValueError(f"Invalid rule: `{rule}`, unmatched substring: `{rule[m.end():]}`")
        if m.group(1) is not None:
            out.append(_Rule())
        elif m.group(2) is not None:
            try:
                pattern = re.compile(m.group(2))
            except re.error as e:
                raise ValueError(f"Invalid rule: `{rule}`: {e}") from None
            out.append(_Rule(pattern, m.group(4), m.group(6) == "L", m.group(6) == "U"))
    return out


class PrincipalMapper(Protocol):
    """Subject → principal name (SslPrincipalMapper, or a test's stand-in)."""

    def name(self, distinguished_name: str) -> str: ...


def principal_from_certificate(der: bytes | None, mapper: PrincipalMapper) -> KafkaPrincipal:
    """The principal of a TLS connection: ANONYMOUS without a client certificate, else the mapped
    subject (Kafka's DefaultKafkaPrincipalBuilder for SSL)."""
    if not der:
        return ANONYMOUS
    return KafkaPrincipal.user(mapper.name(subject_rfc2253(der)))


def subject_rfc2253(der: bytes) -> str:
    """A certificate's subject as Java's X500Principal.getName() prints it (RFC 2253): the most
    specific RDN first, keywords for CN, C, L, ST, O, OU, STREET, DC, UID, other attributes as
    `OID=#` + the hex of their DER value."""
    from cryptography import x509  # here, not at import: most processes never see a certificate

    cert = x509.load_der_x509_certificate(der)
    keyword_oids = _keyword_oids()
    rdns = []
    for rdn in reversed(list(cert.subject.rdns)):
        parts = []
        for attr in rdn:
            if attr.oid in keyword_oids:
                parts.append(attr.rfc4514_string())
            else:
                parts.append(f"{attr.oid.dotted_string}=#{_der_value(attr).hex()}")
        rdns.append("+".join(parts))
    return ",".join(rdns)


def _der_value(attr: object) -> bytes:
    """The DER encoding of a name attribute's value (tag, length, contents)."""
    value = getattr(attr, "value", b"")
    asn1 = getattr(attr, "_type", None)
    tag = int(getattr(asn1, "value", 12))
    if isinstance(value, bytes):
        body = value
    elif tag == 30:  # BMPString
        body = value.encode("utf-16-be")
    elif tag == 28:  # UniversalString
        body = value.encode("utf-32-be")
    else:
        body = value.encode()
    n = len(body)
    if n < 0x80:
        length = bytes([n])
    else:
        size = n.to_bytes((n.bit_length() + 7) // 8, "big")
        length = bytes([0x80 | len(size)]) + size
    return bytes([tag]) + length + body


@functools.cache
def _keyword_oids() -> frozenset[object]:
    """The attributes X500Principal names by keyword."""
    from cryptography.x509.oid import NameOID

    return frozenset({
        NameOID.COMMON_NAME, NameOID.COUNTRY_NAME, NameOID.LOCALITY_NAME, NameOID.STATE_OR_PROVINCE_NAME,
        NameOID.ORGANIZATION_NAME, NameOID.ORGANIZATIONAL_UNIT_NAME, NameOID.STREET_ADDRESS,
        NameOID.DOMAIN_COMPONENT, NameOID.USER_ID,
    })

"""Quota entities, keys and Kafka's validation of AlterClientQuotas and DescribeClientQuotas (pure).

Kafka (ZooKeeper mode) keeps client quotas in config znodes: `/config/users/<user>`,
`/config/users/<user>/clients/<client-id>`, `/config/clients/<client-id>` (`<default>` for the
default entity, names sanitized as Kafka's Sanitizer does) and `/config/ips/<ip>`. The same
`/config/users/<user>` map also holds the user's SCRAM credentials: only the quota keys here are
ever read or written by the quota code. Validation and messages follow ZkAdminManager's
alterClientQuotas/describeClientQuotas; a value must be a finite number greater than 0 (Kafka's
ClientQuotaControlManager rule: a quota of 0 or less is refused, not stored).
"""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from odradek.common.security import scram
from odradek.common.zk_data import DEFAULT_ENTITY

USER = "user"
CLIENT_ID = "client-id"
IP = "ip"

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
CONNECTION_CREATION_RATE = "connection_creation_rate"

CLIENT_QUOTA_KEYS: dict[str, str] = {
    PRODUCER_BYTE_RATE: "LONG",
    CONSUMER_BYTE_RATE: "LONG",
    REQUEST_PERCENTAGE: "DOUBLE",
    CONTROLLER_MUTATION_RATE: "DOUBLE",
}
"""QuotaConfigs' user and client-id keys and their ConfigDef types."""
IP_QUOTA_KEYS: dict[str, str] = {CONNECTION_CREATION_RATE: "INT"}

MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2
"""DescribeClientQuotas match types: a name, the default entity, any named entity."""


class InvalidQuotaRequest(ValueError):
    """Kafka's InvalidRequestException: the entry (or the whole describe) gets INVALID_REQUEST."""


class UnsupportedEntityType(ValueError):
    """Kafka's UnsupportedVersionException for a custom entity type in a describe filter."""


@dataclass(frozen=True)
class QuotaEntity:
    """One config znode holding quotas: `kind` ("users", "clients", "ips") and its znode path
    below `/config/` (sanitized names, `<default>`); `user`/`client_id`/`ip` as named (None:
    the default entity or absent)."""

    entity_path: str
    has_user: bool
    has_client: bool
    user: str | None = None
    client_id: str | None = None
    ip: str | None = None

    @property
    def keys(self) -> Mapping[str, str]:
        return IP_QUOTA_KEYS if self.entity_path.startswith("ips/") else CLIENT_QUOTA_KEYS


def sanitized_name(name: str | None) -> str:
    return DEFAULT_ENTITY if name is None else scram.sanitize(name)


def desanitized_name(name: str) -> str | None:
    return None if name == DEFAULT_ENTITY else scram.desanitize(name)


def user_path(user: str | None) -> str:
    return f"users/{sanitized_name(user)}"


def user_client_path(user: str | None, client_id: str | None) -> str:
    return f"users/{sanitized_name(user)}/clients/{sanitized_name(client_id)}"


def client_path(client_id: str | None) -> str:
    return f"clients/{sanitized_name(client_id)}"


def parse_alter_entity(components: Iterable[tuple[str, str | None]]) -> QuotaEntity:
    """An AlterClientQuotas entity (type, name) list as the znode it names (parseAndSanitizeQuotaEntity)."""
    seen: dict[str, str | None] = {}
    for entity_type, name in components:
        if entity_type not in (USER, CLIENT_ID, IP):
            raise InvalidQuotaRequest(f"Unhandled client quota entity type: {entity_type}")
        if name is not None and not name:
            raise InvalidQuotaRequest(f"Empty {entity_type} not supported")
        seen[entity_type] = name
    if not seen:
        raise InvalidQuotaRequest("Invalid empty client quota entity")
    has_user, has_client, has_ip = USER in seen, CLIENT_ID in seen, IP in seen
    if has_ip and (has_user or has_client):
        raise InvalidQuotaRequest("Invalid quota entity combination, IP entity should not be used with "
                                  "user/client ID entity.")
    user, client = seen.get(USER), seen.get(CLIENT_ID)
    if has_ip:
        ip = seen[IP]
        if ip is not None and not _valid_ip(ip):
            raise InvalidQuotaRequest(f"{ip} is not a valid IP or resolvable host.")
        return QuotaEntity(f"ips/{DEFAULT_ENTITY if ip is None else ip}", False, False, ip=ip)
    if has_user and has_client:
        return QuotaEntity(user_client_path(user, client), True, True, user, client)
    if has_user:
        return QuotaEntity(user_path(user), True, False, user=user)
    return QuotaEntity(client_path(client), False, True, client_id=client)


def _valid_ip(ip: str) -> bool:
    try:
        ipaddress.ip_address(ip)
    except ValueError:
        return False
    return True


def apply_ops(entity: QuotaEntity, config: Mapping[str, str],
              ops: Iterable[tuple[str, float, bool]]) -> dict[str, str]:
    """The znode's config map after the (key, value, remove) ops; keys that are not quota keys
    (SCRAM credentials in a user's znode) are kept as they are. InvalidQuotaRequest on a bad op."""
    out = dict(config)
    keys = entity.keys
    for key, value, remove in ops:
        if remove:
            out.pop(key, None)
            continue
        kind = keys.get(key)
        if kind is None:
            raise InvalidQuotaRequest(f"Invalid configuration key {key}")
        out[key] = quota_value_text(key, kind, value)
    return out


def quota_value_text(key: str, kind: str, value: float) -> str:
    """The value as Kafka writes it (Long/Int as an integer, Double as Java prints it), or
    InvalidQuotaRequest (Kafka's messages)."""
    if not math.isfinite(value):
        raise InvalidQuotaRequest(f"Invalid value {value} for configuration {key}: Not a number of type {kind}")
    if value <= 0.0:
        raise InvalidQuotaRequest(f"Quota {key} must be greater than 0")
    if kind == "DOUBLE":
        return repr(float(value))
    limit = 2**63 - 1 if kind == "LONG" else 2**31 - 1
    epsilon = 1e-6
    whole = int(value + epsilon)
    if abs(whole - value) > epsilon or whole > limit:
        raise InvalidQuotaRequest(f"Configuration {key} must be a {kind} value")
    return str(whole)


def quota_values(config: Mapping[str, str], keys: Mapping[str, str] = CLIENT_QUOTA_KEYS) -> dict[str, float]:
    """The quota keys of a config map as numbers; unreadable values are left out."""
    out = {}
    for key in keys:
        text = config.get(key)
        if text is None:
            continue
        try:
            value = float(text)
        except ValueError:
            continue
        if math.isfinite(value):
            out[key] = value
    return out


# --- DescribeClientQuotas -----------------------------------------------------------------------


@dataclass(frozen=True)
class FilterComponent:
    entity_type: str
    match: str | None
    """A name (exact), DEFAULT_ENTITY (the default entity), None (any named entity: Kafka's null match)."""


def parse_filter(components: Iterable[tuple[str, int, str | None]]) -> dict[str, FilterComponent]:
    """entity type → component, with ZkAdminManager.describeClientQuotas' checks."""
    out: dict[str, FilterComponent] = {}
    for entity_type, match_type, match in components:
        if match_type == MATCH_EXACT:
            if match is None:
                raise InvalidQuotaRequest("Exact match requires a non-null entity name")
            name: str | None = match
        elif match_type == MATCH_DEFAULT:
            name = DEFAULT_ENTITY
        elif match_type == MATCH_SPECIFIED:
            name = None
        else:
            raise InvalidQuotaRequest(f"Unexpected match type: {match_type}")
        if entity_type in (USER, CLIENT_ID, IP):
            if entity_type in out:
                label = {USER: "user", CLIENT_ID: "client", IP: "ip"}[entity_type]
                raise InvalidQuotaRequest(f"Duplicate {label} filter component entity type")
            out[entity_type] = FilterComponent(entity_type, name)
        elif entity_type == "":
            raise InvalidQuotaRequest("Unexpected empty filter component entity type")
        else:
            raise UnsupportedEntityType(f"Custom entity type '{entity_type}' not supported")
    if (USER in out or CLIENT_ID in out) and IP in out:
        raise InvalidQuotaRequest("Invalid entity filter component combination, IP filter component should not be "
                                  "used with user or clientId filter component.")
    return out


def _matches(component: FilterComponent | None, name: str | None, strict: bool) -> bool:
    """`name` is the znode name (sanitized, `<default>`) or None when the entity lacks that type."""
    if component is None:
        return name is None or not strict
    if component.match is None:
        return name is not None
    return name is not None and name == sanitized_or_default(component.match)


def sanitized_or_default(match: str) -> str:
    return match if match == DEFAULT_ENTITY else scram.sanitize(match)


def describe(filters: Mapping[str, FilterComponent], strict: bool,
             users: Mapping[str, Mapping[str, str]], user_clients: Mapping[tuple[str, str], Mapping[str, str]],
             clients: Mapping[str, Mapping[str, str]], ips: Mapping[str, Mapping[str, str]]
             ) -> list[tuple[list[tuple[str, str | None]], dict[str, float]]]:
    """The matching entities ([(type, name or None for default)], quota values), from every
    config map keyed by znode name: users, (user, client) pairs, clients, ips."""
    out: list[tuple[list[tuple[str, str | None]], dict[str, float]]] = []
    user_f, client_f, ip_f = filters.get(USER), filters.get(CLIENT_ID), filters.get(IP)
    if ip_f is None:
        candidates: list[tuple[str | None, str | None, Mapping[str, str]]] = []
        candidates += [(u, None, c) for u, c in users.items()]
        candidates += [(u, c, conf) for (u, c), conf in user_clients.items()]
        candidates += [(None, c, conf) for c, conf in clients.items()]
        for u, c, conf in candidates:
            values = quota_values(conf)
            if values and _matches(user_f, u, strict) and _matches(client_f, c, strict):
                entity: list[tuple[str, str | None]] = []
                if u is not None:
                    entity.append((USER, desanitized_name(u)))
                if c is not None:
                    entity.append((CLIENT_ID, desanitized_name(c)))
                out.append((entity, values))
    if user_f is None and client_f is None:
        for ip, conf in ips.items():
            values = quota_values(conf, IP_QUOTA_KEYS)
            if values and _matches(ip_f, ip, strict):
                out.append(([(IP, None if ip == DEFAULT_ENTITY else ip)], values))
    return out

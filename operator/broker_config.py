"""Broker config changes without restarts (Strimzi's KafkaBrokerConfigurationDiff).

The keys a broker applies live (common/dynamic_broker_keys) are kept in the cluster-wide dynamic
defaults, `/config/brokers/<default>`, through IncrementalAlterConfigs on the BROKER resource ""
(every broker reads it, running or restarted, and it wins over each broker's file); the rest of
the spec's config is in the pods' config hash and rolls them (builders.broker_config_hash). The
operator owns those keys at the default level: a live key removed from the spec is reset to its
default there (a broker's file may still hold the old value until its next restart), or deleted
when Kafka derives its default from another key (`log.retention.ms` from `log.retention.hours`:
brokers then keep the value of the file they started with until their next restart).
"""

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

from odradek.common.config import BrokerConfig
from odradek.common.dynamic_broker_keys import is_live
from odradek.common.security.channel import PLAINTEXT, ClientSecurity
from odradek.operator.kafka_admin import KafkaAdmin

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DynamicChange:
    """One IncrementalAlterConfigs of the default broker resource: SET these, DELETE those."""
    set: dict[str, str] = field(default_factory=dict)
    delete: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.set and not self.delete


def default_text(name: str) -> str | None:
    """Kafka's default of a broker key as text; None when it has none of its own."""
    key = BrokerConfig.config_keys().get(name)
    return None if key is None else key.default_text


def diff(desired: Mapping[str, str], live: Mapping[str, str]) -> DynamicChange:
    """What turns the live dynamic defaults (`live`, as DescribeConfigs of the BROKER resource ""
    lists them) into `desired` (the spec's live keys). Keys the broker does not apply live are
    left as they are: not the operator's."""
    to_set = {k: v for k, v in sorted(desired.items()) if live.get(k) != v}
    delete = []
    for name in sorted(k for k in live if is_live(k) and k not in desired):
        default = default_text(name)
        if default is None:
            delete.append(name)
        elif live[name] != default:
            to_set[name] = default
    return DynamicChange(to_set, tuple(delete))


async def apply_dynamic_defaults(bootstrap: list[tuple[str, int]], desired: Mapping[str, str],
                                 timeout: float = 10.0, security: ClientSecurity = PLAINTEXT
                                 ) -> tuple[DynamicChange, str | None]:
    """Make the cluster-wide dynamic defaults match `desired`: the change sent (empty when none
    was needed) and the brokers' refusal, if any. ConnectionError when no broker answers."""
    admin = KafkaAdmin(bootstrap, request_timeout=timeout, client_id="odradek-operator", security=security)
    try:
        change = diff(desired, await admin.describe_broker_defaults())
        if change.empty:
            return change, None
        return change, await admin.alter_broker_defaults(change.set, change.delete)
    finally:
        await admin.close()

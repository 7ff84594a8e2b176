"""Broker config changes without restarts (Strimzi's KafkaBrokerConfigurationDiff).

The keys a broker applies live (common/dynamic_broker_keys) are kept in the cluster-wide dynamic
defaults, `/config/brokers/<default>`, through IncrementalAlterConfigs on the BROKER resource ""
(every broker reads it, running or restarted, and it wins over each broker's file); the rest of
the spec's config is in the pods' config hash and rolls them (builders.broker_config_hash). The
operator owns those keys at the default level: a live key removed from the spec is reset to its
default there (a broker's file may still hold the old value until its next restart), or deleted
when Kafka derives its default from another key (`log.retention.ms` from `log.retention.hours`:
brokers then keep the value of the file they started with until their next restart). A
listener's key and trust stores (`listener.name.<l>.ssl.keystore.*`) are live per broker only:
they are kept in each broker's own dynamic configs, `/config/brokers/<id>`, sent to that broker.
"""

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from odradek.common.config import LISTENER_PREFIX, BrokerConfig
from odradek.common.dynamic_broker_keys import is_live, is_live_per_broker
from odradek.common.security.channel import PLAINTEXT, ClientSecurity
from odradek.common.topic_config import config_text
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


def startup_problem(properties: Mapping[str, object]) -> str | None:
    """Why a broker would refuse to start with the rendered `properties` (the ConfigException it
    prints before it exits, e.g. "Invalid value abc for configuration num.partitions: Not a number
    of type INT"), or None. A broker ignores keys it does not know: so does this. Refused as an
    invalid spec, as Strimzi refuses an invalid config parameter, instead of rolling the brokers
    one by one into a crash loop."""
    known = BrokerConfig.config_keys()
    text = {k: config_text(v) for k, v in properties.items() if k in known or k.startswith(LISTENER_PREFIX)}
    try:
        BrokerConfig.from_properties({"broker.id": "0", **text})  # broker.id: per pod, on the command line
    except ValueError as e:  # ConfigException
        return str(e)
    return None


def default_text(name: str) -> str | None:
    """Kafka's default of a broker key as text; None when it has none of its own."""
    key = BrokerConfig.config_keys().get(name)
    return None if key is None else key.default_text


def diff(desired: Mapping[str, str], live: Mapping[str, str],
         owned: Callable[[str], bool] = is_live) -> DynamicChange:
    """What turns the live dynamic configs (`live`, as DescribeConfigs of the BROKER resource ""
    or "<id>" lists them) into `desired` (the spec's live keys). Keys not `owned` (those the
    broker does not apply live at that level) are left as they are: not the operator's."""
    to_set = {k: v for k, v in sorted(desired.items()) if live.get(k) != v}
    delete = []
    for name in sorted(k for k in live if owned(k) and k not in desired):
        default = default_text(name)
        if default is None:
            delete.append(name)
        elif live[name] != default:
            to_set[name] = default
    return DynamicChange(to_set, tuple(delete))


async def apply_dynamic_defaults(bootstrap: list[tuple[str, int]], desired: Mapping[str, str],
                                 timeout: float = 10.0, security: ClientSecurity = PLAINTEXT
                                 ) -> tuple[DynamicChange, str | None]:
    """Make the cluster-wide dynamic defaults match `desired`, and each broker's own dynamic
    configs its per-broker keys (a listener's key stores, which Kafka refuses at the default):
    the changes sent (empty when none was needed; a per-broker key as `<key> (broker <id>)`) and
    the first refusal, if any. ConnectionError when no broker answers."""
    admin = KafkaAdmin(bootstrap, request_timeout=timeout, client_id="odradek-operator", security=security)
    defaults = {k: v for k, v in desired.items() if not is_live_per_broker(k)}
    per_broker = {k: v for k, v in desired.items() if is_live_per_broker(k)}
    try:
        change = diff(defaults, await admin.describe_broker_defaults())
        refused = None if change.empty else await admin.alter_broker_defaults(change.set, change.delete)
        changes = [change]
        for broker in sorted((await admin.broker_endpoints()).items()):
            own = diff(per_broker, await admin.describe_broker_defaults(broker), owned=is_live_per_broker)
            if not own.empty:
                refused = refused or await admin.alter_broker_defaults(own.set, own.delete, broker)
                changes.append(DynamicChange({f"{k} (broker {broker[0]})": v for k, v in own.set.items()},
                                             tuple(f"{k} (broker {broker[0]})" for k in own.delete)))
        return DynamicChange({k: v for c in changes for k, v in c.set.items()},
                             tuple(k for c in changes for k in c.delete)), refused
    finally:
        await admin.close()

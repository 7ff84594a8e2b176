"""The KafkaCluster custom resource as pydantic models: the single source of truth for the CRD.

Field names are camelCase on the wire (Kubernetes style); defaults make a five-line resource a
working three-broker cluster with two controllers and a three-node ZooKeeper ensemble.
"""

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

from odradek.operator.storage import parse_quantity

GROUP = "odradek.io"
VERSION = "v1alpha1"
KIND = "KafkaCluster"
PLURAL = "kafkaclusters"
SINGULAR = "kafkacluster"
SHORT_NAMES = ["kc"]

def _package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("odradek")
    except PackageNotFoundError:
        return "0.1.0"


DEFAULT_IMAGE = f"odradek:{_package_version()}"
"""The image of this operator's release, when its Deployment does not name its own (ODRADEK_IMAGE)."""
DEFAULT_ZOOKEEPER_IMAGE = "zookeeper:3.8"

# Keys the operator derives from the pod and the cluster; a user value would break the cluster.
OPERATOR_OWNED_KEYS = frozenset({
    "broker.id",
    "broker.rack",
    "zookeeper.connect",
    "listeners",
    "advertised.listeners",
    "listener.security.protocol.map",
    "control.plane.listener.name",
    "log.dirs",
    "controller.id",
    "metrics.port",
    "metrics.host",
    # security: spec.listeners, spec.authorization and the operator's certificates decide these
    "inter.broker.listener.name",
    "security.inter.broker.protocol",
    "authorizer.class.name",
    "super.users",
    "zookeeper.set.acl",
    "java.security.auth.login.config",
})


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


QUANTITY = (r"^[+-]?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
            r"(([KMGTPE]i)|[numkMGTPE]|([eE][+-]?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$")
"""A Kubernetes resource quantity (the pattern of Kubernetes' own schemas): the API server refuses
anything else in a claim or a container's resources, so the CRD refuses it first."""
Quantity = Annotated[str, Field(pattern=QUANTITY)]


class Storage(_Model):
    size: Quantity = Field("10Gi", description="PersistentVolumeClaim size per pod.")
    storage_class: str | None = Field(None, description="StorageClass name; the default class if unset.")
    delete_claim: bool = Field(False, description="Delete the claims when the cluster is deleted.")

    @field_validator("size")
    @classmethod
    def _positive(cls, size: str) -> str:
        if parse_quantity(size) <= 0:
            raise ValueError(f"a volume's size must be greater than zero: {size}")
        return size


class Resources(_Model):
    requests: dict[str, Quantity] = Field(default_factory=dict)
    limits: dict[str, Quantity] = Field(default_factory=dict)

    @field_validator("requests", "limits")
    @classmethod
    def _not_negative(cls, values: dict[str, str]) -> dict[str, str]:
        if negative := sorted(k for k, v in values.items() if parse_quantity(v) < 0):
            raise ValueError(f"resource quantities cannot be negative: {', '.join(negative)}")
        return values


class Toleration(_Model):
    key: str | None = None
    operator: Literal["Exists", "Equal"] | None = None
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: int | None = None


class LocalObjectReference(_Model):
    name: str = Field(min_length=1, max_length=253)


class EnvVar(_Model):
    name: str = Field(pattern=r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
    value: str = ""


class PodSettings(_Model):
    """Where a component's pods may run, and what they carry beyond what the operator sets (its own
    labels, annotations and environment variables win over these)."""
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: list[Toleration] = Field(default_factory=list)
    priority_class_name: str | None = None
    anti_affinity: Literal["preferred", "required", "none"] = Field(
        "preferred", description="Spread the component's pods over nodes (kubernetes.io/hostname): as a "
                                 "preference, as a rule (needs a node per pod), or not at all.")
    labels: dict[str, str] = Field(default_factory=dict, description="Extra pod labels.")
    annotations: dict[str, str] = Field(default_factory=dict, description="Extra pod annotations.")
    image_pull_secrets: list[LocalObjectReference] = Field(
        default_factory=list, description="Secrets for pulling the image from a private registry.")
    service_account_name: str | None = Field(None, description="The pods' ServiceAccount (default: the namespace's).")
    env: list[EnvVar] = Field(default_factory=list, description="Extra environment variables of the main container.")

    @field_validator("labels", "annotations")
    @classmethod
    def _keys(cls, value: dict[str, str]) -> dict[str, str]:
        bad = [k for k in value if not re.match(LABEL_KEY, k)]
        if bad:
            raise ValueError(f"not a Kubernetes label or annotation key: {bad}")
        return value


def _resources(cpu: str, memory: str, memory_limit: str) -> Resources:
    return Resources(requests={"cpu": cpu, "memory": memory}, limits={"memory": memory_limit})


LABEL_KEY = (r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
             r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
"""A Kubernetes label key: an optional DNS-subdomain prefix and a name of at most 63 characters
(it is also written into the broker's start command, so nothing else may pass)."""


class Rack(_Model):
    topology_key: str = Field(
        pattern=LABEL_KEY, max_length=317,
        description="Node label (e.g. topology.kubernetes.io/zone) whose value is each broker's broker.rack "
                    "(rack-aware replica placement); brokers also spread over it (a topology spread constraint)."
    )


DEFAULT_THROTTLE = 50 * 2**20
"""Bytes/s per broker for moving data: about 40 % of a 1 Gbit/s link, leaving the rest to clients."""


class RebalanceSpec(_Model):
    throttle_bytes_per_second: int = Field(
        DEFAULT_THROTTLE, ge=0,
        description="Replication throttle while partitions move (a scale-up, a drain, an on-demand rebalance): "
                    "leader/follower.replication.throttled.rate on the brokers involved, removed when the move "
                    "completes; 0 = unthrottled.")


MAX_BROKERS = 1000
"""More brokers than Kafka clusters run (the largest reported hold a few hundred). Each pass renders
per-broker objects and certificates, so an unbounded count hung the operator."""
MAX_ZOOKEEPER = 255
"""ZooKeeper's server ids (myid) run from 1 to 255; the operator renders a member per id."""
MAX_INT32 = 2**31 - 1
"""Kubernetes' replica counts are int32: the API server refuses more."""


def _breaks_line(text: str) -> bool:
    """Whether `text` would be more than one line of a properties file (str.splitlines' breaks)."""
    return len(f"-{text}-".splitlines()) != 1


ZOOKEEPER_CONNECT = r"[A-Za-z0-9.:\[\]_-]+(,[A-Za-z0-9.:\[\]_-]+)*(/[^\s]*)?"
"""ZooKeeper's connect string: hosts with optional ports (IPv6 in brackets), then a chroot path;
no whitespace (it is a line of server.properties)."""

CONFIG_KEY = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
"""Kafka's config names: dotted words (listener-prefixed ones carry the listener's name)."""


class BrokersSpec(_Model):
    replicas: int = Field(3, ge=1, le=MAX_BROKERS, description="Broker count; broker id = StatefulSet ordinal.")
    storage: Storage = Field(default_factory=Storage)
    resources: Resources = Field(default_factory=lambda: _resources("500m", "1Gi", "2Gi"))
    pod: PodSettings = Field(default_factory=PodSettings)
    config: dict[str, str | int | float | bool] = Field(
        default_factory=dict, description="Kafka broker config keys (server.properties)."
    )
    rack: Rack | None = None
    auto_rebalance: bool = Field(
        True, description="Move existing partitions onto brokers added by a scale-up (balanced, few moves); "
                          "a scale-down always drains the removed brokers first.")
    rebalance: RebalanceSpec = Field(default_factory=RebalanceSpec)

    @field_validator("config")
    @classmethod
    def _no_owned_keys(cls, config: dict[str, Any]) -> dict[str, Any]:
        # server.properties is one `key=value` per line, read by splitting lines and trimming the
        # key: whitespace around a key, or a line break in a value, would set a key of its own
        # (an owned one, past the check below, or one nobody configured).
        if bad := sorted(repr(k) for k in config if not re.fullmatch(CONFIG_KEY, k)):
            raise ValueError(f"not a Kafka config key: {', '.join(bad)}")
        if broken := sorted(k for k, v in config.items() if _breaks_line(str(v))):
            raise ValueError(f"config values cannot hold line breaks: {', '.join(broken)}")
        owned = sorted(OPERATOR_OWNED_KEYS & set(config))
        if owned:
            raise ValueError(f"keys set by the operator cannot be configured: {', '.join(owned)}")
        return config


class ControllerSpec(_Model):
    replicas: int = Field(2, ge=1, le=MAX_INT32, description="Controller candidates; one is active.")
    resources: Resources = Field(default_factory=lambda: _resources("100m", "256Mi", "512Mi"))
    pod: PodSettings = Field(default_factory=PodSettings)


JVM_SIZE = r"^[0-9]+[kKmMgG]?$"
HEAP_SHARE = 0.75
"""The most of a ZooKeeper container's memory limit its heap may take: the JVM needs the rest
(metaspace, threads, code cache, direct buffers)."""
JVM_OVERHEAD = 256 * 2**20
"""At least this much of the limit is left outside the heap when the heap is derived."""


def jvm_bytes(size: str) -> int:
    """A JVM size flag's value ("768m", "2g", "1048576") in bytes."""
    units = {"k": 2**10, "m": 2**20, "g": 2**30}
    last = size[-1].lower()
    return int(size[:-1]) * units[last] if last in units else int(size)


class JvmOptions(_Model):
    xmx: str | None = Field(None, alias="-Xmx", pattern=JVM_SIZE,
                            description="Maximum heap (-Xmx), e.g. 768m; at most 75 % of the memory limit. "
                                        "Unset: derived from the memory limit.")
    xms: str | None = Field(None, alias="-Xms", pattern=JVM_SIZE, description="Initial heap (-Xms).")


class ZooKeeperSpec(_Model):
    connect: str | None = Field(
        None, description="host:port[,...][/chroot] of an existing ensemble; unset = operator-managed."
    )
    replicas: int = Field(3, ge=1, le=MAX_ZOOKEEPER, description="Ensemble size when operator-managed.")
    storage: Storage = Field(default_factory=lambda: Storage(size="1Gi"))
    image: str = DEFAULT_ZOOKEEPER_IMAGE
    resources: Resources = Field(default_factory=lambda: _resources("100m", "512Mi", "1Gi"))
    jvm_options: JvmOptions = Field(default_factory=JvmOptions,
                                    description="The ZooKeeper JVM's heap; unset: at most 75 % of the memory limit.")
    pod: PodSettings = Field(default_factory=PodSettings)

    @property
    def managed(self) -> bool:
        return self.connect is None

    def memory_limit(self) -> int | None:
        """The container's memory limit (else its request) in bytes, if any."""
        text = self.resources.limits.get("memory") or self.resources.requests.get("memory")
        return None if text is None else int(parse_quantity(text))

    def heap_bytes(self) -> int | None:
        """The heap: -Xmx from the spec, else 75 % of the memory limit (leaving at least 256 MiB
        to the JVM); None without either (the image's default)."""
        if self.jvm_options.xmx is not None:
            return jvm_bytes(self.jvm_options.xmx)
        limit = self.memory_limit()
        if limit is None:
            return None
        return max(64 * 2**20, min(int(limit * HEAP_SHARE), limit - JVM_OVERHEAD)) // 2**20 * 2**20

    @model_validator(mode="after")
    def _heap_fits(self) -> "ZooKeeperSpec":
        limit, xmx = self.memory_limit(), self.jvm_options.xmx
        if limit is not None and xmx is not None and jvm_bytes(xmx) > limit * HEAP_SHARE:
            raise ValueError(f"zookeeper.jvmOptions.-Xmx {xmx} exceeds 75 % of the memory limit "
                             f"({limit // 2**20} MiB): the JVM needs the rest, the pod would be OOM-killed")
        return self


class MetricsSpec(_Model):
    enabled: bool = Field(False, description="Expose every broker's and controller's Prometheus endpoint "
                                             "(port 9404, named `metrics`, with prometheus.io annotations).")


LISTENER_NAME = r"^[a-z][a-z0-9]{0,10}$"
"""Also the name of its port in the Services (at most 15 characters, with room for suffixes)."""
RESERVED_LISTENERS = frozenset({"replication", "controller"})
"""The operator's own listeners (mutual TLS between brokers, controllers and the operator)."""
RESERVED_PORTS = frozenset({9090, 9091, 9190, 9404})
"""Replication, the brokers' control plane, the controller and metrics."""


class LabelSelector(_Model):
    match_labels: dict[str, str] = Field(default_factory=dict)


class IpBlock(_Model):
    cidr: str
    except_: list[str] = Field(default_factory=list, alias="except")


class NetworkPolicyPeer(_Model):
    """Who may connect (Kubernetes' NetworkPolicyPeer: pods, namespaces, or addresses)."""
    pod_selector: LabelSelector | None = None
    namespace_selector: LabelSelector | None = None
    ip_block: IpBlock | None = None


class ListenerAuthentication(_Model):
    type: Literal["scram-sha-512", "tls", "none"] = Field(
        "none", description="scram-sha-512: SASL SCRAM-SHA-512 (KafkaUser passwords); tls: a client certificate "
                            "signed by the clients CA (needs tls: true); none: anonymous.")


class Listener(_Model):
    """A client listener; Kafka's listener name is the name in upper case."""
    name: str = Field(pattern=LISTENER_NAME, description="Lower-case letters and digits; not replication or controller.")
    port: int = Field(ge=1024, le=65535)
    type: Literal["internal", "nodeport", "loadbalancer"] = Field(
        "internal", description="internal: the bootstrap Service inside Kubernetes; nodeport/loadbalancer: a Service "
                                "per broker and a bootstrap Service of that type.")
    tls: bool = Field(False, description="TLS with a broker certificate signed by the cluster CA.")
    authentication: ListenerAuthentication = Field(default_factory=ListenerAuthentication)
    allowed_peers: list[NetworkPolicyPeer] | None = Field(
        None, description="NetworkPolicy peers allowed to connect to this listener; unset: everyone.")

    @model_validator(mode="after")
    def _tls_auth_needs_tls(self) -> "Listener":
        if self.authentication.type == "tls" and not self.tls:
            raise ValueError(f"listener {self.name}: authentication tls needs tls: true")
        return self

    @property
    def kafka_name(self) -> str:
        return self.name.upper()

    @property
    def security_protocol(self) -> str:
        sasl = self.authentication.type == "scram-sha-512"
        return ("SASL_" if sasl else "") + ("SSL" if self.tls else "PLAINTEXT")

    @property
    def secured(self) -> bool:
        return self.tls or self.authentication.type != "none"


def _default_listeners() -> list[Listener]:
    return [Listener(name="plaintext", port=9092)]


class Authorization(_Model):
    type: Literal["simple"] = Field("simple", description="Kafka's ACL authorizer (ACLs in ZooKeeper).")
    super_users: list[str] = Field(default_factory=list, description="Principals allowed everything, e.g. User:ops.")

    @field_validator("super_users")
    @classmethod
    def _principals(cls, users: list[str]) -> list[str]:
        # one line of server.properties holds them all: a line break would set keys of its own
        bad = [u for u in users if not u.startswith("User:") or ";" in u or len(u) <= 5 or _breaks_line(u)]
        if bad:
            raise ValueError(f"super users are principals like User:name: {', '.join(bad)}")
        return users


MAX_VALIDITY_DAYS = 36_500
"""A century: the CA (5×) still ends long before X.509's last date (9999-12-31); an unbounded
count overflowed the date arithmetic of every pass."""


class CertificateAuthority(_Model):
    generate_certificate_authority: bool = Field(
        True, description="false: the user supplies the CA in Secrets <cluster>-<ca> (ca.crt, ca.key) and "
                          "<cluster>-<ca>-cert (ca.crt).")
    validity_days: int = Field(365, ge=2, le=MAX_VALIDITY_DAYS,
                               description="Validity of the certificates it issues (the CA: 5×).")
    renewal_days: int = Field(30, ge=1, description="Certificates are renewed this many days before they expire.")

    @model_validator(mode="after")
    def _renewal_within_validity(self) -> "CertificateAuthority":
        if self.renewal_days >= self.validity_days:
            raise ValueError("renewalDays must be less than validityDays")
        return self


class KafkaClusterSpec(_Model):
    image: str | None = Field(
        None, description="Broker and controller image. Unset: the operator's own image, read at each "
                          "reconcile, so upgrading the operator rolls the brokers onto the same version.")
    brokers: BrokersSpec = Field(default_factory=BrokersSpec)
    controller: ControllerSpec = Field(default_factory=ControllerSpec)
    zookeeper: ZooKeeperSpec = Field(default_factory=ZooKeeperSpec)
    metrics: MetricsSpec = Field(default_factory=MetricsSpec)
    listeners: list[Listener] = Field(
        default_factory=_default_listeners,
        description="Client listeners. Any TLS or authenticated listener, or authorization, secures the cluster: "
                    "replication and controller traffic on mutual TLS with the operator's certificates.")
    authorization: Authorization | None = Field(None, description="Kafka's ACL authorizer; unset: everyone may do everything.")
    cluster_ca: CertificateAuthority = Field(default_factory=CertificateAuthority,
                                             description="Signs broker, controller and operator certificates.")
    clients_ca: CertificateAuthority = Field(default_factory=CertificateAuthority,
                                             description="Signs KafkaUser certificates (tls authentication).")

    @property
    def secured(self) -> bool:
        """TLS between the cluster's own processes, certificates, ZooKeeper ACLs."""
        return self.authorization is not None or any(listener.secured for listener in self.listeners)

    @model_validator(mode="after")
    def _listeners_distinct(self) -> "KafkaClusterSpec":
        names = [listener.name for listener in self.listeners]
        ports = [listener.port for listener in self.listeners]
        if not self.listeners:
            raise ValueError("listeners: at least one client listener")
        if len(set(names)) != len(names) or len(set(ports)) != len(ports):
            raise ValueError("listeners: names and ports must be distinct")
        if reserved := sorted(RESERVED_LISTENERS & set(names)):
            raise ValueError(f"listeners: {', '.join(reserved)} is the operator's own listener")
        if taken := sorted(RESERVED_PORTS & set(ports)):
            raise ValueError(f"listeners: port {', '.join(map(str, taken))} is the operator's own")
        return self

    @model_validator(mode="after")
    def _zookeeper_chroot(self) -> "KafkaClusterSpec":
        connect = self.zookeeper.connect
        if connect is not None and not connect.strip():
            raise ValueError("zookeeper.connect must not be empty; omit it for a managed ensemble")
        if connect is not None and not re.fullmatch(ZOOKEEPER_CONNECT, connect):
            raise ValueError(f"zookeeper.connect {connect!r} is not host:port[,host:port...][/chroot]")
        return self


class Condition(_Model):
    type: str
    status: str = Field(description="True, False or Unknown.")
    reason: str
    message: str = ""
    observed_generation: int | None = None
    last_transition_time: str | None = None


class BrokersStatus(_Model):
    desired: int = 0
    ready: int = 0
    ids: list[int] = Field(default_factory=list)


class ComponentStatus(_Model):
    desired: int = 0
    ready: int = Field(0, description="Pods Ready per their readiness probe.")


class KafkaClusterStatus(_Model):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    observed_generation: int | None = None
    conditions: list[Condition] = Field(default_factory=list)
    brokers: BrokersStatus = Field(default_factory=BrokersStatus)
    controllers: ComponentStatus = Field(
        default_factory=ComponentStatus,
        description="Controller pods; a controller pod is Ready when it is the active controller or a "
                    "healthy standby (the active controller's id is in ZooKeeper's /controller).")
    zookeeper: ComponentStatus | None = Field(
        None, description="The operator-managed ZooKeeper ensemble; null for an existing one.")
    bootstrap_servers: str | None = None
    data_movement: "DataMovementStatus | None" = Field(
        None, description="Partitions being moved (a drain, a scale-up spread, a rebalance) and what is throttled.")
    rebalance: "RebalanceStatus | None" = Field(
        None, description="The on-demand rebalance (annotation odradek.io/rebalance: plan, then approve): "
                          "its dry-run plan, then its state.")


class DataMovementStatus(_Model):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    reason: str = ""
    partitions: int = Field(0, description="Partitions this move reassigns.")
    done: int = Field(0, description="Of which complete.")
    throttle_bytes_per_second: int = 0
    throttled_brokers: list[int] = Field(default_factory=list)
    throttled_topics: list[str] = Field(default_factory=list)


class RebalanceBroker(_Model):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    id: int
    rack: str | None = None
    replicas_before: int = 0
    replicas_after: int = 0
    leaders_before: int = Field(0, description="Preferred leaderships (first replicas).")
    leaders_after: int = 0


class RebalanceStatus(_Model):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    state: str = Field("", description="ProposalReady, Rebalancing, Ready or NotReady.")
    message: str = ""
    plan_id: str | None = Field(None, description="Approving runs this plan only if it is still the one computed.")
    partitions_to_reassign: int = 0
    replicas_to_copy: int = 0
    leader_changes: int = 0
    brokers: list[RebalanceBroker] = Field(default_factory=list)


KafkaClusterStatus.model_rebuild()


def parse_spec(spec: dict[str, Any] | None) -> KafkaClusterSpec:
    """The spec of a resource as a validated model (pydantic.ValidationError when invalid)."""
    return KafkaClusterSpec.model_validate(spec or {})


def spec_error_message(error: Exception) -> str:
    """A one-line, user-facing summary of a validation error (for a condition message)."""
    errors = getattr(error, "errors", None)
    if errors is None:
        return str(error)
    parts = []
    for e in errors():
        where = ".".join(str(p) for p in e.get("loc", ()))
        msg = e.get("msg", "").removeprefix("Value error, ")
        parts.append(f"spec.{where}: {msg}" if where else msg)
    return "; ".join(parts)

"""Kafka's ZooKeeper layout: znode paths and their JSON, as Kafka 2.x writes them.

Paths are relative to the chroot in `zookeeper.connect` (kazoo applies it), so Kafka's own tooling
and knowledge apply. Every function here is pure: bytes in, plain data out, and back.
"""

import json
import time
from dataclasses import dataclass, field

CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
BROKER_IDS = "/brokers/ids"
BROKER_TOPICS = "/brokers/topics"
CONFIG_TOPICS = "/config/topics"
CONFIG_BROKERS = "/config/brokers"
CONFIG_CHANGES = "/config/changes"
CONFIG_CHANGE_PREFIX = "config_change_"
"""Sequential children of /config/changes announce config changes to every broker."""
DEFAULT_ENTITY = "<default>"
"""The name of the cluster-wide default entity (`/config/brokers/<default>`)."""
DELETE_TOPICS = "/admin/delete_topics"
REASSIGN_PARTITIONS = "/admin/reassign_partitions"
LATEST_PRODUCER_ID_BLOCK = "/latest_producer_id_block"
"""The newest block of producer ids any broker claimed (Kafka's ProducerIdBlockZNode)."""
LOG_DIR_EVENT_NOTIFICATION = "/log_dir_event_notification"
"""Brokers whose log directories failed: persistent sequential children, read and deleted by the
controller (Kafka's LogDirEventNotificationZNode)."""
LOG_DIR_EVENT_PREFIX = "log_dir_event_"

PERSISTENT_PATHS = (BROKER_IDS, BROKER_TOPICS, CONFIG_TOPICS, CONFIG_BROKERS, CONFIG_CHANGES, DELETE_TOPICS,
                    LOG_DIR_EVENT_NOTIFICATION)
"""Created (if missing) by whoever connects first, as Kafka does at start-up."""


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS}/{broker_id}"


def topic_path(topic: str) -> str:
    return f"{BROKER_TOPICS}/{topic}"


def consumer_offset_path(group: str, topic: str, partition: int) -> str:
    """Kafka's ConsumerOffset znode: where OffsetCommit v0 keeps a group's offset (text)."""
    return f"/consumers/{group}/offsets/{topic}/{partition}"


def partitions_path(topic: str) -> str:
    return f"{BROKER_TOPICS}/{topic}/partitions"


def partition_state_path(topic: str, partition: int) -> str:
    return f"{BROKER_TOPICS}/{topic}/partitions/{partition}/state"


def topic_config_path(topic: str) -> str:
    return f"{CONFIG_TOPICS}/{topic}"


def delete_topic_path(topic: str) -> str:
    return f"{DELETE_TOPICS}/{topic}"


def broker_config_path(entity: str) -> str:
    """`/config/brokers/<id>` or, for DEFAULT_ENTITY, the cluster-wide defaults."""
    return f"{CONFIG_BROKERS}/{entity}"


def entity_config_path(entity_path: str) -> str:
    """`/config/<entity_path>`, where an entity path is `topics/<t>` or `brokers/<b>`."""
    return f"/config/{entity_path}"


def _dump(obj: dict[str, object]) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


# --- /brokers/ids/<id> ---------------------------------------------------------------------------


@dataclass(frozen=True)
class EndPoint:
    host: str
    port: int
    listener: str = "PLAINTEXT"
    security_protocol: str = "PLAINTEXT"

    def url(self) -> str:
        return f"{self.listener}://{self.host}:{self.port}"


@dataclass(frozen=True)
class BrokerInfo:
    """A broker's registration. `epoch` is the czxid of its znode (not stored in the JSON)."""

    id: int
    endpoints: tuple[EndPoint, ...]
    rack: str | None = None
    epoch: int = -1

    def endpoint_named(self, listener: str) -> EndPoint | None:
        """The endpoint of `listener`, or None (no fallback to another listener)."""
        for ep in self.endpoints:
            if ep.listener == listener:
                return ep
        return None

    def endpoint(self, listener: str = "PLAINTEXT") -> EndPoint:
        for ep in self.endpoints:
            if ep.listener == listener:
                return ep
        return self.endpoints[0]


def encode_broker(info: BrokerInfo) -> bytes:
    first = info.endpoints[0]
    return _dump(
        {
            "version": 5,
            "host": first.host,
            "port": first.port,
            "jmx_port": -1,
            "timestamp": str(int(time.time() * 1000)),
            "endpoints": [ep.url() for ep in info.endpoints],
            "listener_security_protocol_map": {
                ep.listener: ep.security_protocol for ep in info.endpoints
            },
            "rack": info.rack,
            "features": {},
        }
    )


def decode_broker(broker_id: int, data: bytes, czxid: int = -1) -> BrokerInfo:
    obj = json.loads(data)
    protocols = obj.get("listener_security_protocol_map") or {}
    endpoints = []
    for url in obj.get("endpoints", []):
        listener, rest = url.split("://", 1)
        host, port = rest.rsplit(":", 1)
        host = host.strip("[]")
        endpoints.append(EndPoint(host, int(port), listener, protocols.get(listener, listener)))
    if not endpoints:
        endpoints.append(EndPoint(obj["host"], int(obj["port"])))
    return BrokerInfo(broker_id, tuple(endpoints), obj.get("rack"), czxid)


# --- /brokers/topics/<topic> ---------------------------------------------------------------------


@dataclass(frozen=True)
class TopicAssignment:
    """partition → replica list; the first replica is the preferred leader."""

    partitions: dict[int, tuple[int, ...]]
    topic_id: str | None = None
    adding_replicas: dict[int, tuple[int, ...]] = field(default_factory=dict)
    removing_replicas: dict[int, tuple[int, ...]] = field(default_factory=dict)


def encode_topic_assignment(a: TopicAssignment) -> bytes:
    obj = {
        "version": 2,
        "partitions": {str(p): list(r) for p, r in sorted(a.partitions.items())},
        "adding_replicas": {str(p): list(r) for p, r in sorted(a.adding_replicas.items())},
        "removing_replicas": {str(p): list(r) for p, r in sorted(a.removing_replicas.items())},
    }
    if a.topic_id:
        obj["topic_id"] = a.topic_id
    return _dump(obj)


def decode_topic_assignment(data: bytes) -> TopicAssignment:
    obj = json.loads(data)

    def parts(key: str) -> dict[int, tuple[int, ...]]:
        return {int(p): tuple(r) for p, r in (obj.get(key) or {}).items()}

    return TopicAssignment(
        parts("partitions"), obj.get("topic_id"), parts("adding_replicas"), parts("removing_replicas")
    )


# --- /brokers/topics/<topic>/partitions/<p>/state -----------------------------------------------


@dataclass(frozen=True)
class LeaderIsrAndControllerEpoch:
    """The partition state znode. `zk_version` is its znode version, the compare-and-set token."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    zk_version: int = 0


def encode_partition_state(s: LeaderIsrAndControllerEpoch) -> bytes:
    return _dump(
        {
            "controller_epoch": s.controller_epoch,
            "leader": s.leader,
            "version": 1,
            "leader_epoch": s.leader_epoch,
            "isr": list(s.isr),
        }
    )


def decode_partition_state(data: bytes, zk_version: int = 0) -> LeaderIsrAndControllerEpoch:
    obj = json.loads(data)
    return LeaderIsrAndControllerEpoch(
        int(obj["leader"]),
        int(obj["leader_epoch"]),
        tuple(int(b) for b in obj["isr"]),
        int(obj["controller_epoch"]),
        zk_version,
    )


# --- /config/topics/<topic> ----------------------------------------------------------------------


@dataclass(frozen=True)
class EntityConfig:
    """An entity's overrides as read from ZooKeeper (`/config/topics/<t>`, `/config/brokers/<b>`).

    `mzxid` orders reads of one path (it grows with every change, also across deletion and
    re-creation; -1: no znode); `version` is the compare-and-set token of the znode (-1: none)."""

    config: dict[str, str]
    mzxid: int = -1
    version: int = -1


def encode_entity_config(config: dict[str, str]) -> bytes:
    """Kafka's JSON for every config entity: `{"version":1,"config":{...}}`, string values."""
    return _dump({"version": 1, "config": {k: str(v) for k, v in sorted(config.items())}})


def decode_entity_config(data: bytes) -> dict[str, str]:
    """The `config` map of an entity's znode; ValueError when it is not Kafka's JSON."""
    obj = json.loads(data) if data else {}
    if not isinstance(obj, dict):
        raise ValueError("not a JSON object")
    config = obj.get("config") or {}
    if not isinstance(config, dict):
        raise ValueError("config is not a JSON object")
    return {str(k): v if isinstance(v, str) else json.dumps(v) for k, v in config.items() if v is not None}


# --- /config/changes/config_change_NNNNNNNNNN ------------------------------------------------------


def encode_config_change(entity_path: str) -> bytes:
    """Kafka's version 2 notification: which entity's config changed (`topics/<t>`, ...)."""
    return _dump({"version": 2, "entity_path": entity_path})


def decode_config_change(data: bytes) -> str:
    """The entity path a notification names; version 1 (`entity_type`, `entity_name`) too.
    ValueError (or KeyError) on anything else."""
    obj = json.loads(data)
    if not isinstance(obj, dict):
        raise ValueError("not a JSON object")
    if obj.get("version") == 1:
        return f"{obj['entity_type']}/{obj['entity_name']}"
    path = obj["entity_path"]
    if not isinstance(path, str):
        raise ValueError("entity_path is not a string")
    return path


def config_change_sequence(name: str) -> int | None:
    """The sequence number of a `config_change_NNNNNNNNNN` child; None for anything else."""
    if not name.startswith(CONFIG_CHANGE_PREFIX):
        return None
    digits = name[len(CONFIG_CHANGE_PREFIX):]
    return int(digits) if digits.isascii() and digits.isdigit() else None


# --- /controller and /controller_epoch ----------------------------------------------------------


@dataclass(frozen=True)
class ControllerInfo:
    """Who is the active controller. Odradek's controller is its own process with its own id
    (`controller.id`), so `brokerid` names a controller, not a broker; `endpoint` is where it
    takes broker-to-controller requests (AlterPartition, ControlledShutdown), when it has one."""

    controller_id: int
    endpoint: EndPoint | None = None


def encode_controller(info: ControllerInfo) -> bytes:
    obj: dict[str, object] = {"version": 1, "brokerid": info.controller_id, "timestamp": str(int(time.time() * 1000))}
    if info.endpoint is not None:
        obj["host"] = info.endpoint.host
        obj["port"] = info.endpoint.port
        obj["listener"] = info.endpoint.listener
        obj["security_protocol"] = info.endpoint.security_protocol
    return _dump(obj)


def decode_controller(data: bytes) -> ControllerInfo:
    obj = json.loads(data)
    endpoint = (EndPoint(obj["host"], int(obj["port"]), str(obj.get("listener", "PLAINTEXT")),
                         str(obj.get("security_protocol", "PLAINTEXT")))
                if "host" in obj else None)
    return ControllerInfo(int(obj["brokerid"]), endpoint)


def encode_controller_epoch(epoch: int) -> bytes:
    return str(epoch).encode()


def decode_controller_epoch(data: bytes) -> int:
    return int(data)


# --- /latest_producer_id_block -------------------------------------------------------------------

PRODUCER_ID_BLOCK_SIZE = 1000
"""Ids per block (Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE)."""


@dataclass(frozen=True)
class ProducerIdsBlock:
    """A range of producer ids one broker owns: `first_producer_id` .. `last_producer_id`."""

    assigned_broker_id: int
    first_producer_id: int
    size: int

    @property
    def last_producer_id(self) -> int:
        return self.first_producer_id + self.size - 1

    def next_block_first_id(self) -> int:
        return self.first_producer_id + self.size


def encode_producer_id_block(block: ProducerIdsBlock) -> bytes:
    """Kafka's JSON: version and broker are numbers, block_start and block_end strings (longs
    survive JSON readers that use doubles)."""
    return _dump(
        {
            "version": 1,
            "broker": block.assigned_broker_id,
            "block_start": str(block.first_producer_id),
            "block_end": str(block.last_producer_id),
        }
    )


def decode_producer_id_block(data: bytes) -> ProducerIdsBlock:
    """Raises ValueError (or KeyError) on anything that is not Kafka's block JSON."""
    obj = json.loads(data)
    start, end = int(obj["block_start"]), int(obj["block_end"])
    if end < start:
        raise ValueError(f"producer id block ends ({end}) before it starts ({start})")
    return ProducerIdsBlock(int(obj["broker"]), start, end - start + 1)


# --- /log_dir_event_notification/log_dir_event_<seq> ----------------------------------------------

LOG_DIR_FAILURE_EVENT = 1
"""Kafka's LogDirEventNotificationHandler.LogDirFailure: the only event there is."""


def log_dir_event_path(sequence_node: str = "") -> str:
    """The child `log_dir_event_<seq>` (the prefix alone: ZooKeeper appends the sequence)."""
    return f"{LOG_DIR_EVENT_NOTIFICATION}/{sequence_node or LOG_DIR_EVENT_PREFIX}"


def encode_log_dir_event(broker_id: int) -> bytes:
    return _dump({"version": 1, "broker": broker_id, "event": LOG_DIR_FAILURE_EVENT})


def decode_log_dir_event(data: bytes) -> int | None:
    """The broker id of a log-dir failure notification; None for another event or bad JSON."""
    try:
        obj = json.loads(data)
        if obj.get("event") != LOG_DIR_FAILURE_EVENT:
            return None
        return int(obj["broker"])
    except (ValueError, KeyError, TypeError, AttributeError):
        return None

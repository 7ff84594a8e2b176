"""Topic administration at a broker: validate, plan, write the znodes, wait for the controller.

The decisions (name rules, replica assignment, request validation) are pure functions over plain
data, Kafka's rules (`Topic.validate`, `AdminUtils.assignReplicasToBrokers`); `AdminManager` is the
thin shell that writes ZooKeeper and waits until the controller's UpdateMetadata shows the result.
"""

import logging
import random
import re
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from odradek.common.config import BrokerConfig
from odradek.common.errors import KafkaError
from odradek.common.zk_data import TopicAssignment, encode_topic_assignment

from .group.offsets_topic import GROUP_METADATA_TOPIC_CONFIG, GROUP_METADATA_TOPIC_NAME
from .log.config import LogConfig
from .metadata_cache import MetadataCache
from .zk_client import AssignmentChangedError, BrokerZkClient, TopicExistsError, new_base64_uuid

log = logging.getLogger(__name__)

MAX_NAME_LENGTH = 249
_LEGAL = re.compile(r"[a-zA-Z0-9._-]+")
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
MAX_PARTITIONS = 50_000
"""Partitions a topic may have: its assignment must fit one znode (ZooKeeper's 1 MiB
jute.maxbuffer), and a request asking for 2^31 must be refused, not computed."""
MAX_ASSIGNMENT_BYTES = 900_000
"""Largest assignment znode written: a larger write makes ZooKeeper drop the connection."""
MAX_WRITE_ATTEMPTS = 5
"""Read-modify-write attempts of a topic's assignment while other brokers change it."""


def check_assignment_size(topic: str, assignment: TopicAssignment) -> None:
    size = len(encode_topic_assignment(assignment))
    if size > MAX_ASSIGNMENT_BYTES:
        raise ApiError(ErrorCode.invalid_partitions, f"The assignment of topic '{topic}' would take {size} bytes in "
                       f"ZooKeeper, more than {MAX_ASSIGNMENT_BYTES}: fewer partitions or replicas.")


class ApiError(KafkaError):
    """A Kafka error code with a message, the result of a failed admin step."""

    def __init__(self, error_code: ErrorCode, message: str | None = None):
        super().__init__(message or error_code.name)
        self.error_code = error_code
        self.message = message


# --- pure rules ------------------------------------------------------------------------------------


def topic_name_error(name: str | None) -> str | None:
    """Why `name` is not a legal topic name (Kafka's Topic.validate), or None when it is."""
    if not name:
        return "Topic name is illegal, it can't be empty"
    if name in (".", ".."):
        return "Topic name cannot be \".\" or \"..\""
    if len(name) > MAX_NAME_LENGTH:
        return f"Topic name is illegal, it can't be longer than {MAX_NAME_LENGTH} characters"
    if not _LEGAL.fullmatch(name):
        return (
            f"Topic name \"{name}\" is illegal, it contains a character other than "
            "ASCII alphanumerics, '.', '_' and '-'"
        )
    return None


def validate_topic_name(name: str | None) -> None:
    error = topic_name_error(name)
    if error is not None:
        raise ApiError(ErrorCode.invalid_topic_exception, error)


def has_collision_chars(name: str) -> bool:
    """'.' and '_' map to the same character in metric names."""
    return "." in name or "_" in name


def colliding_topics(name: str, existing: Collection[str]) -> list[str]:
    """The existing topics whose names differ from `name` only by '.' versus '_' (their metrics
    would mix): Kafka refuses to create such a topic, and accepts every other name silently."""
    if not has_collision_chars(name):
        return []
    key = name.replace(".", "_")
    return sorted(t for t in existing if t != name and t.replace(".", "_") == key)


def assign_replicas_to_brokers(
    brokers: Sequence[tuple[int, str | None]],
    num_partitions: int,
    replication_factor: int,
    fixed_start_index: int = -1,
    start_partition_id: int = -1,
    rng: random.Random | None = None,
) -> dict[int, tuple[int, ...]]:
    """Kafka's AdminUtils.assignReplicasToBrokers: partition → replicas, first is preferred leader.

    Leaders go round-robin over the brokers from a random start; followers follow at a shift that
    grows each time the partitions wrap around, so replicas of one broker's leaders spread over the
    others. Rack-aware (racks alternate in the broker order, one replica per rack while racks are
    left) when every broker has a rack; otherwise rack-unaware.
    """
    if num_partitions <= 0:
        raise ApiError(ErrorCode.invalid_partitions, "Number of partitions must be larger than 0.")
    if replication_factor <= 0:
        raise ApiError(ErrorCode.invalid_replication_factor, "Replication factor must be larger than 0.")
    if replication_factor > len(brokers):
        raise ApiError(
            ErrorCode.invalid_replication_factor,
            f"Replication factor: {replication_factor} larger than available brokers: {len(brokers)}.",
        )
    rng = rng or random.Random()
    racks = dict(brokers)
    known_racks = {b: r for b, r in racks.items() if r is not None}
    if len(known_racks) == len(racks):
        return _assign_rack_aware(known_racks, num_partitions, replication_factor, fixed_start_index, start_partition_id, rng)
    return _assign_rack_unaware(
        sorted(racks), num_partitions, replication_factor, fixed_start_index, start_partition_id, rng
    )


def _replica_index(first_index: int, shift: int, j: int, n: int) -> int:
    return (first_index + 1 + (shift + j) % (n - 1)) % n


def _leader_positions(n: int, n_parts: int, fixed_start: int, start_partition: int, rng: random.Random
                      ) -> Iterator[tuple[int, int, int]]:
    """(partition, index of its leader, follower shift) in Kafka's order: leaders round-robin from a
    random start, the follower shift growing by one after every n partitions."""
    start = fixed_start if fixed_start >= 0 else rng.randrange(n)
    shift = fixed_start if fixed_start >= 0 else rng.randrange(n)
    for pid in range(max(0, start_partition), max(0, start_partition) + n_parts):
        if pid > 0 and pid % n == 0:
            shift += 1
        yield pid, (pid + start) % n, shift


def _assign_rack_unaware(
    ids: list[int], n_parts: int, rf: int, fixed_start: int, start_partition: int, rng: random.Random
) -> dict[int, tuple[int, ...]]:
    n = len(ids)
    return {
        pid: (ids[first],) + tuple(ids[_replica_index(first, shift, j, n)] for j in range(rf - 1))
        for pid, first, shift in _leader_positions(n, n_parts, fixed_start, start_partition, rng)
    }


def rack_alternated_brokers(racks: Mapping[int, str]) -> list[int]:
    """Brokers ordered so consecutive ones sit in different racks (racks sorted, ids sorted)."""
    by_rack: dict[str, list[int]] = {}
    for broker in sorted(racks):
        by_rack.setdefault(racks[broker], []).append(broker)
    iters = [iter(by_rack[r]) for r in sorted(by_rack)]
    out: list[int] = []
    i = 0
    while len(out) < len(racks):
        nxt = next(iters[i], None)
        if nxt is not None:
            out.append(nxt)
        i = (i + 1) % len(iters)
    return out


def _assign_rack_aware(
    racks: Mapping[int, str], n_parts: int, rf: int, fixed_start: int, start_partition: int, rng: random.Random
) -> dict[int, tuple[int, ...]]:
    arranged = rack_alternated_brokers(racks)
    n = len(arranged)
    num_racks = len(set(racks.values()))
    out: dict[int, tuple[int, ...]] = {}
    for pid, first, shift in _leader_positions(n, n_parts, fixed_start, start_partition, rng):
        leader = arranged[first]
        replicas = [leader]
        racks_used = {racks[leader]}
        brokers_used = {leader}
        k = 0
        for _ in range(rf - 1):
            while True:  # ends within n steps: some broker always qualifies
                broker = arranged[_replica_index(first, shift * num_racks, k, n)]
                rack = racks[broker]
                k += 1
                if (rack not in racks_used or len(racks_used) == num_racks) and (
                    broker not in brokers_used or len(brokers_used) == n
                ):
                    replicas.append(broker)
                    racks_used.add(rack)
                    brokers_used.add(broker)
                    break
        out[pid] = tuple(replicas)
    return out


def validate_manual_assignment(
    assignment: Mapping[int, Sequence[int]], live_broker_ids: set[int]
) -> dict[int, tuple[int, ...]]:
    """Kafka's checks on a client-given assignment; returns it normalised or raises ApiError."""
    if not assignment:
        raise ApiError(ErrorCode.invalid_replica_assignment, "Replica assignment is empty.")
    if sorted(assignment) != list(range(len(assignment))):
        raise ApiError(
            ErrorCode.invalid_replica_assignment,
            "Partitions should be a consecutive 0-based integer sequence",
        )
    sizes = set()
    for p, replicas in assignment.items():
        if not replicas:
            raise ApiError(ErrorCode.invalid_replica_assignment, f"Partition {p} has no replicas.")
        if len(set(replicas)) != len(replicas):
            raise ApiError(
                ErrorCode.invalid_replica_assignment,
                f"Duplicate brokers not allowed in replica assignment: {list(replicas)} for partition {p}.",
            )
        unknown = set(replicas) - live_broker_ids
        if unknown:
            raise ApiError(
                ErrorCode.invalid_replica_assignment,
                f"Unknown broker(s) {sorted(unknown)} in replica assignment of partition {p}.",
            )
        sizes.add(len(replicas))
    if len(sizes) > 1:
        raise ApiError(
            ErrorCode.invalid_replica_assignment,
            "All partitions should have the same number of replicas",
        )
    return {p: tuple(r) for p, r in sorted(assignment.items())}


@dataclass(frozen=True)
class TopicSpec:
    """One topic of a CreateTopics request, as plain data."""

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    assignments: dict[int, tuple[int, ...]] = field(default_factory=dict)
    configs: dict[str, str | None] = field(default_factory=dict)


@dataclass(frozen=True)
class TopicPlan:
    """What to write for a topic that passed validation."""

    name: str
    assignment: dict[int, tuple[int, ...]]
    config: dict[str, str]
    topic_id: str

    @property
    def num_partitions(self) -> int:
        return len(self.assignment)

    @property
    def replication_factor(self) -> int:
        return len(next(iter(self.assignment.values())))


def plan_topic(
    spec: TopicSpec,
    *,
    default_partitions: int,
    default_replication_factor: int,
    live_brokers: Sequence[tuple[int, str | None]],
    validate_config: Callable[[dict[str, str]], None],
    existing: bool = False,
    colliding: Sequence[str] = (),
    rng: random.Random | None = None,
    topic_id: str | None = None,
) -> TopicPlan:
    """Validate one CreateTopics entry and compute its assignment; ApiError with Kafka's code if not.

    Order as Kafka checks: name, existence, partitions/replication factor vs manual assignment,
    configs, then the assignment itself.
    """
    validate_topic_name(spec.name)
    if existing:
        raise ApiError(ErrorCode.topic_already_exists, f"Topic '{spec.name}' already exists.")
    if colliding:
        raise ApiError(ErrorCode.invalid_topic_exception,
                       f"Topic '{spec.name}' collides with existing topics: {', '.join(colliding)}")
    if spec.assignments:
        if spec.num_partitions != -1 or spec.replication_factor != -1:
            raise ApiError(
                ErrorCode.invalid_request,
                "Both numPartitions or replicationFactor and replicasAssignments were set. "
                "Both cannot be used at the same time.",
            )
    else:
        partitions = default_partitions if spec.num_partitions == -1 else spec.num_partitions
        rf = default_replication_factor if spec.replication_factor == -1 else spec.replication_factor
        if partitions <= 0:
            raise ApiError(ErrorCode.invalid_partitions, "Number of partitions must be larger than 0.")
        if partitions > MAX_PARTITIONS:
            raise ApiError(ErrorCode.invalid_partitions,
                           f"Number of partitions {partitions} is more than the {MAX_PARTITIONS} a topic may have.")
        if rf <= 0:
            raise ApiError(ErrorCode.invalid_replication_factor, "Replication factor must be larger than 0.")
    config: dict[str, str] = {}
    for key, value in spec.configs.items():
        if value is None:
            raise ApiError(ErrorCode.invalid_config, f"Null value not supported for topic configs: {key}")
        config[key] = value
    try:
        validate_config(config)
    except ValueError as e:
        raise ApiError(ErrorCode.invalid_config, str(e)) from e
    if spec.assignments:
        assignment = validate_manual_assignment(spec.assignments, {b for b, _ in live_brokers})
    else:
        assignment = assign_replicas_to_brokers(live_brokers, partitions, rf, rng=rng)
    return TopicPlan(spec.name, assignment, config, topic_id or new_base64_uuid())


@dataclass(frozen=True)
class PartitionsSpec:
    """One topic of a CreatePartitions request: the new total count, and the replicas of each new
    partition when the client chose them (None: the broker assigns)."""

    name: str
    count: int
    assignments: tuple[tuple[int, ...], ...] | None = None


def plan_new_partitions(
    spec: PartitionsSpec,
    existing: TopicAssignment,
    live_brokers: Sequence[tuple[int, str | None]],
    rng: random.Random | None = None,
) -> dict[int, tuple[int, ...]]:
    """The replicas of each partition CreatePartitions adds, or ApiError with Kafka's code
    (ZkAdminManager.createPartitions, AdminZkClient.createNewPartitionsAssignment).

    Broker-chosen replicas continue the topic's round-robin from the broker that leads
    partition 0 (Kafka's start index), with the topic's replication factor."""
    if existing.adding_replicas or existing.removing_replicas:
        raise ApiError(ErrorCode.reassignment_in_progress,
                       f"A partition reassignment is in progress for the topic '{spec.name}'.")
    old = len(existing.partitions)
    increment = spec.count - old
    if increment < 0:
        raise ApiError(ErrorCode.invalid_partitions,
                       f"Topic currently has {old} partitions, which is higher than the requested {spec.count}.")
    if increment == 0:
        raise ApiError(ErrorCode.invalid_partitions, f"Topic already has {old} partitions.")
    if spec.count > MAX_PARTITIONS:
        raise ApiError(ErrorCode.invalid_partitions,
                       f"Number of partitions {spec.count} is more than the {MAX_PARTITIONS} a topic may have.")
    first = existing.partitions.get(0)
    if not first:
        raise ApiError(ErrorCode.unknown_server_error,
                       f"Unexpected existing replica assignment for topic '{spec.name}', partition id 0 is missing.")
    rf = len(first)
    ids = sorted(b for b, _ in live_brokers)
    if spec.assignments is None:
        start = next((i for i, b in enumerate(ids) if b >= first[0]), 0)
        return assign_replicas_to_brokers(live_brokers, increment, rf, fixed_start_index=start,
                                          start_partition_id=old, rng=rng)
    unknown = sorted({b for replicas in spec.assignments for b in replicas} - set(ids))
    if unknown:
        raise ApiError(ErrorCode.invalid_replica_assignment,
                       f"Unknown broker(s) in replica assignment: {', '.join(map(str, unknown))}.")
    if len(spec.assignments) != increment:
        raise ApiError(ErrorCode.invalid_replica_assignment,
                       f"Increasing the number of partitions by {increment} but {len(spec.assignments)} "
                       "assignments provided.")
    out = {}
    for i, replicas in enumerate(spec.assignments):
        partition = old + i
        if not replicas:
            raise ApiError(ErrorCode.invalid_replica_assignment,
                           f"Cannot have replication factor of 0 for partition id {partition}.")
        if len(set(replicas)) != len(replicas):
            raise ApiError(ErrorCode.invalid_replica_assignment,
                           f"Duplicate brokers not allowed in replica assignment: "
                           f"{', '.join(map(str, replicas))} for partition id {partition}.")
        if len(replicas) != rf:
            raise ApiError(ErrorCode.invalid_replica_assignment,
                           f"Inconsistent replication factor between partitions, partition 0 has {rf} while "
                           f"partition {partition} has replicas of size {len(replicas)}.")
        out[partition] = tuple(replicas)
    return out


def duplicate_names(names: Sequence[str]) -> set[str]:
    seen: set[str] = set()
    dups: set[str] = set()
    for n in names:
        (dups if n in seen else seen).add(n)
    return dups


# --- the shell -------------------------------------------------------------------------------------


@dataclass
class CreateResult:
    name: str
    error: ApiError | None = None
    plan: TopicPlan | None = None


class AdminManager:
    """Carries out CreateTopics/DeleteTopics through ZooKeeper and waits for the controller."""

    def __init__(
        self,
        config: BrokerConfig,
        metadata_cache: MetadataCache,
        zk: BrokerZkClient,
        current_config: Callable[[], BrokerConfig] | None = None,
    ):
        self.config = config
        self.metadata_cache = metadata_cache
        self.zk = zk
        self.current_config = current_config or (lambda: config)
        """The effective broker config (dynamic configs included): topic configs default to it."""
        self._auto_creating: set[str] = set()

    def validate_config(self, config: dict[str, str]) -> None:
        LogConfig.validate_overrides(config, self.current_config())

    def _live_brokers(self) -> list[tuple[int, str | None]]:
        return [(int(b.id), b.rack) for b in self.metadata_cache.live_brokers().values()]

    async def _exists(self, name: str) -> bool:
        return self.metadata_cache.contains(name) or await self.zk.topic_exists(name)

    async def _colliding(self, name: str) -> list[str]:
        """Kafka reads every topic in ZooKeeper, only for names that can collide."""
        if topic_name_error(name) is not None or not has_collision_chars(name):
            return []
        return colliding_topics(name, await self.zk.get_all_topics())

    async def create_topics(
        self, specs: Sequence[TopicSpec], timeout_ms: int, validate_only: bool
    ) -> list[CreateResult]:
        """One result per spec, in order. Waits (up to timeout_ms) until every created topic has a
        leader for each partition in this broker's MetadataCache; REQUEST_TIMED_OUT for those that
        do not. timeout_ms <= 0 or validate_only answer as soon as the znodes are written."""
        dups = duplicate_names([s.name for s in specs])
        results = [CreateResult(spec.name) for spec in specs]
        named = [s.name for s in specs if s.name not in dups and topic_name_error(s.name) is None]
        try:
            existing = await self._existing(named)
        except Exception as e:
            log.exception("looking up topics to create failed")
            for r in results:
                r.error = ApiError(ErrorCode.unknown_server_error, str(e))
            return results
        all_topics: list[str] | None = None
        planned: list[TopicPlan] = []
        for spec, result in zip(specs, results, strict=True):
            if spec.name in dups:
                result.error = ApiError(
                    ErrorCode.invalid_request, "Create topics request contains duplicate topic names."
                )
                continue
            try:
                colliding: list[str] = []
                if topic_name_error(spec.name) is None and has_collision_chars(spec.name):
                    # Kafka reads every topic in ZooKeeper for such names, once per topic it creates:
                    # read once here, and count the names this request creates before this one
                    if all_topics is None:
                        all_topics = await self.zk.get_all_topics()
                    colliding = colliding_topics(spec.name, [*all_topics, *(p.name for p in planned)])
                plan = plan_topic(
                    spec,
                    default_partitions=self.config.num_partitions,
                    default_replication_factor=self.config.default_replication_factor,
                    live_brokers=self._live_brokers(),
                    validate_config=self.validate_config,
                    existing=spec.name in existing,
                    colliding=colliding,
                )
                if validate_only:
                    result.plan = plan
                else:
                    planned.append(plan)
            except ApiError as e:
                result.error = e
            except Exception as e:
                log.exception("creating topic %r failed", spec.name)
                result.error = ApiError(ErrorCode.unknown_server_error, str(e))
        written = await self._write_all(planned) if planned else {}
        by_name = {r.name: r for r in results if r.name not in dups}
        for plan in planned:
            result = by_name[plan.name]
            error = written[plan.name]
            if error is None:
                result.plan = plan
            elif isinstance(error, ApiError):
                result.error = error
            else:
                log.error("creating topic %r failed: %r", plan.name, error)
                result.error = ApiError(ErrorCode.unknown_server_error, str(error))
        created = [r for r in results if r.plan is not None]
        if validate_only or timeout_ms <= 0 or not created:
            return results
        cache = self.metadata_cache
        await cache.wait_for(
            lambda: all(cache.all_partitions_have_leaders(r.name) for r in created), timeout_ms / 1000
        )
        for r in created:
            if not cache.all_partitions_have_leaders(r.name):
                r.error = ApiError(
                    ErrorCode.request_timed_out,
                    f"Topic '{r.name}' was created but its metadata did not arrive within {timeout_ms} ms.",
                )
        return results

    async def _existing(self, names: Sequence[str]) -> set[str]:
        """Those of `names` that exist: in the MetadataCache, else in ZooKeeper (one round)."""
        known = {n for n in names if self.metadata_cache.contains(n)}
        return known | await self.zk.topics_existing([n for n in names if n not in known])

    async def _write(self, plan: TopicPlan) -> None:
        error = (await self._write_all([plan]))[plan.name]
        if error is not None:
            raise error

    async def _write_all(self, plans: Sequence[TopicPlan]) -> dict[str, Exception | None]:
        """Writes the plans' znodes together; name → None when written, else the error (an
        ApiError with Kafka's code, or what ZooKeeper raised)."""
        out: dict[str, Exception | None] = {}
        writes = []
        for plan in plans:
            assignment = TopicAssignment(dict(plan.assignment), topic_id=plan.topic_id)
            try:
                check_assignment_size(plan.name, assignment)
            except ApiError as e:
                out[plan.name] = e
                continue
            writes.append((plan, assignment))
        try:
            errors = await self.zk.create_topics([(p.name, a, p.config) for p, a in writes]) if writes else {}
        except Exception as e:
            errors = {p.name: e for p, _ in writes}
        for plan, _ in writes:
            error = errors[plan.name]
            if isinstance(error, TopicExistsError):
                error = ApiError(error.error_code, str(error))
            out[plan.name] = error
            if error is None:
                log.info(
                    "created topic %s: %d partitions, assignment %s, config %s",
                    plan.name, plan.num_partitions, plan.assignment, plan.config,
                )
        return out

    async def auto_create_topic(self, name: str) -> ErrorCode:
        """Metadata's auto-creation: write the znodes with the broker defaults, do not wait.

        Returns the code the Metadata response carries for the topic meanwhile (Kafka's rule:
        LEADER_NOT_AVAILABLE while it is being created, or the creation error). The name being
        deleted or raced (TOPIC_ALREADY_EXISTS) and ZooKeeper trouble are retriable for the client:
        LEADER_NOT_AVAILABLE for this topic alone, never an error for the whole Metadata request.
        """
        if name in self._auto_creating:
            return ErrorCode.leader_not_available
        self._auto_creating.add(name)
        try:
            if name == GROUP_METADATA_TOPIC_NAME:  # Kafka's AutoTopicCreationManager: the offsets topic's settings
                code = await self.create_internal_topic(name, self.config.offsets_topic_num_partitions,
                                                        self.config.offsets_topic_replication_factor,
                                                        GROUP_METADATA_TOPIC_CONFIG)
                return ErrorCode.leader_not_available if code == ErrorCode.none else code
            plan = plan_topic(
                TopicSpec(name),
                default_partitions=self.config.num_partitions,
                default_replication_factor=self.config.default_replication_factor,
                live_brokers=self._live_brokers(),
                validate_config=lambda _: None,
                existing=await self._exists(name),  # our view may lag ZooKeeper: never "create" a topic that exists
                colliding=await self._colliding(name),
            )
            await self._write(plan)
        except ApiError as e:
            if e.error_code == ErrorCode.topic_already_exists:
                log.debug("auto-creation of topic %r deferred: %s", name, e.message)
                return ErrorCode.leader_not_available
            log.info("auto-creation of topic %r failed: %s", name, e)
            return e.error_code
        except Exception:
            log.warning("auto-creation of topic %r failed; answering LEADER_NOT_AVAILABLE", name, exc_info=True)
            return ErrorCode.leader_not_available
        finally:
            self._auto_creating.discard(name)
        return ErrorCode.leader_not_available

    async def create_internal_topic(self, name: str, partitions: int, replication_factor: int,
                                    config: dict[str, str]) -> ErrorCode:
        """Creates an internal topic (__consumer_offsets) on first use, without waiting.

        The replication factor is min(configured, live brokers): Kafka refuses to create the topic
        until enough brokers are up; a small cluster here gets a smaller factor instead.
        """
        live = self._live_brokers()
        if not live:
            return ErrorCode.coordinator_not_available
        rf = max(1, min(replication_factor, len(live)))
        if name == GROUP_METADATA_TOPIC_NAME:  # Kafka's offsets.topic.segment.bytes
            config = {**config, "segment.bytes": str(self.config.offsets_topic_segment_bytes)}
        if rf < replication_factor:
            log.warning("creating %s with replication factor %d (configured %d, %d live brokers)",
                        name, rf, replication_factor, len(live))
        try:
            plan = plan_topic(
                TopicSpec(name, partitions, rf, configs=dict(config)),
                default_partitions=partitions,
                default_replication_factor=rf,
                live_brokers=live,
                validate_config=lambda _: None,
                existing=await self._exists(name),
            )
            await self._write(plan)
        except ApiError as e:
            return ErrorCode.none if e.error_code == ErrorCode.topic_already_exists else e.error_code
        return ErrorCode.none

    async def create_partitions(self, specs: Sequence[PartitionsSpec], timeout_ms: int,
                                validate_only: bool) -> list[ApiError | None]:
        """One result per topic, in order (None: done). Writes each grown assignment, then waits
        (up to timeout_ms) until this broker's MetadataCache shows a leader for every partition;
        REQUEST_TIMED_OUT for topics that do not get there. timeout_ms <= 0 or validate_only
        answer as soon as the znodes are written (or checked)."""
        dups = duplicate_names([s.name for s in specs])
        errors: list[ApiError | None] = []
        grown: dict[str, int] = {}
        for spec in specs:
            try:
                if spec.name in dups:
                    raise ApiError(ErrorCode.invalid_request, "Duplicate topic in request.")
                await self._add_partitions(spec, validate_only)
                grown[spec.name] = spec.count
                errors.append(None)
            except ApiError as e:
                errors.append(e)
            except Exception as e:  # one topic's failure must not sink the others
                log.exception("adding partitions to topic %r failed", spec.name)
                errors.append(ApiError(ErrorCode.unknown_server_error, str(e)))
        if validate_only or timeout_ms <= 0 or not grown:
            return errors
        cache = self.metadata_cache

        def ready(topic: str) -> bool:
            return cache.partition_count(topic) >= grown[topic] and cache.all_partitions_have_leaders(topic)

        await cache.wait_for(lambda: all(ready(t) for t in grown), timeout_ms / 1000)
        for i, spec in enumerate(specs):
            if errors[i] is None and not ready(spec.name):
                errors[i] = ApiError(ErrorCode.request_timed_out, f"The partitions of topic '{spec.name}' were "
                                     f"created but their metadata did not arrive within {timeout_ms} ms.")
        return errors

    async def _add_partitions(self, spec: PartitionsSpec, validate_only: bool) -> None:
        if topic_name_error(spec.name) is not None:
            raise ApiError(ErrorCode.unknown_topic_or_partition, f"The topic '{spec.name}' does not exist.")
        if await self.zk.is_topic_marked_for_deletion(spec.name):
            raise ApiError(ErrorCode.invalid_topic_exception, "The topic is queued for deletion.")
        for _ in range(MAX_WRITE_ATTEMPTS):
            read = await self.zk.get_topic_assignment_versioned(spec.name)
            if read is None:
                raise ApiError(ErrorCode.unknown_topic_or_partition, f"The topic '{spec.name}' does not exist.")
            existing, version = read
            added = plan_new_partitions(spec, existing, self._live_brokers())
            merged = TopicAssignment({**existing.partitions, **added}, existing.topic_id,
                                     dict(existing.adding_replicas), dict(existing.removing_replicas))
            check_assignment_size(spec.name, merged)
            if validate_only:
                return
            try:
                await self.zk.set_topic_assignment(spec.name, merged, version)
            except AssignmentChangedError:
                continue
            log.info("topic %s: adding partitions %s", spec.name, added)
            return
        raise ApiError(ErrorCode.unknown_server_error,
                       f"The assignment of topic '{spec.name}' kept changing; gave up after {MAX_WRITE_ATTEMPTS} attempts")

    async def delete_topics(self, names: Sequence[str], timeout_ms: int) -> list[ApiError | None]:
        """Mark each topic for deletion; wait (up to timeout_ms) until the cache drops it."""
        errors: list[ApiError | None] = []
        marked: list[str] = []
        dups = duplicate_names(list(names))
        for name in names:
            try:
                if name in dups:
                    raise ApiError(ErrorCode.invalid_request, "Duplicate topic names in the request.")
                if not self.config.delete_topic_enable:
                    raise ApiError(ErrorCode.topic_deletion_disabled, "Topic deletion is disabled.")
                if topic_name_error(name) is not None or not await self._exists(name):
                    raise ApiError(
                        ErrorCode.unknown_topic_or_partition,
                        "This server does not host this topic-partition.",
                    )
                await self.zk.delete_topic(name)
                log.info("marked topic %s for deletion", name)
                marked.append(name)
                errors.append(None)
            except ApiError as e:
                errors.append(e)
            except Exception as e:
                log.exception("deleting topic %r failed", name)
                errors.append(ApiError(ErrorCode.unknown_server_error, str(e)))
        if marked and timeout_ms > 0:
            cache = self.metadata_cache
            await cache.wait_for(lambda: not any(cache.contains(t) for t in marked), timeout_ms / 1000)
            for i, name in enumerate(names):
                if errors[i] is None and name in marked and cache.contains(name):
                    errors[i] = ApiError(
                        ErrorCode.request_timed_out,
                        f"Topic '{name}' is marked for deletion but is not gone within {timeout_ms} ms.",
                    )
        return errors


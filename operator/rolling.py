"""Rolling restarts and broker-count changes: pure decisions over what the cluster reports.

The operator never guesses from pod status alone: the Kafka protocol (Metadata) tells which
brokers are registered, which partitions are under-replicated and which brokers hold replicas.
The decisions are driven through `BrokerOrchestrator` ("restart broker N", "set broker count"),
implemented by the Kubernetes operator (delete a pod, patch the StatefulSet) and, in tests, by
local broker processes.
"""

from dataclasses import dataclass, field
from typing import Any, Protocol

from odradek.common.security.channel import PLAINTEXT, ClientSecurity


@dataclass(frozen=True)
class PartitionView:
    """One partition's replicas and in-sync replicas, as Metadata reports them."""
    topic: str
    partition: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass(frozen=True)
class ClusterView:
    """What one Metadata answer (and the topics' min.insync.replicas) says about the brokers."""
    registered: frozenset[int]
    partitions: tuple[PartitionView, ...] = ()
    min_insync: dict[str, int] = field(default_factory=dict)  # per topic, as DescribeConfigs reports it
    default_min_insync: int = 1  # for topics missing from min_insync (the cluster's rendered default)
    racks: dict[int, str] = field(default_factory=dict)  # broker → broker.rack, for those that have one
    endpoints: dict[int, tuple[str, int]] = field(default_factory=dict)  # broker → host, port (Metadata)

    @property
    def under_replicated(self) -> tuple[tuple[str, int], ...]:
        return tuple(sorted((p.topic, p.partition) for p in self.partitions if len(p.isr) < len(p.replicas)))

    @property
    def replicas_by_broker(self) -> dict[int, int]:
        counts: dict[int, int] = {}
        for p in self.partitions:
            for r in p.replicas:
                counts[r] = counts.get(r, 0) + 1
        return counts

    def would_fall_under_min_isr(self, broker_id: int) -> tuple[tuple[str, int], ...]:
        """Partitions left with fewer in-sync replicas than min.insync.replicas if `broker_id`
        went down now. A partition with no more replicas than its minimum is left out: it cannot
        stay writable with acks=all through any restart, so it would block every roll forever
        (Strimzi's KafkaRoller makes the same exception)."""
        out = []
        for p in self.partitions:
            minimum = self.min_insync.get(p.topic, self.default_min_insync)
            if broker_id in p.isr and len(p.replicas) > minimum and len(p.isr) - 1 < minimum:
                out.append((p.topic, p.partition))
        return tuple(sorted(out))


@dataclass(frozen=True)
class BrokerState:
    """A broker as its runtime reports it: the config hash it runs with and whether it is up.

    `running` means up and ready as far as the runtime can tell (process alive; in Kubernetes the
    pod is Ready and not terminating). A broker being replaced must report False (or its new
    hash) at once, so that a Metadata answer still listing its old registration cannot let the
    next restart through."""
    broker_id: int
    config_hash: str | None
    running: bool = True
    cannot_serve: bool = False  # the runtime shows it cannot be serving (pod Pending, crash loop, ...)


@dataclass(frozen=True)
class RollStep:
    restart: int | None  # the broker to restart now, or None
    waiting: str | None  # why nothing is restarted while work remains
    pending: tuple[int, ...] = ()  # brokers still on an old config

    @property
    def done(self) -> bool:
        return not self.pending


@dataclass(frozen=True)
class CountDecision:
    replicas: int  # the broker count to run
    refused: str | None = None  # why a scale-down is held back


@dataclass(frozen=True)
class BrokerReconcile:
    """What one `reconcile_brokers` step did and why it stopped there."""
    restarted: int | None = None  # the broker restarted by this step
    count: int | None = None  # the broker count set by this step (only when it changed)
    waiting: str | None = None  # why no restart happened although brokers are stale or not up
    refused: str | None = None  # why the desired count is not applied (a scale-down held back)
    done: bool = False  # desired count and config everywhere, every broker up and registered
    pending: tuple[int, ...] = ()  # brokers still running an old config


class BrokerOrchestrator(Protocol):
    """The runtime the brokers live in (StatefulSet pods, or local processes in tests)."""

    async def brokers(self) -> list[BrokerState]:
        """One state per broker the runtime runs (ids 0..n-1; n is the current count), including
        brokers that are down (running=False)."""
        ...

    async def restart_broker(self, broker_id: int) -> None:
        """Restart one broker so it comes back with the desired config."""
        ...

    async def set_broker_count(self, count: int) -> None:
        """Run brokers 0..count-1 (new ones with the desired config); idempotent."""
        ...


def unregistered(brokers: list[BrokerState], view: ClusterView) -> str | None:
    """The wait for brokers that are down or not yet registered, or None when all are up."""
    down = sorted(b.broker_id for b in brokers if not b.running or b.broker_id not in view.registered)
    return f"waiting for brokers {down} to register" if down else None


def _shown(partitions: tuple[tuple[str, int], ...]) -> str:
    return ", ".join(f"{t}-{p}" for t, p in partitions[:5])


def next_roll_step(brokers: list[BrokerState], desired_hash: str, view: ClusterView) -> RollStep:
    """Restart one stale broker, as Strimzi's KafkaRoller orders it.

    A stale broker that cannot be serving (`cannot_serve`: its pod Pending, in CrashLoopBackOff or
    ImagePullBackOff, its container not created or not started) goes first and without any health
    gate: restarting it onto the fixed spec cannot lower availability, and waiting for it to come
    up first is the deadlock a broken config would otherwise cause. Every other restart, of a
    broker that is merely not Ready or that one Metadata answer does not list (a probe flap, a
    paused process that may still be the last in-sync replica) included, needs every *other*
    broker up and registered (the previous restart is back: a broker that just went down still
    counts in the ISR until replica.lag.time.max.ms has passed, so Metadata alone would let two go
    down at once) and no partition whose ISR it is in falling under min.insync.replicas. Brokers
    that are not up go first among those."""
    pending = tuple(sorted(b.broker_id for b in brokers if b.config_hash != desired_hash))
    if not pending:
        return RollStep(None, None, ())
    stale = set(pending)
    # A broker without a pod (hash None) is being created by the StatefulSet: nothing to restart.
    candidates = [b for b in brokers if b.broker_id in stale and b.config_hash is not None]
    stuck = [b.broker_id for b in candidates if b.cannot_serve]
    if stuck:
        return RollStep(stuck[0], None, pending)

    def up(b: BrokerState) -> bool:
        return b.running and b.broker_id in view.registered

    # Not-up brokers first (a restart may be what brings them back), then by id: predictable for
    # operators reading the events. (The active controller's broker does not exist here:
    # controllers are separate pods.)
    candidates.sort(key=lambda b: (up(b), b.broker_id))
    blocked = []
    waiting = None
    for b in candidates:
        others_down = sorted(o.broker_id for o in brokers if o.broker_id != b.broker_id and not up(o))
        if others_down:
            waiting = waiting or f"waiting for brokers {others_down} to register"
            continue
        at_risk = view.would_fall_under_min_isr(b.broker_id)
        if not at_risk:
            return RollStep(b.broker_id, None, pending)
        blocked.append((b.broker_id, at_risk))
    if blocked:
        broker_id, at_risk = blocked[0]
        return RollStep(None, f"waiting for under-replicated partitions to catch up: restarting broker {broker_id} "
                              f"would leave {len(at_risk)} partitions under min.insync.replicas "
                              f"({_shown(at_risk)})", pending)
    return RollStep(None, waiting or unregistered(brokers, view), pending)


def broker_count(desired: int, current: int, view: ClusterView) -> CountDecision:
    """Scale up at once; scale down only past brokers that hold no replicas (no draining yet)."""
    if desired >= current:
        return CountDecision(desired)
    holding = sorted(b for b in range(desired, current) if view.replicas_by_broker.get(b, 0) > 0)
    if not holding:
        return CountDecision(desired)
    keep = max(holding) + 1
    return CountDecision(keep, f"brokers {holding} still hold replicas; reassign their partitions "
                               f"first (keeping {keep} brokers, {desired} desired)")


async def reconcile_brokers(orchestrator: BrokerOrchestrator, desired_hash: str, desired_count: int,
                            view: ClusterView) -> BrokerReconcile:
    """One idempotent step towards `desired_count` brokers all running `desired_hash`: at most one
    action (a count change or one restart), then return; call again (with a fresh `view`) until
    `done`. Safe to interrupt anywhere: every decision is taken again from what the runtime and
    the cluster report.

    The count is settled before the roll. Scaling up first gives the cluster its new brokers
    (started with the desired config, so never restarted) before old ones go down one by one;
    scaling down first avoids restarting brokers that are about to be removed, and only removes
    brokers holding no replicas, so it never makes a partition under-replicated. While new
    brokers have not registered, the roll waits for them like for a restarted broker."""
    if desired_count < 1:
        raise ValueError(f"a cluster needs at least one broker, {desired_count} desired")
    states = sorted(await orchestrator.brokers(), key=lambda b: b.broker_id)
    current = len(states)
    decision = broker_count(desired_count, current, view)
    if decision.replicas != current:
        await orchestrator.set_broker_count(decision.replicas)
        pending = tuple(b.broker_id for b in states if b.config_hash != desired_hash and b.broker_id < decision.replicas)
        return BrokerReconcile(count=decision.replicas, refused=decision.refused, pending=pending)
    step = next_roll_step(states, desired_hash, view)
    if step.restart is not None:
        await orchestrator.restart_broker(step.restart)
        return BrokerReconcile(restarted=step.restart, refused=decision.refused, pending=step.pending)
    waiting = step.waiting if step.waiting is not None else unregistered(states, view)
    done = step.done and waiting is None and decision.refused is None
    return BrokerReconcile(waiting=waiting, refused=decision.refused, done=done, pending=step.pending)


def view_from_metadata(response: Any, min_insync: dict[str, int] | None = None,
                       default_min_insync: int = 1) -> ClusterView:
    """A kio MetadataResponse (any version with replica_nodes/isr_nodes) → ClusterView."""
    partitions = tuple(
        PartitionView(str(topic.name), int(p.partition_index), tuple(int(r) for r in p.replica_nodes),
                      tuple(int(r) for r in p.isr_nodes))
        for topic in response.topics for p in topic.partitions)
    return ClusterView(registered=frozenset(int(b.node_id) for b in response.brokers),
                       partitions=partitions, min_insync=dict(min_insync or {}),
                       default_min_insync=default_min_insync,
                       racks={int(b.node_id): str(b.rack) for b in response.brokers if getattr(b, "rack", None)},
                       endpoints={int(b.node_id): (str(b.host), int(b.port)) for b in response.brokers
                                  if getattr(b, "host", None) is not None})


def min_insync_from(response: Any) -> dict[str, int]:
    """min.insync.replicas per topic from a DescribeConfigs answer (topics in error left out)."""
    found = {}
    for result in response.results:
        if int(result.error_code) != 0:
            continue
        for config in result.configs:
            if config.name == "min.insync.replicas" and config.value is not None:
                try:
                    found[str(result.resource_name)] = int(config.value)
                except ValueError:
                    continue
    return found


async def fetch_view(bootstrap: list[tuple[str, int]], timeout: float = 10.0,
                     default_min_insync: int = 1, security: ClientSecurity = PLAINTEXT) -> ClusterView:
    """Ask the first broker that answers for Metadata of all topics, then for their
    min.insync.replicas (one DescribeConfigs; topics it cannot describe get the default)."""
    from kio.schema.describe_configs.v4.request import DescribeConfigsRequest, DescribeConfigsResource
    from kio.schema.metadata.v12.request import MetadataRequest
    from kio.static.primitive import i8

    from odradek.common.network.client import NetworkClient

    errors = []
    for host, port in bootstrap:
        client = NetworkClient(host, port, client_id="odradek-operator", connect_attempts=1,
                               connect_timeout=timeout, security=security)
        try:
            response = await client.send(
                MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                include_topic_authorized_operations=False), timeout=timeout)
            names = [str(t.name) for t in response.topics if t.partitions]
            min_insync: dict[str, int] = {}
            if names:
                described = await client.send(DescribeConfigsRequest(resources=tuple(
                    DescribeConfigsResource(resource_type=i8(2), resource_name=n,
                                            configuration_keys=("min.insync.replicas",)) for n in names)),
                    timeout=timeout)
                min_insync = min_insync_from(described)
            return view_from_metadata(response, min_insync, default_min_insync)
        except (OSError, ConnectionError, TimeoutError) as e:
            errors.append(f"{host}:{port}: {e}")
        finally:
            await client.close()
    raise ConnectionError("no broker answered Metadata: " + "; ".join(errors))

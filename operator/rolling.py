"""Rolling restarts and broker-count changes: pure decisions over what the cluster reports.

The operator never guesses from pod status alone: the Kafka protocol (Metadata) tells which
brokers are registered, which partitions are under-replicated and which brokers hold replicas.
The decisions are driven through `BrokerOrchestrator` ("restart broker N", "set broker count"),
implemented by the Kubernetes operator (delete a pod, patch the StatefulSet) and, in tests, by
local broker processes.
"""

from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class ClusterView:
    """What one Metadata answer says about the brokers."""
    registered: frozenset[int]
    under_replicated: tuple[tuple[str, int], ...] = ()
    replicas_by_broker: dict[int, int] = field(default_factory=dict)


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


def next_roll_step(brokers: list[BrokerState], desired_hash: str, view: ClusterView) -> RollStep:
    """Restart one stale broker, and only when every broker is up and registered and no
    partition is under-replicated (so the previous restart has caught up)."""
    pending = tuple(sorted(b.broker_id for b in brokers if b.config_hash != desired_hash))
    if not pending:
        return RollStep(None, None, ())
    if (waiting := unregistered(brokers, view)) is not None:
        return RollStep(None, waiting, pending)
    if view.under_replicated:
        shown = ", ".join(f"{t}-{p}" for t, p in view.under_replicated[:5])
        return RollStep(None, f"waiting for {len(view.under_replicated)} under-replicated partitions ({shown})",
                        pending)
    # The active controller's broker does not exist here (controllers are separate pods), so
    # the order is by id: predictable for operators reading the events.
    return RollStep(pending[0], None, pending)


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


def view_from_metadata(response: Any) -> ClusterView:
    """A kio MetadataResponse (any version with replica_nodes/isr_nodes) → ClusterView."""
    replicas: dict[int, int] = {}
    under = []
    for topic in response.topics:
        for p in topic.partitions:
            for r in p.replica_nodes:
                replicas[int(r)] = replicas.get(int(r), 0) + 1
            if len(p.isr_nodes) < len(p.replica_nodes):
                under.append((str(topic.name), int(p.partition_index)))
    return ClusterView(registered=frozenset(int(b.node_id) for b in response.brokers),
                       under_replicated=tuple(sorted(under)), replicas_by_broker=replicas)


async def fetch_view(bootstrap: list[tuple[str, int]], timeout: float = 10.0) -> ClusterView:
    """Ask the first broker that answers for Metadata of all topics (Kafka protocol)."""
    from kio.schema.metadata.v12.request import MetadataRequest

    from odradek.common.network.client import NetworkClient

    errors = []
    for host, port in bootstrap:
        client = NetworkClient(host, port, client_id="odradek-operator", connect_attempts=1,
                               connect_timeout=timeout)
        try:
            response = await client.send(
                MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                include_topic_authorized_operations=False), timeout=timeout)
            return view_from_metadata(response)
        except (OSError, ConnectionError, TimeoutError) as e:
            errors.append(f"{host}:{port}: {e}")
        finally:
            await client.close()
    raise ConnectionError("no broker answered Metadata: " + "; ".join(errors))

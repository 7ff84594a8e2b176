"""Rolling restarts and broker-count changes: pure decisions over what the cluster reports.

The operator never guesses from pod status alone: the Kafka protocol (Metadata) tells which
brokers are registered, which partitions are under-replicated and which brokers hold replicas.
The decisions are driven through `BrokerOrchestrator` ("restart broker N", "set broker count"),
implemented by the Kubernetes operator (delete a pod, patch the StatefulSet) and, in tests, by
local broker processes.
"""

from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class ClusterView:
    """What one Metadata answer says about the brokers."""
    registered: frozenset[int]
    under_replicated: tuple[tuple[str, int], ...] = ()
    replicas_by_broker: dict[int, int] = field(default_factory=dict)
    controller_id: int | None = None


@dataclass(frozen=True)
class BrokerState:
    """A broker as its runtime reports it: the config hash it runs with and whether it is up."""
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


class BrokerOrchestrator(Protocol):
    async def restart_broker(self, broker_id: int) -> None: ...

    async def set_broker_count(self, count: int) -> None: ...


def next_roll_step(brokers: list[BrokerState], desired_hash: str, view: ClusterView) -> RollStep:
    """Restart one stale broker, and only when every broker is up and registered and no
    partition is under-replicated (so the previous restart has caught up)."""
    pending = tuple(sorted(b.broker_id for b in brokers if b.config_hash != desired_hash))
    if not pending:
        return RollStep(None, None, ())
    down = sorted(b.broker_id for b in brokers if not b.running or b.broker_id not in view.registered)
    if down:
        return RollStep(None, f"waiting for brokers {down} to register", pending)
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


def view_from_metadata(response) -> ClusterView:
    """A kio MetadataResponse (any version with replica_nodes/isr_nodes) → ClusterView."""
    replicas: dict[int, int] = {}
    under = []
    for topic in response.topics:
        for p in topic.partitions:
            for r in p.replica_nodes:
                replicas[int(r)] = replicas.get(int(r), 0) + 1
            if len(p.isr_nodes) < len(p.replica_nodes):
                under.append((str(topic.name), int(p.partition_index)))
    controller = int(response.controller_id) if getattr(response, "controller_id", None) is not None else None
    return ClusterView(registered=frozenset(int(b.node_id) for b in response.brokers),
                       under_replicated=tuple(sorted(under)), replicas_by_broker=replicas,
                       controller_id=None if controller is None or controller < 0 else controller)


async def fetch_view(bootstrap: list[tuple[str, int]], timeout: float = 10.0) -> ClusterView:
    """Ask the first broker that answers for Metadata of all topics (Kafka protocol)."""
    from kio.schema.metadata.v12.request import MetadataRequest

    from odradek.common.client import NetworkClient

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

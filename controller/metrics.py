"""The controller's metrics, named as Strimzi's JMX-exporter rules name Kafka's controller metrics.

Counters are plain ints bumped by the controller's event loop; partition counts are read from
its context at scrape time (only the active controller has one).
"""

import asyncio
from collections.abc import Iterable
from typing import Protocol

from odradek.common.api_key import ApiKey
from odradek.common.metrics import Family

from .context import ControllerContext


def request_event_name(api_key: int) -> str:
    """A broker request's event name ("AlterPartition"); any int is answered, never raises."""
    try:
        name = ApiKey(api_key).name
    except ValueError:
        return f"ApiKey{api_key}"
    return "".join(w.capitalize() for w in name.split("_"))


class ControllerStats:
    def __init__(self) -> None:
        self.events: dict[str, int] = {}
        self.leader_elections = 0
        self.unclean_leader_elections = 0
        self.controller_elections = 0

    def event(self, name: str) -> None:
        self.events[name] = self.events.get(name, 0) + 1


class Observed(Protocol):
    """What the metrics read of a KafkaController (a protocol: the controller imports this module)."""

    stats: "ControllerStats"
    active: asyncio.Event
    context: ControllerContext | None


def families(controller: Observed) -> Iterable[Family]:
    stats = controller.stats
    active = controller.active.is_set()
    yield Family("kafka_controller_kafkacontroller_activecontrollercount", "gauge",
                 "1 on the active controller, 0 on a standby.").add(1 if active else 0)
    ctx = controller.context if active else None
    offline = 0 if ctx is None else sum(1 for s in ctx.partition_states.values() if s.leader < 0)
    total = 0 if ctx is None else sum(len(a.partitions) for a in ctx.assignments.values())
    yield Family("kafka_controller_kafkacontroller_offlinepartitionscount", "gauge",
                 "Partitions without a leader (active controller only).").add(offline)
    yield Family("kafka_controller_kafkacontroller_globalpartitioncount", "gauge",
                 "Partitions in the cluster (active controller only).").add(total)
    yield Family("kafka_controller_kafkacontroller_activebrokercount", "gauge",
                 "Registered brokers (active controller only).").add(0 if ctx is None else len(ctx.live_brokers))
    # Kafka's LeaderElectionRateAndTimeMs is a timer: its count is the summary's _count.
    yield Family("kafka_controller_controllerstats_leaderelectionrateandtimems", "summary",
                 "Partition leader changes this controller wrote.").add(stats.leader_elections, suffix="_count")
    yield Family("kafka_controller_controllerstats_uncleanleaderelections_total", "counter",
                 "Leaders elected from outside the ISR.").add(stats.unclean_leader_elections)
    yield Family("kafka_controller_controllerstats_controllerelections_total", "counter",
                 "Times this process became the active controller.").add(stats.controller_elections)
    events = Family("kafka_controller_controllereventmanager_events_total", "counter",
                    "Controller events handled, per event.")
    for name, count in sorted(stats.events.items()):
        events.add(count, (("event", name),))
    yield events

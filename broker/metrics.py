"""The broker's metrics, named as Strimzi's JMX-exporter rules name Kafka's (common/metrics.py).

Hot paths add to plain ints: `BrokerTopicStats` (messages and bytes per topic, ISR changes, fed
by the replica manager) and `RequestStats` (count and latency per API, fed by `metered`, which
wraps the request handler the socket servers call). Everything else (under-replicated and
under-min-ISR partitions, log sizes, purgatories, consumer lag) is read from the broker's state
when Prometheus scrapes.
"""

import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from kio.index import load_request_schema

from odradek.common.metrics import Family, Labels, Latency, latency_family


class BrokerTopicStats:
    """Per-topic counters (Kafka's BrokerTopicMetrics); each value a list of four ints."""
    MESSAGES_IN, BYTES_IN, BYTES_OUT, REPLICATION_BYTES_OUT = range(4)

    def __init__(self) -> None:
        self.topics: dict[str, list[int]] = {}
        self.isr_shrinks = 0
        self.isr_expands = 0

    def _of(self, topic: str) -> list[int]:
        counts = self.topics.get(topic)
        if counts is None:
            counts = self.topics[topic] = [0, 0, 0, 0]
        return counts

    def record_in(self, topic: str, messages: int, size: int) -> None:
        counts = self._of(topic)
        counts[0] += messages
        counts[1] += size

    def record_out(self, topic: str, size: int, replication: bool) -> None:
        self._of(topic)[3 if replication else 2] += size

    def families(self) -> Iterable[Family]:
        families = [
            Family("kafka_server_brokertopicmetrics_messagesin_total", "counter",
                   "Messages appended to partitions this broker leads."),
            Family("kafka_server_brokertopicmetrics_bytesin_total", "counter",
                   "Bytes appended by clients to partitions this broker leads."),
            Family("kafka_server_brokertopicmetrics_bytesout_total", "counter", "Bytes sent to consumers."),
            Family("kafka_server_brokertopicmetrics_replicationbytesout_total", "counter",
                   "Bytes sent to follower replicas.")]
        for topic, counts in sorted(self.topics.items()):
            for family, value in zip(families, counts):
                family.add(value, (("topic", topic),))
        for family, index in zip(families, range(4)):  # the broker-wide totals Kafka reports too
            family.add(sum(c[index] for c in self.topics.values()))
        yield from families
        yield Family("kafka_server_replicamanager_isrshrinks_total", "counter",
                     "ISR shrinks proposed by this broker as leader.").add(self.isr_shrinks)
        yield Family("kafka_server_replicamanager_isrexpands_total", "counter",
                     "ISR expansions proposed by this broker as leader.").add(self.isr_expands)


def api_name(api_key: int) -> str:
    """Kafka's request name for an API key ("Produce", "Fetch", ...), from kio's schemas."""
    try:
        return load_request_schema(api_key, 0).__name__.removesuffix("Request")
    except Exception:
        for version in range(1, 20):
            try:
                return load_request_schema(api_key, version).__name__.removesuffix("Request")
            except Exception:
                continue
    return f"ApiKey{api_key}"


class RequestStats:
    """Requests and their total time per API key (Kafka's RequestMetrics)."""

    def __init__(self) -> None:
        self.latency: dict[int, Latency] = {}
        self.in_flight = 0
        self._names: dict[int, str] = {}

    def families(self) -> Iterable[Family]:
        def labels(key: int) -> Labels:
            name = self._names.get(key)
            if name is None:
                name = self._names[key] = api_name(key)
            return (("request", name),)

        requests = Family("kafka_network_requestmetrics_requests_total", "counter", "Requests received, per API.")
        for key, lat in sorted(self.latency.items()):
            requests.add(lat.total, labels(key))
        yield requests
        yield latency_family("kafka_network_requestmetrics_totaltimems",
                             "Time from a request's arrival to its answer (ms), per API.",
                             {labels(k): v for k, v in self.latency.items()})
        yield Family("kafka_network_requestchannel_requestqueuesize", "gauge",
                     "Requests received and not answered yet.").add(self.in_flight)


Handler = Callable[[Any, Any], Awaitable[Any]]


def metered(handle: Handler, stats: RequestStats) -> Handler:
    """`handle` (a socket server's request handler) counting and timing each request."""
    latency = stats.latency
    clock = time.perf_counter

    async def handler(frame_body: Any, conn: Any) -> Any:
        start = clock()
        stats.in_flight += 1
        try:
            return await handle(frame_body, conn)
        finally:
            stats.in_flight -= 1
            key = (frame_body[0] << 8 | frame_body[1]) if len(frame_body) >= 2 else -1
            lat = latency.get(key)
            if lat is None and 0 <= key < 128:  # garbage is not a label (the handler refused it anyway)
                lat = latency[key] = Latency()
            if lat is not None:
                lat.observe(clock() - start)

    return handler


def state_families(server: Any) -> Iterable[Family]:  # a KafkaServer (which imports this module)
    """What the broker holds right now: partitions, logs, purgatories, connections, group lag."""
    rm = server.replica_manager
    if rm is None:
        return
    partitions = {(p.topic, p.partition): p for p in rm.all_partitions()}
    led = [p for p in partitions.values() if p.is_leader]
    under = sum(1 for p in led if len(p.isr) < len(p.replicas))
    under_min = sum(1 for p in led if len(p.isr) < p.min_insync_replicas())
    yield Family("kafka_server_replicamanager_underreplicatedpartitions", "gauge",
                 "Partitions this broker leads with fewer in-sync replicas than replicas.").add(under)
    yield Family("kafka_server_replicamanager_underminisrpartitioncount", "gauge",
                 "Partitions this broker leads with fewer in-sync replicas than min.insync.replicas.").add(under_min)
    yield Family("kafka_server_replicamanager_partitioncount", "gauge",
                 "Partitions with a replica on this broker.").add(len(partitions))
    yield Family("kafka_server_replicamanager_leadercount", "gauge",
                 "Partitions this broker leads.").add(len(led))
    offline = len(server.log_manager.offline_dirs) if server.log_manager is not None else 0
    yield Family("kafka_log_logmanager_offlinelogdirectorycount", "gauge",
                 "Log directories that failed.").add(offline)
    size = Family("kafka_log_log_size", "gauge", "Bytes of a partition's log on this broker.")
    end = Family("kafka_log_log_logendoffset", "gauge", "A partition's log end offset on this broker.")
    for (topic, index), p in sorted(partitions.items()):
        plog = getattr(p, "log", None)
        if plog is None:
            continue
        labels = (("topic", topic), ("partition", str(index)))
        size.add(plog.size, labels)
        end.add(plog.log_end_offset, labels)
    yield size
    yield end
    # Kafka's per-partition gauges (kafka.cluster:type=Partition), 0 or 1, reported by the leader:
    # Strimzi's dashboard sums them per cluster.
    at_min = Family("kafka_cluster_partition_atminisr", "gauge",
                    "1 for a partition this broker leads whose ISR is exactly min.insync.replicas.")
    under_min_isr = Family("kafka_cluster_partition_underminisr", "gauge",
                           "1 for a partition this broker leads whose ISR is below min.insync.replicas.")
    under_replicated = Family("kafka_cluster_partition_underreplicated", "gauge",
                              "1 for a partition this broker leads with fewer in-sync replicas than replicas.")
    for (topic, index), p in sorted(partitions.items()):
        if p.is_leader:
            labels = (("topic", topic), ("partition", str(index)))
            isr, minimum = len(p.isr), p.min_insync_replicas()
            at_min.add(int(isr == minimum), labels)
            under_min_isr.add(int(isr < minimum), labels)
            under_replicated.add(int(isr < len(p.replicas)), labels)
    yield at_min
    yield under_min_isr
    yield under_replicated
    purgatory = Family("kafka_server_delayedoperationpurgatory_purgatorysize", "gauge",
                       "Requests waiting in a purgatory.")
    for name, p in (("Produce", rm.produce_purgatory), ("Fetch", rm.fetch_purgatory),
                    ("DeleteRecords", rm.delete_records_purgatory)):
        purgatory.add(p.watched(), (("delayedOperation", name),))
    yield purgatory
    connections = Family("kafka_server_socket_server_metrics_connection_count", "gauge", "Open connections, per listener.")
    for s in server.socket_servers:
        connections.add(len(s.connections), (("listener", str(s.listener)),))
    yield connections
    yield lag_family(server)


def lag_family(server: Any) -> Family:
    """Consumer lag (the high watermark minus the committed offset, kafka_exporter's name) of the
    groups this broker coordinates, for the partitions it has a replica of: a follower's high
    watermark trails the leader's by at most one fetch. A partition with no replica here is
    reported by no broker (its leader's `kafka_log_log_logendoffset` is there to join with)."""
    lag = Family("kafka_consumergroup_lag", "gauge",
                 "High watermark minus the group's committed offset (partitions with a replica here).")
    coordinator = server.group_coordinator
    rm = server.replica_manager
    if coordinator is None:
        return lag
    for group in sorted(coordinator.manager.groups.values(), key=lambda g: g.group_id):
        for (topic, index), committed in sorted(group.offsets.items()):
            p = rm.get_partition((topic, index))
            if p is None or getattr(p, "log", None) is None:
                continue
            lag.add(max(0, p.log.high_watermark - committed.offset),
                    (("consumergroup", group.group_id), ("topic", topic), ("partition", str(index))))
    return lag

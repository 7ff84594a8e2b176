"""TransactionMarkerChannel: the coordinator's side of WriteTxnMarkers (Kafka's
TransactionMarkerChannelManager).

Once PrepareCommit/PrepareAbort is written, the markers go to each partition's leader (this
broker's own partitions through the local MarkerWriter, others over the wire), grouped by leader.
A request that fails or times out has an unknown outcome and is simply sent again: a marker
repeated at a partition ends an empty transaction there, which changes nothing. Retriable
errors are retried until every partition has its marker, unless the coordinator loses the
transaction meanwhile; a newer producer or coordinator epoch at a partition means a newer
coordinator owns the transaction, and this one stops.
"""

import asyncio
import logging
from collections.abc import Callable

from kio.schema.errors import ErrorCode
from kio.schema.types import ProducerId, TopicName
from kio.schema.write_txn_markers.v1.request import WritableTxnMarker, WritableTxnMarkerTopic, WriteTxnMarkersRequest
from kio.static.primitive import i16, i32

from odradek.broker.metadata_cache import MetadataCache
from odradek.common.network.client import NetworkClient
from odradek.common.security.channel import PLAINTEXT, ClientSecurity

from .marker_writer import MarkerWriter, TxnMarker

log = logging.getLogger(__name__)

RETRY_BACKOFF_S = 0.1
RETRY_BACKOFF_MAX_S = 1.0
FENCED = (ErrorCode.invalid_producer_epoch, ErrorCode.transaction_coordinator_fenced)
FATAL = (ErrorCode.corrupt_message, ErrorCode.message_too_large, ErrorCode.record_list_too_large,
         ErrorCode.invalid_required_acks, ErrorCode.invalid_record)


class MarkersAbandoned(Exception):
    """The transaction is no longer this coordinator's to finish."""


class TransactionMarkerChannel:
    def __init__(self, broker_id: int, metadata_cache: MetadataCache, marker_writer: MarkerWriter,
                 request_timeout_ms: int, *,
                 listener: str = "PLAINTEXT", security: ClientSecurity = PLAINTEXT):
        self.broker_id = broker_id
        self.metadata_cache = metadata_cache
        self.marker_writer = marker_writer
        self.request_timeout_s = request_timeout_ms / 1000
        self._clients: dict[int, NetworkClient] = {}
        self._closed = False
        self.listener = listener
        """The inter-broker listener: markers go to each leader's endpoint on it."""
        self.security = security
        """How to connect to that listener."""

    def _client(self, broker_id: int, host: str, port: int) -> NetworkClient:
        client = self._clients.get(broker_id)
        if client is None or (client.host, client.port) != (host, port):
            if client is not None:
                client.disconnect()  # the broker moved: nothing more goes to its old address
            client = self._clients[broker_id] = NetworkClient(host, port, client_id=f"txn-markers-{self.broker_id}",
                                                                security=self.security)
        return client

    async def send(self, marker: TxnMarker, still_valid: Callable[[], bool]) -> None:
        """Returns once every partition of `marker` has it (or its topic is gone); raises
        MarkersAbandoned when `still_valid()` turns false or a partition fences us."""
        pending = set(marker.partitions)
        backoff = RETRY_BACKOFF_S
        while pending:
            if self._closed or not still_valid():
                raise MarkersAbandoned(f"producer {marker.producer_id}: no longer ours")
            by_leader: dict[tuple[int, str, int], list[tuple[str, int]]] = {}
            for topic, partition in list(pending):
                if not self.metadata_cache.contains(topic):
                    log.info("topic %s is gone: no marker for %s-%d", topic, topic, partition)
                    pending.discard((topic, partition))
                    continue
                endpoint = self.metadata_cache.leader_endpoint(topic, partition, self.listener)
                if endpoint is not None:
                    by_leader.setdefault(endpoint, []).append((topic, partition))
            if by_leader:
                outcomes = await asyncio.gather(*(self._send_to(endpoint, marker, parts)
                                                  for endpoint, parts in by_leader.items()))
                for codes in outcomes:
                    for key, code in codes.items():
                        if code == ErrorCode.none:
                            pending.discard(key)
                        elif code in FENCED:
                            raise MarkersAbandoned(f"producer {marker.producer_id}: {code.name} at {key}")
                        elif code in FATAL:
                            log.error("marker for producer %d at %s-%d failed: %s; not retried",
                                      marker.producer_id, *key, code.name)
                            pending.discard(key)
            if pending:
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, RETRY_BACKOFF_MAX_S)
                if by_leader:
                    log.info("producer %d: %d partitions still without their marker", marker.producer_id,
                             len(pending))

    async def _send_to(self, endpoint: tuple[int, str, int], marker: TxnMarker,
                       partitions: list[tuple[str, int]]) -> dict[tuple[str, int], ErrorCode]:
        broker_id, host, port = endpoint
        one = marker._replace(partitions=partitions)
        if broker_id == self.broker_id:
            return await self.marker_writer.write(one)
        by_topic: dict[str, list[int]] = {}
        for topic, partition in partitions:
            by_topic.setdefault(topic, []).append(partition)
        request = WriteTxnMarkersRequest(markers=(WritableTxnMarker(
            producer_id=ProducerId(marker.producer_id), producer_epoch=i16(marker.producer_epoch),
            transaction_result=marker.commit, coordinator_epoch=i32(marker.coordinator_epoch),
            topics=tuple(WritableTxnMarkerTopic(name=TopicName(t), partition_indexes=tuple(map(i32, ps)))
                         for t, ps in by_topic.items())),))
        try:
            response = await self._client(broker_id, host, port).send(request, self.request_timeout_s + 5)
        except (ConnectionError, TimeoutError, OSError) as e:
            log.info("WriteTxnMarkers to broker %d failed: %s; retrying", broker_id, e)
            return {}
        return {(t.name, int(p.partition_index)): p.error_code
                for m in response.markers for t in m.topics for p in t.partitions}

    async def close(self) -> None:
        self._closed = True
        for client in self._clients.values():
            await client.close()
        self._clients.clear()

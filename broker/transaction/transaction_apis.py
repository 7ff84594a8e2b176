"""TransactionApis: the handler table of the transaction APIs, merged into KafkaApis like
GroupApis' (translation between kio's request/response classes and the broker's calls)."""

import logging

from kio.static.primitive import i32, i64

from odradek.common.wire import response_module

from .marker_writer import MarkerWriter, TxnMarker

log = logging.getLogger(__name__)

WRITE_TXN_MARKERS = 27
VERSIONS = {
    WRITE_TXN_MARKERS: (1, 1),  # v0 is gone from Kafka 4; v2 adds the KIP-890 transaction version
}


class TransactionApis:
    def __init__(self, marker_writer: MarkerWriter):
        self.marker_writer = marker_writer
        self.versions = dict(VERSIONS)
        self.handlers = {
            WRITE_TXN_MARKERS: self.handle_write_txn_markers,
        }

    async def handle_write_txn_markers(self, header, request):
        mod = response_module(WRITE_TXN_MARKERS, int(header.request_api_version))
        markers = [
            TxnMarker(int(m.producer_id), int(m.producer_epoch), int(m.coordinator_epoch), bool(m.transaction_result),
                      [(t.name, int(p)) for t in m.topics for p in t.partition_indexes])
            for m in request.markers
        ]
        outcomes = await self.marker_writer.write_all(markers)
        results = []
        for marker, codes in zip(request.markers, outcomes):
            topics = tuple(
                mod.WritableTxnMarkerTopicResult(name=t.name, partitions=tuple(
                    mod.WritableTxnMarkerPartitionResult(partition_index=i32(p), error_code=codes[(t.name, int(p))])
                    for p in t.partition_indexes))
                for t in marker.topics
            )
            results.append(mod.WritableTxnMarkerResult(producer_id=i64(marker.producer_id), topics=topics))
        return mod.WriteTxnMarkersResponse(markers=tuple(results))

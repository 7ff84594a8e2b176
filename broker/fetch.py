"""Fetch (api 1, v0–v17) response encoding by hand, so record data goes out by sendfile.

Layout per version (Kafka's FetchResponse.json): v1+ throttle_time_ms; v7+ error_code, session_id;
topics[name (v13+: topic_id), partitions[partition_index, error_code, high_watermark, v4+
last_stable_offset, v5+ log_start_offset, v4+ aborted_transactions (nullable), v11+
preferred_read_replica, records, v16+ tagged current_leader]], v16+ tagged node_endpoints;
v12 is flexible (compact lengths, a tagged-field section after every struct). v14 (tiered
storage's error) and v15 (the request's replica state) and v17 (the request's directory id) change
nothing here. KIP-951 (v16): a partition answered NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH
names the leader the broker knows, and the response carries its endpoint.
"""

import uuid
from collections.abc import Iterable, Mapping, Sequence

from odradek.broker.fetch_session import PartitionFetch
from odradek.broker.replica_manager import FetchResult
from odradek.common.network.encoding import BodyWriter, Chunk, node_endpoints

MIN_VERSION = 0
"""v0–v3 (message formats v0/v1) are down-converted (broker/log/legacy_records)."""
MAX_VERSION = 17
TOPIC_IDS_VERSION = 13
"""From here topics are named by id (Kafka's topic ids, from the topics' znodes)."""


def encode_fetch_response(
    version: int, topics: Sequence[tuple[str, Sequence[tuple[int, FetchResult]]]], *, error_code: int = 0, session_id: int = 0,
    topic_ids: Mapping[str, uuid.UUID] | None = None, leaders: Mapping[tuple[str, int], tuple[int, int]] | None = None,
    endpoints: Sequence[tuple[int, str, int, str | None]] = (), throttle_ms: int = 0,
) -> tuple[list[Chunk], int]:
    """(chunks, size) of a FetchResponse body; `topics` = [(name, [(partition_index, FetchResult)])];
    v13+: `topic_ids` = {name: id}; v16+: `leaders` = {(name, index): (leader id, epoch)} and
    `endpoints` = [(node id, host, port, rack)] (see above)."""
    w = BodyWriter(flexible=version >= 12)
    leaders = leaders if version >= 16 and leaders else {}
    if version >= 1:
        w.int32(throttle_ms)  # throttle_time_ms (a client quota, KIP-219)
    if version >= 7:
        w.int16(error_code)
        w.int32(session_id)
    w.array(len(topics))
    for name, partitions in topics:
        if version >= TOPIC_IDS_VERSION:
            w.uuid((topic_ids or {})[name].bytes)
        else:
            w.string(name)
        w.array(len(partitions))
        for index, r in partitions:
            w.int32(index)
            w.int16(int(r.error))
            w.int64(r.high_watermark)
            if version >= 4:
                w.int64(r.last_stable_offset)
            if version >= 5:
                w.int64(r.log_start_offset)
            aborted = r.aborted_transactions
            if version < 4:
                pass  # no transactions before v4
            elif aborted is None:
                w.array(None)  # read_uncommitted: null
            else:
                w.array(len(aborted))
                for txn in aborted:
                    w.int64(txn.producer_id)
                    w.int64(txn.first_offset)
                    w.tags()
            if version >= 11:
                w.int32(-1)  # preferred_read_replica
            w.records(r.regions, r.size)
            leader = leaders.get((name, index))
            if leader is None:
                w.tags()
            else:
                hint = BodyWriter(flexible=True)
                hint.int32(leader[0])
                hint.int32(leader[1])
                hint.tags()
                w.tagged([(1, hint.take())])  # current_leader
        w.tags()
    if version >= 16 and endpoints:
        w.tagged([(0, node_endpoints(endpoints))])
    else:
        w.tags()
    chunks = w.chunks()
    return chunks, w.size


def group_by_topic(pairs: Iterable[tuple[PartitionFetch, FetchResult]]) -> list[tuple[str, list[tuple[int, FetchResult]]]]:
    """[(info, FetchResult)] → encode_fetch_response's topics, keeping the order: consecutive
    partitions of one topic share a topic entry (a topic may recur, as in Kafka's responses)."""
    topics: list[tuple[str, list[tuple[int, FetchResult]]]] = []
    last = None
    for info, result in pairs:
        if info.topic != last:
            last = info.topic
            topics.append((last, []))
        topics[-1][1].append((info.partition, result))
    return topics

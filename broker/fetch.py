"""Fetch (api 1, v4–v12) response encoding by hand, so record data goes out by sendfile.

Layout per version (Kafka's FetchResponse.json): throttle_time_ms; v7+ error_code, session_id;
topics[name, partitions[partition_index, error_code, high_watermark, last_stable_offset,
v5+ log_start_offset, aborted_transactions (nullable), v11+ preferred_read_replica, records]];
v12 is flexible (compact lengths, a tagged-field section after every struct).
"""

from odradek.common.network.encoding import BodyWriter

MIN_VERSION = 4
MAX_VERSION = 12
"""v13+ name topics by id; Metadata hands out no stable topic ids yet, so they stop here."""


def encode_fetch_response(
    version: int, topics: list[tuple[str, list[tuple[int, object]]]], *, error_code: int = 0, session_id: int = 0
) -> tuple[list, int]:
    """(chunks, size) of a FetchResponse body; `topics` = [(name, [(partition_index, FetchResult)])]."""
    w = BodyWriter(flexible=version >= 12)
    w.int32(0)  # throttle_time_ms
    if version >= 7:
        w.int16(error_code)
        w.int32(session_id)
    w.array(len(topics))
    for name, partitions in topics:
        w.string(name)
        w.array(len(partitions))
        for index, r in partitions:
            w.int32(index)
            w.int16(int(r.error))
            w.int64(r.high_watermark)
            w.int64(r.last_stable_offset)
            if version >= 5:
                w.int64(r.log_start_offset)
            aborted = r.aborted_transactions
            if aborted is None:
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
            w.tags()
        w.tags()
    w.tags()
    chunks = w.chunks()
    return chunks, w.size


def group_by_topic(pairs) -> list[tuple[str, list[tuple[int, object]]]]:
    """[(info, FetchResult)] → encode_fetch_response's topics, keeping the order: consecutive
    partitions of one topic share a topic entry (a topic may recur, as in Kafka's responses)."""
    topics: list[tuple[str, list]] = []
    last = None
    for info, result in pairs:
        if info.topic != last:
            last = info.topic
            topics.append((last, []))
        topics[-1][1].append((info.partition, result))
    return topics

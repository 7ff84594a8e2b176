"""Acceptance for incremental fetch sessions (KIP-227) against real broker processes.

A kafka-python consumer (incremental sessions on by default) reads a multi-partition topic while
records arrive: nothing lost or doubled, and its fetches really ran in broker-issued sessions.
Raw Fetch v11 requests (kio via NetworkClient) check what the broker hands out and answers: the
session, incremental responses with only partitions that have news, a long poll over unlisted
session partitions, forgetting, closing, and the session errors."""

import asyncio
import datetime
import time
import uuid

from confluent_kafka import Producer
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v11.request import FetchPartition, FetchRequest, FetchTopic, ForgottenTopic
from kio.static.primitive import i32, i32Timedelta, i64

from odradek.broker.log.record_batch import iter_batches
from odradek.common.network.client import NetworkClient

from .kafka_helpers import ContinuousProducer, create_topic, end_offsets, leader_of

PARTITIONS = 6


def produce(bootstrap: str, topic: str, partition: int, n: int, tag: str) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    errors = []
    for i in range(n):
        p.produce(topic, value=f"{tag}-{i}".encode(), partition=partition,
                  on_delivery=lambda err, _msg: err is not None and errors.append(err))
    assert p.flush(30) == 0 and not errors, errors


def record_count(records: bytes | None) -> int:
    """Records in a record-batch sequence."""
    return sum(b.records_count for b in iter_batches(records or b""))


def fetch_request(session_id: int, epoch: int, partitions: dict, topic: str, forget=(), max_wait_ms: int = 0):
    """partitions = {partition: fetch offset}."""
    return FetchRequest(
        replica_id=i32(-1),
        max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=max_wait_ms)),
        min_bytes=i32(1),
        session_id=i32(session_id),
        session_epoch=i32(epoch),
        topics=(FetchTopic(topic=topic, partitions=tuple(
            FetchPartition(partition=i32(p), fetch_offset=i64(o), partition_max_bytes=i32(1 << 20))
            for p, o in partitions.items()
        )),) if partitions else (),
        forgotten_topics_data=(ForgottenTopic(topic=topic, partitions=tuple(i32(p) for p in forget)),) if forget else (),
    )


def answered(response) -> dict[int, object]:
    return {int(p.partition_index): p for t in response.responses for p in t.partitions}


def test_kafka_python_consumes_in_fetch_sessions_while_records_arrive(shared_cluster):
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTopicPartition

    bootstrap = shared_cluster.bootstrap
    topic = f"sessions-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, PARTITIONS)
    producer = ContinuousProducer(bootstrap, topic, PARTITIONS, tag="s", rate=1500).start()
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                             auto_offset_reset="earliest", fetch_max_wait_ms=100)
    consumed: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(PARTITIONS)}
    session_epochs: set[tuple[int, int, int]] = set()

    def poll_once() -> None:
        for tp, msgs in consumer.poll(timeout_ms=200, max_records=5000).items():
            consumed[tp.partition].extend((m.offset, m.value) for m in msgs)
        for node, handler in consumer._fetcher._session_handlers.items():
            meta = handler.next_metadata
            session_epochs.add((node, meta.session_id, meta.epoch))

    try:
        consumer.assign([KTopicPartition(topic, p) for p in range(PARTITIONS)])
        producer.wait_acked(500, timeout=60)
        deadline = time.monotonic() + 60
        while producer.acked_count() < 6000:
            assert time.monotonic() < deadline, f"only {producer.acked_count()} records acknowledged"
            poll_once()
        producer.stop()
        assert not producer.errors, producer.errors[:5]
        ends = end_offsets(bootstrap, topic, PARTITIONS)
        deadline = time.monotonic() + 60
        while any(len(consumed[p]) < ends[p] for p in range(PARTITIONS)):
            assert time.monotonic() < deadline, f"consumed {[len(c) for c in consumed.values()]} of {ends}"
            poll_once()
        for _ in range(5):  # anything beyond the end would be a duplicate
            poll_once()
    finally:
        consumer.close()
        producer.producer.flush(5)

    for p in range(PARTITIONS):
        offsets = [o for o, _ in consumed[p]]
        assert offsets == list(range(ends[p])), f"partition {p}: offsets lost, doubled or out of order"
    by_position = {(p, o): v for p in consumed for o, v in consumed[p]}
    missing = [i for i, pos in producer.acked.items() if by_position.get(pos) != producer.value(i)]
    assert not missing, f"{len(missing)} acknowledged records not consumed where acknowledged: {missing[:5]}"
    # Both brokers handed the consumer a session, and it went on incrementally in it.
    in_session = {node for node, session_id, epoch in session_epochs if session_id != 0 and epoch > 1}
    assert len(in_session) == 2, sorted(session_epochs)[:20]


def test_raw_fetch_session_requests(shared_cluster):
    bootstrap = shared_cluster.bootstrap
    topic = f"raw-sessions-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, 4)
    leaders = {p: leader_of(bootstrap, topic, p) for p in range(4)}
    broker = max(set(leaders.values()), key=lambda b: list(leaders.values()).count(b))
    mine = sorted(p for p, b in leaders.items() if b == broker)
    if len(mine) < 2:  # the assignment put three on the other broker: use the other one
        broker = next(b for b in set(leaders.values()) if b != broker)
        mine = sorted(p for p, b in leaders.items() if b == broker)
    assert len(mine) >= 2, leaders
    first, second = mine[0], mine[1]
    produce(bootstrap, topic, first, 3, "before")

    async def run() -> None:
        client = NetworkClient("127.0.0.1", shared_cluster.broker_ports[broker])
        try:
            async def send(request, timeout: float = 30.0):
                return await client.send(request, timeout)

            # INITIAL: a full fetch that creates a session and answers every partition.
            full = await send(fetch_request(0, 0, dict.fromkeys(mine, 0), topic))
            assert full.error_code == ErrorCode.none and full.session_id > 0
            session = int(full.session_id)
            parts = answered(full)
            assert sorted(parts) == mine
            assert record_count(parts[first].records) == 3 and parts[first].high_watermark == 3

            # Incremental, epoch 1, the new position of `first` listed: nothing new → nothing answered.
            inc = await send(fetch_request(session, 1, {first: 3}, topic))
            assert (inc.error_code, inc.session_id, answered(inc)) == (ErrorCode.none, session, {})

            # Records arrive on `second`; epoch 2 lists nothing and gets only `second`.
            produce(bootstrap, topic, second, 2, "later")
            inc = await send(fetch_request(session, 2, {}, topic))
            parts = answered(inc)
            assert inc.session_id == session and sorted(parts) == [second]
            assert record_count(parts[second].records) == 2 and parts[second].high_watermark == 2

            # A long poll listing only `second` (its new position) waits on the unlisted `first` too.
            inc_task = asyncio.ensure_future(send(fetch_request(session, 3, {second: 2}, topic, max_wait_ms=10_000)))
            await asyncio.sleep(0.3)
            assert not inc_task.done()
            await asyncio.to_thread(produce, bootstrap, topic, first, 4, "polled")
            inc = await inc_task
            parts = answered(inc)
            assert inc.error_code == ErrorCode.none and sorted(parts) == [first]
            assert record_count(parts[first].records) == 4 and parts[first].high_watermark == 7

            # Forgetting `second`: its new records no longer come back.
            inc = await send(fetch_request(session, 4, {first: 7}, topic, forget=[second]))
            assert answered(inc) == {}
            produce(bootstrap, topic, second, 1, "forgotten")
            inc = await send(fetch_request(session, 5, {}, topic))
            assert (inc.error_code, answered(inc)) == (ErrorCode.none, {})

            # Session errors: top-level, no partitions, no session id.
            for request, error in [
                (fetch_request(session, 9, {}, topic), ErrorCode.invalid_fetch_session_epoch),
                (fetch_request(session, 5, {}, topic), ErrorCode.invalid_fetch_session_epoch),  # a replay
                (fetch_request(session ^ 0x5A5A5A, 6, {}, topic), ErrorCode.fetch_session_id_not_found),
                (fetch_request(0, 3, {first: 0}, topic), ErrorCode.fetch_session_id_not_found),
            ]:
                bad = await send(request)
                assert (bad.error_code, bad.session_id, answered(bad)) == (error, 0, {})
            # The errors left the session as it was: epoch 6 still works.
            inc = await send(fetch_request(session, 6, {}, topic))
            assert (inc.error_code, inc.session_id) == (ErrorCode.none, session)

            # FINAL closes the session and is answered sessionless, in full.
            closed = await send(fetch_request(session, -1, dict.fromkeys(mine, 0), topic))
            assert (closed.error_code, closed.session_id, sorted(answered(closed))) == (ErrorCode.none, 0, mine)
            gone = await send(fetch_request(session, 7, {}, topic))
            assert gone.error_code == ErrorCode.fetch_session_id_not_found
        finally:
            await client.close()

    asyncio.run(run())

"""Acceptance: streaming reads through `format("odradek")`, real cluster, real PySpark.

The restart scenario runs each driver as a process of its own (tests/integration/spark_driver.py,
topic → Parquet with a checkpoint): stopped gracefully, SIGKILLed in the middle of a batch, and
run across a partition leader's SIGKILL; the Parquet table must then hold every record exactly
once. The other tests use the shared session and Spark's memory sink."""

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

import odradek.pipeline

from .kafka_helpers import (
    admin,
    ask,
    confluent_consume,
    confluent_produce,
    create_topic,
    leader_of,
    make_records,
    wait_isr_full,
)
from .spark_driver import START_ATTEMPTS, worker_start_timed_out

DRIVER = Path(__file__).with_name("spark_driver.py")
DRIVER_START_TIMEOUT = 420.0


# --- the checkpoint, as Spark writes it ------------------------------------------------------------


def _batches(checkpoint: Path, kind: str) -> list[int]:
    d = checkpoint / kind
    if not d.is_dir():
        return []
    return sorted(int(p.name) for p in d.iterdir() if p.name.isdigit())


def _offsets_of(checkpoint: Path, batch: int) -> dict:
    """The source's end offsets logged for `batch` ("v1", metadata, then one line per source)."""
    lines = (checkpoint / "offsets" / str(batch)).read_text().splitlines()
    return json.loads(lines[2])


def _committed_end(checkpoint: Path) -> dict | None:
    commits = _batches(checkpoint, "commits")
    return _offsets_of(checkpoint, commits[-1]) if commits else None


def _wait(predicate, what: str, timeout: float, proc: subprocess.Popen | None = None, interval: float = 0.1):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the driver exited ({proc.returncode}) while waiting for {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached within {timeout}s")
        time.sleep(interval)


class Driver:
    """One streaming driver process (its own process group, so its JVM and Python workers go
    with it)."""

    def __init__(self, tmp: Path, bootstrap: str, topic: str, name: str, **flags):
        self.stop_file = tmp / f"stop-{name}"
        self.log = open(tmp / f"driver-{name}.log", "wb")
        argv = [sys.executable, str(DRIVER), bootstrap, topic, str(tmp / "checkpoint"), str(tmp / "output"),
                "--stop-file", str(self.stop_file)]
        for k, v in flags.items():
            argv += [f"--{k.replace('_', '-')}"] + ([] if v is True else [str(v)])
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True,
                                     cwd=str(tmp))

    def stop(self, timeout: float = 120.0) -> int:
        self.stop_file.touch()
        try:
            return self.proc.wait(timeout)
        finally:
            self.kill()

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)
        else:  # the driver is gone; its JVM may not be
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.log.close()


def _end_offsets(delivered, topic) -> dict:
    ends: dict[str, int] = {}
    for d in delivered:
        ends[str(d.partition)] = max(ends.get(str(d.partition), 0), d.offset + 1)
    return {topic: ends}


def _reached(checkpoint: Path, target: dict):
    end = _committed_end(checkpoint)
    return end is not None and all(end.get(t, {}).get(p, -1) >= o for t, ps in target.items() for p, o in ps.items())


def test_restart_sigkill_and_leader_failover_lose_and_repeat_nothing(spark, cluster_factory, tmp_path):
    cluster = cluster_factory(brokers=3)
    topic = f"spark-stream-{uuid.uuid4().hex[:8]}"
    create_topic(cluster.bootstrap, topic, 3, replication_factor=3, config={"min.insync.replicas": "2"})
    wait_isr_full(cluster.bootstrap, topic, 3)
    checkpoint = tmp_path / "checkpoint"
    delivered = []
    records = []

    def produce(n, tag):
        batch = make_records(n, tag)
        delivered.extend(confluent_produce(cluster.bootstrap, topic, batch, config={"acks": "all"}))
        records.extend(batch)

    # 1. a first process reads everything there is, and is stopped gracefully
    produce(600, "first")
    a = Driver(tmp_path, cluster.bootstrap, topic, "a", max_per_trigger=200)
    try:
        _wait(lambda: _reached(checkpoint, _end_offsets(delivered, topic)), "process a caught up",
              DRIVER_START_TIMEOUT, a.proc)
        assert a.stop() == 0, (tmp_path / "driver-a.log").read_text()[-3000:]
    finally:
        a.kill()
    first = spark.read.parquet(str(tmp_path / "output")).select("partition", "offset").collect()
    assert sorted((r["partition"], r["offset"]) for r in first) == sorted((d.partition, d.offset) for d in delivered)

    # 2. more records arrive; a second process is SIGKILLed in the middle of a batch
    produce(1500, "second")
    committed_before = _batches(checkpoint, "commits")[-1]
    b = Driver(tmp_path, cluster.bootstrap, topic, "b", max_per_trigger=150, slow_seconds=0.3)
    try:
        def mid_batch():
            planned, done = _batches(checkpoint, "offsets"), _batches(checkpoint, "commits")
            return (planned and done and planned[-1] > done[-1] and done[-1] > committed_before + 1)

        _wait(mid_batch, "process b in the middle of a batch", DRIVER_START_TIMEOUT, b.proc, interval=0.02)
        os.killpg(b.proc.pid, signal.SIGKILL)
        b.proc.wait(30)
    finally:
        b.kill()
    assert _batches(checkpoint, "offsets")[-1] > _batches(checkpoint, "commits")[-1]

    # 3. a third process continues; a partition leader is SIGKILLed while it runs
    committed_at_c = _batches(checkpoint, "commits")[-1]
    c = Driver(tmp_path, cluster.bootstrap, topic, "c", max_per_trigger=300)
    try:
        _wait(lambda: _batches(checkpoint, "commits")[-1] > committed_at_c + 1, "process c running",
              DRIVER_START_TIMEOUT, c.proc)
        victim = leader_of(cluster.bootstrap, topic, 0)
        cluster.broker(victim).kill(signal.SIGKILL)
        _wait(lambda: leader_of(cluster.bootstrap, topic, 0) != victim, "a new leader for partition 0", 60)
        produce(900, "third")
        _wait(lambda: _reached(checkpoint, _end_offsets(delivered, topic)), "process c caught up", 300, c.proc)
        assert c.stop() == 0, (tmp_path / "driver-c.log").read_text()[-3000:]
    finally:
        c.kill()

    rows = spark.read.parquet(str(tmp_path / "output")).select("partition", "offset", "value").collect()
    got = sorted((r["partition"], r["offset"]) for r in rows)
    want = sorted((d.partition, d.offset) for d in delivered)
    assert len(got) == len(set(got)), "duplicates in the output"
    assert got == want
    by_position = {(r["partition"], r["offset"]): bytes(r["value"]) for r in rows}
    assert all(by_position[(d.partition, d.offset)] == rec.value for rec, d in zip(records, delivered))


def _query_id(checkpoint: Path) -> str | None:
    try:
        return json.loads((checkpoint / "metadata").read_text())["id"]
    except (OSError, ValueError, KeyError):
        return None


def _markers(client, query: str, tasks: int) -> dict[int, int]:
    """Each write task's newest committed batch, from its marker group (odradek.pipeline.progress)."""
    from confluent_kafka import ConsumerGroupTopicPartitions

    from odradek.pipeline.progress import last_written_batch, transactional_id

    out = {}
    for t in range(tasks):
        group = transactional_id(query, t)
        try:
            result = client.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(10)
        except Exception:  # the group coordinator loading or moving: no answer yet
            continue
        batch = last_written_batch(tp.offset for tp in result.topic_partitions or [])
        if batch is not None:
            out[t] = batch
    return out


def test_exactly_once_copy_killed_mid_batch_writes_each_record_once(spark, shared_cluster, tmp_path):
    """topic → topic through the exactly-once sink, the driver SIGKILLed after some of a batch's
    tasks committed their transactions and before the batch was done; more records arrive and a new
    driver process continues: Spark runs the batch again, those tasks find their marker and write
    nothing, the others write in new transactions (the killed attempts' are aborted), and
    read_committed sees every input record once, in order per partition."""
    from .test_transactions import read_all

    bootstrap = shared_cluster.bootstrap
    source, sink = (f"spark-eos-{x}-{uuid.uuid4().hex[:6]}" for x in ("in", "out"))
    create_topic(bootstrap, source, 3)
    create_topic(bootstrap, sink, 3)
    checkpoint = tmp_path / "checkpoint"
    delivered, records = [], []
    client = admin(bootstrap)

    def produce(n, tag):
        batch = make_records(n, tag)
        delivered.extend(confluent_produce(bootstrap, source, batch))
        records.extend(batch)

    def kill_after_a_task_committed(name: str, after_batch: int) -> int:
        """Start a driver; SIGKILL it once a batch > after_batch has a task's marker but is not
        done. Returns that batch."""
        d = Driver(tmp_path, bootstrap, source, name, max_per_trigger=150, slow_seconds=0.4, stagger=True,
                   sink_topic=sink)
        try:
            def torn():
                query, planned, done = _query_id(checkpoint), _batches(checkpoint, "offsets"), _batches(checkpoint, "commits")
                if query is None or not planned or planned[-1] <= after_batch or planned[-1] in done:
                    return None
                written = _markers(client, query, 3)
                return planned[-1] if planned[-1] in written.values() else None

            batch = _wait(torn, f"driver {name}: a batch with a committed task, not done", DRIVER_START_TIMEOUT,
                          d.proc, interval=0.05)
            os.killpg(d.proc.pid, signal.SIGKILL)
            d.proc.wait(30)
        finally:
            d.kill()
        assert batch not in _batches(checkpoint, "commits")
        return batch

    produce(600, "first")
    kill_after_a_task_committed("a", -1)
    produce(600, "second")
    b = Driver(tmp_path, bootstrap, source, "b", max_per_trigger=300, sink_topic=sink)
    try:
        _wait(lambda: _reached(checkpoint, _end_offsets(delivered, source)), "driver b caught up",
              DRIVER_START_TIMEOUT, b.proc)
        assert b.stop() == 0, (tmp_path / "driver-b.log").read_text()[-3000:]
    finally:
        b.kill()

    committed = read_all(bootstrap, sink, 3, "read_committed")
    by_partition: dict[int, list[tuple[int, bytes]]] = {}
    for rec, d in zip(records, delivered):
        by_partition.setdefault(d.partition, []).append((d.offset, rec.value))
    for p in range(3):
        assert committed[p] == [v for _, v in sorted(by_partition[p])], f"partition {p}"
    log = (tmp_path / "driver-b.log").read_text(errors="replace")
    assert "was written by an earlier attempt; writing nothing" in log  # the re-run skipped a task


# --- in-process queries (memory sink) -------------------------------------------------------------


def _stream(spark, bootstrap, **options):
    reader = spark.readStream.format("odradek").option("kafka.bootstrap.servers", bootstrap)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def _memory_query(df, name, tmp_path, trigger):
    """Start a memory-sink query; again (bounded) while Spark's 10 s for its Python reader to
    start runs out on a busy machine (spark_driver.worker_start_timed_out)."""
    for attempt in range(START_ATTEMPTS):
        # the memory sink cannot recover from a checkpoint: each attempt starts afresh
        q = (df.writeStream.format("memory").queryName(name)
             .option("checkpointLocation", str(tmp_path / f"{name}-{attempt}")).trigger(**trigger).start())
        _wait(lambda q=q: q.lastProgress is not None or not q.isActive, "the query's first batch or its end", 300)
        if q.isActive or not worker_start_timed_out(q):
            return q
    return q


def test_available_now_with_max_offsets_per_trigger(spark, shared_cluster, tmp_path):
    topic = f"spark-an-{uuid.uuid4().hex[:8]}"
    create_topic(shared_cluster.bootstrap, topic, 3)
    delivered = confluent_produce(shared_cluster.bootstrap, topic, make_records(900, "an"))
    name = f"an_{uuid.uuid4().hex[:8]}"
    df = _stream(spark, shared_cluster.bootstrap, subscribe=topic, startingOffsets="earliest", maxOffsetsPerTrigger="200")
    q = _memory_query(df.select("partition", "offset"), name, tmp_path, {"availableNow": True})
    try:
        assert q.awaitTermination(300), "availableNow did not finish"
        assert q.exception() is None
        batches = [p for p in q.recentProgress if p.numInputRows > 0]
        assert len(batches) >= 5 and all(p.numInputRows <= 200 + 3 for p in batches)  # ≥ 1 per partition
    finally:
        q.stop()
    got = sorted((r["partition"], r["offset"]) for r in spark.table(name).collect())
    assert got == sorted((d.partition, d.offset) for d in delivered)


def _partition_count(port: int, topic: str) -> int:
    """How many partitions the broker on `port` lists for `topic` in its Metadata answer."""
    (answer,) = ask(port, [MetadataRequest(topics=(MetadataRequestTopic(name=topic, topic_id=None),),
                                           allow_auto_topic_creation=False,
                                           include_topic_authorized_operations=False)])
    return sum(len(t.partitions) for t in answer.topics if t.name == topic)


def test_new_partitions_are_read_and_lag_is_reported(spark, shared_cluster, tmp_path):
    topic = f"spark-np-{uuid.uuid4().hex[:8]}"
    create_topic(shared_cluster.bootstrap, topic, 1)
    delivered = confluent_produce(shared_cluster.bootstrap, topic, make_records(100, "np1"))
    name = f"np_{uuid.uuid4().hex[:8]}"
    df = _stream(spark, shared_cluster.bootstrap, subscribe=topic, startingOffsets="earliest",
                 maxOffsetsPerTrigger="40")
    q = _memory_query(df.select("partition", "offset"), name, tmp_path, {"processingTime": "200 milliseconds"})
    try:
        def progress_with_lag():
            for p in q.recentProgress:
                lag = odradek.pipeline.offsets_behind_latest(p.sources[0])
                if lag and int(lag["maxOffsetsBehindLatest"]) > 0:
                    return lag
            return None

        lag = _wait(progress_with_lag, "a progress report behind latest", 300)
        assert set(lag) == {"minOffsetsBehindLatest", "maxOffsetsBehindLatest", "avgOffsetsBehindLatest"}
        from confluent_kafka.admin import NewPartitions

        client = admin(shared_cluster.bootstrap)
        client.create_partitions([NewPartitions(topic, 3)])[topic].result(30)
        # every broker, not just the one answering the admin client: the producer below asks
        # whichever it likes, and one the controller's UpdateMetadata has not reached yet would
        # still give it one partition
        _wait(lambda: all(_partition_count(port, topic) == 3 for port in shared_cluster.broker_ports),
              "3 partitions in every broker's metadata", 30)
        delivered += confluent_produce(shared_cluster.bootstrap, topic, make_records(300, "np2"))
        assert {d.partition for d in delivered} == {0, 1, 2}
        want = sorted((d.partition, d.offset) for d in delivered)
        _wait(lambda: sorted((r["partition"], r["offset"]) for r in spark.table(name).collect()) == want,
              "every record of the old and new partitions", 300, interval=0.5)
        _wait(lambda: odradek.pipeline.offsets_behind_latest(q.lastProgress.sources[0]).get("maxOffsetsBehindLatest")
              == "0", "lag back to 0", 60)
    finally:
        q.stop()


def test_starting_offsets_latest_reads_only_new_records(spark, shared_cluster, tmp_path):
    topic = f"spark-lt-{uuid.uuid4().hex[:8]}"
    create_topic(shared_cluster.bootstrap, topic, 2)
    confluent_produce(shared_cluster.bootstrap, topic, make_records(50, "old"))
    name = f"lt_{uuid.uuid4().hex[:8]}"
    q = _memory_query(_stream(spark, shared_cluster.bootstrap, subscribe=topic).selectExpr("cast(value as string) v"),
                      name, tmp_path, {"processingTime": "200 milliseconds"})
    try:
        _wait(lambda: q.lastProgress is not None and q.lastProgress.batchId >= 0 and q.lastProgress.sources[0].endOffset,
              "the first batch", 300)
        new = make_records(40, "new")
        confluent_produce(shared_cluster.bootstrap, topic, new)
        want = sorted(r.value.decode() for r in new)
        _wait(lambda: sorted(r["v"] for r in spark.table(name).collect()) == want, "the new records only", 120,
              interval=0.5)
    finally:
        q.stop()


def test_streaming_copy_topic_to_topic(spark, shared_cluster, tmp_path):
    source, sink = (f"spark-{x}-{uuid.uuid4().hex[:6]}" for x in ("src", "dst"))
    create_topic(shared_cluster.bootstrap, source, 3)
    create_topic(shared_cluster.bootstrap, sink, 2)
    records = make_records(600, "copy")
    confluent_produce(shared_cluster.bootstrap, source, records)
    q = (spark.readStream.format("odradek").option("kafka.bootstrap.servers", shared_cluster.bootstrap)
         .option("subscribe", source).option("startingOffsets", "earliest").option("includeHeaders", "true").load()
         .selectExpr("key", "upper(cast(value as string)) as value", "headers")
         .writeStream.format("odradek").option("kafka.bootstrap.servers", shared_cluster.bootstrap)
         .option("topic", sink).option("deliveryGuarantee", "at-least-once")
         .option("checkpointLocation", str(tmp_path / "copy")).trigger(availableNow=True).start())
    try:
        assert q.awaitTermination(300)
        assert q.exception() is None
    finally:
        q.stop()
    got = confluent_consume(shared_cluster.bootstrap, sink, 2, len(records))
    read = sorted((c.record.key, c.record.value, c.record.headers) for p in got.values() for c in p)
    assert read == sorted((r.key, r.value.upper(), r.headers) for r in records)


def _run_available_now(spark, bootstrap, tmp_path, options) -> None:
    """Start a query, wait for it to end; raises the query's error."""
    q = _memory_query(_stream(spark, bootstrap, **options), f"r_{uuid.uuid4().hex[:6]}", tmp_path, {"availableNow": True})
    try:
        q.awaitTermination(120)
    finally:
        q.stop()


@pytest.mark.parametrize(("options", "message"), [
    ({"subscribe": "a", "endingOffsets": "latest"}, "ending offset not valid in streaming queries"),
    ({"subscribe": "a", "kafka.group.id": "g", "kafka.enable.auto.commit": "false"}, "enable.auto.commit' is not supported"),
])
def test_stream_refusals(spark, shared_cluster, tmp_path, options, message):
    with pytest.raises(Exception, match=message):
        _run_available_now(spark, shared_cluster.bootstrap, tmp_path, options)

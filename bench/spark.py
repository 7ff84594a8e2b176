"""The PySpark data source against plain confluent-kafka, in one run on one 1-broker Odradek
(LocalCluster, what `odradek dev` runs):

- read: rows per second of a batch read of `--records` records through `format("odradek")`
  (every row materialised in the JVM: Spark's noop sink) against a plain confluent-kafka consumer
  reading the same records and touching the same fields (key, value, offset, timestamp);
- write: rows per second of writing `--records` rows through `format("odradek")` (a cached
  DataFrame, at-least-once, idempotent producer) against a plain confluent-kafka producer
  writing the same rows;
- exactly-once write: the same rows through `format("odradek")` with
  deliveryGuarantee=exactly-once (one transaction per task), against the at-least-once write.

Beside rows per second, each side's CPU per row: the CPU time of every process the bench started
(the driver with its librdkafka threads, Spark's JVM and Python workers, the broker, the
controller, ZooKeeper) over the rows, which other load on the machine moves far less than rows/s.

Spark runs in local mode on every core (`local[*]`); each side runs `--rounds` times, taking turns,
after an uncounted warm-up: a read and a small write of each guarantee. The first write of a Spark
session starts Spark's Python planner processes on the driver (one creates the writer, one commits
the job: 2-3 s here, importing pyspark, pyarrow and the data source), which the first timed round
used to pay. Run: .venv/bin/python bench/spark.py
"""

import argparse
import functools
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from procfs import tree_cpu_seconds  # bench/procfs.py, beside this file

from odradek.dev.cluster import LocalCluster
from odradek.dev.zookeeper import ZooKeeperServer, free_ports

VALUE = b"x" * 100


def cpu_us_per_row(run, n: int) -> tuple[float, float]:
    """`run()`'s result and the CPU microseconds per row the bench's processes spent in it."""
    before = tree_cpu_seconds()
    result = run()
    return result, (tree_cpu_seconds() - before) * 1e6 / n


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(60)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        t = admin.list_topics(topic, timeout=10).topics.get(topic)
        if t is not None and t.error is None and len(t.partitions) == partitions and all(
                p.leader >= 0 for p in t.partitions.values()):
            return
        time.sleep(0.2)
    raise RuntimeError(f"{topic}: no leaders after 60 s")


def plain_produce(bootstrap: str, topic: str, n: int) -> float:
    """Rows per second of a plain producer (idempotent, like the sink's at-least-once mode)."""
    errors = []
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5,
                  "on_delivery": lambda err, msg: err is not None and errors.append(err)})
    keys = [b"key-%d" % (i % 1000) for i in range(n)]
    start = time.perf_counter()
    for i in range(n):
        for _ in range(10_000):
            try:
                p.produce(topic, VALUE, keys[i])
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    left = p.flush(300)
    elapsed = time.perf_counter() - start
    if left or errors:
        raise RuntimeError(f"plain producer: {left} undelivered, {len(errors)} errors ({errors[:1]})")
    return n / elapsed


def plain_consume(bootstrap: str, topic: str, partitions: int, n: int) -> float:
    """Rows per second of a plain consumer reading all `n` records, touching each record's fields."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:6]}",
                  "enable.auto.commit": False, "enable.partition.eof": False})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    seen = 0
    start = time.perf_counter()
    deadline = time.monotonic() + 600
    while seen < n:
        if time.monotonic() > deadline:
            raise RuntimeError(f"plain consumer: {seen} of {n} in 600 s")
        for m in c.consume(num_messages=10_000, timeout=1.0):
            if m.error() is not None:
                if m.error().code() != KafkaError._PARTITION_EOF:
                    raise RuntimeError(m.error())
                continue
            m.key(), m.value(), m.offset(), m.timestamp()
            seen += 1
    elapsed = time.perf_counter() - start
    c.close()
    return n / elapsed


def source_frame(spark, bootstrap: str, topic: str):
    return spark.read.format("odradek").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic).load()


def source_read(spark, bootstrap: str, topic: str, n: int) -> float:
    df = source_frame(spark, bootstrap, topic)
    start = time.perf_counter()
    df.write.format("noop").mode("overwrite").save()
    elapsed = time.perf_counter() - start
    return n / elapsed


def sink_write(spark, df, bootstrap: str, topic: str, n: int, guarantee: str = "at-least-once") -> float:
    start = time.perf_counter()
    (df.write.format("odradek").mode("append").option("kafka.bootstrap.servers", bootstrap)
     .option("topic", topic).option("deliveryGuarantee", guarantee).option("kafka.linger.ms", "5").save())
    return n / (time.perf_counter() - start)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    from pyspark.sql import SparkSession

    import odradek.pipeline

    with tempfile.TemporaryDirectory(prefix="bench-spark-") as tmp:
        tmp = Path(tmp)
        zk = ZooKeeperServer(tmp / "zookeeper")
        zk.start()
        cluster = LocalCluster(tmp / "cluster", brokers=1, controllers=1, broker_ports=free_ports(1),
                               zookeeper_connect=f"{zk.connect}/bench")
        spark = None
        try:
            cluster.start()
            bootstrap = cluster.bootstrap
            spark = (SparkSession.builder.master("local[*]").appName("bench-spark")
                     .config("spark.ui.enabled", "false").config("spark.driver.host", "127.0.0.1")
                     .config("spark.driver.bindAddress", "127.0.0.1").config("spark.driver.memory", "4g")
                     .getOrCreate())
            spark.sparkContext.setLogLevel("ERROR")
            odradek.pipeline.register(spark)

            source = "bench-read"
            create_topic(bootstrap, source, args.partitions)
            print(f"filling {source}: {args.records} records of {len(VALUE)} bytes", flush=True)
            plain_produce(bootstrap, source, args.records)
            rows = (spark.range(args.records, numPartitions=args.partitions)
                    .selectExpr("cast(cast(id % 1000 as string) as binary) as key",
                                f"cast(repeat('x', {len(VALUE)}) as binary) as value").cache())
            rows.count()

            # warm-up: JVM, Python workers, page cache, the driver's Python planner processes
            plain_consume(bootstrap, source, args.partitions, args.records)
            source_read(spark, bootstrap, source, args.records)
            # as many tasks as a timed write, so that each of Spark's Python workers (one per core) has
            # started and imported the sink; a plain limit() writes in one task, one worker
            warm_rows = rows.limit(10_000).repartition(args.partitions)
            for guarantee in ("at-least-once", "exactly-once"):
                create_topic(bootstrap, f"bench-warm-{guarantee}", args.partitions)
                sink_write(spark, warm_rows, bootstrap, f"bench-warm-{guarantee}", 10_000, guarantee)
            # the timed reads assume every record arrives; the noop sink cannot say, a count can
            counted = source_frame(spark, bootstrap, source).count()
            if counted != args.records:
                raise RuntimeError(f"the data source read {counted:,} of {args.records:,} records")

            reads, writes = {"source": [], "plain": []}, {"sink": [], "plain": [], "exactly-once": []}
            cpu: dict[str, list[float]] = {"sink": [], "plain": [], "exactly-once": []}
            for r in range(args.rounds):
                reads["plain"].append(plain_consume(bootstrap, source, args.partitions, args.records))
                reads["source"].append(source_read(spark, bootstrap, source, args.records))
                sides = ("plain", "sink", "exactly-once")
                for side in sides if r % 2 == 0 else reversed(sides):
                    topic = f"bench-write-{side}-{r}"
                    create_topic(bootstrap, topic, args.partitions)
                    if side == "plain":
                        run = functools.partial(plain_produce, bootstrap, topic, args.records)
                    else:
                        guarantee = "at-least-once" if side == "sink" else side
                        run = functools.partial(sink_write, spark, rows, bootstrap, topic, args.records, guarantee)
                    rate, us = cpu_us_per_row(run, args.records)
                    writes[side].append(rate)
                    cpu[side].append(us)
                print(f"round {r}: read source {reads['source'][-1]:,.0f}/s plain {reads['plain'][-1]:,.0f}/s; "
                      f"write sink {writes['sink'][-1]:,.0f}/s plain {writes['plain'][-1]:,.0f}/s "
                      f"exactly-once {writes['exactly-once'][-1]:,.0f}/s; CPU us/row sink {cpu['sink'][-1]:.2f} "
                      f"plain {cpu['plain'][-1]:.2f} exactly-once {cpu['exactly-once'][-1]:.2f}", flush=True)
            rs, rp = statistics.median(reads["source"]), statistics.median(reads["plain"])
            ws, wp = statistics.median(writes["sink"]), statistics.median(writes["plain"])
            print(f"batch read of {args.records:,} records: data source {rs:,.0f} rows/s, plain consumer "
                  f"{rp:,.0f} rows/s, ratio {rs / rp:.2f} (target >= 0.5)")
            we = statistics.median(writes["exactly-once"])
            print(f"write of {args.records:,} rows: data source {ws:,.0f} rows/s, plain producer "
                  f"{wp:,.0f} rows/s, ratio {ws / wp:.2f} (target >= 0.8)")
            print(f"exactly-once write: {we:,.0f} rows/s, ratio to at-least-once {we / ws:.2f} (target >= 0.6)")
            print("write CPU per row (every process of the bench), median: " + ", ".join(
                f"{side} {statistics.median(us):.2f} us" for side, us in cpu.items()))
        finally:
            if spark is not None:
                spark.stop()
            cluster.stop()
            zk.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

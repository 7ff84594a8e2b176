"""A PySpark driver for the tests: the session every test uses, and, run as a script, a streaming
query from a topic to a Parquet table (or, with --sink-topic, to another topic through the
exactly-once sink) with a checkpoint, so a test can stop it, SIGKILL it, and start it again in a new
process.

    python spark_driver.py BOOTSTRAP TOPIC CHECKPOINT OUTPUT --stop-file F [--max-per-trigger N]
        [--slow-seconds S [--stagger]] [--sink-topic T]
"""

import argparse
import os
import sys


def spark_session(name: str):
    """Local mode on two cores, bound to loopback only, no web UI; `format("odradek")` registered."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    from pyspark.sql import SparkSession

    import odradek.pipeline

    session = (
        SparkSession.builder.master("local[2]").appName(name)
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    odradek.pipeline.register(session)
    return session


START_ATTEMPTS = 3
WORKER_START_TIMEOUT = "Python worker failed to connect back"


def worker_start_timed_out(query) -> bool:
    """Spark gives the Python process of a stream reader 10 s (hard-coded) to start and connect
    back; on a machine whose cores are taken by others a Python start-up can take longer. The
    query then fails before reading anything, and starting it again from its checkpoint is what
    any supervisor of a streaming job does."""
    e = query.exception()
    return e is not None and WORKER_START_TIMEOUT in str(e)


def _args(argv):
    p = argparse.ArgumentParser()
    p.add_argument("bootstrap")
    p.add_argument("topic")
    p.add_argument("checkpoint")
    p.add_argument("output")
    p.add_argument("--stop-file", required=True, help="the query stops gracefully once this file exists")
    p.add_argument("--max-per-trigger", type=int, default=None)
    p.add_argument("--slow-seconds", type=float, default=0.0, help="sleep per Arrow batch: makes batches last")
    p.add_argument("--stagger", action="store_true",
                   help="task partition p sleeps (p + 1) times as long: its tasks end one after another")
    p.add_argument("--sink-topic", help="copy to this topic (exactly-once, partition kept) instead of Parquet")
    p.add_argument("--max-runtime", type=float, default=600.0)
    return p.parse_args(argv)


def main(argv=None) -> int:
    """topic → Parquet table (Spark's file sink: exactly-once through its _spark_metadata log), or
    topic → topic (the odradek sink: exactly-once through Kafka transactions)."""
    import time

    args = _args(argv)
    spark = spark_session("odradek-stream-driver")
    reader = (spark.readStream.format("odradek")
              .option("kafka.bootstrap.servers", args.bootstrap)
              .option("subscribe", args.topic)
              .option("startingOffsets", "earliest"))
    if args.max_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(args.max_per_trigger))
    df = reader.load().selectExpr("partition", "offset", "key", "value", "timestamp")
    if args.slow_seconds:
        slow, stagger = args.slow_seconds, args.stagger

        def delay(batches):
            from pyspark import TaskContext

            pause = slow * (TaskContext.get().partitionId() + 1 if stagger else 1)
            for b in batches:
                time.sleep(pause)
                yield b

        df = df.mapInArrow(delay, df.schema)
    if args.sink_topic:
        writer = (df.select("key", "value", "partition").writeStream.format("odradek")
                  .option("kafka.bootstrap.servers", args.bootstrap).option("topic", args.sink_topic)
                  .option("deliveryGuarantee", "exactly-once"))
    else:
        writer = df.writeStream.format("parquet").option("path", args.output)
    writer = writer.option("checkpointLocation", args.checkpoint).trigger(processingTime="200 milliseconds")
    deadline = time.monotonic() + args.max_runtime
    query = writer.start()
    for attempt in range(1, START_ATTEMPTS + 1):
        while not os.path.exists(args.stop_file) and time.monotonic() < deadline:
            try:
                if query.awaitTermination(0.2):
                    break
            except Exception:  # it raises the query's error; isActive and exception() tell below
                break
        if not query.isActive and worker_start_timed_out(query) and attempt < START_ATTEMPTS:
            print(f"attempt {attempt}: {query.exception()}; starting the query again", flush=True)
            query = writer.start()
            continue
        if not query.isActive:
            raise RuntimeError(f"the query ended by itself: {query.exception()}")
        break
    query.stop()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

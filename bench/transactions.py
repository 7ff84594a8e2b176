"""Cost of transactions: transactional produce (100-byte records, 1,000 records per transaction)
against idempotent non-transactional produce, and read_committed against read_uncommitted
consume, on one cluster in the same run (the cases take turns round by round, so a slow spell of
a shared machine hits every case). Prints records/s per case and the ratios. Each producer sends
one record (in one transaction) before its clock starts: its start-up is not timed.

Run: .venv/bin/python bench/transactions.py [--records 200000] [--rounds 3] [--brokers 1]
"""

import argparse
import sys
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

SIZE = 100
PER_TXN = 1000
PARTITIONS = 3


def median(values):
    s = sorted(values)
    return s[len(s) // 2]


class Bench:
    def __init__(self, data_dir: Path, brokers: int):
        from odradek.dev.cluster import LocalCluster
        from odradek.dev.zookeeper import free_ports

        rf = min(brokers, 3)
        overrides = {"transaction.state.log.num.partitions": 3, "offsets.topic.num.partitions": 3,
                     "transaction.state.log.replication.factor": rf, "transaction.state.log.min.isr": 1}
        self.cluster = LocalCluster(data_dir, brokers=brokers, controllers=1, broker_ports=free_ports(brokers),
                                    broker_overrides=overrides)
        self.cluster.start()
        self.bootstrap = self.cluster.bootstrap
        self.rf = rf
        self.admin = AdminClient({"bootstrap.servers": self.bootstrap})

    def topic(self) -> str:
        name = f"bench-{uuid.uuid4().hex[:8]}"
        self.admin.create_topics([NewTopic(name, PARTITIONS, self.rf)], operation_timeout=60)[name].result(65)
        deadline = time.monotonic() + 60
        while True:
            t = self.admin.list_topics(name, timeout=10).topics.get(name)
            if t and t.error is None and all(p.leader >= 0 for p in t.partitions.values()):
                return name
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name}: no leaders after 60 s")
            time.sleep(0.2)

    def produce(self, topic: str, n: int, transactional: bool) -> float:
        config = {"bootstrap.servers": self.bootstrap, "linger.ms": 5, "enable.idempotence": True,
                  "queue.buffering.max.messages": 1_000_000, "message.timeout.ms": 120_000}
        if transactional:
            config.update({"transactional.id": f"bench-{uuid.uuid4().hex[:8]}", "transaction.timeout.ms": 120_000})
        producer = Producer(config)
        value = b"x" * SIZE
        # One record before the clock starts, so that neither case times its producer's start-up:
        # librdkafka's idempotent producer asks for its producer id on a 500 ms timer once the
        # bootstrap connection is replaced by the broker's own, and either kind learns the topic
        # and connects to its leader on its first record.
        if transactional:
            producer.init_transactions(60)
            producer.begin_transaction()
            producer.produce(topic, value)
            producer.commit_transaction(60)
        else:
            producer.produce(topic, value)
            if producer.flush(60):
                raise RuntimeError("the warm-up record was not sent")
        started = time.perf_counter()
        for start in range(0, n, PER_TXN):
            if transactional:
                producer.begin_transaction()
            for _ in range(min(PER_TXN, n - start)):
                while True:
                    try:
                        producer.produce(topic, value)
                        break
                    except BufferError:
                        producer.poll(0.01)
            if transactional:
                producer.commit_transaction(120)
            else:
                producer.poll(0)
        if producer.flush(120):
            raise RuntimeError("records left unsent")
        return n / (time.perf_counter() - started)

    def consume(self, topic: str, n: int, isolation: str) -> float:
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:6]}",
                             "isolation.level": isolation, "enable.auto.commit": False,
                             "fetch.max.bytes": 8 << 20})
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        got = 0
        started = time.perf_counter()
        deadline = time.monotonic() + 300
        while got < n:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{isolation}: read {got} of {n} records in 300 s")
            for m in consumer.consume(10_000, 1.0):
                if not m.error():
                    got += 1
        rate = n / (time.perf_counter() - started)
        consumer.close()
        return rate

    def stop(self) -> None:
        self.cluster.stop()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--brokers", type=int, default=1)
    args = parser.parse_args(argv)
    results: dict[str, list[float]] = {k: [] for k in ("transactional", "idempotent", "read_committed",
                                                        "read_uncommitted")}
    with tempfile.TemporaryDirectory(prefix="odradek-bench-txn-") as tmp:
        bench = Bench(Path(tmp), args.brokers)
        try:
            for round_ in range(args.rounds):
                order = [True, False] if round_ % 2 == 0 else [False, True]
                topics = {}
                for transactional in order:
                    topic = bench.topic()
                    topics[transactional] = topic
                    key = "transactional" if transactional else "idempotent"
                    results[key].append(bench.produce(topic, args.records, transactional))
                for isolation in (["read_committed", "read_uncommitted"] if round_ % 2 == 0
                                  else ["read_uncommitted", "read_committed"]):
                    results[isolation].append(bench.consume(topics[True], args.records, isolation))
                print(f"round {round_ + 1}: " + ", ".join(f"{k} {v[-1]:,.0f}/s" for k, v in results.items()),
                      flush=True)
        finally:
            bench.stop()
    m = {k: median(v) for k, v in results.items()}
    print(f"\n{args.records:,} records of {SIZE} bytes, {PER_TXN} per transaction, {args.brokers} broker(s), "
          f"median of {args.rounds} rounds:")
    for k, v in m.items():
        print(f"  {k:18} {v:12,.0f} records/s")
    print(f"  transactional / idempotent produce   {m['transactional'] / m['idempotent']:.2f}x")
    print(f"  read_committed / read_uncommitted    {m['read_committed'] / m['read_uncommitted']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())

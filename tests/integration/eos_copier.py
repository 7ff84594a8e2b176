"""A consume-transform-produce copier with librdkafka's transactions (Kafka's own EOS system-test
shape): each batch read with read_committed is written to the same partition of the output topic
and its input offsets are committed in the same transaction (send_offsets_to_transaction).

Any error ends the process (exit 2): the test restarts it, and the restarted copier fences the
old epoch, its open transaction is aborted, and it resumes from the committed offsets. With
--abort-every N, every Nth transaction is written and then aborted on purpose (exit 2 after it),
so aborted records exist for read_uncommitted readers to see.

    python eos_copier.py BOOTSTRAP INPUT OUTPUT TRANSACTIONAL_ID [--abort-every N]
"""

import argparse
import sys

from confluent_kafka import Consumer, KafkaException, Producer


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("bootstrap")
    parser.add_argument("input")
    parser.add_argument("output")
    parser.add_argument("transactional_id")
    parser.add_argument("--abort-every", type=int, default=0)
    parser.add_argument("--batch", type=int, default=200)
    parser.add_argument("--max-idle-polls", type=int, default=600, help="exit 0 after this many empty polls")
    args = parser.parse_args()
    producer = Producer({"bootstrap.servers": args.bootstrap, "transactional.id": args.transactional_id,
                         "transaction.timeout.ms": 15_000, "linger.ms": 5, "message.timeout.ms": 15_000})
    consumer = Consumer({"bootstrap.servers": args.bootstrap, "group.id": f"{args.transactional_id}-group",
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "session.timeout.ms": 10_000})
    try:
        producer.init_transactions(60)
        consumer.subscribe([args.input])
        done, idle = 0, 0
        while idle < args.max_idle_polls:
            msgs = consumer.consume(args.batch, 0.5)
            msgs = [m for m in msgs if not m.error()]
            if not msgs:
                idle += 1
                continue
            idle = 0
            producer.begin_transaction()
            for m in msgs:
                producer.produce(args.output, key=m.key(), value=m.value(), partition=m.partition())
            producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                                 consumer.consumer_group_metadata(), 60)
            done += 1
            if args.abort_every and done % args.abort_every == 0:
                producer.flush(60)
                producer.abort_transaction(60)
                print(f"aborted transaction {done} on purpose", file=sys.stderr)
                return 2
            producer.commit_transaction(60)
        return 0
    except KafkaException as e:
        print(f"copier error: {e}", file=sys.stderr)
        return 2
    finally:
        try:
            consumer.close()
        except Exception:
            pass


if __name__ == "__main__":
    sys.exit(main())

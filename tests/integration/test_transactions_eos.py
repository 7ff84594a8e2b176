"""Exactly once under failures (Kafka's transactions system test): a consume-transform-produce
copier (confluent-kafka, send_offsets_to_transaction) copies a 3-partition RF=3 topic while it is
SIGKILLed and restarted and brokers are bounced (SIGKILL or SIGTERM, the transaction coordinator and
partition leaders included). read_committed output holds every input record exactly once, in order
per partition; aborted records are visible to read_uncommitted only. Also: a producer dying inside
a transaction holds the LSO no longer than its timeout + 10 s, and kafka-python's and aiokafka's
transactional producers commit and abort.

The copy's size and failures come from the environment, so that `make eos-soak` runs the issue's
full size in each bounce form and `make test` a smaller one of both forms mixed:
ODRADEK_EOS_RECORDS (10,000), ODRADEK_EOS_BOUNCE (mixed | hard | clean), ODRADEK_EOS_FAILURES (4
copier kills and 4 broker bounces).
"""

import asyncio
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from odradek.transactions import Tool

from .conftest import new_cluster
from .kafka_helpers import create_topic, end_offsets, leader_of, wait_for_leaders
from .test_transactions import TXN_BROKER, read_all

RECORDS = int(os.environ.get("ODRADEK_EOS_RECORDS", "10000"))
BOUNCE = os.environ.get("ODRADEK_EOS_BOUNCE", "mixed")
FAILURES = int(os.environ.get("ODRADEK_EOS_FAILURES", "4"))
COPIER = Path(__file__).with_name("eos_copier.py")
EOS_BROKER = {**TXN_BROKER, "min.insync.replicas": 2, "transaction.state.log.min.isr": 2,
              "offsets.topic.replication.factor": 3, "transaction.state.log.replication.factor": 3}
SINGLE_BROKER = {**TXN_BROKER, "transaction.state.log.replication.factor": 1, "transaction.state.log.min.isr": 1}


def produce_input(bootstrap, topic, n):
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 20})
    for i in range(n):
        producer.produce(topic, key=str(i).encode(), value=f"record-{i}".encode(), partition=i % 3)
        if i % 1000 == 999:
            producer.poll(0)
    assert producer.flush(120) == 0


def coordinator_of(bootstrap, transactional_id) -> int | None:
    async def ask():
        tool = Tool(bootstrap, 5.0)
        try:
            return (await tool.describe(transactional_id))["coordinator"]
        finally:
            await tool.close()
    try:
        return asyncio.run(ask())
    except Exception:
        return None


def copied(bootstrap, group, topic, ends) -> bool:
    """Has the copier's group committed every input partition's end offset?"""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "isolation.level": "read_committed"})
    try:
        committed = consumer.committed([TopicPartition(topic, p) for p in ends], timeout=10)
    except Exception:  # a coordinator moving: not yet
        return False
    finally:
        consumer.close()
    return all(tp.error is None and tp.offset == ends[tp.partition] for tp in committed)


def bounce_plan(mode: str, n: int) -> list[tuple[str, str]]:
    """(how, whom) per bounce: hard (SIGKILL) or clean (SIGTERM), of the transaction coordinator
    and of an output partition's leader in turn; mixed runs hard/clean as 1, 0, 0, 1, ..."""
    return [("hard" if mode == "hard" or (mode == "mixed" and i % 4 in (0, 3)) else "clean",
             "coordinator" if i % 2 == 0 else "leader") for i in range(n)]


@pytest.mark.timeout(600 + RECORDS // 50)
def test_copier_killed_and_brokers_bounced_copies_every_record_exactly_once(cluster_factory, tmp_path):
    cluster = cluster_factory(brokers=3, broker_overrides=EOS_BROKER)
    bootstrap = cluster.bootstrap
    for topic in ("eos-in", "eos-out"):
        create_topic(bootstrap, topic, 3, replication_factor=3)
        wait_for_leaders(bootstrap, topic, 3)
    produce_input(bootstrap, "eos-in", RECORDS)
    ends = end_offsets(bootstrap, "eos-in", 3)
    assert sum(ends.values()) == RECORDS
    rng = random.Random(15)
    plan = bounce_plan(BOUNCE, FAILURES)
    log = open(tmp_path / "copier.log", "ab")
    copier = None
    kills = bounces = starts = 0
    started = time.monotonic()
    deadline = started + 300 + RECORDS // 60

    def ensure_copier():
        nonlocal copier, starts
        if copier is None or copier.poll() is not None:
            starts += 1
            copier = subprocess.Popen([sys.executable, str(COPIER), bootstrap, "eos-in", "eos-out", "copier",
                                       "--abort-every", "9", "--max-idle-polls", "20"], stdout=log, stderr=log)

    try:
        while kills < FAILURES or bounces < FAILURES:  # the failures, at random moments of the copy
            assert time.monotonic() < deadline, f"failures not done: {kills} kills, {bounces} bounces"
            ensure_copier()
            time.sleep(rng.uniform(1, 4))
            if kills < FAILURES and (bounces == FAILURES or rng.random() < 0.5):
                copier.send_signal(signal.SIGKILL)
                copier.wait(10)
                kills += 1
                continue
            how, what = plan[bounces]
            target = coordinator_of(bootstrap, "copier") if what == "coordinator" else None
            if target is None:
                target = leader_of(bootstrap, "eos-out", rng.randrange(3))
            broker = cluster.broker(target)
            if how == "hard":
                broker.kill(signal.SIGKILL)
                broker.start()
            else:
                broker.restart()  # SIGTERM: controlled shutdown first
            cluster.wait_ready(60)
            bounces += 1
        # then the copier runs until its group has committed the whole input (it exits 0 when idle,
        # which a bounce can make it do early: it is started again then)
        while not copied(bootstrap, "copier-group", "eos-in", ends):
            assert time.monotonic() < deadline, "the copier did not finish"
            ensure_copier()
            try:
                copier.wait(5)
            except subprocess.TimeoutExpired:
                pass
    finally:
        if copier is not None and copier.poll() is None:
            copier.send_signal(signal.SIGKILL)
            copier.wait(10)
        log.close()
    elapsed = time.monotonic() - started
    committed = read_all(bootstrap, "eos-out", 3, "read_committed", timeout=180)
    for p in range(3):
        want = [f"record-{i}".encode() for i in range(p, RECORDS, 3)]
        assert committed[p] == want, f"partition {p}: {len(committed[p])} records, first differences " + str(
            [(i, a, b) for i, (a, b) in enumerate(zip(committed[p], want)) if a != b][:3])
    uncommitted = read_all(bootstrap, "eos-out", 3, "read_uncommitted", timeout=180)
    aborted = sum(map(len, uncommitted.values())) - RECORDS
    assert aborted > 0  # aborted copies are there, for these readers only
    assert starts > kills
    print(f"\neos copy: {RECORDS} records exactly once in {elapsed:.0f} s; {kills} copier SIGKILLs, "
          f"{bounces} {BOUNCE} broker bounces {[h + ' ' + w for h, w in plan]}, {starts} copier starts, "
          f"{aborted} aborted records seen by read_uncommitted only")


@pytest.fixture(scope="module")
def single(zookeeper, tmp_path_factory):
    """One broker for the single-client tests of this module."""
    cluster = new_cluster(zookeeper, tmp_path_factory.mktemp("eos-single"), brokers=1, broker_overrides=SINGLE_BROKER)
    cluster.start()
    yield cluster
    cluster.stop()


def test_a_producer_dying_in_a_transaction_holds_the_lso_at_most_its_timeout(single):
    bootstrap = single.bootstrap
    create_topic(bootstrap, "lso", 1)
    wait_for_leaders(bootstrap, "lso", 1)
    script = (
        "import sys, time\n"
        "from confluent_kafka import Producer\n"
        f"p = Producer({{'bootstrap.servers': '{bootstrap}', 'transactional.id': 'dies', "
        "'transaction.timeout.ms': 10000})\n"
        "p.init_transactions(60)\n"
        "p.begin_transaction()\n"
        "p.produce('lso', b'open', partition=0)\n"
        "p.flush(30)\n"
        "print('sent', flush=True)\n"
        "time.sleep(600)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE)
    try:
        assert proc.stdout.readline().strip() == b"sent"
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        died = time.monotonic()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "lso", "isolation.level": "read_committed"})
    try:
        assert consumer.get_watermark_offsets(TopicPartition("lso", 0), timeout=10)[1] == 0  # held by the open txn
        while consumer.get_watermark_offsets(TopicPartition("lso", 0), timeout=10)[1] == 0:
            assert time.monotonic() - died < 10 + 10, "the LSO is stuck past transaction.timeout.ms + 10 s"
            time.sleep(0.2)
    finally:
        consumer.close()
    assert read_all(bootstrap, "lso", 1, "read_committed") == {0: []}


def test_kafka_python_transactional_producer_commits_and_aborts(single):
    from kafka import KafkaProducer

    bootstrap = single.bootstrap
    create_topic(bootstrap, "kp", 1)
    wait_for_leaders(bootstrap, "kp", 1)
    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id="kafka-python-app")
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send("kp", b"kept", partition=0)
        producer.commit_transaction()
        producer.begin_transaction()
        producer.send("kp", b"dropped", partition=0)
        producer.flush()
        producer.abort_transaction()
        producer.begin_transaction()
        producer.send("kp", b"kept too", partition=0)
        producer.commit_transaction()
    finally:
        producer.close(timeout=10)
    assert read_all(bootstrap, "kp", 1, "read_committed") == {0: [b"kept", b"kept too"]}
    assert read_all(bootstrap, "kp", 1, "read_uncommitted") == {0: [b"kept", b"dropped", b"kept too"]}


def test_aiokafka_transactional_producer_commits_and_aborts(single):
    from aiokafka import AIOKafkaProducer

    bootstrap = single.bootstrap
    create_topic(bootstrap, "aio", 1)
    wait_for_leaders(bootstrap, "aio", 1)

    async def run():
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id="aiokafka-app",
                                    request_timeout_ms=30_000)
        await producer.start()
        try:
            async with producer.transaction():
                await producer.send_and_wait("aio", b"kept", partition=0)
            await producer.begin_transaction()
            await producer.send_and_wait("aio", b"dropped", partition=0)
            await producer.abort_transaction()
            async with producer.transaction():
                await producer.send_and_wait("aio", b"kept too", partition=0)
        finally:
            await asyncio.wait_for(producer.stop(), 30)

    asyncio.run(asyncio.wait_for(run(), 120))
    assert read_all(bootstrap, "aio", 1, "read_committed") == {0: [b"kept", b"kept too"]}
    assert read_all(bootstrap, "aio", 1, "read_uncommitted") == {0: [b"kept", b"dropped", b"kept too"]}

"""Consumer groups end to end: real brokers and controller (LocalCluster), real clients
(confluent-kafka/librdkafka, kafka-python, kcat)."""

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from odradek.broker.group.offsets_topic import partition_for
from odradek.dev.waiting import wait_until

from .conftest import new_cluster
from .kafka_helpers import ContinuousProducer, create_topic, end_offsets, leader_of, wait_for_leaders, wait_isr_full

GROUP_BROKER = {
    "offsets.topic.num.partitions": 4,
    "offsets.topic.replication.factor": 1,
    "group.initial.rebalance.delay.ms": 0,
    "group.min.session.timeout.ms": 1000,
}
SHARED_BROKER = {
    "offsets.topic.num.partitions": 3,
    "offsets.topic.replication.factor": 3,
    "group.initial.rebalance.delay.ms": 0,
    "group.min.session.timeout.ms": 1000,
}




def produce(bootstrap: str, topic: str, n: int, tag: str) -> set[bytes]:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    values = set()
    for i in range(n):
        v = b"%s-%05d" % (tag.encode(), i)
        values.add(v)
        p.produce(topic, v, key=b"k%d" % i)
    assert p.flush(30) == 0
    return values


def consumer(bootstrap: str, group: str, **extra) -> Consumer:
    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 500,
    }
    conf.update(extra)
    return Consumer(conf)


def consume(c: Consumer, want: int, timeout: float = 60.0) -> list[bytes]:
    out: list[bytes] = []
    deadline = time.monotonic() + timeout
    while len(out) < want and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is None or m.error():
            continue
        out.append(m.value())
    return out


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    c = consumer(bootstrap, group)
    try:
        return {tp.partition: tp.offset for tp in c.committed([TopicPartition(topic, p) for p in range(partitions)],
                                                              timeout=10)}
    finally:
        c.close()


class Member(threading.Thread):
    """A confluent-kafka group member polling in its own thread: records what it consumed and its
    assignment; on revocation it commits the revoked partitions' positions synchronously, so the
    next owner starts exactly where this one stopped."""

    def __init__(self, name: str, bootstrap: str, group: str, topic: str, strategy: str = "range",
                 consumed: list | None = None, **extra):
        super().__init__(name=f"member-{name}", daemon=True)
        self.member_name, self.topic, self.strategy = name, topic, strategy
        self.consumer = consumer(bootstrap, group, **{"partition.assignment.strategy": strategy, **extra})
        self.consumed = consumed if consumed is not None else []
        self.assignment: set[int] = set()
        self.commit_errors: list[str] = []
        self.errors: list[str] = []
        self._halt = threading.Event()
        self._lock = threading.Lock()

    @property
    def cooperative(self) -> bool:
        return self.strategy == "cooperative-sticky"

    def _on_assign(self, c, partitions):
        with self._lock:
            self.assignment |= {tp.partition for tp in partitions}
        (c.incremental_assign if self.cooperative else c.assign)(partitions)

    def _on_revoke(self, c, partitions):
        positions = [tp for tp in c.position(partitions) if tp.offset >= 0]
        if positions:
            try:
                c.commit(offsets=positions, asynchronous=False)
            except KafkaException as e:
                self.commit_errors.append(str(e))
        with self._lock:
            self.assignment -= {tp.partition for tp in partitions}
        if self.cooperative:
            c.incremental_unassign(partitions)
        else:
            c.unassign()

    def owned(self) -> set[int]:
        with self._lock:
            return set(self.assignment)

    def run(self):
        c = self.consumer
        c.subscribe([self.topic], on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_revoke)
        try:
            while not self._halt.is_set():
                m = c.poll(0.2)
                if m is None:
                    continue
                if m.error():
                    self.errors.append(str(m.error()))
                    continue
                self.consumed.append((m.value(), self.member_name, m.partition(), m.offset()))
        finally:
            c.close()  # revokes (commits) and leaves the group

    def stop(self, timeout: float = 30.0):
        self._halt.set()
        self.join(timeout)
        assert not self.is_alive(), f"{self.name} did not close within {timeout}s"


def wait_partitioned(members: list[Member], partitions: int, timeout: float = 60.0) -> dict[str, set[int]]:
    """Until every member owns at least one partition and each partition has exactly one owner."""
    def check():
        owned = {m.member_name: m.owned() for m in members}
        flat = [p for ps in owned.values() for p in ps]
        if all(owned.values()) and sorted(flat) == list(range(partitions)):
            return owned
        return None

    return wait_until(check, f"each of {partitions} partitions owned by exactly one of {len(members)} members",
                      timeout)


@pytest.fixture(scope="module")
def groups_cluster(zookeeper, tmp_path_factory):
    """Three brokers, `__consumer_offsets` with RF=3 on 3 partitions; the coordinator-kill case runs
    last in this module."""
    cluster = new_cluster(zookeeper, tmp_path_factory.mktemp("groups-cluster"), brokers=3,
                          broker_overrides=SHARED_BROKER)
    cluster.start()
    yield cluster
    cluster.stop()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


# --- one member at a time: commit, stop, resume (and across a coordinator restart) -----------------


def test_commit_stop_resume_and_after_restart(cluster_factory):
    cluster = cluster_factory(brokers=1, broker_overrides=GROUP_BROKER)
    bs = cluster.bootstrap
    create_topic(bs, "resume", 3)
    wait_for_leaders(bs, "resume", 3)
    sent = produce(bs, "resume", 60, "a")

    c1 = consumer(bs, "g-resume")
    c1.subscribe(["resume"])
    first = consume(c1, 20)
    assert len(first) >= 20
    c1.commit(asynchronous=False)
    c1.close()

    c2 = consumer(bs, "g-resume")
    c2.subscribe(["resume"])
    rest = consume(c2, 60 - len(first))
    c2.commit(asynchronous=False)
    c2.close()
    assert len(rest) == 60 - len(first)
    assert set(first) | set(rest) == sent and not set(first) & set(rest)

    more = produce(bs, "resume", 10, "b")
    cluster.broker(0).restart()
    cluster.wait_ready()
    c3 = consumer(bs, "g-resume")
    c3.subscribe(["resume"])
    got = consume(c3, 10)
    time.sleep(1)
    got += consume(c3, 1, timeout=1)
    c3.close()
    assert set(got) == more


# --- three members, one leaves, one joins: no record twice, none missed ----------------------------


@pytest.mark.parametrize("strategy", ["range", "roundrobin", "cooperative-sticky"])
def test_members_leave_and_join_without_duplicates(groups_cluster, strategy):
    bs = groups_cluster.bootstrap
    topic, group = unique(f"six-{strategy}"), unique(f"g-{strategy}")
    create_topic(bs, topic, 6)
    producer = ContinuousProducer(bs, topic, 6, tag="r", rate=300).start()
    consumed: list = []
    members = [Member(n, bs, group, topic, strategy, consumed) for n in ("m1", "m2", "m3")]
    try:
        for m in members:
            m.start()
        first = wait_partitioned(members, 6)
        assert sorted(len(ps) for ps in first.values()) == [2, 2, 2]
        producer.wait_acked(200)

        leaving = members.pop(0)
        leaving.stop()
        assert not leaving.owned()
        members.append(Member("m4", bs, group, topic, strategy, consumed))
        members[-1].start()
        second = wait_partitioned(members, 6)  # m1's partitions moved; m4 got a share
        assert set(second) == {"m2", "m3", "m4"} and second["m4"]
        producer.wait_acked(200)
    finally:
        producer.stop()
        acked = {producer.value(i) for i in producer.acked}
        try:
            wait_until(lambda: {v for v, *_ in consumed} >= acked, "every acknowledged record consumed", 60)
        finally:
            for m in members:
                m.stop()
    values = [v for v, *_ in consumed]
    dupes = {v for v in values if values.count(v) > 1} if len(values) != len(set(values)) else set()
    assert not dupes, f"{len(dupes)} records consumed twice, e.g. {[c for c in consumed if c[0] in dupes][:4]}"
    assert set(values) <= {producer.value(i) for i in range(producer.sent)}
    assert {name for _, name, *_ in consumed} == {"m1", "m2", "m3", "m4"}  # all took part
    assert not producer.errors
    for m in members + [leaving]:
        assert not m.commit_errors, m.commit_errors


# --- other clients ---------------------------------------------------------------------------------


def test_kafka_python_group_consumes_and_commits(groups_cluster):
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTP

    bs = groups_cluster.bootstrap
    topic, group = unique("kp"), unique("g-kp")
    create_topic(bs, topic, 3)
    kp = KafkaProducer(bootstrap_servers=bs, enable_idempotence=False, linger_ms=5)
    for i in range(30):
        kp.send(topic, b"kp-%03d" % i, partition=i % 3)
    kp.flush(30)

    def group_consumer():
        return KafkaConsumer(topic, bootstrap_servers=bs, group_id=group, enable_auto_commit=False,
                             auto_offset_reset="earliest", consumer_timeout_ms=3000,
                             session_timeout_ms=6000, heartbeat_interval_ms=500)

    kc = group_consumer()
    try:
        got = []
        deadline = time.monotonic() + 60
        while len(got) < 30 and time.monotonic() < deadline:
            for batch in kc.poll(timeout_ms=500).values():
                got += [r.value for r in batch]
        assert sorted(got) == [b"kp-%03d" % i for i in range(30)]
        kc.commit()
        assert {p: kc.committed(KTP(topic, p)) for p in range(3)} == {0: 10, 1: 10, 2: 10}
    finally:
        kc.close()
    assert committed(bs, group, topic, 3) == {0: 10, 1: 10, 2: 10}  # librdkafka reads kafka-python's commit

    for i in range(30, 36):
        kp.send(topic, b"kp-%03d" % i, partition=i % 3)
    kp.flush(30)
    kp.close()
    kc = group_consumer()
    try:
        got = []
        deadline = time.monotonic() + 60
        while len(got) < 6 and time.monotonic() < deadline:
            for batch in kc.poll(timeout_ms=500).values():
                got += [r.value for r in batch]
        assert sorted(got) == [b"kp-%03d" % i for i in range(30, 36)]  # resumed at the commit
    finally:
        kc.close()


def test_kcat_consumes_as_a_group(groups_cluster):
    bs = groups_cluster.bootstrap
    topic, group = unique("kcat"), unique("g-kcat")
    create_topic(bs, topic, 3)
    sent = produce(bs, topic, 45, "kc")
    out = subprocess.run(
        ["kcat", "-b", bs, "-G", group, "-o", "beginning", "-e", "-q", "-f", "%s\\n",
         "-X", "session.timeout.ms=6000", "-X", "heartbeat.interval.ms=500", topic],
        capture_output=True, timeout=90,
    )
    assert out.returncode == 0, out.stderr.decode()[-2000:]
    lines = [line for line in out.stdout.splitlines() if line]
    assert sorted(lines) == sorted(sent)
    assert committed(bs, group, topic, 3) == end_offsets(bs, topic, 3)  # kcat committed where it stopped


# --- versions: what librdkafka 2.x (up to 2.11 exact checks) and kafka-python 3.x need ----------------

GROUP_APIS = {10: "FindCoordinator", 8: "OffsetCommit", 9: "OffsetFetch", 11: "JoinGroup", 12: "Heartbeat",
              13: "LeaveGroup", 14: "SyncGroup", 15: "DescribeGroups", 16: "ListGroups", 42: "DeleteGroups"}
# librdkafka up to 2.11 enables the group consumer only if these exact versions are advertised.
LIBRDKAFKA_EXACT = {10: [0], 11: [0], 14: [0], 12: [0], 13: [0], 8: [1, 2], 9: [1]}
# The version ranges kafka-python 3.0 implements (its bundled JSON schemas); it uses the highest
# version both sides know. librdkafka 2.16's own choices are exercised by the acceptance cases.
CLIENT_RANGES = {
    "kafka-python": {10: (0, 6), 8: (2, 10), 9: (1, 10), 11: (0, 9), 12: (0, 4), 13: (0, 5), 14: (0, 5),
                     15: (0, 6), 16: (0, 5), 42: (0, 2)},
}


def api_versions(host: str, port: int) -> dict[int, tuple[int, int]]:
    """ApiVersions v0, encoded and parsed by hand (independent of the broker's codec library)."""
    import socket
    import struct

    client_id = b"versions-test"
    body = struct.pack(">hhih", 18, 0, 1, len(client_id)) + client_id
    with socket.create_connection((host, port), timeout=10) as s:
        s.sendall(struct.pack(">i", len(body)) + body)
        data = b""
        while len(data) < 4 or len(data) < 4 + struct.unpack(">i", data[:4])[0]:
            chunk = s.recv(65536)
            assert chunk, "connection closed before the ApiVersions answer"
            data += chunk
    corr, error, n = struct.unpack_from(">ihi", data, 4)
    assert (corr, error) == (1, 0)
    return {k: (lo, hi) for k, lo, hi in (struct.unpack_from(">hhh", data, 14 + 6 * i) for i in range(n))}


def test_group_api_versions_cover_the_clients(groups_cluster):
    host, port = groups_cluster.bootstrap.split(",")[0].split(":")
    served = api_versions(host, int(port))
    missing = [GROUP_APIS[k] for k in GROUP_APIS if k not in served]
    assert not missing, f"group APIs not advertised: {missing}"
    for key, versions in LIBRDKAFKA_EXACT.items():
        lo, hi = served[key]
        assert all(lo <= v <= hi for v in versions), f"{GROUP_APIS[key]} {lo}-{hi} lacks librdkafka's {versions}"
    for client, ranges in CLIENT_RANGES.items():
        for key, (client_lo, client_hi) in ranges.items():
            lo, hi = served[key]
            assert max(lo, client_lo) <= min(hi, client_hi), f"{client}: no common {GROUP_APIS[key]} version"
    # Static membership (group.instance.id) needs JoinGroup 5+, SyncGroup/Heartbeat 3+, batch LeaveGroup 3+.
    assert served[11][1] >= 5 and served[14][1] >= 3 and served[12][1] >= 3 and served[13][1] >= 3


# --- a member that stops heartbeating is expelled ---------------------------------------------------

STOPPABLE_MEMBER = textwrap.dedent("""
    import sys
    from confluent_kafka import Consumer
    bootstrap, group, topic = sys.argv[1:4]
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, "session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
    def on_assign(consumer, partitions):
        print("ASSIGNED " + ",".join(str(tp.partition) for tp in partitions), flush=True)
    c.subscribe([topic], on_assign=on_assign)
    while True:
        c.poll(0.2)
""")


def test_stopped_member_is_expelled_and_its_partitions_move(groups_cluster):
    bs = groups_cluster.bootstrap
    topic, group = unique("sigstop"), unique("g-sigstop")
    create_topic(bs, topic, 6)
    child = subprocess.Popen([sys.executable, "-c", STOPPABLE_MEMBER, bs, group, topic], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: [lines.append(line.strip()) for line in child.stdout], daemon=True)
    reader.start()
    survivor = Member("survivor", bs, group, topic)
    try:
        wait_until(lambda: any(line.startswith("ASSIGNED ") and set(line[9:].split(",")) == set("012345")
                               for line in lines), "the child member owns all 6 partitions", 60)
        survivor.start()
        owned = wait_until(lambda: (lambda o: o if 0 < len(o) < 6 else None)(survivor.owned()),
                           "the partitions split between the two members", 60)
        child_partitions = set(range(6)) - owned
        os.kill(child.pid, signal.SIGSTOP)
        sent = produce(bs, topic, 60, "after-stop")
        wait_until(lambda: survivor.owned() == set(range(6)), "survivor owns every partition after the session timeout",
                   60)
        wait_until(lambda: {v for v, *_ in survivor.consumed} >= sent, "survivor consumed the stopped member's records",
                   60)
        assert {p for v, _, p, _ in survivor.consumed if v in sent} >= child_partitions
    finally:
        if child.poll() is None:
            child.kill()  # SIGKILL ends a stopped process too
        child.wait(10)
        if survivor.is_alive():
            survivor.stop()


# --- the admin client: list, describe, offsets, delete -----------------------------------------------


def admin_result(future, timeout: float = 30.0):
    return future.result(timeout=timeout)


def test_admin_client_lists_describes_and_deletes_groups(groups_cluster):
    from confluent_kafka import ConsumerGroupState, ConsumerGroupTopicPartitions, KafkaError
    from confluent_kafka.admin import AdminClient

    bs = groups_cluster.bootstrap
    admin = AdminClient({"bootstrap.servers": bs})
    topic, live, idle = unique("admin"), unique("g-live"), unique("g-idle")
    create_topic(bs, topic, 3)
    sent = produce(bs, topic, 30, "adm")

    c = consumer(bs, idle)  # an Empty group with committed offsets
    c.subscribe([topic])
    assert set(consume(c, 30)) == sent
    c.commit(asynchronous=False)
    c.close()
    ends = end_offsets(bs, topic, 3)

    members = [Member(n, bs, live, topic, "range") for n in ("a1", "a2")]
    try:
        for m in members:
            m.start()
        owned = wait_partitioned(members, 3)

        def listed(**kw):
            result = admin_result(admin.list_consumer_groups(request_timeout=10, **kw))
            assert not result.errors, result.errors
            return {g.group_id: g for g in result.valid}

        groups = wait_until(lambda: (lambda g: g if live in g and idle in g else None)(listed()),
                            "both groups listed", 30)
        assert groups[live].state == ConsumerGroupState.STABLE and groups[idle].state == ConsumerGroupState.EMPTY
        assert not groups[live].is_simple_consumer_group
        stable = listed(states={ConsumerGroupState.STABLE})
        assert live in stable and idle not in stable

        desc = admin_result(admin.describe_consumer_groups([live], request_timeout=10)[live])
        assert (desc.group_id, desc.state, desc.partition_assignor) == (live, ConsumerGroupState.STABLE, "range")
        assert desc.coordinator.id == leader_of(bs, "__consumer_offsets", partition_for(live, 3))
        assert len(desc.members) == 2 and all(m.host and m.client_id for m in desc.members)
        assigned = {m.member_id: {tp.partition for tp in m.assignment.topic_partitions if tp.topic == topic}
                    for m in desc.members}
        assert sorted(assigned.values(), key=sorted) == sorted(owned.values(), key=sorted)
        idle_desc = admin_result(admin.describe_consumer_groups([idle], request_timeout=10)[idle])
        assert idle_desc.state == ConsumerGroupState.EMPTY and not idle_desc.members

        request = [ConsumerGroupTopicPartitions(idle)]
        got = admin_result(admin.list_consumer_group_offsets(request, request_timeout=10)[idle])
        assert got.group_id == idle
        assert {tp.partition: tp.offset for tp in got.topic_partitions if tp.topic == topic} == ends
        one = [ConsumerGroupTopicPartitions(idle, [TopicPartition(topic, 1)])]
        got = admin_result(admin.list_consumer_group_offsets(one, request_timeout=10)[idle])
        assert [(tp.partition, tp.offset) for tp in got.topic_partitions] == [(1, ends[1])]

        futures = admin.delete_consumer_groups([live, idle], request_timeout=10)
        with pytest.raises(KafkaException) as refused:
            admin_result(futures[live])
        assert refused.value.args[0].code() == KafkaError.NON_EMPTY_GROUP
        admin_result(futures[idle])
        groups = listed()
        assert live in groups and idle not in groups
        got = admin_result(admin.list_consumer_group_offsets(request, request_timeout=10)[idle])
        assert not [tp for tp in got.topic_partitions if tp.offset >= 0]
        with pytest.raises(KafkaException) as unknown:  # Kafka: a deleted (unknown) group is not found
            admin_result(admin.delete_consumer_groups([idle], request_timeout=10)[idle])
        assert unknown.value.args[0].code() == KafkaError.GROUP_ID_NOT_FOUND
        assert admin_result(admin.describe_consumer_groups([idle], request_timeout=10)[idle]).state == \
            ConsumerGroupState.DEAD
    finally:
        for m in members:
            m.stop()

    c = consumer(bs, idle)  # the offsets are gone: auto.offset.reset (earliest) decides again
    c.subscribe([topic])
    try:
        assert set(consume(c, 30)) == sent
    finally:
        c.close()


# --- the coordinator broker dies; coordination moves with __consumer_offsets leadership -------------


def test_offsets_survive_coordinator_kill(groups_cluster):
    bs = groups_cluster.bootstrap
    topic, group = unique("failover"), unique("g-failover")
    create_topic(bs, topic, 3, replication_factor=3)
    wait_isr_full(bs, topic, 3)
    sent = produce(bs, topic, 30, "before")
    c1 = consumer(bs, group)
    c1.subscribe([topic])
    got = consume(c1, 30)
    assert set(got) == sent
    c1.commit(asynchronous=False)
    c1.close()
    wait_isr_full(bs, "__consumer_offsets", 3)

    coordinator = leader_of(bs, "__consumer_offsets", partition_for(group, 3))
    groups_cluster.broker(coordinator).kill()
    groups_cluster.wait_broker_gone(coordinator)
    wait_until(lambda: leader_of(bs, "__consumer_offsets", partition_for(group, 3)) != coordinator,
               "a new leader for the group's offsets partition", 60)
    later = produce(bs, topic, 9, "after")

    c2 = consumer(bs, group)
    c2.subscribe([topic])
    resumed = consume(c2, 9)
    time.sleep(1)
    resumed += consume(c2, 1, timeout=1)
    c2.close()
    assert set(resumed) == later  # from the committed offsets, nothing of `before` again

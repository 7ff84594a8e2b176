"""Acceptance for partition reassignment (issue 13): real ZooKeeper, two controllers and four
brokers as processes, kafka-python's AdminClient (AlterPartitionReassignments and
ListPartitionReassignments, sent to any broker, forwarded to the controller) and confluent-kafka
producing acks=all. One cluster serves the module; each test uses topics of its own."""

import json
import signal
import subprocess
import sys
import time

import pytest
from confluent_kafka import ElectionType, KafkaError, TopicPartition
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource
from kafka import KafkaAdminClient
from kafka import TopicPartition as KTP
from kafka.admin import NewTopic
from kafka.errors import KafkaConnectionError
from kio.schema.errors import ErrorCode

from odradek.broker.replication_quota import SAMPLE_S, SAMPLES
from odradek.common import zk_data
from odradek.dev.waiting import wait_until

from .conftest import new_cluster
from .kafka_helpers import (
    ContinuousProducer,
    Record,
    admin,
    confluent_produce,
    verify_acknowledged,
    wait_for_partitions,
    wait_isr_full,
)


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory):
    c = new_cluster(zookeeper, tmp_path_factory.mktemp("reassign"), brokers=4, controllers=2,
                    # paused brokers (the "in the middle" tests) must stay registered meanwhile
                    broker_overrides={"replica.lag.time.max.ms": 3000, "zookeeper.session.timeout.ms": 15000})
    c.start()
    yield c
    c.stop()


@pytest.fixture(scope="module")
def kadmin(cluster):
    client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=30_000)
    yield client
    client.close()


def wait_done(kadmin, cluster, topic: str, replicas: tuple[int, ...], timeout: float = 60.0) -> None:
    """Until the controller lists no reassignment of `topic` and Metadata shows `replicas`, all in sync."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if not any(tp.topic == topic for tp in kadmin.list_partition_reassignments()):
                break
        except KafkaConnectionError:
            pass  # a connection to a broker that was paused: kafka-python reconnects on the next call
        assert time.monotonic() < deadline, f"{topic}: reassignment still listed after {timeout}s"
        time.sleep(0.2)
    wait_for_partitions(cluster.bootstrap, topic,
                        lambda v: set(v[0].replicas) == set(replicas) and set(v[0].isr) == set(replicas),
                        f"replicas {replicas}", max(1.0, deadline - time.monotonic()))


def wait_gone(cluster, broker: int, topic: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while cluster.partition_dir(broker, topic, 0).exists():
        assert time.monotonic() < deadline, f"broker {broker} still holds {topic}-0 after {timeout}s"
        time.sleep(0.2)


def create_on(cluster, kadmin, topic: str, replicas: list[int]) -> None:
    kadmin.create_topics([NewTopic(topic, replica_assignments={0: replicas})])
    wait_isr_full(cluster.bootstrap, topic, 1)


def test_move_under_load(cluster, kadmin):
    """{0,1,2} → {1,2,3} while acks=all records flow: completes, nothing acknowledged is lost,
    broker 0's files are gone, broker 3's log is the leader's byte for byte."""
    topic = "move-under-load"
    create_on(cluster, kadmin, topic, [0, 1, 2])
    producer = ContinuousProducer(cluster.bootstrap, topic, 1, rate=500).start()
    try:
        producer.wait_acked(500)
        assert kadmin.alter_partition_reassignments({KTP(topic, 0): [1, 2, 3]}) == {KTP(topic, 0): None}
        wait_done(kadmin, cluster, topic, (1, 2, 3))
        producer.wait_acked(500)
    finally:
        producer.stop()
    assert not producer.errors, producer.errors[:3]
    verify_acknowledged(cluster.bootstrap, producer)
    wait_gone(cluster, 0, topic)
    stored = cluster.wait_logs_identical(topic, 0, [1, 2, 3])
    # DescribeLogDirs (kafka-python) sees the same: the replica on 3, none left on 0
    sizes = {}
    for answer in kadmin.describe_log_dirs({topic: [0]}, brokers=[0, 3]):
        for d in answer["log_dirs"]:
            for t in d["topics"]:
                for p in t["partitions"]:
                    sizes[answer["broker"]] = p["partition_size"]
    assert sizes == {3: len(stored)}


def test_errors_and_replication_factor_changes(cluster, kadmin):
    """Kafka's errors for bad targets; replication factor 1 → 3 through /admin/reassign_partitions
    (older tools), then 3 → 2 through the API."""
    topic = "rf-change"
    create_on(cluster, kadmin, topic, [2])
    answer = kadmin.alter_partition_reassignments({KTP(topic, 0): [2, 9], KTP(topic, 1): [1]})
    assert answer[KTP(topic, 0)].errno == ErrorCode.invalid_replica_assignment
    assert answer[KTP(topic, 1)].errno == ErrorCode.unknown_topic_or_partition
    cancel = kadmin.alter_partition_reassignments({KTP(topic, 0): None})
    assert cancel[KTP(topic, 0)].errno == ErrorCode.no_reassignment_in_progress

    zk = cluster.zk_client()
    try:
        zk.create(zk_data.REASSIGN_PARTITIONS, json.dumps(
            {"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [2, 0, 1]}]}).encode())
        wait_done(kadmin, cluster, topic, (2, 0, 1))
        deadline = time.monotonic() + 30
        while zk.exists(zk_data.REASSIGN_PARTITIONS):
            assert time.monotonic() < deadline, "/admin/reassign_partitions left behind"
            time.sleep(0.2)
    finally:
        zk.stop()
        zk.close()
    assert kadmin.alter_partition_reassignments({KTP(topic, 0): [0, 1]}) == {KTP(topic, 0): None}
    wait_done(kadmin, cluster, topic, (0, 1))
    wait_gone(cluster, 2, topic)
    cluster.wait_logs_identical(topic, 0, [0, 1])


def test_cancel_restores_the_original_replicas(cluster, kadmin):
    """Broker 3 is hung (SIGSTOP) when it is added, so the reassignment stays in the middle;
    cancelling it leaves the original replicas, and broker 3 deletes what it started."""
    topic = "cancelled"
    create_on(cluster, kadmin, topic, [0, 1])
    b3 = cluster.broker(3)
    b3.pause()
    try:
        assert kadmin.alter_partition_reassignments({KTP(topic, 0): [0, 1, 3]}) == {KTP(topic, 0): None}
        listed = kadmin.list_partition_reassignments()
        assert listed[KTP(topic, 0)] == {"replicas": [0, 1, 3], "adding_replicas": [3], "removing_replicas": []}
        assert kadmin.alter_partition_reassignments({KTP(topic, 0): None}) == {KTP(topic, 0): None}
    finally:
        b3.resume()
    wait_done(kadmin, cluster, topic, (0, 1))
    wait_gone(cluster, 3, topic)


def test_reorder_then_preferred_election(cluster, kadmin):
    """Kafka's way to move a leader: reorder the replicas (done at once: all in sync), then a
    preferred election through confluent-kafka's AdminClient (ElectLeaders v2, forwarded)."""
    topic = "preferred"
    create_on(cluster, kadmin, topic, [0, 1])
    assert kadmin.alter_partition_reassignments({KTP(topic, 0): [1, 0]}) == {KTP(topic, 0): None}
    wait_done(kadmin, cluster, topic, (0, 1))
    views = wait_for_partitions(cluster.bootstrap, topic, lambda v: v[0].replicas == (1, 0), "replicas (1, 0)")
    assert views[0].leader == 0  # a reorder alone keeps the leader
    client = admin(cluster.bootstrap)
    result = client.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, 0)]).result(timeout=30)
    assert result == {TopicPartition(topic, 0): None}
    wait_for_partitions(cluster.bootstrap, topic, lambda v: v[0].leader == 1, "leader 1")
    again = client.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, 0)]).result(timeout=30)
    assert again[TopicPartition(topic, 0)].code() == KafkaError.ELECTION_NOT_NEEDED


def reassign_cli(cluster, *args, timeout: float = 90.0) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "odradek.cli", "reassign", "--bootstrap-server", cluster.bootstrap,
                           *map(str, args)], capture_output=True, text=True, timeout=timeout)


def throttle_configs(cluster, topic: str) -> dict[str, str]:
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    client = admin(cluster.bootstrap)  # must outlive the future
    entries = client.describe_configs([resource])[resource].result(timeout=30)
    return {k: entries[k].value or "" for k in ("leader.replication.throttled.replicas",
                                                 "follower.replication.throttled.replicas")}


def test_cli_generate_execute_verify_cancel(cluster, kadmin, tmp_path):
    """`odradek reassign` end to end: a generated plan moves a topic onto brokers 1-3 (--verify
    exits 1 while moving, 0 when done); a plan stuck on a hung broker is cancelled."""
    topic = "cli"
    kadmin.create_topics([NewTopic(topic, replica_assignments={0: [0, 1], 1: [1, 0], 2: [0, 1]})])
    wait_isr_full(cluster.bootstrap, topic, 3)
    producer = ContinuousProducer(cluster.bootstrap, topic, 3, rate=300).start()
    try:
        producer.wait_acked(300)
        topics_file = tmp_path / "topics.json"
        topics_file.write_text(json.dumps({"version": 1, "topics": [{"topic": topic}]}))
        done = reassign_cli(cluster, "--generate", "--topics-to-move-json-file", topics_file, "--broker-list", "1,2,3")
        assert done.returncode == 0, done.stderr
        current, proposed = [line for line in done.stdout.splitlines() if line.startswith("{")]
        plan = json.loads(proposed)
        assert {p["partition"] for p in plan["partitions"]} == {0, 1, 2}
        assert all(set(p["replicas"]) <= {1, 2, 3} and len(p["replicas"]) == 2 for p in plan["partitions"])
        plan_file = tmp_path / "plan.json"
        plan_file.write_text(proposed)
        done = reassign_cli(cluster, "--execute", "--reassignment-json-file", plan_file, "--throttle", 50_000_000)
        assert done.returncode == 0, done.stderr
        assert "Successfully started partition reassignments for" in done.stdout
        assert json.loads(done.stdout.split("\n\n")[1]) == json.loads(current)  # the rollback plan
        assert throttle_configs(cluster, topic)["follower.replication.throttled.replicas"]
        done = reassign_cli(cluster, "--verify", "--reassignment-json-file", plan_file, "--wait", 60)
        assert done.returncode == 0, done.stdout + done.stderr
        assert done.stdout.count("is completed.") == 3 and "Clearing topic-level throttles" in done.stdout
        assert not any(throttle_configs(cluster, topic).values())  # removed once complete
        producer.wait_acked(300)
    finally:
        producer.stop()
    verify_acknowledged(cluster.bootstrap, producer)
    views = wait_for_partitions(cluster.bootstrap, topic, lambda v: all(set(x.replicas) <= {1, 2, 3} for x in v.values()),
                                "replicas on 1-3")
    assert {p: set(v.replicas) for p, v in views.items()} == {p["partition"]: set(p["replicas"]) for p in plan["partitions"]}

    (spare,) = {1, 2, 3} - set(views[0].replicas)
    stuck = tmp_path / "stuck.json"
    stuck.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0,
                                                               "replicas": [*views[0].replicas, spare]}]}))
    hung = cluster.broker(spare)
    hung.pause()
    try:
        assert reassign_cli(cluster, "--execute", "--reassignment-json-file", stuck, "--timeout", 2).returncode == 0
        done = reassign_cli(cluster, "--verify", "--reassignment-json-file", stuck, "--timeout", 2)
        assert done.returncode == 1 and "still in progress" in done.stdout
        done = reassign_cli(cluster, "--cancel", "--reassignment-json-file", stuck, "--timeout", 2)
        assert done.returncode == 0 and "Successfully cancelled partition reassignments for: cli-0" in done.stdout
    finally:
        hung.resume()
    wait_done(kadmin, cluster, topic, views[0].replicas)
    wait_gone(cluster, spare, topic)


def alter(client, resource: ConfigResource, key: str, value: str | None) -> None:
    op = AlterConfigOpType.DELETE if value is None else AlterConfigOpType.SET
    resource = ConfigResource(resource.restype, resource.name,
                              incremental_configs=[ConfigEntry(key, value or "", incremental_operation=op)])
    client.incremental_alter_configs([resource])[resource].result(timeout=30)


def broker_config(client, resource: ConfigResource, key: str) -> str | None:
    """The value `key` has on the broker itself (DescribeConfigs of a broker is answered by it);
    None while it does not list the key (a dynamic key may be listed only once it is set)."""
    entry = client.describe_configs([resource])[resource].result(timeout=30).get(key)
    return None if entry is None else entry.value


def test_follower_throttle_holds_the_move_back_until_lifted(cluster, kadmin):
    """follower.replication.throttled.rate (broker 3, dynamic) with the topic's
    follower.replication.throttled.replicas naming 0:3: the new replica copies no more than the
    rate allows over the quota's window plus the one fetch that exceeds it, so the move stays in
    progress; lifting the rate lets it complete."""
    topic = "throttled"
    create_on(cluster, kadmin, topic, [0])
    confluent_produce(cluster.bootstrap, topic, [Record(b"k%d" % i, bytes(1000), ()) for i in range(4000)])
    client = admin(cluster.bootstrap)
    rate = 50_000
    broker3 = ConfigResource(ConfigResource.Type.BROKER, "3")
    alter(client, broker3, "follower.replication.throttled.rate", str(rate))
    alter(client, ConfigResource(ConfigResource.Type.TOPIC, topic), "follower.replication.throttled.replicas", "0:3")
    # AlterConfigs answers once ZooKeeper has the change; broker 3 applies it at the notification
    wait_until(lambda: broker_config(client, broker3, "follower.replication.throttled.rate") == str(rate),
               "broker 3 applies the throttle")
    total = len(cluster.log_bytes(0, topic, 0))
    assert kadmin.alter_partition_reassignments({KTP(topic, 0): [0, 3]}) == {KTP(topic, 0): None}
    started = time.monotonic()
    fetch_max = 1024 * 1024  # replica.fetch.max.bytes: what one fetch may bring before the check
    # The quota is a rate over its window, and broker 3 throttled the CLI test's move moments ago:
    # a window that old admits up to rate x window before it is exceeded (Kafka's Rate, too).
    window = SAMPLES * SAMPLE_S
    while time.monotonic() - started < 3.0:
        copied = len(cluster.log_bytes(3, topic, 0)) if cluster.partition_dir(3, topic, 0).exists() else 0
        assert copied <= fetch_max + rate * (window + time.monotonic() - started), (copied, total)
        time.sleep(0.2)
    assert copied < total and KTP(topic, 0) in kadmin.list_partition_reassignments()
    alter(client, ConfigResource(ConfigResource.Type.BROKER, "3"), "follower.replication.throttled.rate", None)
    wait_done(kadmin, cluster, topic, (0, 3))
    cluster.wait_logs_identical(topic, 0, [0, 3])


def test_successor_controller_finishes(cluster, kadmin):
    """The active controller is killed while broker 3 (hung) has not caught up: the standby takes
    over and completes the reassignment from what ZooKeeper recorded."""
    topic = "successor"
    create_on(cluster, kadmin, topic, [1, 2])
    producer = ContinuousProducer(cluster.bootstrap, topic, 1, rate=200).start()
    zk = cluster.zk_client()
    try:
        producer.wait_acked(200)
        b3 = cluster.broker(3)
        b3.pause()
        try:
            assert kadmin.alter_partition_reassignments({KTP(topic, 0): [2, 3]}) == {KTP(topic, 0): None}
            active = cluster.active_controller(zk)
            cluster.controller_by_id(active).kill(signal.SIGKILL)
        finally:
            b3.resume()
        wait_done(kadmin, cluster, topic, (2, 3), timeout=90)
        assert cluster.active_controller(zk) not in (None, active)
        producer.wait_acked(200)
    finally:
        producer.stop()
        zk.stop()
        zk.close()
    verify_acknowledged(cluster.bootstrap, producer)
    wait_gone(cluster, 1, topic)
    cluster.wait_logs_identical(topic, 0, [2, 3])

"""A real `odradek broker` process and real admin clients (confluent-kafka, kafka-python).

The test plays the controller's wire part (it reads the znodes the broker writes and sends
LeaderAndIsr / UpdateMetadata / StopReplica to the broker's listener, framed by common.wire),
which is exactly what the controller process does; the broker under test is the real one.
"""

import socket
import subprocess
import sys
import threading
import time
import uuid

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, NewTopic
from kazoo.client import KazooClient
from kio.schema.errors import ErrorCode

from odradek.common import wire, zk_data
from odradek.common.messages import (
    LEADER_DURING_DELETE,
    LeaderAndIsrLiveLeader,
    LeaderAndIsrPartitionState,
    LeaderAndIsrRequest,
    LeaderAndIsrTopicState,
    StopReplicaRequest,
    StopReplicaTopic,
    UpdateMetadataBroker,
    UpdateMetadataEndpoint,
    UpdateMetadataPartitionState,
    UpdateMetadataRequest,
    UpdateMetadataTopicState,
)
from odradek.dev.zookeeper import free_port

CONTROLLER_ID, CONTROLLER_EPOCH = 1000, 1


class ControllerWire:
    """The controller's side of the broker protocol, over one socket to the broker."""

    def __init__(self, port: int, control_port: int, broker_epoch: int):
        self.sock = socket.create_connection(("127.0.0.1", control_port), timeout=10)
        self.port = port
        self.broker_epoch = broker_epoch
        self.correlation = 0

    def send(self, payload):
        self.correlation += 1
        self.sock.sendall(wire.encode_request(payload, self.correlation, "controller-1000"))
        size = wire.SIZE.unpack(self._read(4))[0]
        correlation, response = wire.decode_response(type(payload), self._read(size))
        assert correlation == self.correlation
        return response

    def _read(self, n: int) -> bytes:
        chunks, got = [], 0
        while got < n:
            chunk = self.sock.recv(n - got)
            if not chunk:
                raise ConnectionError("broker closed the connection")
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)

    def brokers(self):
        endpoint = UpdateMetadataEndpoint(port=self.port, host="127.0.0.1", listener="PLAINTEXT", security_protocol=0)
        return (UpdateMetadataBroker(id=0, endpoints=(endpoint,), rack=None),)

    def update_metadata(self, topics: dict[str, dict[int, tuple[int, tuple[int, ...]]]]):
        """topics: name → partition → (leader, replicas)."""
        states = tuple(
            UpdateMetadataTopicState(
                topic_name=t,
                partition_states=tuple(
                    UpdateMetadataPartitionState(
                        partition_index=p, controller_epoch=CONTROLLER_EPOCH, leader=leader, leader_epoch=0,
                        isr=replicas, zk_version=0, replicas=replicas, offline_replicas=(),
                    )
                    for p, (leader, replicas) in parts.items()
                ),
            )
            for t, parts in topics.items()
        )
        response = self.send(UpdateMetadataRequest(
            controller_id=CONTROLLER_ID, controller_epoch=CONTROLLER_EPOCH, broker_epoch=self.broker_epoch,
            topic_states=states, live_brokers=self.brokers(),
        ))
        assert response.error_code == ErrorCode.none

    def leader_and_isr(self, topic: str, assignment: dict[int, tuple[int, ...]]):
        response = self.send(LeaderAndIsrRequest(
            controller_id=CONTROLLER_ID, controller_epoch=CONTROLLER_EPOCH, broker_epoch=self.broker_epoch,
            topic_states=(LeaderAndIsrTopicState(topic_name=topic, partition_states=tuple(
                LeaderAndIsrPartitionState(
                    partition_index=p, controller_epoch=CONTROLLER_EPOCH, leader=r[0], leader_epoch=0,
                    isr=r, zk_version=0, replicas=r, is_new=True,
                )
                for p, r in assignment.items()
            )),),
            live_leaders=(LeaderAndIsrLiveLeader(broker_id=0, host_name="127.0.0.1", port=self.port),),
        ))
        assert response.error_code == ErrorCode.none

    def stop_replica(self, topic: str, partitions):
        response = self.send(StopReplicaRequest(
            controller_id=CONTROLLER_ID, controller_epoch=CONTROLLER_EPOCH, broker_epoch=self.broker_epoch,
            delete_partitions=True, topics=(StopReplicaTopic(name=topic, partition_indexes=tuple(partitions)),),
        ))
        assert response.error_code == ErrorCode.none

    def close(self):
        self.sock.close()


def poll(predicate, timeout_s: float = 20.0, step: float = 0.05):
    for _ in range(int(timeout_s / step)):
        value = predicate()
        if value:
            return value
        time.sleep(step)
    raise AssertionError("condition not reached in time")


@pytest.fixture
def broker(zookeeper, tmp_path):
    port = free_port()
    connect = f"{zookeeper.connect}/odradek-{uuid.uuid4().hex[:8]}"
    overrides = {
        "broker.id": "0", "zookeeper.connect": connect,
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:0",
        "log.dirs": str(tmp_path / "logs"), "zookeeper.session.timeout.ms": "6000", "num.partitions": "2",
    }
    argv = [sys.executable, "-m", "odradek.cli", "broker"]
    for key, value in overrides.items():
        argv += ["--override", f"{key}={value}"]
    log_path = tmp_path / "broker.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    root = KazooClient(hosts=zookeeper.connect)
    root.start(timeout=10)
    root.ensure_path("/" + connect.split("/", 1)[1])  # the chroot, so our client starts cleanly
    root.stop()
    root.close()
    zk = KazooClient(hosts=connect)
    zk.start(timeout=10)
    try:
        def registered():
            assert process.poll() is None, log_path.read_text()
            return zk.exists(zk_data.broker_path(0))

        poll(registered, 60)
        data, stat = zk.get(zk_data.broker_path(0))
        control_port = zk_data.decode_broker(0, data).endpoint_named("CONTROLLER").port
        # what an elected controller leaves in ZooKeeper, which the broker checks; ephemeral, as a
        # controller's is: gone with this session, the broker shuts down without waiting for it
        zk.create(zk_data.CONTROLLER, zk_data.encode_controller(zk_data.ControllerInfo(CONTROLLER_ID)),
                  ephemeral=True)
        zk.create(zk_data.CONTROLLER_EPOCH, zk_data.encode_controller_epoch(CONTROLLER_EPOCH))
        controller = ControllerWire(port, control_port, stat.czxid)
        controller.update_metadata({})  # a new broker gets full metadata first
        poll(lambda: _accepts(port), 30)  # and serves clients from then on
        yield port, zk, controller
        controller.close()
    finally:
        zk.stop()
        zk.close()
        process.terminate()
        try:
            assert process.wait(20) == 0, log_path.read_text()
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
            raise


def _accepts(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except OSError:
        return False
    return True


class Background:
    """Runs `target(*args)` on a thread; `join` re-raises what it raised (an assertion on a
    thread would otherwise only be printed) and fails if it did not finish in time."""

    def __init__(self, target, *args):
        self.error: BaseException | None = None

        def run():
            try:
                target(*args)
            except BaseException as e:  # re-raised on the test's thread by join()
                self.error = e

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def join(self, timeout: float) -> None:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"background step still running after {timeout}s"
        if self.error is not None:
            raise self.error


def controller_publishes_topic(zk: KazooClient, controller: ControllerWire, topic: str) -> dict:
    data, _ = poll(lambda: zk.exists(zk_data.topic_path(topic)) and zk.get(zk_data.topic_path(topic)))
    assignment = zk_data.decode_topic_assignment(data).partitions
    controller.leader_and_isr(topic, assignment)
    controller.update_metadata({topic: {p: (r[0], r) for p, r in assignment.items()}})
    return assignment


def controller_deletes_topic(zk: KazooClient, controller: ControllerWire, topic: str, assignment: dict) -> None:
    poll(lambda: zk.exists(zk_data.delete_topic_path(topic)))
    controller.update_metadata({topic: {p: (LEADER_DURING_DELETE, r) for p, r in assignment.items()}})
    controller.stop_replica(topic, list(assignment))
    zk.delete(zk_data.topic_path(topic), recursive=True)
    zk.delete(zk_data.topic_config_path(topic))
    zk.delete(zk_data.delete_topic_path(topic))


def test_confluent_admin_client_creates_describes_and_deletes(broker):
    port, zk, controller = broker
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"})

    created = admin.create_topics([NewTopic("e2e", 3, 1, config={"retention.ms": "12345"})], request_timeout=30)
    assignment = controller_publishes_topic(zk, controller, "e2e")
    assert created["e2e"].result(30) is None
    assert sorted(assignment) == [0, 1, 2]

    again = admin.create_topics([NewTopic("e2e", 1, 1)], request_timeout=30)
    with pytest.raises(Exception) as e:
        again["e2e"].result(30)
    assert "TOPIC_ALREADY_EXISTS" in str(e.value)

    metadata = admin.list_topics(timeout=10)
    assert sorted(metadata.topics["e2e"].partitions) == [0, 1, 2]
    assert all(p.leader == 0 for p in metadata.topics["e2e"].partitions.values())
    assert metadata.controller_id == 0 and metadata.cluster_id
    cluster = admin.describe_cluster(request_timeout=10).result(10)
    assert cluster.controller.id == 0 and [n.id for n in cluster.nodes] == [0]
    assert cluster.cluster_id == metadata.cluster_id

    (topic_configs,) = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, "e2e")]).values()
    configs = topic_configs.result(10)
    assert configs["retention.ms"].value == "12345"
    assert configs["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["segment.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    (broker_configs,) = admin.describe_configs([ConfigResource(ConfigResource.Type.BROKER, "0")]).values()
    assert broker_configs.result(10)["num.partitions"].value == "2"

    deleted = admin.delete_topics(["e2e"], request_timeout=30)
    controller_deletes_topic(zk, controller, "e2e", assignment)
    assert deleted["e2e"].result(30) is None
    assert "e2e" not in admin.list_topics(timeout=10).topics
    missing = admin.delete_topics(["e2e"], request_timeout=10)
    with pytest.raises(Exception) as e:
        missing["e2e"].result(30)
    assert "UNKNOWN_TOPIC_OR_PART" in str(e.value)


def test_kafka_python_admin_and_auto_creation(broker):
    from kafka import KafkaProducer
    from kafka.admin import ConfigResource as KpConfigResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient
    from kafka.admin import NewTopic as KpNewTopic

    port, zk, controller = broker
    admin = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{port}", request_timeout_ms=30_000)
    try:
        creating = Background(controller_publishes_topic, zk, controller, "kp")
        admin.create_topics([KpNewTopic("kp", 2, 1, topic_configs={"cleanup.policy": "compact"})], timeout_ms=30_000)
        creating.join(30)
        assert "kp" in admin.list_topics()
        described = admin.describe_configs([KpConfigResource(ConfigResourceType.TOPIC, "kp")])
        modified = described["topic"]["kp"]  # kafka-python lists only non-default keys by default
        assert set(modified) == {"cleanup.policy"}, described
        assert modified["cleanup.policy"]["value"] == "compact", described
        # auto-creation through Metadata: a producer asks for a topic nobody created, gets
        # LEADER_NOT_AVAILABLE while the (test-played) controller publishes it, then its partitions
        publishing = Background(controller_publishes_topic, zk, controller, "auto")
        producer = KafkaProducer(bootstrap_servers=f"127.0.0.1:{port}", max_block_ms=30_000)
        try:
            assert producer.partitions_for("auto") == {0, 1}  # num.partitions=2
        finally:
            producer.close(timeout=5)
            publishing.join(30)
        data, _ = zk.get(zk_data.topic_path("auto"))
        assert sorted(zk_data.decode_topic_assignment(data).partitions) == [0, 1]
    finally:
        admin.close()

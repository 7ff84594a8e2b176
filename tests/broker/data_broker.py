"""Test support for the broker data-path tests: a real broker process, a raw Kafka wire client, and
a stand-in for the controller's side of the wire (LeaderAndIsr/UpdateMetadata/StopReplica frames,
exactly what the controller sends; the controller process is tested elsewhere)."""

import datetime
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from kazoo.client import KazooClient
from kio.static.primitive import i8, i16, i32, i32Timedelta, i64

from odradek.common import wire, zk_data
from odradek.common.messages import (
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

CONTROLLER_ID = 1000


class WireClient:
    """One Kafka connection speaking raw frames (common/wire.py), for what real clients can't do."""

    def __init__(self, port: int, timeout: float = 30.0):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.correlation_id = 0

    def close(self):
        self.sock.close()

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv_exact(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(min(n - len(out), 1 << 20))
            if not chunk:
                raise EOFError(f"connection closed after {len(out)} of {n} bytes")
            out += chunk
        return bytes(out)

    def recv_frame(self) -> bytes:
        (size,) = wire.SIZE.unpack(self.recv_exact(4))
        return self.recv_exact(size)

    def request(self, payload):
        """Sends a kio/inter-broker request, returns the decoded response payload."""
        self.correlation_id += 1
        self.sock.sendall(wire.encode_request(payload, self.correlation_id, "odradek-test"))
        correlation_id, response = wire.decode_response(type(payload), self.recv_frame())
        assert correlation_id == self.correlation_id
        return response

    def is_closed_by_peer(self, timeout: float = 10.0) -> bool:
        """True when the broker closes the connection (EOF or reset) within `timeout`."""
        self.sock.settimeout(timeout)
        try:
            while True:
                data = self.sock.recv(65536)
                if not data:
                    return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False


class BrokerProcess:
    """`odradek broker` as a child process, with its stderr in a log file."""

    def __init__(self, zk_connect: str, data_dir: Path, broker_id: int = 0, port: int | None = None, overrides=()):
        self.zk_connect = zk_connect
        self.broker_id = broker_id
        self.port = port or free_port()
        self.log_dir = data_dir / f"logs-{broker_id}"
        self.stderr_path = data_dir / f"broker-{broker_id}.log"
        self.overrides = [
            f"broker.id={broker_id}",
            f"zookeeper.connect={zk_connect}",
            f"log.dirs={self.log_dir}",
            f"listeners=PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{free_port()}",
            "zookeeper.session.timeout.ms=6000",
            *overrides,
        ]
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 60.0, announce: bool = True) -> "BrokerProcess":
        """Start and wait until registered; with `announce`, also until it serves clients (after
        the UpdateMetadata a controller would send it)."""
        self.spawn()
        self.wait_registered(timeout)
        if announce:
            self.announce(timeout)
        return self

    def spawn(self) -> "BrokerProcess":
        args = [sys.executable, "-m", "odradek.cli", "broker"]
        for o in self.overrides:
            args += ["--override", o]
        self._stderr = open(self.stderr_path, "ab")
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=self._stderr, cwd="/")
        return self

    @property
    def control_port(self) -> int:
        listeners = next(o for o in self.overrides if o.startswith("listeners="))
        return int(listeners.rsplit(":", 1)[1])

    def announce(self, timeout: float) -> None:
        """What a controller does when it sees a broker register: an UpdateMetadata (the cluster as
        it knows it: this broker, no topics), after which the broker serves clients; wait for that."""
        ctl = FakeController(self.zk_connect, {self.broker_id: self.port})
        try:
            response = ctl.update_metadata_brokers(self.broker_id)
            assert response.error_code == 0, response
        finally:
            ctl.close()
        self.wait_serving(timeout)

    def wait_serving(self, timeout: float) -> None:
        """Until the client listener accepts connections."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=2).close()
                return
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise AssertionError(f"client listener not serving after {timeout}s:\n{self.stderr_tail()}") from None
                time.sleep(0.05)

    def wait_registered(self, timeout: float) -> None:
        zk = KazooClient(hosts=self.zk_connect, timeout=10)
        zk.start(timeout=10)
        try:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise AssertionError(f"broker exited with {self.proc.returncode}:\n{self.stderr_tail()}")
                if zk.exists(zk_data.broker_path(self.broker_id)):
                    return
                time.sleep(0.05)
            raise AssertionError(f"broker not registered after {timeout}s:\n{self.stderr_tail()}")
        finally:
            zk.stop()
            zk.close()

    def stderr_tail(self, n: int = 60) -> str:
        try:
            return "\n".join(self.stderr_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 30.0) -> int:
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._stderr.close()
        return self.proc.returncode

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"


class FakeController:
    """Sends what the controller would, to the brokers' control-plane listener (as registered), with
    each broker's own epoch; names itself the active controller in ZooKeeper (`/controller`,
    `/controller_epoch`, which brokers check) and tracks epochs per partition."""

    def __init__(self, zk_connect: str, brokers: dict[int, int], controller_epoch: int = 1):
        self.zk_connect = zk_connect
        self.brokers = brokers  # broker id → client port
        self.leader_epochs: dict[tuple[str, int], int] = {}
        self._clients: dict[int, WireClient] = {}
        self._broker_epochs: dict[int, int] = {}
        self.topics: dict[str, dict[int, tuple[int, ...]]] = {}
        self._zk = KazooClient(hosts=zk_connect, timeout=10)
        self._zk.start(timeout=10)
        self._zk.ensure_path("/")
        if not self._zk.exists(zk_data.CONTROLLER):  # ephemeral, as an elected controller's
            self._zk.create(zk_data.CONTROLLER, zk_data.encode_controller(zk_data.ControllerInfo(CONTROLLER_ID)),
                            ephemeral=True)
        self._controller_epoch = -1
        self.controller_epoch = controller_epoch

    @property
    def controller_epoch(self) -> int:
        return self._controller_epoch

    @controller_epoch.setter
    def controller_epoch(self, epoch: int) -> None:
        """A new epoch, as an election would write it to ZooKeeper."""
        data = zk_data.encode_controller_epoch(epoch)
        if self._zk.exists(zk_data.CONTROLLER_EPOCH):
            self._zk.set(zk_data.CONTROLLER_EPOCH, data)
        else:
            self._zk.create(zk_data.CONTROLLER_EPOCH, data)
        self._controller_epoch = epoch

    def broker_epoch(self, broker: int) -> int:
        if broker not in self._broker_epochs:
            self._registration(broker)
        return self._broker_epochs[broker]

    def _registration(self, broker: int) -> zk_data.BrokerInfo:
        data, stat = self._zk.get(zk_data.broker_path(broker))
        self._broker_epochs[broker] = stat.czxid
        return zk_data.decode_broker(broker, data, stat.czxid)

    def client(self, broker: int) -> WireClient:
        if broker not in self._clients:
            self._clients[broker] = WireClient(self._registration(broker).endpoint_named("CONTROLLER").port)
        return self._clients[broker]

    def close(self):
        for c in self._clients.values():
            c.close()
        self._zk.stop()
        self._zk.close()

    def live_brokers(self):
        return tuple(
            UpdateMetadataBroker(
                id=b,
                endpoints=(UpdateMetadataEndpoint(port=port, host="127.0.0.1", listener="PLAINTEXT", security_protocol=0),),
                rack=None,
            )
            for b, port in sorted(self.brokers.items())
        )

    def write_topic_znodes(self, topic: str, assignment: dict[int, tuple[int, ...]], config: dict[str, str] | None = None):
        zk = KazooClient(hosts=self.zk_connect, timeout=10)
        zk.start(timeout=10)
        try:
            zk.ensure_path(zk_data.CONFIG_TOPICS)
            zk.ensure_path(zk_data.BROKER_TOPICS)
            zk.create(zk_data.topic_config_path(topic), zk_data.encode_entity_config(config or {}))
            zk.create(zk_data.topic_path(topic), zk_data.encode_topic_assignment(zk_data.TopicAssignment(assignment)))
        finally:
            zk.stop()
            zk.close()

    def leader_and_isr(self, broker: int, topic: str, partitions: dict[int, tuple[int, ...]], leader_of=None, epoch_bump=1,
                       controller_epoch=None):
        states = []
        for p, replicas in sorted(partitions.items()):
            key = (topic, p)
            self.leader_epochs[key] = self.leader_epochs.get(key, -1) + epoch_bump
            leader = leader_of(p) if leader_of else replicas[0]
            states.append(
                LeaderAndIsrPartitionState(
                    partition_index=p, controller_epoch=self.controller_epoch, leader=leader,
                    leader_epoch=self.leader_epochs[key], isr=tuple(replicas), zk_version=0,
                    replicas=tuple(replicas), is_new=True,
                )
            )
        request = LeaderAndIsrRequest(
            controller_id=CONTROLLER_ID,
            controller_epoch=self.controller_epoch if controller_epoch is None else controller_epoch,
            broker_epoch=self.broker_epoch(broker),
            topic_states=(LeaderAndIsrTopicState(topic_name=topic, partition_states=tuple(states)),),
            live_leaders=tuple(
                LeaderAndIsrLiveLeader(broker_id=b, host_name="127.0.0.1", port=port) for b, port in self.brokers.items()
            ),
        )
        return self.client(broker).request(request)

    def update_metadata(self, broker: int, topic: str, partitions: dict[int, tuple[int, ...]], leader: int | None = None):
        states = tuple(
            UpdateMetadataPartitionState(
                partition_index=p, controller_epoch=self.controller_epoch,
                leader=replicas[0] if leader is None else leader,
                leader_epoch=max(0, self.leader_epochs.get((topic, p), 0)), isr=tuple(replicas), zk_version=0,
                replicas=tuple(replicas), offline_replicas=(),
            )
            for p, replicas in sorted(partitions.items())
        )
        request = UpdateMetadataRequest(
            controller_id=CONTROLLER_ID, controller_epoch=self.controller_epoch, broker_epoch=self.broker_epoch(broker),
            topic_states=(UpdateMetadataTopicState(topic_name=topic, partition_states=states),),
            live_brokers=self.live_brokers(),
        )
        return self.client(broker).request(request)

    def update_metadata_brokers(self, broker: int):
        """An UpdateMetadata with the live brokers and no partitions."""
        request = UpdateMetadataRequest(
            controller_id=CONTROLLER_ID, controller_epoch=self.controller_epoch, broker_epoch=self.broker_epoch(broker),
            topic_states=(), live_brokers=self.live_brokers(),
        )
        return self.client(broker).request(request)

    def create_topic(self, topic: str, partitions: int = 1, config: dict[str, str] | None = None, broker: int = 0):
        """What the controller does for a new topic with RF=1 on `broker`; asserts no errors."""
        assignment = dict.fromkeys(range(partitions), (broker,))
        self.write_topic_znodes(topic, assignment, config)
        response = self.leader_and_isr(broker, topic, assignment)
        assert response.error_code == 0, response
        assert all(e.error_code == 0 for e in response.partition_errors), response
        response = self.update_metadata(broker, topic, assignment)
        assert response.error_code == 0, response
        self.topics[topic] = assignment
        return assignment

    def stop_replica(self, broker: int, topic: str, partitions, delete: bool, controller_epoch=None):
        request = StopReplicaRequest(
            controller_id=CONTROLLER_ID,
            controller_epoch=self.controller_epoch if controller_epoch is None else controller_epoch,
            broker_epoch=self.broker_epoch(broker), delete_partitions=delete,
            topics=(StopReplicaTopic(name=topic, partition_indexes=tuple(partitions)),),
        )
        return self.client(broker).request(request)


# --- data-path request builders (versioned kio schemas), for the raw-wire tests ---------------


def _ms(n):
    return i32Timedelta.parse(datetime.timedelta(milliseconds=n))


def produce_request(version, topic, partition, records, acks=1, timeout_ms=5000, transactional_id=None):
    mod = __import__(f"kio.schema.produce.v{version}.request", fromlist=["x"])
    return mod.ProduceRequest(
        transactional_id=transactional_id,
        acks=i16(acks),
        timeout=_ms(timeout_ms),
        topic_data=(mod.TopicProduceData(
            name=topic, partition_data=(mod.PartitionProduceData(index=i32(partition), records=records),)),),
    )


def fetch_request(version, topic, partition, offset, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0):
    mod = __import__(f"kio.schema.fetch.v{version}.request", fromlist=["x"])
    extra = {"forgotten_topics_data": ()} if version >= 7 else {}
    return mod.FetchRequest(
        replica_id=i32(-1),
        max_wait=_ms(max_wait_ms),
        min_bytes=i32(min_bytes),
        max_bytes=i32(max_bytes),
        isolation_level=i8(isolation_level),
        topics=(mod.FetchTopic(topic=topic, partitions=(mod.FetchPartition(
            partition=i32(partition), fetch_offset=i64(offset), partition_max_bytes=i32(max_bytes)),)),),
        **extra,
    )


def list_offsets_request(version, topic, partition, timestamp, isolation_level=0):
    mod = __import__(f"kio.schema.list_offsets.v{version}.request", fromlist=["x"])
    extra = {"isolation_level": i8(isolation_level)} if version >= 2 else {}
    return mod.ListOffsetsRequest(
        replica_id=i32(-1),
        topics=(mod.ListOffsetsTopic(name=topic, partitions=(mod.ListOffsetsPartition(
            partition_index=i32(partition), timestamp=i64(timestamp)),)),),
        **extra,
    )


def dir_snapshot(path: Path) -> dict[str, bytes]:
    """Every file's bytes under `path` (for 'stored data unchanged' checks)."""
    out = {}
    for root, _, files in os.walk(path):
        for name in files:
            p = Path(root) / name
            out[str(p.relative_to(path))] = p.read_bytes()
    return out

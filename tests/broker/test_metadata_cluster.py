"""Admin through a real cluster: two broker processes and the controller process (LocalCluster,
what `odradek dev` runs), driven by confluent-kafka's AdminClient."""

import socket
import time
import uuid

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, NewTopic
from kio.schema.metadata.v9.request import MetadataRequest, MetadataRequestTopic

from odradek.common import wire
from odradek.dev.cluster import LocalCluster
from odradek.dev.zookeeper import free_ports


def metadata_from(port: int, topic: str):
    """A Metadata v9 request sent straight to one broker (no client-side routing)."""
    payload = MetadataRequest(
        topics=(MetadataRequestTopic(name=topic),), allow_auto_topic_creation=False,
        include_cluster_authorized_operations=False, include_topic_authorized_operations=False,
    )
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(wire.encode_request(payload, 1, "test"))
        data = b""
        while len(data) < 4 or len(data) < 4 + wire.SIZE.unpack_from(data)[0]:
            chunk = sock.recv(65536)
            assert chunk, "broker closed the connection"
            data += chunk
    correlation, response = wire.decode_response(MetadataRequest, data[4:])
    assert correlation == 1
    return response


@pytest.fixture
def cluster(zookeeper, tmp_path):
    c = LocalCluster(
        tmp_path / "cluster", brokers=2, controllers=1, broker_ports=free_ports(2),
        zookeeper_connect=f"{zookeeper.connect}/odradek-{uuid.uuid4().hex[:8]}",
        broker_overrides={"zookeeper.session.timeout.ms": "6000"},
        controller_overrides={"zookeeper.session.timeout.ms": "6000"},
    )
    c.start()
    yield c
    c.stop()


def test_create_describe_delete_with_the_controller(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    created = admin.create_topics([NewTopic("replicated", 3, 2, config={"retention.ms": "999"})], request_timeout=30)
    assert created["replicated"].result(40) is None  # answered once the metadata is out

    metadata = admin.list_topics(timeout=10)
    assert metadata.controller_id == 0  # a live broker, never the controller process's id
    partitions = metadata.topics["replicated"].partitions
    assert sorted(partitions) == [0, 1, 2]
    for p in partitions.values():
        assert sorted(p.replicas) == [0, 1] and p.leader == p.replicas[0]
    assert {p.leader for p in partitions.values()} == {0, 1}  # leaders spread (Kafka's assignment)

    resource = ConfigResource(ConfigResource.Type.TOPIC, "replicated")
    configs = admin.describe_configs([resource])[resource].result(10)
    assert configs["retention.ms"].value == "999"
    assert configs["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value

    # each broker itself answers the same metadata once the controller's UpdateMetadata reaches it
    # (CreateTopics waits only for the broker that answered it, as Kafka's does)
    for port in cluster.broker_ports:
        deadline = time.monotonic() + 15
        response = metadata_from(port, "replicated")
        while not response.topics[0].partitions and time.monotonic() < deadline:
            time.sleep(0.2)
            response = metadata_from(port, "replicated")
        assert [b.node_id for b in response.brokers] == [0, 1] and response.controller_id == 0
        assert sorted(p.partition_index for p in response.topics[0].partitions) == [0, 1, 2]

    assert admin.delete_topics(["replicated"], request_timeout=30)["replicated"].result(40) is None
    assert "replicated" not in admin.list_topics(timeout=10).topics

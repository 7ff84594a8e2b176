"""What client suites written elsewhere still caught (issue 27), each case as Kafka 3.9 answers it:
fenced producers get the error codes their request version knows, EndTxn in the wrong state,
per-record produce errors (KIP-467), dynamic broker configs, and the versions Kafka 3.9 serves.
Real brokers and controller; real clients where they can express the case, the wire otherwise."""

import datetime
import socket
import struct
import sys
import time
import uuid

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8, i16, i32, i32Timedelta, i64

from odradek.broker.log.record_batch import build_batch
from odradek.common import wire
from odradek.dev.waiting import wait_until

from .conftest import new_cluster
from .kafka_helpers import (
    ask,
    confluent_consume,
    confluent_produce,
    create_topic,
    kafka_python_consume,
    make_records,
    wait_for_leaders,
)

BROKER = {
    "transaction.state.log.num.partitions": 1,
    "transaction.state.log.replication.factor": 1,
    "transaction.state.log.min.isr": 1,
    "offsets.topic.num.partitions": 1,
    "offsets.topic.replication.factor": 1,
    "group.initial.rebalance.delay.ms": 0,
}
PRODUCE, FIND_COORDINATOR, INIT_PRODUCER_ID, ADD_PARTITIONS_TO_TXN, END_TXN = 0, 10, 22, 24, 26


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory):
    c = new_cluster(zookeeper, tmp_path_factory.mktemp("conformance2"), brokers=1, broker_overrides=BROKER)
    c.start()
    yield c
    c.stop()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def request(api: int, version: int, **fields):
    return wire.make_entity(wire.request_schema(api, version), **fields)


def request_module(api: int, version: int):
    return sys.modules[wire.request_schema(api, version).__module__]



def raw_exchange(port: int, frame_body: bytes, timeout: float = 10.0) -> bytes:
    """One hand-written request frame (without its size prefix) and the response frame body
    (correlation id first); b"" when the broker closed the connection instead."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(struct.pack(">i", len(frame_body)) + frame_body)
        head = b""
        while len(head) < 4:
            chunk = s.recv(4 - len(head))
            if not chunk:
                return b""
            head += chunk
        (size,) = struct.unpack(">i", head)
        body = b""
        while len(body) < size:
            chunk = s.recv(size - len(body))
            if not chunk:
                raise AssertionError("response cut short")
            body += chunk
        return body


def header_v1(api: int, version: int, correlation_id: int, client_id: bytes = b"conf2") -> bytes:
    return struct.pack(">hhih", api, version, correlation_id, len(client_id)) + client_id


# --- transactions on the wire ----------------------------------------------------------------------


def init_producer(port: int, txn_id: str, version: int = 3) -> tuple[int, int]:
    """(producer id, epoch) of a transactional producer, retried while the coordinator starts or an
    older producer's transaction is being aborted."""

    def attempt():
        (found,) = ask(port, [request(FIND_COORDINATOR, 3, key=txn_id, key_type=i8(1))])  # creates the topic
        if found.error_code != ErrorCode.none:
            return None
        (r,) = ask(port, [request(INIT_PRODUCER_ID, version, transactional_id=txn_id,
                                  transaction_timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)),
                                  producer_id=i64(-1), producer_epoch=i16(-1))])
        if r.error_code == ErrorCode.none:
            return int(r.producer_id), int(r.producer_epoch)
        assert r.error_code in (ErrorCode.coordinator_not_available, ErrorCode.not_coordinator,
                                ErrorCode.coordinator_load_in_progress, ErrorCode.concurrent_transactions), r
        return None

    return wait_until(attempt, f"a producer id for {txn_id}", 60)


def add_partitions(port: int, txn_id: str, pid: int, epoch: int, topic: str, partitions: list[int],
                   version: int = 3) -> set[ErrorCode]:
    mod = request_module(ADD_PARTITIONS_TO_TXN, version)
    (r,) = ask(port, [request(ADD_PARTITIONS_TO_TXN, version, v3_and_below_transactional_id=txn_id,
                              v3_and_below_producer_id=i64(pid), v3_and_below_producer_epoch=i16(epoch),
                              v3_and_below_topics=(mod.AddPartitionsToTxnTopic(
                                  name=topic, partitions=tuple(i32(p) for p in partitions)),))])
    return {ErrorCode(p.partition_error_code) for t in r.results_by_topic_v3_and_below for p in t.results_by_partition}


def end_txn(port: int, txn_id: str, pid: int, epoch: int, commit: bool, version: int = 3) -> ErrorCode:
    (r,) = ask(port, [request(END_TXN, version, transactional_id=txn_id, producer_id=i64(pid),
                              producer_epoch=i16(epoch), committed=commit)])
    return ErrorCode(r.error_code)


def produce_txn(port: int, txn_id: str, pid: int, epoch: int, topic: str, partition: int, sequence: int = 0,
                version: int = 8) -> ErrorCode:
    mod = request_module(PRODUCE, version)
    batch = build_batch([b"v"], producer_id=pid, producer_epoch=epoch, base_sequence=sequence, attributes=0x10)
    (r,) = ask(port, [request(PRODUCE, version, transactional_id=txn_id, acks=i16(-1),
                              timeout=i32Timedelta.parse(datetime.timedelta(seconds=10)),
                              topic_data=(mod.TopicProduceData(name=topic, partition_data=(
                                  mod.PartitionProduceData(index=i32(partition), records=batch),)),))])
    return ErrorCode(r.responses[0].partition_responses[0].error_code)


@pytest.fixture(scope="module")
def txn_topic(cluster):
    topic = unique("txn")
    create_topic(cluster.bootstrap, topic, 2)
    wait_for_leaders(cluster.bootstrap, topic, 2)
    return topic


def test_a_fenced_producers_produce_answers_invalid_producer_epoch(cluster, txn_topic):
    port = cluster.broker_ports[0]
    txn_id = unique("fenced")
    pid, old = init_producer(port, txn_id)
    assert add_partitions(port, txn_id, pid, old, txn_topic, [0]) == {ErrorCode.none}
    _, new = init_producer(port, txn_id)  # aborts the open transaction, bumps the epoch
    assert new > old
    # the partition is not in any open transaction of the old epoch: the coordinator says fenced
    assert produce_txn(port, txn_id, pid, old, txn_topic, 0) == ErrorCode.invalid_producer_epoch
    assert produce_txn(port, txn_id, pid, old, txn_topic, 1) == ErrorCode.invalid_producer_epoch


@pytest.mark.parametrize(("version", "want"), [(1, ErrorCode.invalid_producer_epoch),
                                               (2, ErrorCode.producer_fenced)])
def test_fenced_txn_requests_answer_the_code_their_version_knows(cluster, txn_topic, version, want):
    port = cluster.broker_ports[0]
    txn_id = unique("fenced-v")
    pid, old = init_producer(port, txn_id)
    _, new = init_producer(port, txn_id)
    assert add_partitions(port, txn_id, pid, old, txn_topic, [0], version=version) == {want}
    (r,) = ask(port, [request(25, version, transactional_id=txn_id, producer_id=i64(pid),
                              producer_epoch=i16(old), group_id=unique("g"))])
    assert r.error_code == want
    assert add_partitions(port, txn_id, pid, new, txn_topic, [0]) == {ErrorCode.none}
    assert end_txn(port, txn_id, pid, old, True, version=version) == want
    assert end_txn(port, txn_id, pid, new, False) == ErrorCode.none


@pytest.mark.parametrize(("version", "want"), [(3, ErrorCode.invalid_producer_epoch), (4, ErrorCode.producer_fenced)])
def test_init_producer_id_with_a_stale_producer_id_answers_per_version(cluster, version, want):
    port = cluster.broker_ports[0]
    txn_id = unique("fenced-init")
    pid, epoch = init_producer(port, txn_id)
    (r,) = ask(port, [request(INIT_PRODUCER_ID, version, transactional_id=txn_id,
                              transaction_timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)),
                              producer_id=i64(pid + 1000), producer_epoch=i16(epoch))])
    assert r.error_code == want


def test_a_fenced_txn_offset_commit_answers_invalid_producer_epoch(cluster, txn_topic):
    """Kafka's TxnOffsetCommit passes the log's (and the verification's) INVALID_PRODUCER_EPOCH on."""
    port = cluster.broker_ports[0]
    txn_id, group = unique("fenced-offsets"), unique("g")
    pid, old = init_producer(port, txn_id)
    init_producer(port, txn_id)

    def coordinator_found() -> bool:
        (r,) = ask(port, [request(FIND_COORDINATOR, 3, key=group, key_type=i8(0))])
        return r.error_code == ErrorCode.none

    wait_until(coordinator_found, "the group coordinator", 60)
    mod = request_module(28, 3)
    (r,) = ask(port, [request(28, 3, transactional_id=txn_id, group_id=group, producer_id=i64(pid),
                              producer_epoch=i16(old), generation_id=i32(-1), member_id="", group_instance_id=None,
                              topics=(mod.TxnOffsetCommitRequestTopic(name=txn_topic, partitions=(
                                  mod.TxnOffsetCommitRequestPartition(partition_index=i32(0), committed_offset=i64(1),
                                                                      committed_leader_epoch=i32(-1),
                                                                      committed_metadata=""),)),))])
    assert r.topics[0].partitions[0].error_code == ErrorCode.invalid_producer_epoch


def test_librdkafka_sees_a_fenced_produce_as_fatal(cluster, txn_topic):
    """The zombie's next Produce (to a partition already in its transaction, so no
    AddPartitionsToTxn first) is refused INVALID_PRODUCER_EPOCH, which librdkafka makes fatal."""
    bootstrap = cluster.bootstrap
    txn_id = unique("zombie")
    config = {"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 5,
              "transaction.timeout.ms": 20_000, "message.timeout.ms": 20_000}
    zombie = Producer(config)
    zombie.init_transactions(60)
    zombie.begin_transaction()
    zombie.produce(txn_topic, value=b"zombie", partition=0)
    zombie.flush(30)
    successor = Producer(config)
    successor.init_transactions(60)
    zombie.produce(txn_topic, value=b"late", partition=0)
    with pytest.raises(KafkaException) as err:  # librdkafka raises its fatal error from flush()
        zombie.flush(30)
    assert err.value.args[0].fatal(), err.value
    successor.flush(5)


def test_end_txn_outside_a_transaction_is_invalid_txn_state(cluster, txn_topic):
    port = cluster.broker_ports[0]
    txn_id = unique("states")
    pid, epoch = init_producer(port, txn_id)
    assert end_txn(port, txn_id, pid, epoch, True) == ErrorCode.invalid_txn_state  # Empty
    assert end_txn(port, txn_id, pid, epoch, False) == ErrorCode.invalid_txn_state  # Empty
    assert add_partitions(port, txn_id, pid, epoch, txn_topic, [0]) == {ErrorCode.none}
    assert end_txn(port, txn_id, pid, epoch, False) == ErrorCode.none

    def aborted():
        code = end_txn(port, txn_id, pid, epoch, False)
        assert code in (ErrorCode.none, ErrorCode.concurrent_transactions)
        return code == ErrorCode.none

    wait_until(aborted, "the abort completes", 30)
    assert end_txn(port, txn_id, pid, epoch, True) == ErrorCode.invalid_txn_state  # after CompleteAbort
    assert add_partitions(port, txn_id, pid, epoch, txn_topic, [1]) == {ErrorCode.none}
    assert end_txn(port, txn_id, pid, epoch, True) == ErrorCode.none
    wait_until(lambda: end_txn(port, txn_id, pid, epoch, True) == ErrorCode.none, "the commit completes", 30)
    assert end_txn(port, txn_id, pid, epoch, False) == ErrorCode.invalid_txn_state  # after CompleteCommit


# --- dynamic broker configs (Kafka's DynamicBrokerConfig) ----------------------------------------


def alter_default(configs: dict[str, str], port: int) -> tuple[int, str | None]:
    """AlterConfigs v2 on the cluster-wide default broker resource (""), on the wire (both
    clients refuse an empty broker resource name locally): (error code, message)."""
    mod = request_module(33, 2)
    (r,) = ask(port, [request(33, 2, validate_only=False, resources=(mod.AlterConfigsResource(
        resource_type=i8(4), resource_name="", configs=tuple(
            mod.AlterableConfig(name=k, value=v) for k, v in configs.items())),))])
    (resource,) = r.responses
    return int(resource.error_code), resource.error_message


def test_broker_configs_accept_kafkas_dynamic_keys_and_unknown_ones(cluster):
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})

    def alter(name: str, entries: dict[str, str]):
        resource = ConfigResource(ResourceType.BROKER, name, incremental_configs=[
            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in entries.items()])
        (future,) = admin.incremental_alter_configs([resource], request_timeout=30).values()
        try:
            future.result(30)
            return None
        except KafkaException as e:
            return e.args[0]

    broker = "0"  # LocalCluster numbers brokers from 0
    assert alter(broker, {"sasl.kerberos.min.time.before.relogin": "60000",
                          "listener.name.plaintext.ssl.keystore.location": "/etc/k.jks",
                          "listener.name.plaintext.ssl.keystore.password": "hunter2",
                          "some.plugin.setting": "x"}) is None
    assert alter_default({"some.plugin.setting": "y", "max.connections": "1000"}, cluster.broker_ports[0]) == (0, None)
    err = alter(broker, {"log.dirs": "/elsewhere"})
    assert err.code() == KafkaError.INVALID_CONFIG and "Cannot update these configs dynamically" in err.str()
    err = alter(broker, {"ssl.keystore.location": "/etc/k.jks"})
    assert err.code() == KafkaError.INVALID_CONFIG and "listener prefix" in err.str()
    code, message = alter_default({"listener.name.plaintext.ssl.keystore.location": "/etc/k.jks"}, cluster.broker_ports[0])
    assert code == KafkaError.INVALID_CONFIG and "broker id must be specified" in message

    (described,) = admin.describe_configs([ConfigResource(ResourceType.BROKER, broker)]).values()
    entries = described.result(30)
    assert entries["sasl.kerberos.min.time.before.relogin"].value == "60000"
    assert not entries["sasl.kerberos.min.time.before.relogin"].is_read_only
    password = entries["listener.name.plaintext.ssl.keystore.password"]
    assert password.is_sensitive and password.value is None


# --- KIP-467: per-record produce errors -----------------------------------------------------------


def test_only_the_keyless_records_of_a_compacted_batch_fail(cluster):
    """librdkafka fails the records named in record_errors with INVALID_RECORD and the rest of the
    batch with its retriable _INVALID_DIFFERENT_RECORD; before, every record got INVALID_RECORD."""
    topic = unique("compacted")
    create_topic(cluster.bootstrap, topic, 1, config={"cleanup.policy": "compact"})
    wait_for_leaders(cluster.bootstrap, topic, 1)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 200, "retries": 0,
                         "message.timeout.ms": 20_000})
    outcome: dict[bytes, int | None] = {}

    def delivered(err, msg):
        outcome[msg.value()] = err.code() if err else None

    for key, value in ((b"k0", b"v0"), (None, b"v1"), (b"k2", b"v2"), (None, b"v3")):
        producer.produce(topic, key=key, value=value, partition=0, on_delivery=delivered)
    assert producer.flush(30) == 0
    different = getattr(KafkaError, "_INVALID_DIFFERENT_RECORD", -138)
    assert outcome == {b"v0": different, b"v1": KafkaError.INVALID_RECORD, b"v2": different,
                       b"v3": KafkaError.INVALID_RECORD}


def test_produce_v8_names_every_invalid_record_with_kafkas_messages(cluster):
    topic = unique("compacted-wire")
    create_topic(cluster.bootstrap, topic, 1, config={"cleanup.policy": "compact"})
    wait_for_leaders(cluster.bootstrap, topic, 1)
    batch = build_batch([(b"k", b"a"), (None, b"b"), (None, b"c")])
    for version in (8, 9, 10, 11):
        mod = request_module(PRODUCE, version)
        (r,) = ask(cluster.broker_ports[0], [request(
            PRODUCE, version, transactional_id=None, acks=i16(1),
            timeout=i32Timedelta.parse(datetime.timedelta(seconds=10)),
            topic_data=(mod.TopicProduceData(name=topic, partition_data=(
                mod.PartitionProduceData(index=i32(0), records=batch),)),))])
        (p,) = r.responses[0].partition_responses
        assert p.error_code == ErrorCode.invalid_record
        message = f"Compacted topic cannot accept message without key in topic partition {topic}-0"
        assert [(int(e.batch_index), e.batch_index_error_message) for e in p.record_errors] == [(1, message),
                                                                                               (2, message)]
        assert p.error_message.startswith("One or more records have been rejected due to 2 record errors")


# --- versions Kafka 3.9 serves -------------------------------------------------------------------

KAFKA_39_MAX = {0: 11, 1: 17, 2: 9, 3: 12, 8: 9, 9: 9, 10: 6, 11: 9, 12: 4, 13: 5, 14: 5, 15: 5, 16: 5, 18: 4,
                19: 7, 20: 6, 21: 2, 22: 5, 23: 4, 24: 5, 25: 4, 26: 4, 27: 1, 28: 4, 29: 3, 30: 3, 31: 3, 32: 4,
                33: 2, 35: 4, 37: 3, 42: 2, 43: 2, 44: 1, 45: 0, 46: 0, 47: 0, 61: 0, 65: 0, 66: 1}
"""Kafka 3.9's highest version of each client API a ZooKeeper-mode broker here serves (its
message specs' validVersions); Metadata and DescribeCluster may go beyond (Kafka 4's)."""


def advertised(port: int, version: int = 4) -> dict[int, tuple[int, int]]:
    (r,) = ask(port, [request(18, version, client_software_name="conf2", client_software_version="1")])
    assert r.error_code == ErrorCode.none
    return {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in r.api_keys}


def test_versions_reach_kafka_39s(cluster):
    versions = advertised(cluster.broker_ports[0])
    low = {api: lo for api, (lo, hi) in versions.items()}
    high = {api: hi for api, (lo, hi) in versions.items() if api in KAFKA_39_MAX}
    assert {api: hi for api, hi in high.items() if api not in (3,)} == {
        api: hi for api, hi in KAFKA_39_MAX.items() if api != 3}
    assert versions[3][1] >= 12
    # every version from 0 (librdkafka needs Produce 0, FindCoordinator 0, ListOffsets 1, ...)
    old = (0, 1, 2, 8, 9, 10, 18, 19, 20, 23, 27, 29, 30, 31, 32, 35)
    assert {api: lo for api, lo in low.items() if api in old} == dict.fromkeys(old, 0)


def test_list_offsets_v0_answers_offsets_before_a_time(cluster):
    topic = unique("lo-v0")
    create_topic(cluster.bootstrap, topic, 1)
    wait_for_leaders(cluster.bootstrap, topic, 1)
    producer = Producer({"bootstrap.servers": cluster.bootstrap})
    for i in range(5):
        producer.produce(topic, value=b"%d" % i, partition=0)
    assert producer.flush(30) == 0
    mod = request_module(2, 0)

    def v0(timestamp: int, max_num: int):
        (r,) = ask(cluster.broker_ports[0], [request(2, 0, replica_id=i32(-1), topics=(mod.ListOffsetsTopic(
            name=topic, partitions=(mod.ListOffsetsPartition(partition_index=i32(0), timestamp=i64(timestamp),
                                                             max_num_offsets=i32(max_num)),)),))])
        (p,) = r.topics[0].partitions
        return ErrorCode(p.error_code), [int(o) for o in p.old_style_offsets]

    assert v0(-1, 10) == (ErrorCode.none, [5, 0])  # the log end, then the segment's start
    assert v0(-1, 1) == (ErrorCode.none, [5])
    assert v0(-2, 10) == (ErrorCode.none, [0])
    assert v0(-3, 10) == (ErrorCode.unsupported_version, [])


def test_versions_kio_lacks_are_served_with_their_own_fields(cluster):
    port = cluster.broker_ports[0]
    topic = unique("old-versions")
    mod = request_module(19, 0)
    (created,) = ask(port, [request(19, 0, timeout=i32Timedelta.parse(datetime.timedelta(seconds=20)), topics=(
        mod.CreatableTopic(name=topic, num_partitions=i32(1), replication_factor=i16(1), assignments=(),
                           configs=()),))])
    assert [(t.name, t.error_code) for t in created.topics] == [(topic, ErrorCode.none)]
    wait_for_leaders(cluster.bootstrap, topic, 1)

    mod = request_module(23, 0)
    (epochs,) = ask(port, [request(23, 0, topics=(mod.OffsetForLeaderTopic(topic=topic, partitions=(
        mod.OffsetForLeaderPartition(partition=i32(0), leader_epoch=i32(0)),)),))])
    (p,) = epochs.topics[0].partitions
    assert (p.error_code, int(p.end_offset)) == (ErrorCode.none, 0)

    mod = request_module(32, 0)
    (described,) = ask(port, [request(32, 0, resources=(mod.DescribeConfigsResource(
        resource_type=i8(2), resource_name=topic, configuration_keys=("cleanup.policy",)),))])
    (config,) = described.results[0].configs
    assert (config.name, config.value, config.is_default) == ("cleanup.policy", "delete", True)

    (acls,) = ask(port, [request(29, 0, resource_type_filter=i8(1), resource_name_filter=None,
                                 principal_filter=None, host_filter=None, operation=i8(1), permission_type=i8(1))])
    assert acls.error_code in (ErrorCode.none, ErrorCode.security_disabled)  # answered, not a closed connection

    (dirs,) = ask(port, [request(35, 0, topics=None)])
    assert dirs.results and dirs.results[0].error_code == ErrorCode.none

    (deleted,) = ask(port, [request(20, 0, topic_names=(topic,), timeout=i32Timedelta.parse(
        datetime.timedelta(seconds=20)))])
    assert [(t.name, t.error_code) for t in deleted.responses] == [(topic, ErrorCode.none)]


def test_an_unsupported_version_is_answered_as_kafka_does(cluster):
    """ApiVersions: UNSUPPORTED_VERSION and the list, in v0 layout (KIP-511). Any other API: Kafka's
    SocketServer refuses the header (InvalidRequestException) and closes the connection."""
    port = cluster.broker_ports[0]
    body = raw_exchange(port, header_v1(18, 99, 7))
    (correlation_id, code) = struct.unpack_from(">ih", body, 0)
    assert (correlation_id, code) == (7, ErrorCode.unsupported_version)
    assert raw_exchange(port, header_v1(3, 99, 8) + b"\0\0\0\0") == b""


def fetch_by_id(port: int, version: int, topic_ids: list[uuid.UUID]):
    mod = request_module(1, version)
    fields = dict(max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=10)), min_bytes=i32(0),
                  max_bytes=i32(1 << 20), isolation_level=i8(0), session_id=i32(0), session_epoch=i32(-1),
                  forgotten_topics_data=(), rack_id="", replica_id=i32(-1), topics=tuple(
                      mod.FetchTopic(topic_id=tid, partitions=(mod.FetchPartition(
                          partition=i32(0), current_leader_epoch=i32(-1), fetch_offset=i64(0),
                          last_fetched_epoch=i32(-1), log_start_offset=i64(-1), partition_max_bytes=i32(1 << 20)),))
                      for tid in topic_ids))
    (r,) = ask(port, [request(1, version, **fields)])
    return r


def test_fetch_v13_to_v17_name_topics_by_id_and_clients_read_through_them(cluster):
    topic = unique("by-id")
    create_topic(cluster.bootstrap, topic, 1)
    wait_for_leaders(cluster.bootstrap, topic, 1)
    records = make_records(30, "by-id")
    confluent_produce(cluster.bootstrap, topic, records)
    (meta,) = ask(cluster.broker_ports[0], [request(3, 12, topics=(request_module(3, 12).MetadataRequestTopic(
        name=topic, topic_id=None),), allow_auto_topic_creation=False, include_topic_authorized_operations=False)])
    topic_id = meta.topics[0].topic_id
    assert topic_id != uuid.UUID(int=0)
    stranger = uuid.uuid4()
    for version in (13, 14, 15, 16, 17):
        r = fetch_by_id(cluster.broker_ports[0], version, [topic_id, stranger])
        answers = {t.topic_id: (t.partitions[0].error_code, len(t.partitions[0].records or b"")) for t in r.responses}
        assert answers[stranger] == (ErrorCode.unknown_topic_id, 0), version
        assert answers[topic_id][0] == ErrorCode.none and answers[topic_id][1] > 0, version
    # librdkafka and kafka-python pick their newest Fetch (v13+ here) and read through topic ids
    assert [c.record.value for c in confluent_consume(cluster.bootstrap, topic, 1, 30)[0]] == [
        r.value for r in records]
    assert [c.record.value for c in kafka_python_consume(cluster.bootstrap, topic, 1, 30)[0]] == [
        r.value for r in records]


def test_produce_and_fetch_name_the_leader_to_a_client_at_the_wrong_broker(cluster_factory):
    """KIP-951: Produce v10+ and Fetch v16+ answered NOT_LEADER_OR_FOLLOWER carry the leader's id,
    epoch and endpoint."""
    two = cluster_factory(brokers=2)
    topic = unique("moved")
    create_topic(two.bootstrap, topic, 1, replication_factor=1)
    leader = wait_for_leaders(two.bootstrap, topic, 1)[0]
    other = 1 - leader

    def known_at_other() -> bool:
        (m,) = ask(two.broker_ports[other], [request(3, 12, topics=(request_module(3, 12).MetadataRequestTopic(
            name=topic, topic_id=None),), allow_auto_topic_creation=False, include_topic_authorized_operations=False)])
        return m.topics[0].error_code == ErrorCode.none and int(m.topics[0].partitions[0].leader_id) == leader

    wait_until(known_at_other, "the other broker knows the leader", 30)
    mod = request_module(PRODUCE, 11)
    (r,) = ask(two.broker_ports[other], [request(
        PRODUCE, 11, transactional_id=None, acks=i16(1), timeout=i32Timedelta.parse(datetime.timedelta(seconds=5)),
        topic_data=(mod.TopicProduceData(name=topic, partition_data=(
            mod.PartitionProduceData(index=i32(0), records=build_batch([b"x"])),)),))])
    (p,) = r.responses[0].partition_responses
    assert p.error_code == ErrorCode.not_leader_or_follower
    assert int(p.current_leader.leader_id) == leader and int(p.current_leader.leader_epoch) >= 0
    assert [(int(n.node_id), n.host, int(n.port)) for n in r.node_endpoints] == [
        (leader, "127.0.0.1", two.broker_ports[leader])]
    (meta,) = ask(two.broker_ports[leader], [request(3, 12, topics=(request_module(3, 12).MetadataRequestTopic(
        name=topic, topic_id=None),), allow_auto_topic_creation=False, include_topic_authorized_operations=False)])
    f = fetch_by_id(two.broker_ports[other], 16, [meta.topics[0].topic_id])
    (fp,) = f.responses[0].partitions
    assert fp.error_code == ErrorCode.not_leader_or_follower
    assert int(fp.current_leader.leader_id) == leader
    assert [int(n.node_id) for n in f.node_endpoints] == [leader]


@pytest.mark.parametrize("api_version", [(0, 10, 1), (0, 10, 0), (0, 9), (0, 8, 2)])
def test_old_clients_produce_and_fetch_message_formats_v0_and_v1(cluster, api_version):
    """kafka-python pinned to an old broker release speaks Produce v0-v2 and Fetch v0-v3 with
    message formats v0/v1: stored as v2 batches (up-converted), read back down-converted."""
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTopicPartition

    topic = unique("old-client")
    create_topic(cluster.bootstrap, topic, 1)
    wait_for_leaders(cluster.bootstrap, topic, 1)
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, api_version=api_version, linger_ms=20,
                             compression_type="gzip")
    try:
        futures = [producer.send(topic, key=b"k%d" % i if i % 2 else None, value=b"v%d" % i, partition=0)
                   for i in range(20)]
        offsets = [f.get(timeout=30).offset for f in futures]
    finally:
        producer.close(timeout=10)
    assert offsets == list(range(20))
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap, api_version=api_version, enable_auto_commit=False,
                             consumer_timeout_ms=10_000)
    try:
        consumer.assign([KTopicPartition(topic, 0)])
        consumer.seek(KTopicPartition(topic, 0), 5)
        got = []
        deadline = time.monotonic() + 30
        while len(got) < 15 and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                got += [(r.offset, r.key, r.value) for r in records]
    finally:
        consumer.close()
    assert got == [(i, b"k%d" % i if i % 2 else None, b"v%d" % i) for i in range(5, 20)]
    # and a new client reads what the old one wrote
    assert [c.record.value for c in confluent_consume(cluster.bootstrap, topic, 1, 20)[0]] == [
        b"v%d" % i for i in range(20)]


def test_offset_commit_and_fetch_v0_keep_offsets_in_zookeeper(cluster):
    """Kafka's version 0 stores a group's offsets in ZooKeeper, not in the coordinator."""
    topic, group = unique("zk-offsets"), unique("g0")
    create_topic(cluster.bootstrap, topic, 2)
    wait_for_leaders(cluster.bootstrap, topic, 2)
    port = cluster.broker_ports[0]
    commit_mod, fetch_mod = request_module(8, 0), request_module(9, 0)
    (committed,) = ask(port, [request(8, 0, group_id=group, topics=(commit_mod.OffsetCommitRequestTopic(
        name=topic, partitions=(commit_mod.OffsetCommitRequestPartition(
            partition_index=i32(1), committed_offset=i64(42), committed_metadata="m"),)),))])
    assert [(int(p.partition_index), p.error_code) for p in committed.topics[0].partitions] == [(1, ErrorCode.none)]
    (fetched,) = ask(port, [request(9, 0, group_id=group, topics=(fetch_mod.OffsetFetchRequestTopic(
        name=topic, partition_indexes=(i32(0), i32(1))), fetch_mod.OffsetFetchRequestTopic(
        name="no-such-topic", partition_indexes=(i32(0),))))])
    got = {(t.name, int(p.partition_index)): (int(p.committed_offset), p.error_code)
           for t in fetched.topics for p in t.partitions}
    assert got == {(topic, 0): (-1, ErrorCode.unknown_topic_or_partition), (topic, 1): (42, ErrorCode.none),
                   ("no-such-topic", 0): (-1, ErrorCode.unknown_topic_or_partition)}


def test_delegation_token_apis_answer_as_kafka_without_token_support(cluster):
    """Kafka serves the four token APIs on every broker; on PLAINTEXT they are never allowed."""
    versions = advertised(cluster.broker_ports[0])
    assert {api: versions[api] for api in (38, 39, 40, 41)} == {38: (0, 3), 39: (0, 2), 40: (0, 2), 41: (0, 3)}
    for version in (0, 3):
        (r,) = ask(cluster.broker_ports[0], [request(41, version, owners=None)])
        assert r.error_code == ErrorCode.delegation_token_request_not_allowed

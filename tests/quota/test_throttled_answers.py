"""KafkaApis with client quotas, over a stand-in ReplicaManager: Produce answers carry the
throttle time and ask the connection to mute itself after answering (KIP-219), acks=0 included."""

import asyncio
import datetime
from types import SimpleNamespace

from kio.static.primitive import i16, i32

from odradek.broker.kafka_apis import KafkaApis
from odradek.broker.quota.client_quota_manager import QuotaConfig
from odradek.broker.quota.quota_managers import QuotaManagers
from odradek.broker.quota.zk_quota_store import QuotaConfigs
from odradek.broker.replica_manager import ProduceResult
from odradek.common import wire
from odradek.common.api_key import ApiKey
from odradek.common.clock import ManualClock


class StandInReplicaManager:
    async def append_records(self, timeout_ms, acks, entries, verified=None):
        return {(t, p): ProduceResult(base_offset=0) for t, p, _ in entries}


class Conn:
    peer = ("127.0.0.1", 5555)

    def __init__(self):
        self.mutes: list[float] = []

    def mute_for(self, seconds: float) -> None:
        self.mutes.append(seconds)


def produce_frame(acks: int, size: int, client_id: str) -> bytes:
    schema = wire.request_schema(ApiKey.PRODUCE, 9)
    mod = __import__(schema.__module__, fromlist=["x"])
    data = mod.TopicProduceData(name="t", partition_data=(mod.PartitionProduceData(index=i32(0), records=b"\0" * size),))
    request = schema(transactional_id=None, acks=i16(acks), timeout=datetime.timedelta(seconds=30), topic_data=(data,))
    return wire.encode_request(request, 7, client_id)[4:]


def test_produce_answers_throttle_and_mutes_acks_0_too():
    clock = ManualClock(0)
    config = SimpleNamespace(max_incremental_fetch_session_cache_slots=10, min_incremental_fetch_session_eviction_ms=1000)
    apis = KafkaApis(config, StandInReplicaManager(), None, clock=clock)
    apis.quotas = QuotaManagers(None, QuotaConfig(samples=2, window_ms=1000), clock)
    apis.quotas.update(QuotaConfigs(clients={"flood": {"producer_byte_rate": "1000"}}))
    conn = Conn()
    chunks = asyncio.run(apis.handle(produce_frame(1, 500, "flood"), conn))
    assert conn.mutes == [] and chunks
    answer = asyncio.run(apis.handle(produce_frame(1, 2000, "flood"), conn))
    _, response = wire.decode_response(wire.response_schema(ApiKey.PRODUCE, 9), b"".join(answer)[4:])
    throttle = wire.ms(response.throttle_time)
    assert throttle > 0 and conn.mutes == [throttle / 1000.0]
    assert asyncio.run(apis.handle(produce_frame(0, 2000, "flood"), conn)) is None  # acks=0: no answer
    assert len(conn.mutes) == 2 and conn.mutes[1] > 0
    other = Conn()
    asyncio.run(apis.handle(produce_frame(1, 10**6, "other"), other))
    assert other.mutes == []


class OnlyDescribeConfigs:
    """An authorizer that lets the principal DESCRIBE_CONFIGS on the Cluster and nothing else."""

    enabled = True

    def __init__(self):
        self.asked = []

    def authorize(self, context, op, resource_type, name):
        from odradek.broker.authorizer.acl import AclOperation, ResourceType

        self.asked.append((op, resource_type, name))
        return op == AclOperation.DESCRIBE_CONFIGS and resource_type == ResourceType.CLUSTER

    def authorize_by_type(self, context, op, resource_type):
        return False


def test_quota_apis_need_kafkas_cluster_operations():
    """DescribeClientQuotas needs DESCRIBE_CONFIGS on the Cluster, AlterClientQuotas ALTER_CONFIGS;
    a refusal is CLUSTER_AUTHORIZATION_FAILED and the handler (nothing stored) never runs."""
    from kio.schema.errors import ErrorCode

    from odradek.broker.authorizer.acl import AclOperation, ResourceType
    from odradek.broker.quota.quota_apis import QuotaApis

    class Store:
        def __init__(self):
            self.altered = []

        async def read_all(self):
            return QuotaConfigs()

        async def alter(self, entity, ops, validate_only):
            self.altered.append(entity)

    config = SimpleNamespace(max_incremental_fetch_session_cache_slots=10, min_incremental_fetch_session_eviction_ms=1000)
    store = Store()
    apis = KafkaApis(config, StandInReplicaManager(), None, [QuotaApis(store)], authorizer=OnlyDescribeConfigs())
    alter = wire.request_schema(ApiKey.ALTER_CLIENT_QUOTAS, 1)
    amod = __import__(alter.__module__, fromlist=["x"])
    request = alter(validate_only=False, entries=(amod.EntryData(
        entity=(amod.EntityData(entity_type="user", entity_name="u"),),
        ops=(amod.OpData(key="producer_byte_rate", value=1.0, remove=False),)),))
    answer = asyncio.run(apis.handle(wire.encode_request(request, 3, "admin")[4:], Conn()))
    _, response = wire.decode_response(wire.response_schema(ApiKey.ALTER_CLIENT_QUOTAS, 1), b"".join(answer)[4:])
    assert [e.error_code for e in response.entries] == [ErrorCode.cluster_authorization_failed]
    assert store.altered == []
    describe = wire.request_schema(ApiKey.DESCRIBE_CLIENT_QUOTAS, 1)
    answer = asyncio.run(apis.handle(wire.encode_request(describe(components=(), strict=False), 4, "admin")[4:],
                                     Conn()))
    _, response = wire.decode_response(wire.response_schema(ApiKey.DESCRIBE_CLIENT_QUOTAS, 1), b"".join(answer)[4:])
    assert response.error_code == ErrorCode.none and response.entries == ()
    assert (AclOperation.ALTER_CONFIGS, ResourceType.CLUSTER, "kafka-cluster") in apis.authorizer.asked

"""Metadata answers each client with the endpoints of the listener it connected through (Kafka's
rule): brokers without that listener are left out, and a partition whose leader lacks it has no
leader for that client (LISTENER_NOT_FOUND from v6, LEADER_NOT_AVAILABLE before)."""

import asyncio

import pytest
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from odradek.broker.admin_manager import AdminManager
from odradek.broker.dynamic_config import DynamicBrokerConfig
from odradek.broker.metadata_apis import MetadataApis
from odradek.broker.metadata_cache import MetadataCache
from odradek.common import wire
from odradek.common.config import BrokerConfig
from odradek.common.messages import (
    UpdateMetadataBroker,
    UpdateMetadataEndpoint,
    UpdateMetadataPartitionState,
    UpdateMetadataRequest,
    UpdateMetadataTopicState,
)
from odradek.common.network.request_context import RequestContext


class _Zk:
    async def get_cluster_id(self):
        return "cluster"

    async def get_topic_ids(self, topics):
        return {}


def _endpoint(listener: str, port: int) -> UpdateMetadataEndpoint:
    return UpdateMetadataEndpoint(port=port, host="127.0.0.1", listener=listener, security_protocol=1)


def _apis() -> MetadataApis:
    """Broker 0 has CLIENT and INTERNAL listeners, broker 1 only INTERNAL; each leads one partition."""
    cache = MetadataCache(0)
    cache.update(UpdateMetadataRequest(
        controller_id=1000, controller_epoch=1, broker_epoch=-1,
        topic_states=(UpdateMetadataTopicState(topic_name="t", partition_states=tuple(
            UpdateMetadataPartitionState(partition_index=p, controller_epoch=1, leader=p, leader_epoch=0,
                                         isr=(0, 1), zk_version=0, replicas=(0, 1), offline_replicas=())
            for p in (0, 1))),),
        live_brokers=(UpdateMetadataBroker(id=0, endpoints=(_endpoint("CLIENT", 9000), _endpoint("INTERNAL", 9100)),
                                           rack=None),
                      UpdateMetadataBroker(id=1, endpoints=(_endpoint("INTERNAL", 9101),), rack=None))))
    config = BrokerConfig.from_properties({"broker.id": "0", "zookeeper.connect": "z"})
    zk = _Zk()
    return MetadataApis(config, cache, zk, AdminManager(config, cache, zk), DynamicBrokerConfig.from_config(config))


def _metadata(apis: MetadataApis, version: int, listener: str):
    values = {"topics": None, "allow_auto_topic_creation": False}
    if version >= 8:
        values["include_topic_authorized_operations"] = False
    if 8 <= version <= 10:
        values["include_cluster_authorized_operations"] = False
    frame = wire.encode_request(wire.make_entity(load_request_schema(3, version), **values), 1, "test")
    header, decoded, schema = wire.decode_request(frame[4:])
    response = asyncio.run(apis.handlers[3](RequestContext(header, listener=listener), decoded))
    flexible = wire.response_header_flexible(3, schema.__flexible__)
    body = b"".join(response.chunks)
    out = b"\0\0\0\0" + wire.SIZE.pack(1) + (b"\0" if flexible else b"") + body
    return wire.decode_response(schema, out[4:])[1]


@pytest.mark.parametrize(("version", "code"), [(12, ErrorCode.listener_not_found), (5, ErrorCode.leader_not_available)])
def test_metadata_follows_the_clients_listener(version, code):
    apis = _apis()
    client = _metadata(apis, version, "CLIENT")
    assert [(int(b.node_id), int(b.port)) for b in client.brokers] == [(0, 9000)]
    partitions = {int(p.partition_index): (int(p.leader_id), p.error_code) for t in client.topics for p in t.partitions}
    assert partitions == {0: (0, ErrorCode.none), 1: (-1, code)}
    internal = _metadata(apis, version, "INTERNAL")
    assert [(int(b.node_id), int(b.port)) for b in internal.brokers] == [(0, 9100), (1, 9101)]
    assert {int(p.leader_id) for t in internal.topics for p in t.partitions} == {0, 1}

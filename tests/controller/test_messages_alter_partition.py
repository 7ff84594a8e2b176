"""AlterPartition v1 framing: what brokers send the controller round-trips through common.wire."""

from kio.schema.errors import ErrorCode
from kio.static.primitive import i32, i64

from odradek.common import messages as m
from odradek.common import wire


def test_alter_partition_v1_round_trip():
    req = m.AlterPartitionRequest(broker_id=i32(1), broker_epoch=i64(55), topics=(
        m.AlterPartitionRequestTopic(topic_name="t", partitions=(
            m.AlterPartitionRequestPartition(partition_index=i32(0), leader_epoch=i32(3),
                                             new_isr=(i32(1), i32(2)), partition_epoch=i32(7)),
        )),
    ))
    frame = wire.encode_request(req, 9, "broker-1")
    header, payload, schema = wire.decode_request(frame[4:])
    assert (header.request_api_key, header.request_api_version, header.correlation_id) == (56, 1, 9)
    assert schema is m.AlterPartitionRequest and payload == req
    resp = m.AlterPartitionResponse(throttle_time_ms=i32(0), error_code=ErrorCode.none, topics=(
        m.AlterPartitionResponseTopic(topic_name="t", partitions=(
            m.AlterPartitionResponsePartition(partition_index=i32(0), error_code=ErrorCode.fenced_leader_epoch,
                                              leader_id=i32(1), leader_epoch=i32(3), isr=(i32(1),),
                                              partition_epoch=i32(8)),
        )),
    ))
    flexible = wire.response_header_flexible(56, m.AlterPartitionRequest.__flexible__)
    assert flexible
    out = wire.encode_response(resp, 9, flexible_header=flexible)
    assert wire.decode_response(m.AlterPartitionRequest, out[4:]) == (9, resp)

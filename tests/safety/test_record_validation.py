"""Issue 11, finding 3: record batches whose contents lie are refused, and nothing is stored.

A real broker (with its controller) takes every lying batch of the hostile corpus in a Produce
request, answers Kafka's error (INVALID_RECORD with the record's index in record_errors, or
CORRUPT_MESSAGE), stores nothing, and a real consumer still reads exactly what was produced.
"""

import datetime

from kio.schema.errors import ErrorCode
from kio.schema.produce.v3 import request as produce_v3
from kio.schema.produce.v9 import request as produce_v9
from kio.static.primitive import i16, i32, i32Timedelta

from .hostile import BROKER_ANSWERS, exchange, lying_batches


def _produce(mod, topic: str, payload: bytes):
    return mod.ProduceRequest(
        transactional_id=None, acks=i16(-1), timeout=i32Timedelta.parse(datetime.timedelta(seconds=10)),
        topic_data=(mod.TopicProduceData(name=topic, partition_data=(
            mod.PartitionProduceData(index=i32(0), records=payload),)),),
    )


def test_lying_batches_are_refused_and_nothing_is_stored(cluster_factory):
    from integration.kafka_helpers import (
        confluent_consume,
        confluent_produce,
        create_topic,
        end_offsets,
        make_records,
    )

    cluster = cluster_factory(brokers=1, controllers=1)
    cluster.wait_ready()
    create_topic(cluster.bootstrap, "honest", 1)
    good = make_records(50, "honest")
    confluent_produce(cluster.bootstrap, "honest", good, {"compression.type": "snappy"})
    assert end_offsets(cluster.bootstrap, "honest", 1) == {0: 50}

    port = cluster.broker_ports[0]
    for name, (data, error) in lying_batches().items():
        for mod in (produce_v3, produce_v9):
            response = exchange(port, _produce(mod, "honest", bytes(data)))
            p = response.responses[0].partition_responses[0]
            expected = BROKER_ANSWERS.get(name, error)
            assert p.error_code == ErrorCode[expected], (name, mod.__name__, p)
            if mod is produce_v9 and expected == "invalid_record":
                assert p.error_message, name
                if "offset deltas" in name:
                    assert [int(e.batch_index) for e in p.record_errors] == [1], p

    assert end_offsets(cluster.bootstrap, "honest", 1) == {0: 50}
    more = make_records(20, "after")
    confluent_produce(cluster.bootstrap, "honest", more)
    consumed = confluent_consume(cluster.bootstrap, "honest", 1, 70)[0]
    assert [c.offset for c in consumed] == list(range(70))
    assert [c.record.value for c in consumed] == [r.value for r in good + more]

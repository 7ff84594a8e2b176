"""Spark's Kafka schemas (KafkaRecordToRowConverter, KafkaWriter) and their Arrow twins.

Rows leave `read()` as Arrow record batches, which Spark takes only when their schema equals,
field for field, the Arrow form of the declared Spark schema (int32 partition, int64 offset,
microsecond UTC timestamps); building both from one place keeps them equal.
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

HEADERS_TYPE = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))


def kafka_schema(include_headers: bool) -> StructType:
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", HEADERS_TYPE))
    return StructType(fields)


def arrow_schema(include_headers: bool) -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(kafka_schema(include_headers), timezone="UTC")


def check_write_schema(schema: StructType, topic_option: str | None) -> None:
    """Spark's KafkaWriter.validateQuery: a value column of string or binary; key, topic,
    partition and headers optional with their types; a topic from the option or a column."""
    types = {f.name: f.dataType for f in schema.fields}
    if "topic" not in types and topic_option is None:
        raise ValueError("topic option required when no 'topic' attribute is present. "
                         "Use the topic option for setting a topic.")
    if "topic" in types and not isinstance(types["topic"], StringType):
        raise ValueError(f"Topic type must be a string, got {types['topic'].simpleString()}")
    if "value" not in types:
        raise ValueError("Required attribute 'value' not found")
    for name in ("key", "value"):
        if name in types and not isinstance(types[name], (StringType, BinaryType)):
            raise ValueError(f"{name.capitalize()} attribute type must be a string or binary, "
                             f"got {types[name].simpleString()}")
    if "partition" in types and not isinstance(types["partition"], IntegerType):
        raise ValueError(f"Partition type must be an int, got {types['partition'].simpleString()}")
    if "headers" in types:
        h = types["headers"]
        ok = (isinstance(h, ArrayType) and isinstance(h.elementType, StructType)
              and [f.name for f in h.elementType.fields] == ["key", "value"]
              and isinstance(h.elementType.fields[0].dataType, StringType)
              and isinstance(h.elementType.fields[1].dataType, BinaryType))
        if not ok:
            raise ValueError("Headers attribute type must be an array<struct<key:string,value:binary>>, "
                             f"got {h.simpleString()}")

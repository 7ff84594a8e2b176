"""A PySpark data source for Odradek (and any Kafka cluster): `format("odradek")` reads and writes
topics as DataFrames with the schema and options of Spark's Kafka connector, without its JVM jar.

    import odradek.pipeline
    odradek.pipeline.register(spark)
    df = spark.read.format("odradek").option("kafka.bootstrap.servers", "...").option("subscribe", "t").load()
"""

from .datasource import OdradekDataSource, register
from .lag import offsets_behind_latest

__all__ = ["OdradekDataSource", "offsets_behind_latest", "register"]

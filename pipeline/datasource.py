"""The data source Spark looks up by name: options in, readers and writers out."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

from .options import WriteOptions, read_options, write_options
from .schema import check_write_schema, kafka_schema

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from .sink import BatchWriter, StreamWriter
    from .source import BatchReader, StreamReader


class OdradekDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "odradek"

    def schema(self) -> StructType:
        headers = str(self.options.get("includeheaders", "false")).strip().lower() == "true"
        return kafka_schema(headers)

    def reader(self, schema: StructType) -> BatchReader:
        from .source import BatchReader

        return BatchReader(read_options(dict(self.options), streaming=False))

    def streamReader(self, schema: StructType) -> StreamReader:
        from .source import StreamReader

        return StreamReader(read_options(dict(self.options), streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> BatchWriter:
        from .sink import BatchWriter

        options, guarantee = self._write_options(schema, overwrite)
        return BatchWriter(options, guarantee)

    def streamWriter(self, schema: StructType, overwrite: bool) -> StreamWriter:
        from .sink import StreamWriter

        options, guarantee = self._write_options(schema, False)
        return StreamWriter(options, guarantee)

    def _write_options(self, schema: StructType, overwrite: bool) -> tuple[WriteOptions, str]:
        from .sink import choose_guarantee

        if overwrite:
            raise ValueError("Save mode Overwrite not allowed for Kafka. Allowed save mode is Append "
                             "(a Python data source cannot be written with ErrorIfExists)")
        options = write_options(dict(self.options))
        check_write_schema(schema, options.topic)
        return options, choose_guarantee(options)


def register(spark: SparkSession) -> None:
    """Make `format("odradek")` known to this SparkSession."""
    spark.dataSource.register(OdradekDataSource)

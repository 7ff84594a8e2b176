"""The data source Spark looks up by name: options in, readers and writers out."""

from __future__ import annotations

from pyspark.sql.datasource import DataSource

from .options import read_options, write_options
from .schema import check_write_schema, kafka_schema


class OdradekDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "odradek"

    def schema(self):
        headers = str(self.options.get("includeheaders", "false")).strip().lower() == "true"
        return kafka_schema(headers)

    def reader(self, schema):
        from .source import BatchReader

        return BatchReader(read_options(dict(self.options), streaming=False))

    def streamReader(self, schema):
        from .source import StreamReader

        return StreamReader(read_options(dict(self.options), streaming=True))

    def writer(self, schema, overwrite: bool):
        return self._writer(schema, overwrite, streaming=False)

    def streamWriter(self, schema, overwrite: bool):
        return self._writer(schema, False, streaming=True)

    def _writer(self, schema, overwrite: bool, streaming: bool):
        from .sink import BatchWriter, StreamWriter, choose_guarantee

        if overwrite:
            raise ValueError("Save mode Overwrite not allowed for Kafka. Allowed save mode is Append "
                             "(a Python data source cannot be written with ErrorIfExists)")
        options = write_options(dict(self.options))
        check_write_schema(schema, options.topic)
        guarantee = choose_guarantee(options)
        return (StreamWriter if streaming else BatchWriter)(options, guarantee)


def register(spark) -> None:
    """Make `format("odradek")` known to this SparkSession."""
    spark.dataSource.register(OdradekDataSource)

"""The PySpark session the tests drive."""

import os
import sys


def spark_session(name: str):
    """Local mode on two cores, bound to loopback only, no web UI; `format("odradek")` registered."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    from pyspark.sql import SparkSession

    import odradek.pipeline

    session = (
        SparkSession.builder.master("local[2]").appName(name)
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    odradek.pipeline.register(session)
    return session


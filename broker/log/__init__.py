"""The storage engine: partition logs of v2 record batches with sparse indexes (Kafka's kafka.log)."""

from .config import LogConfig
from .log import FetchDataInfo, FileRegion, Log, LogAppendInfo
from .log_manager import LogManager

__all__ = ["FetchDataInfo", "FileRegion", "Log", "LogAppendInfo", "LogConfig", "LogManager"]

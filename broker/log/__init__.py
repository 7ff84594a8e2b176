"""The storage engine: partition logs of v2 record batches with sparse indexes (Kafka's kafka.log)."""

from .config import LogConfig
from .local_log import FetchDataInfo, FileRegion
from .log import Log, LogAppendInfo
from .log_manager import LogManager

__all__ = ["FetchDataInfo", "FileRegion", "Log", "LogAppendInfo", "LogConfig", "LogManager"]

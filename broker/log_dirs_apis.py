"""DescribeLogDirs (v1-v4): this broker's log directories, each replica's size and offset lag.

What a reassignment tool reads to show bytes moved; answered by every broker for itself, as in
Kafka. The answer is a pure function of a snapshot of the log manager (`LogDirView`s); an offline
directory answers KAFKA_STORAGE_ERROR with no partitions and unknown volume sizes. The offset lag
is Kafka's for a current (not future) replica: how far its log end is below its high watermark.
v0 is not served: the kio release in use has no v0 classes (Kafka 4 dropped it).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i32, i64

from odradek.common import wire
from odradek.common.api_key import ApiKey
from odradek.common.network.request_context import Handler, RequestContext

from .authorizer.acl import AclOperation
from .authorizer.authorizer import ALLOW_ALL, Authorizer, authorize_cluster
from .log.log_manager import LogManager

UNKNOWN_VOLUME_BYTES = -1


@dataclass(frozen=True)
class ReplicaView:
    topic: str
    partition: int
    size: int
    offset_lag: int


@dataclass(frozen=True)
class LogDirView:
    path: str
    offline: bool
    replicas: list[ReplicaView] = field(default_factory=list)
    total_bytes: int = UNKNOWN_VOLUME_BYTES
    usable_bytes: int = UNKNOWN_VOLUME_BYTES


def snapshot(log_manager: LogManager) -> list[LogDirView]:
    """The log manager's directories as plain data (statvfs for the volume sizes)."""
    by_dir: dict[str, list[ReplicaView]] = {str(d): [] for d in log_manager.log_dirs}
    for plog in log_manager.all_logs():
        d = log_manager.dir_of(plog.topic, plog.partition)
        if d is not None and str(d) in by_dir:
            by_dir[str(d)].append(ReplicaView(plog.topic, plog.partition, plog.size,
                                              max(0, plog.high_watermark - plog.log_end_offset)))
    out = []
    for d in log_manager.log_dirs:
        offline = d in log_manager.offline_dirs
        total = usable = UNKNOWN_VOLUME_BYTES
        if not offline:
            try:
                st = os.statvfs(d)
                total, usable = st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
            except OSError:
                pass
        out.append(LogDirView(str(d), offline, [] if offline else by_dir[str(d)], total, usable))
    return out


def describe(views: list[LogDirView], wanted: dict[str, set[int]] | None, version: int) -> Any:
    """The response of `version` for `wanted` (topic → partitions; None: every replica)."""
    mod = wire.response_module(ApiKey.DESCRIBE_LOG_DIRS, version)
    results = []
    for v in views:
        topics: dict[str, list[Any]] = {}
        for r in sorted(v.replicas, key=lambda r: (r.topic, r.partition)):
            if wanted is not None and r.partition not in wanted.get(r.topic, ()):
                continue
            topics.setdefault(r.topic, []).append(mod.DescribeLogDirsPartition(
                partition_index=i32(r.partition), partition_size=i64(r.size), offset_lag=i64(r.offset_lag),
                is_future_key=False))
        results.append(wire.make_entity(
            mod.DescribeLogDirsResult,
            error_code=ErrorCode.kafka_storage_error if v.offline else ErrorCode.none, log_dir=v.path,
            topics=tuple(mod.DescribeLogDirsTopic(name=t, partitions=tuple(ps)) for t, ps in topics.items()),
            total_bytes=i64(v.total_bytes), usable_bytes=i64(v.usable_bytes)))
    return wire.make_entity(mod.DescribeLogDirsResponse, throttle_time=wire.NO_THROTTLE, error_code=ErrorCode.none,
                            results=tuple(results))


def wanted_partitions(request: Any) -> dict[str, set[int]] | None:
    if request.topics is None:
        return None
    out: dict[str, set[int]] = {}
    for t in request.topics:
        out.setdefault(t.topic, set()).update(int(p) for p in t.partitions)
    return out


class LogDirsApis:
    def __init__(self, log_manager: LogManager, *, authorizer: Authorizer = ALLOW_ALL):
        self.log_manager = log_manager
        self.authorizer = authorizer
        self.versions: dict[int, tuple[int, int]] = {ApiKey.DESCRIBE_LOG_DIRS: (0, 4)}  # v0: legacy_schemas
        self.handlers: dict[int, Handler] = {
            ApiKey.DESCRIBE_LOG_DIRS: self.handle_describe_log_dirs}

    async def handle_describe_log_dirs(self, context: RequestContext, request: Any) -> Any:
        if not authorize_cluster(self.authorizer, context, AclOperation.DESCRIBE):  # Kafka: nothing, v3+ says why
            mod = wire.response_module(ApiKey.DESCRIBE_LOG_DIRS, int(request.__version__))
            return wire.make_entity(mod.DescribeLogDirsResponse, throttle_time=wire.NO_THROTTLE,
                                    error_code=ErrorCode.cluster_authorization_failed, results=())
        return describe(snapshot(self.log_manager), wanted_partitions(request), int(request.__version__))

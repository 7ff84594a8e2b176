"""Admin requests a broker forwards to the controller: ElectLeaders, AlterPartitionReassignments,
ListPartitionReassignments.

Clients send these to the broker that Metadata names as controller; the controller is its own
process here, so the broker passes the request, as decoded (bounds-checked by common.wire), to the
active controller over the broker-to-controller channel and answers with what it says. No
controller answering within the request's timeout → REQUEST_TIMED_OUT on every entry, as Kafka's
forwarding answers.
"""

from __future__ import annotations

import logging
from typing import Any

from kio.schema.errors import ErrorCode

from odradek.common import wire
from odradek.common.api_key import ApiKey
from odradek.common.network.request_context import Handler, RequestContext

from .authorizer.acl import AclOperation
from .authorizer.authorizer import ALLOW_ALL, Authorizer, authorize_cluster
from .controller_channel import BrokerToControllerChannel
from .error_response import error_response

log = logging.getLogger(__name__)

MIN_FORWARD_S, MAX_FORWARD_S = 1.0, 60.0
"""Bounds of the forwarding deadline taken from the request's own `timeout`."""


class ForwardedApis:
    def __init__(self, channel: BrokerToControllerChannel, *, authorizer: Authorizer = ALLOW_ALL):
        self.channel = channel
        self.authorizer = authorizer
        self.versions: dict[int, tuple[int, int]] = {
            ApiKey.ELECT_LEADERS: (0, 2),
            ApiKey.ALTER_PARTITION_REASSIGNMENTS: (0, 0),
            ApiKey.LIST_PARTITION_REASSIGNMENTS: (0, 0),
        }
        self.handlers: dict[int, Handler] = dict.fromkeys(
            self.versions, self.forward)

    async def forward(self, context: RequestContext, request: Any) -> Any:
        if int(request.__api_key__) == ApiKey.ELECT_LEADERS and not authorize_cluster(
                self.authorizer, context, AclOperation.ALTER):  # Kafka: ALTER on the Cluster
            return elect_leaders_error(request, ErrorCode.cluster_authorization_failed)
        timeout_s = min(MAX_FORWARD_S, max(MIN_FORWARD_S, wire.ms(request.timeout) / 1000))
        try:
            return await self.channel.send(request, timeout_s)
        except (TimeoutError, ConnectionError, OSError) as e:
            log.warning("%s: not forwarded to the controller: %s", type(request).__name__, e)
            if int(request.__api_key__) == ApiKey.ELECT_LEADERS:
                return elect_leaders_error(request, ErrorCode.request_timed_out)
            return error_response(request, ErrorCode.request_timed_out)


def elect_leaders_error(request: Any, code: ErrorCode) -> Any:
    """Every listed partition answered `code` (v0 has no top-level error code to carry it)."""
    mod = wire.response_module(ApiKey.ELECT_LEADERS, int(request.__version__))
    results = tuple(
        mod.ReplicaElectionResult(topic=t.topic, partition_result=tuple(
            mod.PartitionResult(partition_id=p, error_code=code, error_message=None) for p in t.partitions))
        for t in request.topic_partitions or ())
    return wire.make_entity(mod.ElectLeadersResponse, throttle_time=wire.NO_THROTTLE, error_code=code,
                            replica_election_results=results)

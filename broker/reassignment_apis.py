"""AlterPartitionReassignments and ListPartitionReassignments at a broker: forwarded to the controller.

Clients send these to the broker that Metadata names as controller; the controller is its own
process here, so the broker passes the request, as decoded (bounds-checked by common.wire), to the
active controller over the broker-to-controller channel and answers with what it says. No controller
answering within the request's timeout → REQUEST_TIMED_OUT, as Kafka's forwarding answers.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from kio.schema.errors import ErrorCode

from odradek.common import wire

from .controller_channel import BrokerToControllerChannel

log = logging.getLogger(__name__)

ALTER_PARTITION_REASSIGNMENTS, LIST_PARTITION_REASSIGNMENTS = 45, 46
MIN_FORWARD_S, MAX_FORWARD_S = 1.0, 60.0
"""Bounds of the forwarding deadline taken from the request's own `timeout`."""


class ReassignmentApis:
    def __init__(self, channel: BrokerToControllerChannel):
        self.channel = channel
        self.handlers: dict[int, Callable[[object, object], Awaitable[object]]] = {
            ALTER_PARTITION_REASSIGNMENTS: self.forward,
            LIST_PARTITION_REASSIGNMENTS: self.forward,
        }
        self.versions: dict[int, tuple[int, int]] = {
            ALTER_PARTITION_REASSIGNMENTS: (0, 0),
            LIST_PARTITION_REASSIGNMENTS: (0, 0),
        }

    async def forward(self, header, request):
        timeout_s = min(MAX_FORWARD_S, max(MIN_FORWARD_S, wire.ms(request.timeout) / 1000))
        try:
            return await self.channel.send(request, timeout_s)
        except (TimeoutError, ConnectionError, OSError) as e:
            log.warning("%s: not forwarded to the controller: %s", type(request).__name__, e)
            cls = wire.response_schema(int(request.__api_key__), int(request.__version__))
            empty = "responses" if hasattr(cls, "__dataclass_fields__") and "responses" in cls.__dataclass_fields__ \
                else "topics"
            return cls(throttle_time=wire.NO_THROTTLE, error_code=ErrorCode.request_timed_out,
                       error_message="The controller did not answer in time.", **{empty: ()})

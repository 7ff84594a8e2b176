"""ControllerApis: the broker→controller requests the active controller serves on its listener.

Contract for brokers (the replica manager and the shutdown path):

- Find the controller: read `/controller` (zk_data.decode_controller); its `endpoint` (host, port)
  is where the active controller listens. No endpoint or no znode → no controller yet: retry later.
  Connect with common.network.client.NetworkClient and send with common.wire framing.
- AlterPartition, API 56 **version 1** (common.messages.AlterPartitionRequest, flexible: request
  header v2, response header v1): `broker_id`, `broker_epoch` (czxid of the broker's registration
  znode), topics[`topic_name`, partitions[`partition_index`, `leader_epoch`, `new_isr` (plain
  broker ids), `leader_recovery_state` (0), `partition_epoch` = the `zk_version` last received in
  LeaderAndIsr or in an AlterPartition answer]].
  Answer: top-level `error_code` NOT_CONTROLLER (a standby or deposed controller: re-read
  /controller and retry) or STALE_BROKER_EPOCH (the broker re-registered since: drop the change);
  per partition NONE with the new state (`leader_id`, `leader_epoch`, `isr`, `partition_epoch`:
  adopt them), or UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER (sender is not the leader),
  FENCED_LEADER_EPOCH (leader epoch differs: a LeaderAndIsr is on its way; drop the change),
  INVALID_UPDATE_VERSION (partition epoch differs: the state changed meanwhile; wait for the
  LeaderAndIsr/UpdateMetadata carrying it), INVALID_REQUEST (an ISR member that is not a replica,
  or an ISR without the leader). A change equal to the current state answers NONE (idempotent).
- ControlledShutdown, API 7 **version 2** (common.messages.ControlledShutdownRequest, non-flexible:
  request header v1, response header v0): `broker_id`, `broker_epoch`. The controller moves every
  leadership of that broker to another live ISR member (LeaderAndIsr + UpdateMetadata), removes it
  from the ISR of partitions it follows, and answers `remaining_partitions`: those it still leads
  (no other ISR member). Retry until the list is empty or a bound, then stop anyway. Errors:
  NOT_CONTROLLER (retry at the new controller), STALE_BROKER_EPOCH.

- ElectLeaders v0-2 (43), AlterPartitionReassignments v0 (45) and ListPartitionReassignments v0
  (46), as clients sent them
  to a broker, which forwards them here unchanged (the controller is no broker): answered from the
  controller's decisions (controller/reassignment), NOT_CONTROLLER at the top level when this
  controller is not active.

All are answered only once the resulting ZooKeeper writes succeeded; requests it triggers
(LeaderAndIsr, UpdateMetadata) are queued before the answer is sent.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Protocol

from kio.schema.alter_partition_reassignments.v0 import response as apr
from kio.schema.errors import ErrorCode
from kio.schema.list_partition_reassignments.v0 import response as lpr
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i32

from odradek.common import messages as m
from odradek.common import wire
from odradek.common.api_key import ApiKey
from odradek.common.network.socket_server import CloseConnection, RateLimitedLog

from . import state_machine as sm
from .context import ReplicaAssignment, TopicPartition
from .reassignment import Result, Results

log = logging.getLogger(__name__)


def election(request: Any) -> tuple[int, list[TopicPartition] | None]:
    """ElectLeaders → (election type, partitions or None for all); v0 is always preferred."""
    tps = None if request.topic_partitions is None else [
        TopicPartition(t.topic, int(p)) for t in request.topic_partitions for p in t.partitions]
    return int(getattr(request, "election_type", 0)), tps


def elect_leaders_response(request: Any, answer: Results | None) -> Any:
    """The answer in the request's version; None → NOT_CONTROLLER (per partition in v0, which
    has no top-level error code)."""
    mod = wire.response_module(ApiKey.ELECT_LEADERS, int(request.__version__))
    election_type, tps = election(request)
    if answer is None:
        answer = {tp: Result(int(ErrorCode.not_controller)) for tp in tps or ()}
        top = ErrorCode.not_controller
    else:
        top = ErrorCode.none
        if election_type not in (0, 1):
            top = ErrorCode.invalid_request
    topics: dict[str, list[Any]] = {}
    for tp, result in sorted(answer.items()):
        topics.setdefault(tp.topic, []).append(mod.PartitionResult(
            partition_id=i32(tp.partition), error_code=ErrorCode(result.error), error_message=result.message))
    return wire.make_entity(mod.ElectLeadersResponse, throttle_time=wire.NO_THROTTLE, error_code=top,
                            replica_election_results=tuple(
                                mod.ReplicaElectionResult(topic=t, partition_result=tuple(ps)) for t, ps in topics.items()))


def reassignment_targets(request: Any) -> dict[TopicPartition, tuple[int, ...] | None]:
    """AlterPartitionReassignments → partition → target replicas (None: cancel); a partition
    named twice takes its last entry, as Kafka's map does."""
    return {TopicPartition(t.name, int(p.partition_index)): None if p.replicas is None else tuple(int(r) for r in p.replicas)
            for t in request.topics for p in t.partitions}


def alter_reassignments_response(request: Any, answer: Results | None) -> apr.AlterPartitionReassignmentsResponse:
    """One entry per partition asked for; None → NOT_CONTROLLER at the top level."""
    if answer is None:
        return apr.AlterPartitionReassignmentsResponse(
            throttle_time=wire.NO_THROTTLE, error_code=ErrorCode.not_controller, error_message=None, responses=())
    topics: dict[str, list[apr.ReassignablePartitionResponse]] = {}
    for tp in reassignment_targets(request):
        result = answer.get(tp)
        topics.setdefault(tp.topic, []).append(apr.ReassignablePartitionResponse(
            partition_index=i32(tp.partition), error_code=ErrorCode(result.error if result else 0),
            error_message=result.message if result else None))
    return apr.AlterPartitionReassignmentsResponse(
        throttle_time=wire.NO_THROTTLE, error_code=ErrorCode.none, error_message=None,
        responses=tuple(apr.ReassignableTopicResponse(name=TopicName(t), partitions=tuple(ps)) for t, ps in topics.items()))


def listed_partitions(request: Any) -> list[TopicPartition] | None:
    if request.topics is None:
        return None
    return [TopicPartition(t.name, int(p)) for t in request.topics for p in t.partition_indexes]


def list_reassignments_response(answer: dict[TopicPartition, ReplicaAssignment] | None
                                ) -> lpr.ListPartitionReassignmentsResponse:
    if answer is None:
        return lpr.ListPartitionReassignmentsResponse(
            throttle_time=wire.NO_THROTTLE, error_code=ErrorCode.not_controller, error_message=None, topics=())
    topics: dict[str, list[lpr.OngoingPartitionReassignment]] = {}
    for tp, ra in sorted(answer.items()):
        topics.setdefault(tp.topic, []).append(lpr.OngoingPartitionReassignment(
            partition_index=i32(tp.partition), replicas=tuple(BrokerId(r) for r in ra.replicas),
            adding_replicas=tuple(BrokerId(r) for r in ra.adding),
            removing_replicas=tuple(BrokerId(r) for r in ra.removing)))
    return lpr.ListPartitionReassignmentsResponse(
        throttle_time=wire.NO_THROTTLE, error_code=ErrorCode.none, error_message=None,
        topics=tuple(lpr.OngoingTopicReassignment(name=TopicName(t), partitions=tuple(ps)) for t, ps in topics.items()))


def isr_changes(request: m.AlterPartitionRequest) -> list[sm.IsrChange]:
    return [
        sm.IsrChange(TopicPartition(t.topic_name, int(p.partition_index)), int(p.leader_epoch),
                     tuple(int(b) for b in p.new_isr), int(p.partition_epoch))
        for t in request.topics for p in t.partitions
    ]


def alter_partition_response(
    request: m.AlterPartitionRequest, answer: sm.AlterPartitionAnswer | None
) -> m.AlterPartitionResponse:
    """None → NOT_CONTROLLER (standby, deposed, or no decision in time)."""
    if answer is None or answer.error != ErrorCode.none:
        code = ErrorCode.not_controller if answer is None else answer.error
        return m.AlterPartitionResponse(throttle_time_ms=i32(0), error_code=code, topics=())
    topics = []
    for t in request.topics:
        parts = []
        for p in t.partitions:
            code, state = answer.partitions.get(TopicPartition(t.topic_name, int(p.partition_index)),
                                                (ErrorCode.unknown_topic_or_partition, None))
            parts.append(m.AlterPartitionResponsePartition(
                partition_index=p.partition_index, error_code=code,
                leader_id=i32(state.leader if state else -1), leader_epoch=i32(state.leader_epoch if state else -1),
                isr=tuple(i32(b) for b in state.isr) if state else (),
                partition_epoch=i32(state.zk_version if state else -1),
            ))
        topics.append(m.AlterPartitionResponseTopic(topic_name=t.topic_name, partitions=tuple(parts)))
    return m.AlterPartitionResponse(throttle_time_ms=i32(0), error_code=ErrorCode.none, topics=tuple(topics))


def controlled_shutdown_response(answer: sm.ControlledShutdownAnswer | None) -> m.ControlledShutdownResponse:
    if answer is None:
        return m.ControlledShutdownResponse(error_code=ErrorCode.not_controller, remaining_partitions=())
    return m.ControlledShutdownResponse(
        error_code=answer.error,
        remaining_partitions=tuple(m.RemainingPartition(topic_name=tp.topic, partition_index=i32(tp.partition))
                                   for tp in answer.remaining),
    )


class Submitter(Protocol):
    """Where the listener hands a broker's request: the controller's event loop (KafkaController)."""

    async def alter_partition(self, request: m.AlterPartitionRequest) -> sm.AlterPartitionAnswer | None: ...
    async def controlled_shutdown(self, request: m.ControlledShutdownRequest) -> sm.ControlledShutdownAnswer | None: ...
    async def elect_leaders(self, election_type: int, tps: list[TopicPartition] | None) -> Results | None: ...
    async def alter_reassignments(self, targets: Mapping[TopicPartition, tuple[int, ...] | None]) -> Results | None: ...
    async def list_reassignments(self, tps: list[TopicPartition] | None
                                 ) -> dict[TopicPartition, ReplicaAssignment] | None: ...


class ControllerApis:
    """The listener's handler: decode, hand the request to the controller's event loop (which
    answers None unless it is the active controller), encode the answer."""

    def __init__(self, controller: Submitter) -> None:
        self.controller = controller
        self.bad_input = RateLimitedLog(log)

    async def handle(self, frame: memoryview, conn: object) -> list[bytes] | None:
        try:
            header, payload, schema = wire.decode_request(bytes(frame))
        except (KeyError, ValueError) as e:
            # only our brokers talk to this port, with the two requests above: anything else is a bug
            self.bad_input.warning("bad-request", "controller listener: closing on bad request: %s", e)
            raise CloseConnection from e
        api_key = int(schema.__api_key__)
        response: object
        if api_key == ApiKey.ALTER_PARTITION:
            response = alter_partition_response(payload, await self.controller.alter_partition(payload))
        elif api_key == ApiKey.CONTROLLED_SHUTDOWN:
            response = controlled_shutdown_response(await self.controller.controlled_shutdown(payload))
        elif api_key == ApiKey.ELECT_LEADERS:
            response = elect_leaders_response(payload, await self.controller.elect_leaders(*election(payload)))
        elif api_key == ApiKey.ALTER_PARTITION_REASSIGNMENTS:
            response = alter_reassignments_response(
                payload, await self.controller.alter_reassignments(reassignment_targets(payload)))
        elif api_key == ApiKey.LIST_PARTITION_REASSIGNMENTS:
            response = list_reassignments_response(
                await self.controller.list_reassignments(listed_partitions(payload)))
        else:
            self.bad_input.warning("unexpected-api", "controller listener: API %d is not served here", api_key)
            raise CloseConnection
        flexible = wire.response_header_flexible(api_key, schema.__flexible__)
        return [wire.encode_response(response, int(header.correlation_id), flexible_header=flexible)]

"""Who may change this broker's replicas: the gates every controller request passes.

LeaderAndIsr, StopReplica and UpdateMetadata create, move and delete replicas and rewrite what the
broker tells clients. A client sent StopReplica(controller_epoch=999999, delete_partitions=true) on
the client port and deleted a topic's records on every replica, and the raised epoch made the
brokers ignore the real controller from then on (issue 11, finding 2). Kafka keeps them off client
listeners (a control-plane listener, `control.plane.listener.name`, plus the CLUSTER_ACTION ACL);
Odradek does the same and adds ZooKeeper as the judge of who the controller is:

1. Listener: accepted only on the control-plane listener; elsewhere CLUSTER_AUTHORIZATION_FAILED
   (Kafka's answer to a client without CLUSTER_ACTION).
2. Broker epoch: only this broker's own registration epoch (the czxid of `/brokers/ids/<id>`), else
   STALE_BROKER_EPOCH; -1 ("unknown", which Kafka lets through for old controllers) included. The
   controller sees a (re-)registration as soon as ZooKeeper has it, possibly before the broker
   has stored the epoch its create returned (Kafka processes no request before registering): a
   request for a newer epoch than the broker knows waits, up to REGISTRATION_WAIT_S, for it.
3. Controller epoch: a lower epoch than the one adopted is STALE_CONTROLLER_EPOCH; the adopted
   (epoch, controller id) passes; anything else is adopted only if ZooKeeper confirms it:
   `/controller_epoch` holds that epoch and `/controller` names that controller.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from kio.schema.errors import ErrorCode

from odradek.common import messages as m
from odradek.common.api_key import ApiKey

log = logging.getLogger(__name__)

CONTROL_PLANE_APIS = frozenset({ApiKey.LEADER_AND_ISR, ApiKey.STOP_REPLICA, ApiKey.UPDATE_METADATA})
"""Requests only the active controller may send a broker (Kafka's CLUSTER_ACTION requests)."""

ACCEPT, STALE, CONFIRM = "accept", "stale", "confirm"

REGISTRATION_WAIT_S = 10.0
"""How long a request for a broker epoch newer than ours waits for our registration to finish."""

ControllerReader = Callable[[], Awaitable[tuple[int, int] | None]]
"""Reads (epoch of `/controller_epoch`, controller id of `/controller`) from ZooKeeper; None when
either is missing."""


def epoch_verdict(adopted: tuple[int, int] | None, epoch: int, controller_id: int) -> str:
    """ACCEPT the adopted (epoch, controller), STALE a lower epoch, CONFIRM anything else."""
    if adopted is not None:
        if epoch < adopted[0]:
            return STALE
        if (epoch, controller_id) == adopted:
            return ACCEPT
    return CONFIRM


def confirmed(zk_state: tuple[int, int] | None, epoch: int, controller_id: int) -> bool:
    """ZooKeeper names this controller with this epoch."""
    return zk_state is not None and zk_state == (epoch, controller_id)


class ControlPlaneGuard:
    """Applies the three gates; `admit` returns the error code to answer with, or NONE."""

    def __init__(self, listener: str, broker_epoch: Callable[[], int], read_controller: ControllerReader,
                 registration_wait_s: float = REGISTRATION_WAIT_S):
        self.listener = listener
        self.registration_wait_s = registration_wait_s
        """The control-plane listener's name (`control.plane.listener.name`)."""
        self._broker_epoch = broker_epoch
        self._read_controller = read_controller
        self.adopted: tuple[int, int] | None = None
        """(controller epoch, controller id) last confirmed by ZooKeeper."""
        self._registered = asyncio.Event()

    def registered(self, _epoch: int) -> None:
        """Called after every (re-)registration: requests waiting for its epoch go on."""
        self._registered.set()

    async def _own_epoch(self, wanted: int) -> int:
        """This broker's epoch; if `wanted` is newer, first wait (bounded) for a registration in
        progress to finish."""
        own = self._broker_epoch()
        deadline = asyncio.get_running_loop().time() + self.registration_wait_s
        while wanted > own:
            self._registered.clear()
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                break
            try:
                await asyncio.wait_for(self._registered.wait(), remaining)
            except TimeoutError:
                break
            own = self._broker_epoch()
        return own

    async def admit(self, request: Any, listener: str | None) -> ErrorCode:
        name = type(request).__name__
        if listener != self.listener:
            return ErrorCode.cluster_authorization_failed
        own = await self._own_epoch(int(request.broker_epoch))
        if int(request.broker_epoch) != own or own < 0:
            log.warning("refusing %s for broker epoch %d (ours: %d)", name, int(request.broker_epoch), own)
            return ErrorCode.stale_broker_epoch
        epoch, controller_id = int(request.controller_epoch), int(request.controller_id)
        verdict = epoch_verdict(self.adopted, epoch, controller_id)
        if verdict == ACCEPT:
            return ErrorCode.none
        if verdict == CONFIRM:
            try:
                zk_state = await self._read_controller()
            except Exception as e:  # ZooKeeper unreachable: nothing is confirmed
                log.warning("cannot confirm controller %d epoch %d in ZooKeeper: %s", controller_id, epoch, e)
                return ErrorCode.stale_controller_epoch
            if confirmed(zk_state, epoch, controller_id):
                self.adopted = (epoch, controller_id)
                return ErrorCode.none
            log.warning("refusing %s from controller %d with epoch %d: ZooKeeper names %s",
                        name, controller_id, epoch, zk_state)
        else:
            log.warning("refusing %s from controller %d with epoch %d, older than the adopted %s",
                        name, controller_id, epoch, self.adopted)
        return ErrorCode.stale_controller_epoch


def refusal(api_key: int, code: ErrorCode) -> Any:
    """The whole-request error answer to a refused controller request."""
    if api_key == ApiKey.LEADER_AND_ISR:
        return m.LeaderAndIsrResponse(error_code=code, partition_errors=())
    if api_key == ApiKey.STOP_REPLICA:
        return m.StopReplicaResponse(error_code=code, partition_errors=())
    return m.UpdateMetadataResponse(error_code=code)

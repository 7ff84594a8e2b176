"""The broker's channel to the active controller (Kafka's BrokerToControllerChannelManager).

The controller is its own process here: `/controller` names it and carries the endpoint of its
listener. A broker has one channel per purpose (AlterPartition, forwarded admin requests,
controlled shutdown), as Kafka has: the controller answers one connection's requests in order, so a
request held on one (an AlterPartition waiting for its ZooKeeper write) never delays the others.
A channel keeps one connection to it, forgets it when `/controller` changes (a watch
set by each lookup), when the connection fails, or when the answer is NOT_CONTROLLER (a standby or
deposed controller), and then looks it up again. Every send is bounded by a deadline; retries back
off.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, NamedTuple

from kio.schema.errors import ErrorCode

from odradek.common.network.client import NetworkClient
from odradek.common.security.channel import PLAINTEXT, ClientSecurity

from .zk_client import BrokerZkClient

log = logging.getLogger(__name__)


class ControllerNotAvailableError(TimeoutError):
    """No controller answered the request before its deadline."""


class BrokerToControllerChannel:
    def __init__(self, zk: BrokerZkClient, broker_id: int, retry_backoff_ms: int = 100, connect_timeout_s: float = 5.0,
                 security_for: Callable[[str], ClientSecurity] | None = None, purpose: str = "controller"):
        self.purpose = purpose
        """Names the connection (its client id): `broker-<id>-<purpose>`."""
        self.security_for = security_for
        """The controller's listener's security protocol (from `/controller`) → how to connect."""
        self.zk = zk
        self.broker_id = broker_id
        self.backoff_s = max(0.01, retry_backoff_ms / 1000)
        self.connect_timeout_s = connect_timeout_s
        self.endpoint: tuple[str, int] | None = None
        self.controller_id: int | None = None
        self.client: NetworkClient | None = None
        self._closed = False

    def invalidate(self) -> None:
        """Forget the controller (its znode changed, or it failed us); the next send looks again."""
        self.endpoint = None
        client, self.client = self.client, None
        if client is not None:
            asyncio.get_running_loop().create_task(client.close())

    async def _controller_client(self, timeout_s: float) -> NetworkClient | None:
        if self.client is not None:
            return self.client
        info = await self.zk.get_controller(on_change=self.invalidate, timeout_s=timeout_s)
        if info is None or info.endpoint is None:
            return None
        if self.client is not None:  # found by a concurrent send meanwhile
            return self.client
        self.controller_id = info.controller_id
        self.endpoint = (info.endpoint.host, int(info.endpoint.port))
        protocol = info.endpoint.security_protocol
        security = self.security_for(protocol) if self.security_for is not None else PLAINTEXT
        self.client = NetworkClient(*self.endpoint, client_id=f"broker-{self.broker_id}-{self.purpose}",
                                    connect_timeout=self.connect_timeout_s, connect_attempts=1, security=security)
        return self.client

    async def send(self, request: Any, timeout_s: float) -> Any:
        """Send `request` to the active controller and return its answer, retrying (with backoff)
        on connection errors and NOT_CONTROLLER until `timeout_s` passes: then
        ControllerNotAvailableError. The answer's other errors are the caller's to handle.
        `request` is any kio request class and the answer its response (NetworkClient.send's)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        last: object = "no controller registered"
        while not self._closed:
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            try:
                client = await asyncio.wait_for(self._controller_client(remaining), remaining)
            except (TimeoutError, ConnectionError) as e:
                last = e
                client = None
            if client is not None:
                try:
                    response = await client.send(request, max(0.05, deadline - loop.time()))
                except (ConnectionError, TimeoutError, OSError) as e:
                    last = e
                    if self.client is client:
                        self.invalidate()
                else:
                    if getattr(response, "error_code", None) != ErrorCode.not_controller:
                        return response
                    last = f"controller {self.controller_id} answered NOT_CONTROLLER"
                    if self.client is client:
                        self.invalidate()
            await asyncio.sleep(min(self.backoff_s, max(0.0, deadline - loop.time())))
        raise ControllerNotAvailableError(f"{type(request).__name__}: no controller answered ({last})")

    async def close(self) -> None:
        self._closed = True
        client, self.client = self.client, None
        if client is not None:
            await client.close()


class ControllerChannels(NamedTuple):
    """A broker's channels to the controller, one per purpose (see the module doc)."""
    alter_partition: BrokerToControllerChannel
    forwarding: BrokerToControllerChannel
    controlled_shutdown: BrokerToControllerChannel


def controller_channels(zk: BrokerZkClient, broker_id: int,
                        security_for: Callable[[str], ClientSecurity] | None = None,
                        retry_backoff_ms: int = 100) -> ControllerChannels:
    return ControllerChannels(*(
        BrokerToControllerChannel(zk, broker_id, retry_backoff_ms, security_for=security_for, purpose=purpose)
        for purpose in ControllerChannels._fields))

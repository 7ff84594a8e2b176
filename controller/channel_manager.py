"""ControllerChannelManager: one ordered request queue and connection per live broker.

As Kafka's: requests to a broker go out one at a time, in the order the controller decided them
(a LeaderAndIsr must not overtake the UpdateMetadata before it); a failed send is retried with
backoff for as long as the broker is registered; when it dies (or re-registers with a new epoch)
its queue is dropped, because the controller sends it everything again when it comes back.

Requests are encoded on a thread of the manager's own, not on the event loop: a decision about
thousands of partitions makes requests that take a second or more to encode, and the loop must
answer the broker that asked meanwhile (a controlled shutdown's answer waited for every channel's
first request to be encoded). A request is encoded once, whatever the retries.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from odradek.common import wire
from odradek.common.executors import BlockingExecutor
from odradek.common.network.client import NetworkClient
from odradek.common.security.channel import PLAINTEXT, ClientSecurity
from odradek.common.zk_data import BrokerInfo, EndPoint

log = logging.getLogger(__name__)

ENCODE_THREADS = 1
"""Encoding holds the GIL: more threads would not encode faster, only take turns."""
ENCODE_STOP_S = 5.0

ResponseHook = Callable[[int, object, object], None]
"""(broker_id, request, response) → None; called for every response (for deletion tracking and tests)."""


class _BrokerChannel:
    def __init__(self, manager: ControllerChannelManager, info: BrokerInfo, ep: EndPoint):
        """`ep`: the broker's control-plane endpoint."""
        self.manager = manager
        self.info = info
        security = manager.security_for(ep.security_protocol) if manager.security_for is not None else PLAINTEXT
        self.client = NetworkClient(
            ep.host, ep.port, client_id=f"controller-{manager.controller_id}", connect_attempts=1,
            connect_timeout=manager.request_timeout, security=security,
        )
        self.queue: asyncio.Queue[object] = asyncio.Queue()
        self.task = asyncio.get_running_loop().create_task(self._send_loop(), name=f"controller-channel-{info.id}")

    async def _send_loop(self) -> None:
        m = self.manager
        while True:
            payload = await self.queue.get()
            try:
                frame = await m.encoder.run(wire.encode_request, payload, 0, self.client.client_id)
            except ConnectionError:
                return  # the manager is closing
            except Exception:
                log.exception("broker %d: cannot encode %s; dropped", self.info.id, type(payload).__name__)
                continue
            backoff = m.backoff_ms / 1000
            failures = 0
            while True:
                if m.gate is not None:
                    await m.gate.wait()
                try:
                    response = await self.client.send_encoded(frame, type(payload), m.request_timeout)
                    break
                except (ConnectionError, TimeoutError, OSError) as e:
                    failures += 1
                    # one failure is routine (the broker is stopping, or restarting): a warning
                    # only once it persists
                    level = logging.INFO if failures == 1 else (
                        logging.WARNING if failures == 10 or failures % 100 == 0 else logging.DEBUG)
                    log.log(level, "broker %d: %s failed (%s); retry %d in %.2fs", self.info.id,
                            type(payload).__name__, e, failures, backoff)
                    self.client.disconnect()
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, m.backoff_max_ms / 1000)
                except ValueError as e:  # malformed answer: retrying would not help
                    log.error("broker %d: bad response to %s: %s", self.info.id, type(payload).__name__, e)
                    response = None
                    break
            if response is None:
                continue
            code = getattr(response, "error_code", 0)
            if code:
                log.warning("broker %d answered %s with error %s", self.info.id, type(payload).__name__, code)
            for err in getattr(response, "partition_errors", ()):
                if err.error_code:
                    log.warning("broker %d: %s-%d: error %s", self.info.id, err.topic_name, err.partition_index, err.error_code)
            if m.on_response is not None:
                try:
                    m.on_response(self.info.id, payload, response)
                except Exception:
                    log.exception("response hook failed")

    def stop(self) -> None:
        self.task.cancel()
        self.client.disconnect()


class ControllerChannelManager:
    """Per-broker senders. `gate` (an asyncio.Event) pauses all sending while it is clear: the
    controller clears it while its ZooKeeper session is suspended, when it may already be deposed."""

    def __init__(self, controller_id: int, *, listener: str = "CONTROLLER", request_timeout: float = 30.0,
                 backoff_ms: int = 100, backoff_max_ms: int = 1000, gate: asyncio.Event | None = None,
                 on_response: ResponseHook | None = None,
                 security_for: Callable[[str], ClientSecurity] | None = None):
        self.controller_id = controller_id
        self.security_for = security_for
        """A broker endpoint's security protocol → how to connect to it (common/security)."""
        self.listener = listener
        """The brokers' control-plane listener (`control.plane.listener.name`): requests go to its
        endpoint in each broker's registration, and to no other."""
        self.request_timeout = request_timeout
        self.backoff_ms = backoff_ms
        self.backoff_max_ms = backoff_max_ms
        self.gate = gate
        self.on_response = on_response
        self.channels: dict[int, _BrokerChannel] = {}
        self.encoder = BlockingExecutor("controller-encode", ENCODE_THREADS)
        """Where requests are encoded (off the event loop); stopped by `close`."""

    def update_brokers(self, live: dict[int, BrokerInfo]) -> None:
        """Open channels to new brokers, drop those of dead or re-registered ones."""
        for b, ch in list(self.channels.items()):
            if b not in live or live[b].epoch != ch.info.epoch or live[b].endpoints != ch.info.endpoints:
                log.info("dropping channel to broker %d (%d queued)", b, ch.queue.qsize())
                ch.stop()
                del self.channels[b]
        for b, info in live.items():
            if b in self.channels:
                continue
            ep = info.endpoint_named(self.listener)
            if ep is None:
                log.error("broker %d registers no %s endpoint (control.plane.listener.name); "
                          "it cannot be sent controller requests", b, self.listener)
                continue
            self.channels[b] = _BrokerChannel(self, info, ep)

    def send(self, broker_id: int, payload: object) -> bool:
        """Queue a request; False (and dropped) if the broker has no channel (not live)."""
        ch = self.channels.get(broker_id)
        if ch is None:
            log.debug("not sending %s to broker %d: not live", type(payload).__name__, broker_id)
            return False
        ch.queue.put_nowait(payload)
        return True

    def abort(self) -> None:
        """Stop at once: drop every queue and connection (a deposed controller sends nothing more)."""
        for ch in self.channels.values():
            ch.stop()
        self.channels.clear()

    async def close(self) -> None:
        tasks = [ch.task for ch in self.channels.values()]
        self.abort()
        for ch_task in tasks:
            try:
                await ch_task
            except (asyncio.CancelledError, Exception):
                pass
        if not await self.encoder.aclose(ENCODE_STOP_S):
            log.warning("%d request encoding threads still running after %.0fs", self.encoder.alive(), ENCODE_STOP_S)

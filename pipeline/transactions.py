"""Does the cluster have a transaction coordinator? Asked once per write on the driver.

librdkafka gives no clear answer: against a cluster without one, a transactional producer retries
COORDINATOR_NOT_AVAILABLE until its timeout (FINDINGS). A broker that implements transactions
advertises the APIs a transactional producer needs, so ApiVersions settles it in one round trip.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

from kio.schema.api_versions.v3.request import ApiVersionsRequest

from odradek.common.api_key import ApiKey
from odradek.common.network.client import NetworkClient
from odradek.common.security.channel import PLAINTEXT, ClientSecurity, client_security_from_properties

log = logging.getLogger(__name__)

TRANSACTION_APIS = frozenset({ApiKey.ADD_PARTITIONS_TO_TXN, ApiKey.ADD_OFFSETS_TO_TXN, ApiKey.END_TXN, ApiKey.TXN_OFFSET_COMMIT})


def _hosts(bootstrap: str) -> list[tuple[str, int]]:
    out = []
    for item in bootstrap.split(","):
        item = item.strip()
        if "://" in item:
            item = item.split("://", 1)[1]
        host, _, port = item.rpartition(":")
        if host and port.isdigit():
            out.append((host.strip("[]"), int(port)))
    return out


async def _advertised(host: str, port: int, timeout: float, security: ClientSecurity = PLAINTEXT) -> set[int]:
    client = NetworkClient(host, port, client_id="odradek-spark", connect_attempts=1, connect_timeout=timeout,
                           security=security)
    try:
        response = await client.send(
            ApiVersionsRequest(client_software_name="odradek-spark", client_software_version="0.1"), timeout=timeout)
    finally:
        await client.close()
    return {int(k.api_key) for k in response.api_keys}


def transactions_supported(bootstrap: str, timeout: float = 10.0, props: Mapping[str, str] | None = None) -> bool:
    """True when a bootstrap broker advertises every transactional API. Raises ConnectionError
    when none of them answers. `props`: the client's security keys (`security.protocol`, `ssl.*`,
    `sasl.*`), as the Spark options give them to confluent-kafka."""
    security = client_security_from_properties(props or {}, "odradek-spark")
    last: Exception | None = None
    for host, port in _hosts(bootstrap):
        try:
            return asyncio.run(_advertised(host, port, timeout, security)) >= TRANSACTION_APIS
        except (OSError, ConnectionError, TimeoutError) as e:
            last = e
            log.warning("ApiVersions from %s:%d failed: %s", host, port, e)
    raise ConnectionError(f"no bootstrap server of {bootstrap!r} answered ApiVersions: {last}")

"""DescribeClientQuotas (48) and AlterClientQuotas (49), v0-1 (KIP-546), ZooKeeper mode.

As Kafka's KafkaApis + ZkAdminManager: the dispatcher already refused a principal without
DESCRIBE_CONFIGS / ALTER_CONFIGS on the Cluster (authorizer.CLUSTER_GATED_APIS). Each alter entry
is validated whole (entity, keys, values) before anything of it is written, and answered on its
own (INVALID_REQUEST with Kafka's message); `validate_only` writes nothing. A describe with a bad
filter gets its error at the top level and no entries.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import f64

from odradek.broker.zk_client import ConfigChangedError
from odradek.common import wire
from odradek.common.api_key import ApiKey
from odradek.common.network.request_context import Handler, RequestContext

from . import quota_entity
from .quota_entity import InvalidQuotaRequest, UnsupportedEntityType
from .zk_quota_store import ZkQuotaStore

log = logging.getLogger(__name__)

VERSIONS = (0, 1)


class QuotaApis:
    def __init__(self, store: ZkQuotaStore):
        self.store = store
        self.versions: dict[int, tuple[int, int]] = {
            ApiKey.DESCRIBE_CLIENT_QUOTAS: VERSIONS, ApiKey.ALTER_CLIENT_QUOTAS: VERSIONS}
        self.handlers: dict[int, Handler] = {
            ApiKey.DESCRIBE_CLIENT_QUOTAS: self.handle_describe,
            ApiKey.ALTER_CLIENT_QUOTAS: self.handle_alter,
        }

    async def handle_describe(self, context: RequestContext, request: Any) -> Any:
        mod = wire.response_module(ApiKey.DESCRIBE_CLIENT_QUOTAS, context.api_version)

        def failed(code: ErrorCode, message: str) -> Any:
            return mod.DescribeClientQuotasResponse(throttle_time=wire.NO_THROTTLE, error_code=code,
                                                    error_message=message, entries=None)

        try:
            filters = quota_entity.parse_filter(
                (c.entity_type, int(c.match_type), c.match) for c in request.components)
        except InvalidQuotaRequest as e:
            return failed(ErrorCode.invalid_request, str(e))
        except UnsupportedEntityType as e:
            return failed(ErrorCode.unsupported_version, str(e))
        try:
            configs = await self.store.read_all()
        except Exception as e:
            log.warning("DescribeClientQuotas failed: %s", type(e).__name__)
            return failed(ErrorCode.unknown_server_error, "Error reading client quotas")
        found = quota_entity.describe(filters, bool(request.strict), configs.users, configs.user_clients,
                                      configs.clients, configs.ips)
        entries = tuple(
            mod.EntryData(
                entity=tuple(mod.EntityData(entity_type=t, entity_name=n) for t, n in entity),
                values=tuple(mod.ValueData(key=k, value=f64(v)) for k, v in sorted(values.items())))
            for entity, values in found)
        return mod.DescribeClientQuotasResponse(throttle_time=wire.NO_THROTTLE, error_code=ErrorCode.none,
                                                error_message=None, entries=entries)

    async def handle_alter(self, context: RequestContext, request: Any) -> Any:
        mod = wire.response_module(ApiKey.ALTER_CLIENT_QUOTAS, context.api_version)
        out = []
        for entry in request.entries:
            code, message = await self._alter_one(entry, bool(request.validate_only))
            out.append(mod.EntryData(
                error_code=code, error_message=message,
                entity=tuple(mod.EntityData(entity_type=e.entity_type, entity_name=e.entity_name)
                             for e in entry.entity)))
        return mod.AlterClientQuotasResponse(throttle_time=wire.NO_THROTTLE, entries=tuple(out))

    async def _alter_one(self, entry: Any, validate_only: bool) -> tuple[ErrorCode, str | None]:
        try:
            entity = quota_entity.parse_alter_entity((e.entity_type, e.entity_name) for e in entry.entity)
            ops = [(op.key, float(op.value), bool(op.remove)) for op in entry.ops]
            await self.store.alter(entity, ops, validate_only)
        except InvalidQuotaRequest as e:
            return ErrorCode.invalid_request, str(e)
        except ConfigChangedError:
            return ErrorCode.unknown_server_error, "The entity's configuration kept changing; try again"
        except Exception as e:
            log.warning("AlterClientQuotas failed: %s", type(e).__name__)
            return ErrorCode.unknown_server_error, "Error altering client quotas"
        if not validate_only:
            log.info("client quotas of %s altered: %s", entity.entity_path,
                     ", ".join(f"{k}={'(removed)' if r else v}" for k, v, r in ops))
        return ErrorCode.none, None


def describe_error_response(request: Any, code: ErrorCode) -> Any:
    """Kafka's DescribeClientQuotasRequest.getErrorResponse: the code, no entries (null)."""
    mod = wire.response_module(ApiKey.DESCRIBE_CLIENT_QUOTAS, int(request.__version__))
    return mod.DescribeClientQuotasResponse(throttle_time=wire.NO_THROTTLE, error_code=code, error_message=None,
                                            entries=None)


ERROR_RESPONSES: dict[int, Callable[[Any, ErrorCode], Any]] = {ApiKey.DESCRIBE_CLIENT_QUOTAS: describe_error_response}
"""Error responses the generic builder (broker/error_response) would get wrong (it would mirror
the filter components as entries)."""

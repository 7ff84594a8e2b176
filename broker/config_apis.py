"""The config APIs: DescribeConfigs (32), AlterConfigs (33), IncrementalAlterConfigs (44).

A thin shell over config_helper (what to describe) and config_admin (what a change becomes):
reads and writes go to ZooKeeper, Kafka's ZooKeeper layout. A change writes the entity's znode
(`/config/topics/<t>`, `/config/brokers/<id|<default>>`) with a compare-and-set and announces it
in `/config/changes` in the same transaction; every broker's config manager applies it. A
concurrent change of the same entity makes the read-modify-write start over (a few times).
"""

import logging
from collections.abc import Awaitable, Callable
from types import ModuleType
from typing import Any

from kio.schema.errors import ErrorCode

from odradek.common import wire, zk_data
from odradek.common.api_key import ApiKey
from odradek.common.network.request_context import RequestContext

from . import config_admin as ca
from . import config_helper as ch
from .admin_manager import ApiError, topic_name_error
from .authorizer.acl import CLUSTER_NAME, AclOperation, ResourceType
from .authorizer.authorizer import ALLOW_ALL, Authorizer
from .dynamic_config import DynamicBrokerConfig
from .log.config import LogConfig
from .metadata_cache import MetadataCache
from .zk_client import BrokerZkClient, ConfigChangedError

log = logging.getLogger(__name__)

MAX_WRITE_ATTEMPTS = 5
"""Read-modify-write attempts of one resource while other writers keep changing it."""


def _entity_path(change: ca.ResourceChange) -> str:
    if change.type == ca.TOPIC:
        return f"topics/{change.name}"
    return f"brokers/{change.name or zk_data.DEFAULT_ENTITY}"


class ConfigApis:
    def __init__(self, dynamic: DynamicBrokerConfig, metadata_cache: MetadataCache, zk: BrokerZkClient, *,
                 authorizer: Authorizer = ALLOW_ALL):
        self.dynamic = dynamic
        self.authorizer = authorizer
        self.broker_id = dynamic.broker_id
        self.metadata_cache = metadata_cache
        self.zk = zk
        self.handlers: dict[int, Callable[[RequestContext, Any], Awaitable[Any]]] = {
            ApiKey.DESCRIBE_CONFIGS: self.handle_describe_configs,
            ApiKey.ALTER_CONFIGS: self.handle_alter_configs,
            ApiKey.INCREMENTAL_ALTER_CONFIGS: self.handle_incremental_alter_configs,
        }
        self.versions: dict[int, tuple[int, int]] = {
            ApiKey.DESCRIBE_CONFIGS: (0, 4),  # v0 from common/legacy_schemas
            ApiKey.ALTER_CONFIGS: (0, 2),
            ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 1),
        }

    def refusal(self, context: RequestContext, rtype: int, rname: str, op: AclOperation) -> ApiError | None:
        """Kafka's check: `op` (DESCRIBE_CONFIGS or ALTER_CONFIGS) on the topic, or on the Cluster
        for a broker resource; None when allowed."""
        if rtype == ca.TOPIC and not self.authorizer.authorize(context, op, ResourceType.TOPIC, rname):
            return ApiError(ErrorCode.topic_authorization_failed, None)
        if rtype in (ca.BROKER, ca.BROKER_LOGGER) and not self.authorizer.authorize(
                context, op, ResourceType.CLUSTER, CLUSTER_NAME):
            return ApiError(ErrorCode.cluster_authorization_failed, None)
        return None

    async def _topic_exists(self, topic: str) -> bool:
        return topic_name_error(topic) is None and (
            self.metadata_cache.contains(topic) or await self.zk.topic_exists(topic))

    # --- DescribeConfigs (32) ------------------------------------------------------------------

    async def handle_describe_configs(self, context: RequestContext, request: Any) -> Any:
        mod = wire.response_module(ApiKey.DESCRIBE_CONFIGS, int(request.__version__))
        synonyms = bool(getattr(request, "include_synonyms", False))
        docs = bool(getattr(request, "include_documentation", False))
        topics = {r.resource_name for r in request.resources
                  if int(r.resource_type) == ca.TOPIC and topic_name_error(r.resource_name) is None}
        overrides = await self.zk.get_topic_configs(sorted(topics)) if topics else {}
        results = []
        for resource in request.resources:
            rtype, rname = int(resource.resource_type), resource.resource_name
            try:
                refused = self.refusal(context, rtype, rname, AclOperation.DESCRIBE_CONFIGS)
                if refused is not None:
                    raise refused
                entries = ch.select(await self._describe(rtype, rname, overrides, synonyms, docs),
                                    resource.configuration_keys)
                configs = tuple(self._entry(mod, e) for e in entries)
                error, message = ErrorCode.none, None
            except ApiError as e:
                configs, error, message = (), e.error_code, e.message
            except Exception as e:
                log.exception("DescribeConfigs of %d/%r failed", rtype, rname)
                configs, error, message = (), ErrorCode.unknown_server_error, str(e)
            results.append(wire.make_entity(
                mod.DescribeConfigsResult, error_code=error, error_message=message,
                resource_type=rtype, resource_name=rname, configs=configs,
            ))
        return wire.make_entity(mod.DescribeConfigsResponse, throttle_time=wire.NO_THROTTLE, results=tuple(results))

    async def _describe(self, rtype: int, rname: str, overrides: dict[str, zk_data.EntityConfig], synonyms: bool,
                        docs: bool) -> list[ch.DescribedConfig]:
        if rtype == ca.TOPIC:
            error = topic_name_error(rname)
            if error is not None:
                raise ApiError(ErrorCode.invalid_topic_exception, error)
            if not await self._topic_exists(rname):
                raise ApiError(ErrorCode.unknown_topic_or_partition, f"Topic '{rname}' does not exist.")
            topic_overrides = overrides[rname].config
            log_config = LogConfig.from_broker(self.dynamic.current, topic_overrides)
            return ch.describe_topic(log_config, log_config.overrides, self.dynamic.sources(), synonyms, docs)
        if rtype == ca.BROKER:
            if not rname:
                return ch.describe_broker_default(self.dynamic.sources(), synonyms, docs)
            try:
                requested = int(rname)
            except ValueError:
                raise ApiError(ErrorCode.invalid_request, f"Broker id must be an integer, but it is: {rname}") from None
            if requested != self.broker_id:
                raise ApiError(ErrorCode.invalid_request, f"Unexpected broker id, expected {self.broker_id} or "
                               f"empty string, but received {rname}")
            return ch.describe_broker(self.dynamic.current, self.dynamic.sources(), synonyms, docs)
        raise ApiError(ErrorCode.invalid_request, f"Unsupported resource type: {rtype}")

    @staticmethod
    def _entry(mod: ModuleType, e: ch.DescribedConfig) -> Any:
        return wire.make_entity(
            mod.DescribeConfigsResourceResult,
            name=e.name, value=e.value, read_only=e.read_only, config_source=e.source,
            is_default=e.source == ch.DEFAULT_CONFIG, is_sensitive=e.sensitive,
            synonyms=tuple(wire.make_entity(mod.DescribeConfigsSynonym, name=s.name, value=s.value, source=s.source)
                           for s in e.synonyms),
            config_type=int(e.config_type), documentation=e.documentation,
        )

    # --- AlterConfigs (33), IncrementalAlterConfigs (44) --------------------------------------

    async def handle_alter_configs(self, context: RequestContext, request: Any) -> Any:
        changes = [ca.ResourceChange(int(r.resource_type), r.resource_name,
                                     tuple(ca.ConfigOp(c.name, ca.SET, c.value) for c in r.configs))
                   for r in request.resources]
        return await self._answer(ApiKey.ALTER_CONFIGS, request, changes, False, context)

    async def handle_incremental_alter_configs(self, context: RequestContext, request: Any) -> Any:
        changes = [ca.ResourceChange(int(r.resource_type), r.resource_name,
                                     tuple(ca.ConfigOp(c.name, int(c.config_operation), c.value) for c in r.configs))
                   for r in request.resources]
        return await self._answer(ApiKey.INCREMENTAL_ALTER_CONFIGS, request, changes, True, context)

    async def _answer(self, api_key: int, request: Any, changes: list[ca.ResourceChange], incremental: bool,
                      context: RequestContext) -> Any:
        mod = wire.response_module(api_key, int(request.__version__))
        refused = [self.refusal(context, c.type, c.name, AclOperation.ALTER_CONFIGS) for c in changes]
        allowed = [c for c, r in zip(changes, refused) if r is None]
        done = iter(await self.alter(allowed, bool(request.validate_only), incremental) if allowed else [])
        errors = [next(done) if r is None else r for r in refused]
        responses = tuple(
            wire.make_entity(
                mod.AlterConfigsResourceResponse,
                error_code=ErrorCode.none if e is None else e.error_code,
                error_message=None if e is None else e.message,
                resource_type=c.type, resource_name=c.name,
            )
            for c, e in zip(changes, errors)
        )
        response_cls = mod.AlterConfigsResponse if api_key == ApiKey.ALTER_CONFIGS else mod.IncrementalAlterConfigsResponse
        return wire.make_entity(response_cls, throttle_time=wire.NO_THROTTLE, responses=responses)

    async def alter(self, changes: list[ca.ResourceChange], validate_only: bool, incremental: bool) -> list[ApiError | None]:
        """One result per resource, in order: None when changed (or valid, with validate_only)."""
        errors = ca.preprocess(changes, self.broker_id, incremental)
        for i, change in enumerate(changes):
            if errors[i] is not None:
                continue
            try:
                await self._alter_one(change, validate_only, incremental)
            except ApiError as e:
                log.info("alter configs of %s refused: %s", change.describe(), e.message)
                errors[i] = e
            except Exception as e:
                log.exception("alter configs of %s failed", change.describe())
                errors[i] = ApiError(ErrorCode.unknown_server_error, str(e))
        return errors

    async def _alter_one(self, change: ca.ResourceChange, validate_only: bool, incremental: bool) -> None:
        if change.type == ca.TOPIC and not await self._topic_exists(change.name):
            raise ApiError(ErrorCode.unknown_topic_or_partition, f"The topic '{change.name}' does not exist.")
        entity_path = _entity_path(change)
        for _ in range(MAX_WRITE_ATTEMPTS):
            current = await self.zk.get_entity_config(entity_path)
            props = ca.apply_ops(current.config, change.ops, change.type) if incremental else ca.replace_all(change.ops)
            ca.validate(change, props, self.dynamic.current, self.dynamic)
            if validate_only or (props == current.config and current.version >= 0):
                return
            try:
                await self.zk.change_entity_config(entity_path, props, current.version)
            except ConfigChangedError:
                continue
            log.info("%s: configs now %s", change.describe(), props)
            return
        raise ApiError(ErrorCode.unknown_server_error,
                       f"{change.describe()} kept changing; gave up after {MAX_WRITE_ATTEMPTS} attempts")

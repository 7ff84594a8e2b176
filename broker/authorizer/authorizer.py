"""What the request handlers see of the authorizer: one object, consulted where Kafka's KafkaApis
consults its AuthHelper.

`ALLOW_ALL` stands in when `authorizer.class.name` is unset (Kafka with no authorizer: every
request allowed); `acl_authorizer.AclAuthorizer` when it is set. Both answer `authorize` (one
resource), `authorize_by_type` (any resource of a type) and say whether they are `enabled`
(KIP-430's authorized operations and the ACL APIs differ).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol, TypeVar

from kio.schema.errors import ErrorCode

from odradek.common.api_key import ApiKey
from odradek.common.network.request_context import RequestContext

from .acl import CLUSTER_NAME, AclOperation, ResourceType

T = TypeVar("T")


class Authorizer(Protocol):
    enabled: bool

    def authorize(self, context: RequestContext, op: AclOperation, resource_type: ResourceType, name: str) -> bool:
        ...

    def authorize_by_type(self, context: RequestContext, op: AclOperation, resource_type: ResourceType) -> bool:
        ...


class AllowAll:
    """No authorizer configured."""

    enabled = False

    def authorize(self, context: RequestContext, op: AclOperation, resource_type: ResourceType, name: str) -> bool:
        return True

    def authorize_by_type(self, context: RequestContext, op: AclOperation, resource_type: ResourceType) -> bool:
        return True


ALLOW_ALL: Authorizer = AllowAll()

AUTHORIZATION_ERRORS = {
    ResourceType.TOPIC: ErrorCode.topic_authorization_failed,
    ResourceType.GROUP: ErrorCode.group_authorization_failed,
    ResourceType.CLUSTER: ErrorCode.cluster_authorization_failed,
    ResourceType.TRANSACTIONAL_ID: ErrorCode.transactional_id_authorization_failed,
    ResourceType.DELEGATION_TOKEN: ErrorCode.delegation_token_authorization_failed,
}
"""AclEntry.authorizationError: the code a refused resource of each type gets."""


_OP = AclOperation
CLUSTER_GATED_APIS: dict[int, AclOperation] = {
    ApiKey.LEADER_AND_ISR: _OP.CLUSTER_ACTION,
    ApiKey.STOP_REPLICA: _OP.CLUSTER_ACTION,
    ApiKey.UPDATE_METADATA: _OP.CLUSTER_ACTION,
    ApiKey.CONTROLLED_SHUTDOWN: _OP.CLUSTER_ACTION,
    ApiKey.WRITE_TXN_MARKERS: _OP.CLUSTER_ACTION,
    ApiKey.ALTER_PARTITION: _OP.CLUSTER_ACTION,
    ApiKey.ALLOCATE_PRODUCER_IDS: _OP.CLUSTER_ACTION,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: _OP.ALTER,
    ApiKey.LIST_PARTITION_REASSIGNMENTS: _OP.DESCRIBE,
    ApiKey.ALTER_REPLICA_LOG_DIRS: _OP.ALTER,
    ApiKey.UPDATE_FEATURES: _OP.ALTER,
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: _OP.DESCRIBE,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: _OP.ALTER,
    ApiKey.DESCRIBE_CLIENT_QUOTAS: _OP.DESCRIBE_CONFIGS,
    ApiKey.ALTER_CLIENT_QUOTAS: _OP.ALTER_CONFIGS,
}
"""APIs Kafka refuses whole, with CLUSTER_AUTHORIZATION_FAILED everywhere, unless the principal may
do the operation on the Cluster: checked once in the dispatcher, before the handler."""


def authorize_cluster(authorizer: Authorizer, context: RequestContext, op: AclOperation) -> bool:
    return authorizer.authorize(context, op, ResourceType.CLUSTER, CLUSTER_NAME)


def authorized_names(authorizer: Authorizer, context: RequestContext, op: AclOperation,
                     resource_type: ResourceType, names: Iterable[str]) -> set[str]:
    """The names (each checked once) the principal may `op` (AuthHelper.filterByAuthorized)."""
    if not authorizer.enabled:
        return set(names)
    return {n for n in set(names) if authorizer.authorize(context, op, resource_type, n)}

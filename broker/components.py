"""The broker's object graph, built in one place: every component gets what it uses in its
constructor, and nothing is wired by assigning attributes afterwards.

Kafka's KafkaServer.startup builds its managers in order and hands each its dependencies; here that
is `build`, a plain synchronous function, so the graph can be read top to bottom (and typed: every
part exists once it returns). What needs I/O (connecting to ZooKeeper, loading logs, ACLs, quotas,
credentials, starting tasks) stays in KafkaServer.startup, before and after the build. The one
cycle, the AlterPartition sender asking the replica manager whether a change is still wanted, is
closed by a callback.
"""

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from odradek.broker.acl_apis import AclApis
from odradek.broker.admin_manager import AdminManager
from odradek.broker.alter_partition_manager import AlterPartitionManager
from odradek.broker.authorizer.acl_authorizer import AclAuthorizer
from odradek.broker.authorizer.authorizer import ALLOW_ALL, Authorizer
from odradek.broker.config_apis import ConfigApis
from odradek.broker.config_manager import DynamicConfigManager
from odradek.broker.control_plane import ControlPlaneGuard
from odradek.broker.controller_channel import BrokerToControllerChannel, controller_channels
from odradek.broker.delegation_token_apis import DelegationTokenApis
from odradek.broker.dynamic_config import DynamicBrokerConfig
from odradek.broker.forwarded_apis import ForwardedApis
from odradek.broker.group.group_apis import GroupApis
from odradek.broker.group.group_coordinator import GroupConfig, GroupCoordinator
from odradek.broker.group.group_metadata_manager import GroupMetadataManager
from odradek.broker.group.offsets_topic import GROUP_METADATA_TOPIC_NAME
from odradek.broker.kafka_apis import KafkaApis
from odradek.broker.log import LogManager
from odradek.broker.log_dirs_apis import LogDirsApis
from odradek.broker.metadata_apis import MetadataApis
from odradek.broker.metadata_cache import MetadataCache
from odradek.broker.producer_id_manager import ZkProducerIdManager
from odradek.broker.quota.client_quota_manager import QuotaConfig
from odradek.broker.quota.quota_apis import QuotaApis
from odradek.broker.quota.quota_managers import QuotaManagers
from odradek.broker.quota.zk_quota_store import ZkQuotaStore
from odradek.broker.replica_manager import ReplicaManager
from odradek.broker.replication_quota import ReplicationQuota
from odradek.broker.security.credential_cache import CredentialCache, CredentialLoader
from odradek.broker.security.sasl_apis import SaslApis
from odradek.broker.security.scram_apis import ScramApis
from odradek.broker.transaction.marker_channel import TransactionMarkerChannel
from odradek.broker.transaction.marker_writer import MarkerWriter
from odradek.broker.transaction.transaction_apis import TransactionApis
from odradek.broker.transaction.transaction_coordinator import TransactionCoordinator
from odradek.broker.transaction.transaction_state_manager import (
    TRANSACTION_STATE_TOPIC_NAME,
    TransactionConfig,
    TransactionStateManager,
)
from odradek.broker.transaction.verification import TransactionVerifier
from odradek.broker.zk_client import BrokerZkClient
from odradek.common.clock import Clock
from odradek.common.config import BrokerConfig
from odradek.common.security.channel import ClientSecurity


def log_dirs(config: BrokerConfig) -> list[Path]:
    return [Path(d.strip()) for d in config.log_dirs.split(",") if d.strip()]


@dataclass(frozen=True)
class BrokerComponents:
    """Every long-lived part of a broker, as `build` made them."""

    acl_authorizer: AclAuthorizer | None
    """Set when authorizer.class.name is (ACLs from ZooKeeper); None: every request allowed."""
    authorizer: Authorizer
    """The one authorizer every handler consults (`acl_authorizer`, else ALLOW_ALL)."""
    log_manager: LogManager
    metadata_cache: MetadataCache
    replica_manager: ReplicaManager
    controller_channel: BrokerToControllerChannel
    """AlterPartition's channel to the controller."""
    forwarding_channel: BrokerToControllerChannel
    """Forwarded admin requests' channel (CreateTopics, AlterConfigs, ...)."""
    shutdown_channel: BrokerToControllerChannel
    """ControlledShutdown's channel: never queued behind the other two."""
    alter_partition_manager: AlterPartitionManager
    config_manager: DynamicConfigManager
    credential_loader: CredentialLoader
    quotas: QuotaManagers
    """Client quotas (broker/quota), loaded from ZooKeeper at start-up."""
    group_coordinator: GroupCoordinator
    marker_writer: MarkerWriter
    transaction_coordinator: TransactionCoordinator
    transaction_verifier: TransactionVerifier | None
    """With transaction.partition.verification.enable (KIP-890's verification)."""
    control_plane_guard: ControlPlaneGuard
    apis: KafkaApis
    """The dispatcher: one table from ApiKey to every handler below."""


def build(config: BrokerConfig, zk: BrokerZkClient, dynamic_config: DynamicBrokerConfig,
          credentials: CredentialCache, clock: Clock, inter_broker: ClientSecurity,
          security_to_controller: Callable[[str], ClientSecurity],
          on_fencing: Callable[[bool], None]) -> BrokerComponents:
    """The broker's graph over a started ZooKeeper client and the loaded dynamic configs (the
    logs' defaults): nothing here does I/O; KafkaServer.startup loads and starts the parts.
    `on_fencing(fenced)` runs when the registration is lost or back, before the partitions hear it."""
    acl_authorizer = None
    if config.authorizer_class_name:
        acl_authorizer = AclAuthorizer.from_config(
            config.authorizer_class_name, config.super_users, config.allow_everyone_if_no_acl_found,
            zk.current_calls, lambda: zk.session_id, clock, zk.threads)
        zk.registration_listeners.append(acl_authorizer.on_registration)
    authorizer: Authorizer = acl_authorizer or ALLOW_ALL

    log_manager = LogManager(log_dirs(config), dynamic_config.current, clock=clock)
    metadata_cache = MetadataCache(config.broker_id)
    controller_channel, forwarding_channel, shutdown_channel = controller_channels(
        zk, config.broker_id, security_for=security_to_controller)

    def isr_change_still_wanted(key: tuple[str, int], change: object) -> bool:
        return replica_manager.isr_change_still_wanted(key, change)  # the replica manager, built next

    alter_partition_manager = AlterPartitionManager(
        controller_channel, config.broker_id, lambda: zk.broker_epoch, isr_change_still_wanted,
        config.controller_socket_timeout_ms)
    replica_manager = ReplicaManager(
        config, log_manager, metadata_cache, zk, clock=clock,
        # the rates are dynamic broker configs, read at every check
        leader_quota=ReplicationQuota(lambda: int(dynamic_config.current.leader_replication_throttled_rate)),
        follower_quota=ReplicationQuota(lambda: int(dynamic_config.current.follower_replication_throttled_rate)),
        alter_partition_manager=alter_partition_manager, inter_broker_security=inter_broker)
    zk.fencing_listeners.append(on_fencing)
    zk.fencing_listeners.append(replica_manager.set_fenced)

    config_manager = DynamicConfigManager(zk, dynamic_config, log_manager, clock=clock)
    credential_loader = CredentialLoader(zk, credentials)
    config_manager.entity_listeners.append(credential_loader.on_entity_changes)
    quota_store = ZkQuotaStore(zk)
    quotas = QuotaManagers(quota_store, QuotaConfig(config.quota_window_num,
                                                    config.quota_window_size_seconds * 1000), clock)
    config_manager.entity_listeners.append(quotas.on_entity_changes)

    admin = AdminManager(config, metadata_cache, zk, current_config=lambda: dynamic_config.current)
    metadata_apis = MetadataApis(config, metadata_cache, zk, admin, dynamic_config, authorizer=authorizer,
                                 quotas=quotas)
    group_coordinator = _group_coordinator(config, metadata_cache, replica_manager, clock)
    producer_id_manager = ZkProducerIdManager(config.broker_id, zk)
    marker_writer = MarkerWriter(replica_manager, config.request_timeout_ms, clock=clock)
    transaction_coordinator = _transaction_coordinator(config, metadata_cache, replica_manager, marker_writer,
                                                       producer_id_manager, inter_broker, clock)
    transaction_apis = TransactionApis(
        transaction_coordinator, marker_writer, metadata_cache, replica_manager,
        group_coordinator.manager.partition_for, admin, authorizer=authorizer)
    verifier = None
    if config.transaction_partition_verification_enable:
        verifier = TransactionVerifier(config.broker_id, replica_manager, metadata_cache, transaction_coordinator,
                                       config.request_timeout_ms, listener=config.inter_broker_listener,
                                       security=inter_broker)
    group_apis = GroupApis(
        group_coordinator, metadata_cache, admin, config.offsets_topic_num_partitions,
        config.offsets_topic_replication_factor, authorizer=authorizer,
        find_transaction_coordinator=transaction_apis.find_coordinator,
        verify_txn_offsets=verifier.verify_offsets if verifier is not None else None)
    guard = ControlPlaneGuard(config.control_plane_listener_name, lambda: zk.broker_epoch, zk.get_controller_epoch)
    zk.registration_listeners.append(guard.registered)
    apis = KafkaApis(
        config, replica_manager, metadata_apis,
        [ConfigApis(dynamic_config, metadata_cache, zk, authorizer=authorizer), group_apis, transaction_apis,
         ForwardedApis(forwarding_channel, authorizer=authorizer), LogDirsApis(log_manager, authorizer=authorizer),
         AclApis(acl_authorizer), SaslApis(), ScramApis(zk), QuotaApis(quota_store),
         DelegationTokenApis(lambda: authorizer)],
        producer_id_manager, guard, authorizer=authorizer, quotas=quotas, transaction_verifier=verifier,
        transaction_apis=transaction_apis, clock=clock)
    return BrokerComponents(
        acl_authorizer=acl_authorizer, authorizer=authorizer, log_manager=log_manager, metadata_cache=metadata_cache,
        replica_manager=replica_manager, controller_channel=controller_channel,
        forwarding_channel=forwarding_channel, shutdown_channel=shutdown_channel,
        alter_partition_manager=alter_partition_manager, config_manager=config_manager,
        credential_loader=credential_loader, quotas=quotas, group_coordinator=group_coordinator,
        marker_writer=marker_writer, transaction_coordinator=transaction_coordinator, transaction_verifier=verifier,
        control_plane_guard=guard, apis=apis)


def _group_coordinator(c: BrokerConfig, cache: MetadataCache, replica_manager: ReplicaManager,
                       clock: Clock) -> GroupCoordinator:
    def partition_count() -> int:
        return cache.partition_count(GROUP_METADATA_TOPIC_NAME) or c.offsets_topic_num_partitions

    manager = GroupMetadataManager(c.broker_id, replica_manager, partition_count, c.offsets_commit_timeout_ms,
                                   clock=clock)
    return GroupCoordinator(manager, GroupConfig(
        min_session_timeout_ms=c.group_min_session_timeout_ms,
        max_session_timeout_ms=c.group_max_session_timeout_ms,
        initial_rebalance_delay_ms=c.group_initial_rebalance_delay_ms,
        offset_metadata_max_bytes=c.offset_metadata_max_bytes,
        offsets_retention_ms=c.offsets_retention_minutes * 60_000,
        offsets_retention_check_interval_ms=c.offsets_retention_check_interval_ms,
        max_size=c.group_max_size,
    ), clock_ms=clock)


def _transaction_coordinator(c: BrokerConfig, cache: MetadataCache, replica_manager: ReplicaManager,
                             marker_writer: MarkerWriter, producer_id_manager: ZkProducerIdManager,
                             inter_broker: ClientSecurity, clock: Clock) -> TransactionCoordinator:
    tconfig = TransactionConfig(
        num_partitions=c.transaction_state_log_num_partitions,
        replication_factor=c.transaction_state_log_replication_factor,
        min_isr=c.transaction_state_log_min_isr,
        segment_bytes=c.transaction_state_log_segment_bytes,
        max_timeout_ms=c.transaction_max_timeout_ms,
        abort_timed_out_interval_ms=c.transaction_abort_timed_out_transaction_cleanup_interval_ms,
        id_expiration_ms=c.transactional_id_expiration_ms,
        remove_expired_interval_ms=c.transaction_remove_expired_transaction_cleanup_interval_ms,
        request_timeout_ms=c.request_timeout_ms,
        partition_verification=c.transaction_partition_verification_enable,
    )

    def partition_count() -> int:
        return cache.partition_count(TRANSACTION_STATE_TOPIC_NAME) or tconfig.num_partitions

    state = TransactionStateManager(replica_manager, partition_count, tconfig, clock=clock)
    channel = TransactionMarkerChannel(c.broker_id, cache, marker_writer, c.request_timeout_ms,
                                       listener=c.inter_broker_listener, security=inter_broker)
    return TransactionCoordinator(state, producer_id_manager, channel, tconfig, clock=clock)

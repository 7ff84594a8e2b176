"""ControllerApis: the broker→controller requests the active controller serves on its listener.

Contract for brokers (the replica manager and the shutdown path):

- Find the controller: read `/controller` (zk_data.decode_controller); its `endpoint` (host, port)
  is where the active controller listens. No endpoint or no znode → no controller yet: retry later.
  Connect with common.client.NetworkClient and send with common.wire framing.
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

Both are answered only once the resulting ZooKeeper writes succeeded; requests it triggers
(LeaderAndIsr, UpdateMetadata) are queued before the answer is sent.
"""

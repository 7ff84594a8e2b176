"""Transactions (Kafka's kafka.coordinator.transaction): the coordinator, its log
`__transaction_state`, the marker channel to partition leaders, and the transaction APIs."""

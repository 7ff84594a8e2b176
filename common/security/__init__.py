"""What brokers, controllers and tools share about security: SSL contexts, principals, the SASL client."""

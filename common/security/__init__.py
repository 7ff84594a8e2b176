"""What brokers, controllers and tools share about security: TLS contexts from Kafka's `ssl.*`
keys (`ssl_factory`), certificate reloading (`reload`), principals and Kafka's
`ssl.principal.mapping.rules` (`principal`), the settings of a listener and of an outgoing
connection (`channel`, `listeners`), and the SASL client (`scram`, `jaas`, `sasl_client`)."""

"""The broker's side of security: the SASL authenticator, its mechanisms and the SCRAM credentials."""

"""The failures of a SASL exchange, and what a client is told about them."""

from __future__ import annotations


class SaslAuthenticationError(Exception):
    """The client failed to authenticate. `str(e)` is the reason for the broker's log (never a
    secret); the client only ever sees `client_message` (the same for every credential failure,
    so an answer never tells whether a user exists)."""


class IllegalSaslStateError(Exception):
    """A message that the exchange does not expect now."""


def client_message(mechanism: str, reauthenticating: bool = False) -> str:
    """Kafka's SaslServerAuthenticator message for invalid credentials."""
    what = "re-authentication" if reauthenticating else "authentication"
    return f"Authentication failed during {what} due to invalid credentials with SASL mechanism {mechanism}"

"""The PLAIN server exchange (RFC 4616), sans I/O, with Kafka's PlainLoginModule users.

Users come from a JAAS config's `user_<name>="<password>"` options, as Kafka's
PlainServerCallbackHandler reads them. The password is compared with hmac.compare_digest against
the stored one, or against a decoy for an unknown user, so both fail alike.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping

from .errors import IllegalSaslStateError, SaslAuthenticationError

MAX_TOKEN_BYTES = 4096


def users_from_jaas_options(options: Mapping[str, str]) -> dict[str, str]:
    """PlainLoginModule's `user_<name>` options → {name: password}."""
    return {key[5:]: value for key, value in options.items() if key.startswith("user_") and len(key) > 5}


class PlainServer:
    def __init__(self, users: Mapping[str, str]):
        self._users = users
        self.username: str | None = None
        self._done = False

    @property
    def complete(self) -> bool:
        return self.username is not None

    def evaluate(self, token: bytes) -> bytes:
        if self._done:
            raise IllegalSaslStateError("PLAIN exchange already over")
        self._done = True
        if len(token) > MAX_TOKEN_BYTES:
            raise SaslAuthenticationError(f"PLAIN token of {len(token)} bytes (at most {MAX_TOKEN_BYTES})")
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise SaslAuthenticationError("PLAIN token is not authzid NUL authcid NUL passwd")
        try:
            authzid, username, password = (p.decode("utf-8") for p in parts)
        except UnicodeDecodeError:
            raise SaslAuthenticationError("PLAIN token is not UTF-8") from None
        if not username or not password:
            raise SaslAuthenticationError("empty username or password")
        expected = self._users.get(username)
        # compare even for an unknown user, so the time taken does not tell
        ok = hmac.compare_digest(password.encode(), (expected if expected is not None else "\0" + password).encode())
        if expected is None or not ok:
            raise SaslAuthenticationError("invalid username or password")
        if authzid and authzid != username:
            raise SaslAuthenticationError("authorization id differs from the username")
        self.username = username
        return b""

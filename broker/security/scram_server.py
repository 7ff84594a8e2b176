"""The SCRAM-SHA-256/512 server exchange (RFC 5802, RFC 7677), sans I/O: tokens in, tokens out.

Kafka's ScramSaslServer, with one difference it does not have: an unknown user (or one without a
credential for this mechanism, or with one below 4096 iterations) gets a server-first message with
a salt derived from the username and a secret shared by the cluster's brokers (credential_cache),
and fails only at the proof, in the same words as a wrong password (RFC 5802 section 9), so no
answer, nor two brokers' answers compared, tells whether a user exists.
The proof is checked with hmac.compare_digest; the nonce of the final message must end with the
one this exchange made (Kafka's rule), so a proof replayed from another exchange fails.
"""

from __future__ import annotations

import base64
import hmac
from collections.abc import Callable

from odradek.common.security import scram
from odradek.common.security.scram import ScramCredential, ScramFormatError, ScramMechanism

from .errors import IllegalSaslStateError, SaslAuthenticationError

CredentialLookup = Callable[[str, str], "ScramCredential | None"]
"""(username, mechanism name) → the stored credential, or None."""

_FIRST, _FINAL, _COMPLETE, _FAILED = "first", "final", "complete", "failed"


class ScramServer:
    def __init__(self, mechanism: ScramMechanism, lookup: CredentialLookup, secret: bytes,
                 nonce: Callable[[], str] = scram.new_nonce):
        self.mechanism = mechanism
        self._lookup = lookup
        self._secret = secret
        self._nonce = nonce
        self._state = _FIRST
        self.username: str | None = None
        """The authenticated user once complete (the authorization id)."""
        self._credential: ScramCredential | None = None
        self._refusal: str | None = None
        """Why this exchange will fail at the proof, decided at the first message."""
        self._gs2_header = ""
        self._client_first_bare = ""
        self._server_first = ""
        self._full_nonce = ""

    @property
    def complete(self) -> bool:
        return self._state == _COMPLETE

    def evaluate(self, token: bytes) -> bytes:
        """The answer to the client's next token; SaslAuthenticationError when it fails."""
        state = self._state
        self._state = _FAILED
        try:
            if state == _FIRST:
                out = self._client_first(token)
                self._state = _FINAL
                return out
            if state == _FINAL:
                out = self._client_final(token)
                self._state = _COMPLETE
                return out
        except ScramFormatError as e:
            raise SaslAuthenticationError(f"invalid {self.mechanism.name} message: {e}") from None
        raise IllegalSaslStateError(f"{self.mechanism.name} exchange already {state}")

    def _client_first(self, token: bytes) -> bytes:
        text = scram.decode_message(token)
        # gs2-header: "n," [ "a=" authzid ] "," ; channel binding is not offered here
        flag, sep, rest = text.partition(",")
        if not sep or flag != "n":
            raise ScramFormatError("channel binding is not supported (gs2 flag must be 'n')")
        authzid_part, sep, bare = rest.partition(",")
        if not sep:
            raise ScramFormatError("truncated client-first message")
        attrs = scram.attributes(bare)
        if len(attrs) < 2 or attrs[0][0] != "n" or attrs[1][0] != "r":
            raise ScramFormatError("client-first message must start n=<user>,r=<nonce>")
        username = scram.decode_saslname(attrs[0][1])
        client_nonce = attrs[1][1]
        if not username or not scram.valid_nonce(client_nonce):
            raise ScramFormatError("empty username or invalid nonce")
        extensions = dict(attrs[2:])
        if authzid_part and (not authzid_part.startswith("a=") or scram.decode_saslname(authzid_part[2:]) != username):
            self._refusal = "authorization id differs from the username"
        if extensions.get("tokenauth", "false").lower() == "true":
            self._refusal = "delegation tokens are not supported"
        self._gs2_header = f"{flag},{authzid_part},"
        self._client_first_bare = bare
        self.username = username
        credential = self._lookup(username, self.mechanism.name)
        if credential is None:
            self._refusal = self._refusal or "unknown user or no credential for this mechanism"
        elif credential.iterations < scram.MIN_ITERATIONS:
            self._refusal = self._refusal or (
                f"stored credential has {credential.iterations} iterations, below {scram.MIN_ITERATIONS}")
            credential = None
        self._credential = credential
        if credential is not None:
            salt, iterations = credential.salt, credential.iterations
        else:  # a stable decoy: the same answer every time for this name, as for a real user
            salt = hmac.new(self._secret, username.encode(), "sha256").digest()
            iterations = scram.MIN_ITERATIONS
        self._full_nonce = client_nonce + self._nonce()
        self._server_first = f"r={self._full_nonce},s={base64.b64encode(salt).decode()},i={iterations}"
        return self._server_first.encode()

    def _client_final(self, token: bytes) -> bytes:
        text = scram.decode_message(token)
        without_proof, sep, proof_b64 = text.rpartition(",p=")
        if not sep:
            raise ScramFormatError("client-final message without a proof")
        attrs = scram.attributes(without_proof)
        if len(attrs) < 2 or attrs[0][0] != "c" or attrs[1][0] != "r":
            raise ScramFormatError("client-final message must start c=<binding>,r=<nonce>")
        if scram.b64decode(attrs[0][1]) != self._gs2_header.encode():
            raise SaslAuthenticationError("channel binding does not match the gs2 header")
        # Kafka's check (ScramSaslServer): the nonce ends with this exchange's, whose server part is
        # fresh, so a proof from another exchange never passes. librdkafka 2.0.x repeats its own
        # nonce in front (c-nonce + c-nonce + s-nonce), which Kafka accepts this way.
        if not attrs[1][1].endswith(self._full_nonce):
            raise SaslAuthenticationError("nonce of the final message is not this exchange's")
        proof = scram.b64decode(proof_b64)
        if self._refusal is not None or self._credential is None:
            raise SaslAuthenticationError(self._refusal or "no credential")
        credential = self._credential
        mech = self.mechanism
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        signature = mech.hmac(credential.stored_key, auth_message)
        if len(proof) != len(signature):
            raise SaslAuthenticationError("invalid proof")
        client_key = scram.xor(proof, signature)
        if not hmac.compare_digest(mech.h(client_key), credential.stored_key):
            raise SaslAuthenticationError("invalid proof (wrong password)")
        server_signature = mech.hmac(credential.server_key, auth_message)
        return b"v=" + base64.b64encode(server_signature)

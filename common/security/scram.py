"""SCRAM (RFC 5802, RFC 7677) primitives and Kafka's way of storing SCRAM credentials.

Shared by the broker's SCRAM server, the SASL client and the tools that create credentials
(`odradek users`, AlterUserScramCredentials): one place computes salted passwords, keys and
proofs, and reads and writes Kafka's credential string
(`salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=<n>`, ScramCredentialUtils) and the
user znode name (Kafka's Sanitizer: URL-encoding). Only hashlib, hmac and secrets do cryptography.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
import urllib.parse
from dataclasses import dataclass

MIN_ITERATIONS = 4096
"""Kafka's ScramMechanism minimum for both SHA-256 and SHA-512: fewer is refused everywhere."""
MAX_ITERATIONS = 16384
"""The most AlterUserScramCredentials accepts (Kafka's ZkAdminManager)."""
SALT_BYTES = 32


@dataclass(frozen=True)
class ScramMechanism:
    name: str
    hash_name: str
    type: int
    """The int8 of DescribeUserScramCredentials / AlterUserScramCredentials (0 is UNKNOWN)."""

    @property
    def digest_size(self) -> int:
        return int(hashlib.new(self.hash_name).digest_size)

    def h(self, data: bytes) -> bytes:
        return hashlib.new(self.hash_name, data).digest()

    def hmac(self, key: bytes, data: bytes) -> bytes:
        return hmac.new(key, data, self.hash_name).digest()

    def salted_password(self, password: str, salt: bytes, iterations: int) -> bytes:
        return hashlib.pbkdf2_hmac(self.hash_name, password.encode(), salt, iterations)

    def credential(self, salted_password: bytes, salt: bytes, iterations: int) -> ScramCredential:
        """What the server stores (Kafka's ScramFormatter.generateCredential)."""
        client_key = self.hmac(salted_password, b"Client Key")
        server_key = self.hmac(salted_password, b"Server Key")
        return ScramCredential(salt, self.h(client_key), server_key, iterations)

    def credential_from_password(self, password: str, iterations: int, salt: bytes | None = None) -> ScramCredential:
        salt = secrets.token_bytes(SALT_BYTES) if salt is None else salt
        return self.credential(self.salted_password(password, salt, iterations), salt, iterations)


SCRAM_SHA_256 = ScramMechanism("SCRAM-SHA-256", "sha256", 1)
SCRAM_SHA_512 = ScramMechanism("SCRAM-SHA-512", "sha512", 2)
MECHANISMS: dict[str, ScramMechanism] = {m.name: m for m in (SCRAM_SHA_256, SCRAM_SHA_512)}
BY_TYPE: dict[int, ScramMechanism] = {m.type: m for m in MECHANISMS.values()}


@dataclass(frozen=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def __repr__(self) -> str:  # keys never reach a log line through a repr
        return f"ScramCredential(iterations={self.iterations})"


class ScramFormatError(ValueError):
    """A SCRAM message (or stored credential) that does not follow RFC 5802 / Kafka's format."""


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def b64decode(text: str) -> bytes:
    """Strict base64 (ValueError on anything else)."""
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError) as e:
        raise ScramFormatError("not base64") from e


def credential_to_string(c: ScramCredential) -> str:
    """Kafka's ScramCredentialUtils.credentialToString."""
    return (f"salt={_b64(c.salt)},stored_key={_b64(c.stored_key)},server_key={_b64(c.server_key)},"
            f"iterations={c.iterations}")


def credential_from_string(text: str) -> ScramCredential:
    """Kafka's ScramCredentialUtils.credentialFromString: exactly the four keys; ValueError otherwise
    (the message never repeats the text: it holds key material)."""
    props: dict[str, str] = {}
    for token in text.split(","):
        key, sep, value = token.partition("=")
        if not sep or not key:
            raise ValueError("SCRAM credential is not key=value,...")
        props[key] = value
    if set(props) != {"salt", "stored_key", "server_key", "iterations"}:
        raise ValueError("SCRAM credential needs exactly salt, stored_key, server_key and iterations")
    try:
        iterations = int(props["iterations"])
    except ValueError:
        raise ValueError("SCRAM credential iterations is not a number") from None
    return ScramCredential(b64decode(props["salt"]), b64decode(props["stored_key"]),
                           b64decode(props["server_key"]), iterations)


def sanitize(user: str) -> str:
    """Kafka's Sanitizer.sanitize: a user (principal) name as a znode name (URL-encoded, UTF-8)."""
    return urllib.parse.quote(user, safe="-._").replace("~", "%7E")


def desanitize(name: str) -> str:
    return urllib.parse.unquote(name)


def xor(a: bytes, b: bytes) -> bytes:
    return bytes(x ^ y for x, y in zip(a, b, strict=True))


# --- RFC 5802 attribute syntax --------------------------------------------------------------------

MAX_MESSAGE_BYTES = 4096
"""Longest SCRAM message either side accepts: a username, a nonce and a proof fit many times."""


def encode_saslname(username: str) -> str:
    return username.replace("=", "=3D").replace(",", "=2C")


def decode_saslname(value: str) -> str:
    """RFC 5802 saslname: "=" only as =2C or =3D."""
    out, i = [], 0
    while i < len(value):
        ch = value[i]
        if ch == "=":
            code = value[i:i + 3]
            if code == "=2C":
                out.append(",")
            elif code == "=3D":
                out.append("=")
            else:
                raise ScramFormatError("bad escape in username")
            i += 3
            continue
        if ch == ",":
            raise ScramFormatError("bad username")
        out.append(ch)
        i += 1
    return "".join(out)


def valid_nonce(nonce: str) -> bool:
    """RFC 5802 printable: ASCII 0x21-0x7E except ','."""
    return bool(nonce) and all(0x21 <= ord(c) <= 0x7E and c != "," for c in nonce)


def new_nonce() -> str:
    return secrets.token_urlsafe(24)


def decode_message(data: bytes) -> str:
    if len(data) > MAX_MESSAGE_BYTES:
        raise ScramFormatError(f"SCRAM message of {len(data)} bytes (at most {MAX_MESSAGE_BYTES})")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ScramFormatError("SCRAM message is not UTF-8") from None


def attributes(text: str) -> list[tuple[str, str]]:
    """`a=b,c=d` → [(a, b), (c, d)]; each attribute name one letter (RFC 5802) or an extension."""
    out = []
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if not sep or not key:
            raise ScramFormatError("SCRAM attribute is not name=value")
        out.append((key, value))
    return out

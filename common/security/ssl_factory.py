"""SSLContexts from Kafka's `ssl.*` keys (Kafka's SslFactory / DefaultSslEngineFactory), PEM only.

The keys are Kafka's (`ssl.keystore.location`, `ssl.keystore.certificate.chain` + `ssl.keystore.key`,
`ssl.key.password`, `ssl.truststore.location` / `ssl.truststore.certificates`,
`ssl.enabled.protocols`, `ssl.cipher.suites`, `ssl.client.auth`,
`ssl.endpoint.identification.algorithm`), read through a listener's `listener.name.<name>.`
prefix by the caller (common/config). Key material stays out of every message: errors name the
key and the file, never the contents or the password.
"""

from __future__ import annotations

import os
import ssl
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field

from odradek.common.config_def import ConfigException

TLS_PROTOCOLS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
"""What `ssl.enabled.protocols` may name: TLS 1.0 and 1.1 are refused, as Kafka 3.x does by default."""
CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}
TLS_SECURITY_PROTOCOLS = frozenset({"SSL", "SASL_SSL"})
SECURITY_PROTOCOLS = frozenset({"PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"})

SSL_KEYS = (
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.certificate.chain", "ssl.keystore.key",
    "ssl.keystore.password", "ssl.key.password", "ssl.truststore.type", "ssl.truststore.location",
    "ssl.truststore.certificates", "ssl.truststore.password", "ssl.enabled.protocols", "ssl.protocol",
    "ssl.cipher.suites", "ssl.client.auth", "ssl.endpoint.identification.algorithm",
    "ssl.principal.mapping.rules",
)
"""The keys an SslConfig reads (per listener, with Kafka's prefix)."""


@dataclass(frozen=True)
class SslConfig:
    """One listener's (or one client's) TLS settings, as plain data."""

    keystore_location: str | None = None
    keystore_certificate_chain: str | None = field(default=None, repr=False)
    keystore_key: str | None = field(default=None, repr=False)
    key_password: str | None = field(default=None, repr=False)
    truststore_location: str | None = None
    truststore_certificates: str | None = field(default=None, repr=False)
    enabled_protocols: tuple[str, ...] = ("TLSv1.2", "TLSv1.3")
    cipher_suites: tuple[str, ...] = ()
    client_auth: str = "none"
    endpoint_identification_algorithm: str = "https"
    principal_mapping_rules: str = "DEFAULT"

    @classmethod
    def from_values(cls, values: Mapping[str, object]) -> SslConfig:
        """From Kafka's keys (strings, or lists for list keys); ConfigException on a bad value."""

        def text(key: str) -> str | None:
            value = values.get(key)
            if value is None:
                return None
            if isinstance(value, (list, tuple)):
                return ",".join(str(v) for v in value)
            return str(value)

        def items(key: str) -> tuple[str, ...] | None:
            value = text(key)
            return None if value is None else tuple(v.strip() for v in value.split(",") if v.strip())

        for store_type in ("ssl.keystore.type", "ssl.truststore.type"):
            kind = text(store_type)
            if kind is not None and kind.strip() and kind.strip().upper() != "PEM":
                raise ConfigException(store_type, kind, "only PEM key and trust stores are supported")
        chain, pem_key = text("ssl.keystore.certificate.chain"), text("ssl.keystore.key")
        if bool(chain) != bool(pem_key):
            raise ConfigException("ssl.keystore.key", None,
                                  "ssl.keystore.certificate.chain and ssl.keystore.key go together")
        location = text("ssl.keystore.location") or None
        if location and chain:
            raise ConfigException("ssl.keystore.location", location,
                                  "set either ssl.keystore.location or ssl.keystore.certificate.chain, not both")
        trust_location = text("ssl.truststore.location") or None
        trust_certs = text("ssl.truststore.certificates") or None
        if trust_location and trust_certs:
            raise ConfigException("ssl.truststore.location", trust_location,
                                  "set either ssl.truststore.location or ssl.truststore.certificates, not both")
        protocols = items("ssl.enabled.protocols") or ("TLSv1.2", "TLSv1.3")
        for p in protocols:
            if p not in TLS_PROTOCOLS:
                raise ConfigException("ssl.enabled.protocols", ",".join(protocols),
                                      f"{p} is not supported (TLSv1.2, TLSv1.3)")
        client_auth = (text("ssl.client.auth") or "none").strip().lower()
        if client_auth not in CLIENT_AUTH:
            raise ConfigException("ssl.client.auth", client_auth, "must be one of none, requested, required")
        raw_algorithm = text("ssl.endpoint.identification.algorithm")
        algorithm = "https" if raw_algorithm is None else raw_algorithm.strip().lower()
        if algorithm == "none":  # librdkafka's spelling of "no host name check"
            algorithm = ""
        if algorithm not in ("https", ""):
            raise ConfigException("ssl.endpoint.identification.algorithm", algorithm, "must be https or empty")
        return cls(
            keystore_location=location,
            keystore_certificate_chain=chain or None,
            keystore_key=pem_key or None,
            key_password=text("ssl.key.password") or None,
            truststore_location=trust_location,
            truststore_certificates=trust_certs,
            enabled_protocols=protocols,
            cipher_suites=items("ssl.cipher.suites") or (),
            client_auth=client_auth,
            endpoint_identification_algorithm=algorithm,
            principal_mapping_rules=text("ssl.principal.mapping.rules") or "DEFAULT",
        )

    @property
    def has_keystore(self) -> bool:
        return bool(self.keystore_location or self.keystore_certificate_chain)

    def files(self) -> tuple[str, ...]:
        """The files this configuration reads (watched for certificate reloads)."""
        return tuple(f for f in (self.keystore_location, self.truststore_location) if f)


def server_context(config: SslConfig) -> ssl.SSLContext:
    """A listener's context: its key and certificate chain, client certificates per `ssl.client.auth`."""
    if not config.has_keystore:
        raise ConfigException("ssl.keystore.location", None, "a TLS listener needs a key store")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _common(context, config)
    context.verify_mode = CLIENT_AUTH[config.client_auth]
    if config.client_auth != "none":
        _load_trust(context, config, ssl.Purpose.CLIENT_AUTH)
    return context


def client_context(config: SslConfig) -> ssl.SSLContext:
    """An outgoing connection's context: the server's certificate is always verified against the
    trust store (the system's when none is given); its host name only with
    `ssl.endpoint.identification.algorithm=https`. A key store makes it present a certificate (mTLS)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _common(context, config)
    context.check_hostname = config.endpoint_identification_algorithm == "https"
    context.verify_mode = ssl.CERT_REQUIRED
    _load_trust(context, config, ssl.Purpose.SERVER_AUTH)
    return context


def _common(context: ssl.SSLContext, config: SslConfig) -> None:
    versions = [TLS_PROTOCOLS[p] for p in config.enabled_protocols]
    context.minimum_version = min(versions)
    context.maximum_version = max(versions)
    context.options |= ssl.OP_NO_COMPRESSION
    if config.cipher_suites:
        names = [openssl_cipher_name(c) for c in config.cipher_suites]
        tls12 = [n for n in names if n is not None]
        if tls12:
            try:
                context.set_ciphers(":".join(tls12))
            except ssl.SSLError:
                raise ConfigException("ssl.cipher.suites", ",".join(config.cipher_suites),
                                      "none of these cipher suites is available") from None
    if config.has_keystore:
        _load_keystore(context, config)


def openssl_cipher_name(suite: str) -> str | None:
    """Kafka (JSSE, IANA) cipher suite name → OpenSSL's, e.g. TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384
    → ECDHE-RSA-AES256-GCM-SHA384; None for a TLS 1.3 suite (OpenSSL enables those itself).
    OpenSSL names pass through."""
    if not suite.startswith("TLS_"):
        return suite
    if "_WITH_" not in suite:
        return None
    kx, cipher = suite[4:].split("_WITH_", 1)
    kx = kx.replace("_", "-")
    if kx == "RSA":
        kx = ""
    cipher = cipher.replace("AES_128", "AES128").replace("AES_256", "AES256").replace("_", "-")
    if cipher.endswith("-CBC-SHA"):
        cipher = cipher[: -len("-CBC-SHA")] + "-SHA"
    elif "-CBC-" in cipher:
        cipher = cipher.replace("-CBC-", "-")
    if cipher.startswith("CHACHA20-POLY1305"):
        cipher = "CHACHA20-POLY1305"
    return f"{kx}-{cipher}" if kx else cipher


def _load_keystore(context: ssl.SSLContext, config: SslConfig) -> None:
    password = config.key_password
    try:
        if config.keystore_location:
            context.load_cert_chain(config.keystore_location, password=password)
            return
        assert config.keystore_certificate_chain is not None and config.keystore_key is not None
        # ssl loads keys from files only: a private file, removed as soon as it is read
        fd, path = tempfile.mkstemp(prefix="odradek-key-", suffix=".pem")
        try:
            with os.fdopen(fd, "w") as f:
                f.write(config.keystore_key.strip() + "\n" + config.keystore_certificate_chain.strip() + "\n")
            context.load_cert_chain(path, password=password)
        finally:
            os.unlink(path)
    except (ssl.SSLError, OSError, ValueError) as e:
        where = config.keystore_location or "ssl.keystore.certificate.chain/ssl.keystore.key"
        raise ConfigException("ssl.keystore.location", config.keystore_location,
                              f"cannot load the key store {where}: {_reason(e)}") from None


def _load_trust(context: ssl.SSLContext, config: SslConfig, purpose: ssl.Purpose) -> None:
    try:
        if config.truststore_location:
            context.load_verify_locations(cafile=config.truststore_location)
        elif config.truststore_certificates:
            context.load_verify_locations(cadata=config.truststore_certificates)
        else:
            context.load_default_certs(purpose)
    except (ssl.SSLError, OSError, ValueError) as e:
        raise ConfigException("ssl.truststore.location", config.truststore_location,
                              f"cannot load the trust store: {_reason(e)}") from None


def _reason(e: Exception) -> str:
    """An error's reason without file contents (OpenSSL's reason, or the OS error)."""
    if isinstance(e, ssl.SSLError):
        return str(e.reason or e.__class__.__name__)
    if isinstance(e, OSError):
        return e.strerror or e.__class__.__name__
    return e.__class__.__name__

"""How a process proves who it is to ZooKeeper and which ACLs its znodes get (Kafka's
`zookeeper.set.acl` and `zookeeper.ssl.*`).

With `zookeeper.set.acl=true` every znode created gets Kafka's default ACLs (ZkData.defaultAcls):
all permissions for its creator's identity and read for everyone, except under the sensitive
roots (SCRAM credentials in `/config/users`, broker configs with passwords in `/config/brokers`,
delegation tokens), which the world cannot read at all. The identity is a ZooKeeper `digest`
(user:password, the `addauth digest` scheme that every ZooKeeper server has without any server
configuration), taken from the `Client` section of a JAAS file as Kafka users already write one
(`java.security.auth.login.config`), or, on TLS, the client certificate (ZooKeeper's x509 scheme).
Every process of a cluster must use the same digest: a znode is writable only by whoever
created it. Znodes that already exist keep their ACLs (Kafka's zookeeper-security-migration,
which rewrites them, is not here).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kazoo.security import ACL, CREATOR_ALL_ACL, OPEN_ACL_UNSAFE, READ_ACL_UNSAFE

from .config import ZkClientConfig, load_properties
from .config_def import ConfigException
from .security import jaas

SCRAM_DECOY_SECRET_PATH = "/scram_decoy_secret"
"""Not Kafka's: the key of the SCRAM decoy salts for unknown users (broker/security/credential_cache)."""
SENSITIVE_ROOT_PATHS = ("/config/users", "/config/brokers", "/delegation_token", SCRAM_DECOY_SECRET_PATH)
"""Kafka's ZkData.SensitiveRootPaths, and our decoy key (whoever reads it can tell made-up users'
salts from real ones): no world read below them."""
OPEN_PATHS = ("/consumers",)
"""The old consumers' path stays writable by everyone, as in Kafka."""
DEFAULT_JAAS_SECTION = "Client"
"""ZooKeeper's default login context name (`zookeeper.sasl.clientconfig`)."""


class ZkSecurityError(ValueError):
    """A bad ZooKeeper security setting (the message never quotes a password)."""


def is_sensitive(path: str) -> bool:
    """`path` (relative to the chroot) holds secrets: its znodes get no world read."""
    return any(path == root or path.startswith(root + "/") for root in SENSITIVE_ROOT_PATHS)


def default_acls(set_acl: bool, path: str) -> list[ACL]:
    """Kafka's ZkData.defaultAcls: creator-all + world-read (no world read when sensitive), or
    open to everyone without `zookeeper.set.acl`."""
    if not set_acl or path in OPEN_PATHS:
        return list(OPEN_ACL_UNSAFE)
    return list(CREATOR_ALL_ACL) + ([] if is_sensitive(path) else list(READ_ACL_UNSAFE))


@dataclass(frozen=True)
class ZkSecurity:
    """A process's ZooKeeper client security; the default is Kafka's: plaintext, no identity, open ACLs."""

    set_acl: bool = False
    digest: tuple[str, str] | None = field(default=None, repr=False)
    """(user, password) for ZooKeeper's digest scheme."""
    ssl: bool = False
    keystore: str | None = None
    """PEM file with the private key and the certificate chain (ZooKeeper's x509 identity)."""
    keystore_password: str | None = field(default=None, repr=False)
    truststore: str | None = None
    """PEM file of the CA certificates the server's certificate must chain to."""
    check_hostname: bool = True
    """`zookeeper.ssl.endpoint.identification.algorithm=HTTPS` (Kafka's default); "" turns it off."""

    def __post_init__(self) -> None:
        if self.set_acl and self.digest is None and not (self.ssl and self.keystore):
            raise ZkSecurityError(
                "zookeeper.set.acl=true needs an identity: a digest user in the JAAS file's Client section "
                "(java.security.auth.login.config) or a TLS client certificate (zookeeper.ssl.keystore.location)")

    def acls(self, path: str) -> list[ACL]:
        return default_acls(self.set_acl, path)

    def client_kwargs(self) -> dict[str, Any]:
        """KazooClient's keyword arguments for the identity and TLS."""
        kwargs: dict[str, Any] = {}
        if self.digest is not None:
            kwargs["auth_data"] = [("digest", f"{self.digest[0]}:{self.digest[1]}")]
        if self.ssl:
            kwargs.update(use_ssl=True, verify_certs=True, check_hostname=self.check_hostname, ca=self.truststore)
            if self.keystore:
                kwargs.update(certfile=self.keystore, keyfile=self.keystore, keyfile_password=self.keystore_password)
        return kwargs


NO_SECURITY = ZkSecurity()


def jaas_section(text: str, section: str) -> dict[str, str]:
    """The options of the login module in `section { Module flag k="v" ...; };` of a JAAS file."""
    pos = 0
    while pos < len(text):
        name_start = _skip_space_and_comments(text, pos)
        brace = text.find("{", name_start)
        if brace < 0:
            break
        name = text[name_start:brace].strip()
        end = _closing_brace(text, brace)
        if name == section:
            body = text[brace + 1:end].strip()
            try:
                return jaas.parse(body).options
            except jaas.JaasConfigError as e:
                raise ZkSecurityError(f"JAAS section {section}: {e}") from None
        pos = end + 1
        while pos < len(text) and text[pos] in " \t\r\n;":
            pos += 1
    raise ZkSecurityError(f"JAAS file has no {section} section")


def _skip_space_and_comments(text: str, pos: int) -> int:
    while pos < len(text):
        if text[pos].isspace():
            pos += 1
        elif text.startswith("//", pos):
            nl = text.find("\n", pos)
            pos = len(text) if nl < 0 else nl + 1
        elif text.startswith("/*", pos):
            close = text.find("*/", pos + 2)
            pos = len(text) if close < 0 else close + 2
        else:
            break
    return pos


def _closing_brace(text: str, brace: int) -> int:
    quoted = False
    i = brace + 1
    while i < len(text):
        c = text[i]
        if quoted and c == "\\":
            i += 2
            continue
        if c == '"':
            quoted = not quoted
        elif c == "}" and not quoted:
            return i
        i += 1
    raise ZkSecurityError("JAAS file: a section is not closed with '};'")


def digest_from_jaas_file(path: str, section: str = DEFAULT_JAAS_SECTION) -> tuple[str, str]:
    """(username, password) of the JAAS file's `section` (Kafka's Client section for ZooKeeper)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise ZkSecurityError(f"cannot read the JAAS file {path}: {e.strerror}") from None
    options = jaas_section(text, section)
    user, password = options.get("username"), options.get("password")
    if not user or not password:
        raise ZkSecurityError(f"JAAS file {path}: section {section} needs username and password")
    return user, password


def from_settings(*, set_acl: bool = False, jaas_file: str | None = None,
                  jaas_section_name: str = DEFAULT_JAAS_SECTION, ssl: bool = False,
                  keystore: str | None = None, keystore_type: str | None = None,
                  keystore_password: str | None = None, truststore: str | None = None,
                  truststore_type: str | None = None, endpoint_identification: str = "HTTPS") -> ZkSecurity:
    """A ZkSecurity from Kafka's keys' values; PEM is the only key store type."""
    for key, kind in (("zookeeper.ssl.keystore.type", keystore_type),
                      ("zookeeper.ssl.truststore.type", truststore_type)):
        if kind and kind.upper() != "PEM":
            raise ZkSecurityError(f"{key}={kind} is not supported: only PEM")
    if ssl and not truststore:
        raise ZkSecurityError("zookeeper.ssl.client.enable=true needs zookeeper.ssl.truststore.location (PEM)")
    if endpoint_identification.upper() not in ("", "HTTPS"):
        raise ZkSecurityError("zookeeper.ssl.endpoint.identification.algorithm must be HTTPS or empty")
    digest = digest_from_jaas_file(jaas_file, jaas_section_name) if jaas_file else None
    return ZkSecurity(set_acl=set_acl, digest=digest, ssl=ssl, keystore=keystore if ssl else None,
                      keystore_password=keystore_password, truststore=truststore if ssl else None,
                      check_hostname=endpoint_identification.upper() == "HTTPS")


def from_config(config: ZkClientConfig) -> ZkSecurity:
    """The ZooKeeper security of a process's `zookeeper.*` keys; ConfigException when they are bad."""
    try:
        return from_settings(
            set_acl=config.zookeeper_set_acl, jaas_file=config.java_security_auth_login_config,
            jaas_section_name=config.zookeeper_sasl_clientconfig, ssl=config.zookeeper_ssl_client_enable,
            keystore=config.zookeeper_ssl_keystore_location, keystore_type=config.zookeeper_ssl_keystore_type,
            keystore_password=config.zookeeper_ssl_keystore_password,
            truststore=config.zookeeper_ssl_truststore_location, truststore_type=config.zookeeper_ssl_truststore_type,
            endpoint_identification=config.zookeeper_ssl_endpoint_identification_algorithm)
    except ZkSecurityError as e:
        raise ConfigException("zookeeper.set.acl", message=str(e)) from None


def from_properties(props: dict[str, str]) -> ZkSecurity:
    """The ZooKeeper security of client properties (only the `zookeeper.*` and JAAS keys are read)."""
    keys = {k: v for k, v in props.items() if k.startswith(("zookeeper.", "java.security."))}
    return from_config(ZkClientConfig.from_properties({"zookeeper.connect": "-", **keys}))


def from_properties_file(path: str | Path) -> ZkSecurity:
    """A tool's `--zk-tls-config-file`: the brokers' ZooKeeper client keys in a properties file."""
    return from_properties(load_properties(path))

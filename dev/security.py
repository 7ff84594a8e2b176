"""`odradek dev --security`: a cluster CA, certificates for every process, and the settings that
put every path on TLS (clients, replication, controller traffic), as a real deployment would.

Everything is generated with `cryptography` into `<data dir>/security/` (kept across restarts of
`odradek dev`: clients keep trusting the same CA). Certificates are valid for 127.0.0.1 and
localhost (and the advertised host), so clients that verify host names accept them. Listeners:

- CLIENT (the port clients bootstrap from): `client_protocol`, SASL_SSL with SCRAM-SHA-512 and a
  generated super user `admin` under `odradek dev --security` (`use_scram_client_listener`);
- INTERNAL: replication and transaction markers, SSL with client certificates required;
- CONTROLLER: controller requests to brokers, SSL with client certificates required;
- the controller's own listener: AlterPartition and ControlledShutdown, SSL, client certificates required.

ZooKeeper (`zookeeper_acl`, on under `odradek dev --security`): every process sets
`zookeeper.set.acl=true` with one digest identity (user `odradek`, a generated password in the
JAAS file `zookeeper-jaas.conf`'s Client section, 0600), so only the cluster writes its znodes
and nobody else reads `/config/users`; `zookeeper-client.properties` gives the same to
`odradek users --zk-tls-config-file`. With `zookeeper_tls` (when LocalCluster runs ZooKeeper
itself) ZooKeeper serves TLS only, with a certificate from the same CA, and every process and tool
connects with `zookeeper.ssl.client.enable=true`.

Principals are the certificates' common names (`ssl.principal.mapping.rules`): User:broker-0,
User:controller-1000, User:client.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from odradek.common import zk_security
from odradek.common.zk_security import ZkSecurity
from odradek.dev.zookeeper import ZooKeeperTls

PRINCIPAL_RULES = "RULE:^CN=([^,]+)(,.*)?$/$1/,DEFAULT"
"""The principal of a certificate is its common name (User:broker-0, User:client)."""
VALIDITY = datetime.timedelta(days=365)
ZOOKEEPER_USER = "odradek"
"""The digest user every process of the cluster shares towards ZooKeeper."""
SUPER_USER = "admin"
"""The SCRAM user `odradek dev --security` creates for clients (a super user)."""


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _pem_cert(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def write_private(path: Path, data: bytes) -> None:
    """Writes a file only its owner reads (0600, also when it was there before)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


@dataclass
class CertificateAuthority:
    """A CA that signs the cluster's and clients' certificates."""

    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate

    @classmethod
    def create(cls, name: str = "odradek dev CA") -> CertificateAuthority:
        key = _key()
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = datetime.datetime.now(datetime.UTC)
        cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
                .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
                .not_valid_after(now + VALIDITY * 5)
                .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
                .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                             content_commitment=False, key_encipherment=False,
                                             data_encipherment=False, key_agreement=False,
                                             encipher_only=False, decipher_only=False), critical=True)
                .sign(key, hashes.SHA256()))
        return cls(key, cert)

    @classmethod
    def load(cls, cert_path: Path, key_path: Path) -> CertificateAuthority:
        key = serialization.load_pem_private_key(key_path.read_bytes(), None)
        assert isinstance(key, ec.EllipticCurvePrivateKey)
        return cls(key, x509.load_pem_x509_certificate(cert_path.read_bytes()))

    def issue(self, common_name: str, hosts: tuple[str, ...] = ("127.0.0.1", "localhost"), *,
              not_before: datetime.datetime | None = None, validity: datetime.timedelta = VALIDITY,
              organizational_unit: str | None = None) -> tuple[bytes, bytes]:
        """A new key and certificate (PEM) for `common_name`, valid for `hosts` (IP and DNS SANs)
        as server and client: (key PEM, certificate PEM)."""
        key = _key()
        # most significant first: the subject prints (RFC 2253) as CN=<name>,[OU=<unit>,]O=odradek
        names = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, "odradek")]
        if organizational_unit:
            names.append(x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, organizational_unit))
        names.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
        sans: list[x509.GeneralName] = []
        for host in hosts:
            try:
                sans.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                sans.append(x509.DNSName(host))
        start = not_before or datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=5)
        cert = (x509.CertificateBuilder().subject_name(x509.Name(names)).issuer_name(self.cert.subject)
                .public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(start).not_valid_after(start + validity)
                .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                .add_extension(x509.SubjectAlternativeName(sans), critical=False)
                .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                      ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
                .sign(self.key, hashes.SHA256()))
        return _pem_key(key), _pem_cert(cert)

    def write_keystore(self, path: Path, common_name: str, hosts: tuple[str, ...] = ("127.0.0.1", "localhost"), *,
                       not_before: datetime.datetime | None = None, validity: datetime.timedelta = VALIDITY,
                       organizational_unit: str | None = None) -> Path:
        """A PEM key store (key, then certificate chain) for `ssl.keystore.location`. Written to a
        temporary name and renamed, as a Secret update swaps files: a reader never sees half of it."""
        key, cert = self.issue(common_name, hosts, not_before=not_before, validity=validity,
                               organizational_unit=organizational_unit)
        tmp = path.with_name(path.name + ".tmp")
        write_private(tmp, key + cert + _pem_cert(self.cert))
        os.replace(tmp, path)
        return path


@dataclass
class ClusterSecurity:
    """The TLS material and listener settings of a secure local cluster."""

    directory: Path
    hosts: tuple[str, ...] = ("127.0.0.1", "localhost")
    client_protocol: str = "SSL"
    """The security protocol of the CLIENT listener."""
    client_properties_extra: dict[str, str] = field(default_factory=dict)
    """More client properties (the SASL mechanism and credentials, when the client listener uses SASL)."""
    broker_overrides_extra: dict[str, str] = field(default_factory=dict)
    ca: CertificateAuthority | None = None
    scram_users: dict[str, str] = field(default_factory=dict, repr=False)
    """SCRAM-SHA-512 users (name → password) written to ZooKeeper before the brokers start (`bootstrap`)."""
    zookeeper_acl: bool = False
    """`zookeeper.set.acl=true` with the cluster's digest identity for every process and tool."""
    zookeeper_tls: bool = False
    """ZooKeeper serves TLS only and everyone connects with `zookeeper.ssl.client.enable=true`."""

    def use_scram_client_listener(self, brokers: int, controllers: int, user: str = SUPER_USER) -> None:
        """CLIENT becomes SASL_SSL with SCRAM-SHA-512 and one super user whose password is generated
        once (kept in the security directory, 0600) and written into the client properties file.
        Brokers and controllers stay on mTLS and are super users by their certificates' names; the
        authorizer is on, so every other user needs ACLs."""
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / f"{user}.password"
        if not path.exists():
            write_private(path, secrets.token_urlsafe(24).encode())
        password = path.read_text().strip()
        self.scram_users[user] = password
        self.client_protocol = "SASL_SSL"
        self.client_properties_extra.update({"sasl.mechanism": "SCRAM-SHA-512", "sasl.username": user,
                                             "sasl.password": password})
        supers = [f"User:{user}", *(f"User:broker-{i}" for i in range(brokers)),
                  *(f"User:controller-{j}" for j in range(controllers))]
        self.broker_overrides_extra.update({"listener.name.client.sasl.enabled.mechanisms": "SCRAM-SHA-512",
                                            "super.users": ";".join(supers),
                                            # ACLs decide for everyone else (allow.everyone.if.no.acl.found=false)
                                            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"})

    def bootstrap(self, zookeeper_connect: str) -> None:
        """Writes `scram_users` to ZooKeeper (odradek users' bootstrap path), before any broker runs."""
        from odradek.users import bootstrap_user

        for user, password in self.scram_users.items():
            bootstrap_user(zookeeper_connect, user, password, security=self.zk_security())

    @property
    def zookeeper_jaas_path(self) -> Path:
        return self.directory / "zookeeper-jaas.conf"

    @property
    def zookeeper_client_config_path(self) -> Path:
        """`odradek users --zk-tls-config-file` (and any tool reaching ZooKeeper) as the cluster does."""
        return self.directory / "zookeeper-client.properties"

    def zookeeper_tls_files(self) -> ZooKeeperTls:
        """The key and trust stores of a TLS-only ZooKeeper server."""
        return ZooKeeperTls(keystore=self.keystore("zookeeper"), truststore=self.ca_path)

    def zookeeper_properties(self, keystore: Path | None = None) -> dict[str, str]:
        """The `zookeeper.*` client keys of a process (or, without `keystore`, of a tool)."""
        props: dict[str, str] = {}
        if self.zookeeper_acl:
            props.update({"zookeeper.set.acl": "true",
                          "java.security.auth.login.config": str(self.zookeeper_jaas_path)})
        if self.zookeeper_tls:
            props.update({"zookeeper.ssl.client.enable": "true", "zookeeper.ssl.truststore.type": "PEM",
                          "zookeeper.ssl.truststore.location": str(self.ca_path)})
            if keystore is not None:
                props.update({"zookeeper.ssl.keystore.type": "PEM", "zookeeper.ssl.keystore.location": str(keystore)})
        return props

    def zk_security(self) -> ZkSecurity:
        """How this process (tests, `odradek dev`) reaches the cluster's ZooKeeper."""
        return zk_security.from_properties(self.zookeeper_properties())

    def _write_zookeeper_files(self) -> None:
        path = self.directory / f"{ZOOKEEPER_USER}.zookeeper.password"
        if not path.exists():
            write_private(path, secrets.token_urlsafe(24).encode())
        password = path.read_text().strip()
        write_private(self.zookeeper_jaas_path, (
            "Client {\n  org.apache.zookeeper.server.auth.DigestLoginModule required\n"
            f'  username="{ZOOKEEPER_USER}"\n  password="{password}";\n}};\n').encode())
        text = "".join(f"{k}={v}\n" for k, v in self.zookeeper_properties().items())
        write_private(self.zookeeper_client_config_path, text.encode())

    @property
    def ca_path(self) -> Path:
        return self.directory / "ca.pem"

    @property
    def client_config_path(self) -> Path:
        return self.directory / "client.properties"

    def prepare(self, brokers: int, controllers: int) -> ClusterSecurity:
        """Creates (or reuses) the CA and writes every process's key store and the client files."""
        self.directory.mkdir(parents=True, exist_ok=True)
        ca_key = self.directory / "ca-key.pem"
        if self.ca_path.exists() and ca_key.exists():
            self.ca = CertificateAuthority.load(self.ca_path, ca_key)
        else:
            self.ca = CertificateAuthority.create()
            write_private(ca_key, _pem_key(self.ca.key))
            self.ca_path.write_bytes(_pem_cert(self.ca.cert))
        for i in range(brokers):
            self.keystore(f"broker-{i}")
        for j in range(controllers):
            self.keystore(f"controller-{j}")
        self.keystore("client")
        self.write_client_config()
        if self.zookeeper_acl or self.zookeeper_tls:
            self._write_zookeeper_files()
        return self

    def keystore(self, name: str) -> Path:
        """The key store of process (or client) `name`, created when missing."""
        path = self.directory / f"{name}.pem"
        if not path.exists():
            assert self.ca is not None
            self.ca.write_keystore(path, name, self.hosts)
        return path

    def client_properties(self) -> dict[str, str]:
        """A Kafka client's properties (confluent-kafka, kcat -F, `odradek` tools' --command-config)."""
        return {"security.protocol": self.client_protocol, "ssl.ca.location": str(self.ca_path),
                **self.client_properties_extra}

    def write_client_config(self) -> Path:
        text = "".join(f"{k}={v}\n" for k, v in self.client_properties().items())
        write_private(self.client_config_path, text.encode())
        return self.client_config_path

    def _common(self, keystore: Path) -> dict[str, str]:
        return {
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(keystore),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.ca_path),
            "ssl.principal.mapping.rules": PRINCIPAL_RULES,
            "ssl.endpoint.identification.algorithm": "https",
        }

    def broker_overrides(self, i: int) -> dict[str, str]:
        """Broker `i`'s security keys (its listeners are LocalCluster's: CLIENT, INTERNAL, CONTROLLER)."""
        return {
            **self._common(self.keystore(f"broker-{i}")),
            **self.zookeeper_properties(self.keystore(f"broker-{i}")),
            "listener.security.protocol.map": f"CLIENT:{self.client_protocol},INTERNAL:SSL,CONTROLLER:SSL",
            "inter.broker.listener.name": "INTERNAL",
            "control.plane.listener.name": "CONTROLLER",
            "listener.name.internal.ssl.client.auth": "required",
            "listener.name.controller.ssl.client.auth": "required",
            **self.broker_overrides_extra,
        }

    def controller_overrides(self, j: int) -> dict[str, str]:
        return {
            **self._common(self.keystore(f"controller-{j}")),
            **self.zookeeper_properties(self.keystore(f"controller-{j}")),
            "listener.security.protocol.map": "CONTROLLER:SSL",
            "ssl.client.auth": "required",
            "inter.broker.listener.name": "INTERNAL",
            "control.plane.listener.name": "CONTROLLER",
        }

"""The certificates of a secured cluster, as a pure function of the Secrets found and the clock.

Two CAs per cluster (Strimzi's layout): the cluster CA signs the brokers', the controllers' and the
operator's certificates (each a super user by its subject), the clients CA signs KafkaUsers'.
Each CA lives in `<cluster>-<ca>` (ca.key, ca.crt) with the public half alone in
`<cluster>-<ca>-cert` (ca.crt), which applications may read. Leaf certificates are valid for
`validityDays` and replaced once fewer than `renewalDays` remain, or when the names they must
carry (SANs) or their CA changed: `plan` returns the Secrets' new contents, the reconciler writes
them, the kubelet updates the mounted files and the processes reload them (common/security/reload)
without a restart. A CA is generated once (valid 5 × validityDays) and never replaced by the
operator; with `generateCertificateAuthority: false` the user supplies it in the same Secrets.

Principals: a certificate's subject is `CN=<name>,O=odradek.io` and the operator's own listeners
keep Kafka's DEFAULT principal mapping, so a broker is `User:CN=<cluster>-broker,O=odradek.io`,
which no KafkaUser name (a DNS label) can spell.
"""

from __future__ import annotations

import datetime
import ipaddress
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from odradek.common.clock import Clock, now_ms
from odradek.operator import builders
from odradek.operator.models import CertificateAuthority, KafkaClusterSpec

ORGANIZATION = "odradek.io"
CA_VALIDITY_FACTOR = 5
"""A generated CA outlives the certificates it signs by this factor (it is not renewed)."""
BACKDATE = datetime.timedelta(minutes=5)
"""Certificates start a little in the past: a peer whose clock lags still accepts them."""
ZOOKEEPER_USER = "odradek"
CERTS_DIR = "/etc/odradek-certs"
"""Where brokers and controllers mount their certificate Secret."""
ZOOKEEPER_JAAS_DIR = "/etc/odradek-zookeeper"


def clock_now(clock: Clock = now_ms) -> datetime.datetime:
    """The process clock as an aware datetime (tests hand in a clock they move)."""
    return datetime.datetime.fromtimestamp(clock() / 1000, datetime.UTC)


def principal(common_name: str) -> str:
    """The Kafka principal of a certificate this module issues (DEFAULT mapping: the subject)."""
    return f"User:CN={common_name},O={ORGANIZATION}"


@dataclass(frozen=True)
class Authority:
    """A CA: its key and certificate in PEM."""
    key_pem: str = field(repr=False)
    cert_pem: str

    @property
    def certificate(self) -> x509.Certificate:
        return x509.load_pem_x509_certificate(self.cert_pem.encode())

    def private_key(self) -> ec.EllipticCurvePrivateKey:
        key = serialization.load_pem_private_key(self.key_pem.encode(), None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise ValueError("the CA key must be an EC key")
        return key

    @classmethod
    def from_secret(cls, data: Mapping[str, str] | None) -> Authority | None:
        """From a CA Secret's decoded data (ca.key, ca.crt); None when absent or unreadable."""
        if not data or not data.get("ca.key") or not data.get("ca.crt"):
            return None
        try:
            found = cls(data["ca.key"], data["ca.crt"])
            found.private_key()
            found.certificate  # noqa: B018  (parses)
        except ValueError:
            return None
        return found


def _pem_key(key: ec.EllipticCurvePrivateKey) -> str:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode()


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, ORGANIZATION),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def new_ca(common_name: str, now: datetime.datetime, validity_days: int) -> Authority:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = _name(common_name)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - BACKDATE)
            .not_valid_after(now + datetime.timedelta(days=validity_days * CA_VALIDITY_FACTOR))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .sign(key, hashes.SHA256()))
    return Authority(_pem_key(key), cert.public_bytes(serialization.Encoding.PEM).decode())


def _san(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def issue(ca: Authority, common_name: str, hosts: tuple[str, ...], now: datetime.datetime,
          validity_days: int) -> tuple[str, str]:
    """A new key and a certificate signed by `ca` for `common_name` and `hosts` (SANs), valid as
    server and client: (key PEM, certificate PEM)."""
    key = ec.generate_private_key(ec.SECP256R1())
    builder = (x509.CertificateBuilder().subject_name(_name(common_name)).issuer_name(ca.certificate.subject)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - BACKDATE).not_valid_after(now + datetime.timedelta(days=validity_days))
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                              critical=False))
    if hosts:
        builder = builder.add_extension(x509.SubjectAlternativeName([_san(h) for h in hosts]), critical=False)
    cert = builder.sign(ca.private_key(), hashes.SHA256())
    return _pem_key(key), cert.public_bytes(serialization.Encoding.PEM).decode()


def _first_certificate(pem: str) -> x509.Certificate | None:
    try:
        return x509.load_pem_x509_certificate(pem.encode())
    except ValueError:
        return None


def _hosts(cert: x509.Certificate) -> set[str]:
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return set()
    return {str(v) for v in sans.get_values_for_type(x509.DNSName)} | {
        str(v) for v in sans.get_values_for_type(x509.IPAddress)}


def needs_renewal(cert_pem: str | None, ca: Authority, hosts: tuple[str, ...], now: datetime.datetime,
                  renewal_days: int) -> str | None:
    """Why the certificate must be replaced (missing, unreadable, signed by another CA, other
    names, or within `renewal_days` of its end), or None while it is good."""
    cert = _first_certificate(cert_pem) if cert_pem else None
    if cert is None:
        return "missing"
    authority = ca.certificate
    public = authority.public_key()
    if cert.issuer != authority.subject or not isinstance(public, ec.EllipticCurvePublicKey):
        return "another CA"
    try:
        public.verify(cert.signature, cert.tbs_certificate_bytes, ec.ECDSA(hashes.SHA256()))
    except InvalidSignature:
        return "another CA"
    if _hosts(cert) != set(hosts):
        return "names changed"
    if cert.not_valid_after_utc - now <= datetime.timedelta(days=renewal_days):
        return "expires soon"
    return None


# --- what a cluster needs ----------------------------------------------------------------------


def broker_hosts(cluster: str, namespace: str, broker_id: int, external: tuple[str, ...] = ()) -> tuple[str, ...]:
    """Every name a client may reach broker `broker_id` by: its pod, the bootstrap Service, and
    its external addresses."""
    n = builders.names(cluster)
    pod = f"{n['broker']}-{broker_id}.{n['broker_headless']}.{namespace}"
    boot = f"{n['bootstrap']}.{namespace}"
    return (f"{pod}.svc", f"{pod}.svc.cluster.local", n["bootstrap"], boot, f"{boot}.svc",
            f"{boot}.svc.cluster.local", *external)


def controller_hosts(cluster: str, namespace: str) -> tuple[str, ...]:
    service = f"{builders.names(cluster)['controller']}.{namespace}"
    return f"{service}.svc", f"{service}.svc.cluster.local"


def broker_file(cluster: str, broker_id: int) -> str:
    """The key store (key and chain, PEM) of a broker in its Secret; the pod's name."""
    return f"{builders.names(cluster)['broker']}-{broker_id}.pem"


def common_name(cluster: str, role: str) -> str:
    return f"{cluster}-{role}"


def super_users(cluster: str) -> list[str]:
    """The cluster's own principals: brokers, controllers and the operator."""
    return [principal(common_name(cluster, r)) for r in ("broker", "controller", "operator")]


@dataclass
class CertificatePlan:
    secrets: dict[str, dict[str, str]] = field(default_factory=dict, repr=False)
    """Secret name → its whole decoded data, for every Secret the cluster needs."""
    renewed: list[str] = field(default_factory=list)
    """What was (re)issued and why, for the log (no key material)."""
    missing_ca: str | None = None
    """A user-supplied CA that is not there (or unreadable): nothing is issued from it."""


def _authority(name: str, role: str, settings: CertificateAuthority, found: Mapping[str, str] | None,
               now: datetime.datetime, plan: CertificatePlan) -> Authority | None:
    ca = Authority.from_secret(found)
    if ca is not None:
        return ca
    if not settings.generate_certificate_authority:
        plan.missing_ca = (f"Secret {name} (ca.key, ca.crt) is missing or unreadable and "
                           f"{role}.generateCertificateAuthority is false")
        return None
    plan.renewed.append(f"{role}: generated")
    return new_ca(f"{name} {role}", now, settings.validity_days)


def plan(cluster: str, namespace: str, spec: KafkaClusterSpec, brokers: int,
         found: Mapping[str, Mapping[str, str] | None], now: datetime.datetime,
         external: Mapping[int, tuple[str, ...]] | None = None) -> CertificatePlan:
    """The certificate Secrets of a secured cluster with `brokers` brokers (ids 0..brokers-1),
    given the decoded Secrets `found` (name → data, None when absent) and the time `now`. What is
    still good is kept byte for byte, so an unchanged plan writes nothing."""
    n = builders.names(cluster)
    out = CertificatePlan()
    cluster_ca = _authority(cluster, "clusterCa", spec.cluster_ca, found.get(n["cluster_ca"]), now, out)
    clients_ca = _authority(cluster, "clientsCa", spec.clients_ca, found.get(n["clients_ca"]), now, out)
    if cluster_ca is None or clients_ca is None:
        return out
    for ca, name, public in ((cluster_ca, n["cluster_ca"], n["cluster_ca_cert"]),
                             (clients_ca, n["clients_ca"], n["clients_ca_cert"])):
        out.secrets[name] = {"ca.key": ca.key_pem, "ca.crt": ca.cert_pem}
        out.secrets[public] = {"ca.crt": ca.cert_pem}
    validity, renewal = spec.cluster_ca.validity_days, spec.cluster_ca.renewal_days

    def keystore(old: str | None, role: str, hosts: tuple[str, ...], what: str) -> str:
        """key + certificate + CA in one PEM (ssl.keystore.location), renewed when due."""
        if old is not None and (reason := needs_renewal(old, cluster_ca, hosts, now, renewal)) is None:
            return old
        out.renewed.append(f"{what}: {'issued' if old is None else reason}")
        key, cert = issue(cluster_ca, common_name(cluster, role), hosts, now, validity)
        return key + cert + cluster_ca.cert_pem

    old_brokers = found.get(n["broker_certs"]) or {}
    broker_data = {"ca.crt": cluster_ca.cert_pem, "clients-ca.crt": clients_ca.cert_pem}
    for i in range(brokers):
        file = broker_file(cluster, i)
        hosts = broker_hosts(cluster, namespace, i, (external or {}).get(i, ()))
        broker_data[file] = keystore(old_brokers.get(file), "broker", hosts, f"broker {i}")
    out.secrets[n["broker_certs"]] = broker_data
    old_controller = (found.get(n["controller_certs"]) or {}).get("controller.pem")
    out.secrets[n["controller_certs"]] = {
        "ca.crt": cluster_ca.cert_pem,
        "controller.pem": keystore(old_controller, "controller", controller_hosts(cluster, namespace), "controllers")}
    old_operator = found.get(n["operator_certs"]) or {}
    old_pem = (old_operator.get("user.key", "") + old_operator.get("user.crt", "")) or None
    operator_pem = keystore(old_pem, "operator", (), "operator")
    if operator_pem == old_pem:
        out.secrets[n["operator_certs"]] = dict(old_operator)
    else:
        key_end = operator_pem.index("-----END PRIVATE KEY-----") + len("-----END PRIVATE KEY-----\n")
        out.secrets[n["operator_certs"]] = {"user.key": operator_pem[:key_end], "user.crt": operator_pem[key_end:],
                                            "ca.crt": cluster_ca.cert_pem}
    out.secrets[n["zookeeper_client"]] = zookeeper_identity(found.get(n["zookeeper_client"]))
    return out


def zookeeper_identity(found: Mapping[str, str] | None) -> dict[str, str]:
    """The digest identity every process of the cluster shares towards ZooKeeper
    (zookeeper.set.acl), generated once: a JAAS file's Client section, as Kafka reads it."""
    if found and found.get("username") and found.get("password") and found.get("jaas.conf"):
        return dict(found)
    password = secrets.token_urlsafe(24)
    jaas = ("Client {\n  org.apache.zookeeper.server.auth.DigestLoginModule required\n"
            f'  username="{ZOOKEEPER_USER}"\n  password="{password}";\n}};\n')
    return {"username": ZOOKEEPER_USER, "password": password, "jaas.conf": jaas}

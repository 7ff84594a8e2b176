"""common/security/ssl_factory and reload: Kafka's ssl.* keys to SSLContexts, per-listener
prefixes, and certificate files replaced on disk detected without a restart."""

import os
import ssl

import pytest
from cryptography.hazmat.primitives import serialization

from odradek.common.config import BrokerConfig
from odradek.common.config_def import ConfigException
from odradek.common.security.channel import client_security_from_properties
from odradek.common.security.reload import CertificateWatcher, ReloadingSslContext, fingerprint
from odradek.common.security.ssl_factory import (
    SSL_KEYS,
    SslConfig,
    client_context,
    openssl_cipher_name,
    server_context,
)
from odradek.dev.security import CertificateAuthority


@pytest.fixture(scope="module")
def ca():
    return CertificateAuthority.create("test CA")


@pytest.fixture
def stores(ca, tmp_path):
    ca_path = tmp_path / "ca.pem"
    ca_path.write_bytes(ca.cert.public_bytes(serialization.Encoding.PEM))
    keystore = ca.write_keystore(tmp_path / "server.pem", "server")
    return ca_path, keystore


def test_defaults_are_kafkas():
    config = SslConfig.from_values({})
    assert config.enabled_protocols == ("TLSv1.2", "TLSv1.3")
    assert config.client_auth == "none"
    assert config.endpoint_identification_algorithm == "https"
    assert config.principal_mapping_rules == "DEFAULT"


@pytest.mark.parametrize(("values", "key"), [
    ({"ssl.keystore.type": "JKS"}, "ssl.keystore.type"),
    ({"ssl.truststore.type": "PKCS12"}, "ssl.truststore.type"),
    ({"ssl.enabled.protocols": "TLSv1.1,TLSv1.2"}, "ssl.enabled.protocols"),
    ({"ssl.client.auth": "sometimes"}, "ssl.client.auth"),
    ({"ssl.endpoint.identification.algorithm": "ldap"}, "ssl.endpoint.identification.algorithm"),
    ({"ssl.keystore.key": "-----BEGIN PRIVATE KEY-----"}, "ssl.keystore.key"),
    ({"ssl.keystore.location": "/a", "ssl.keystore.certificate.chain": "x", "ssl.keystore.key": "y"},
     "ssl.keystore.location"),
])
def test_bad_values_name_the_key(values, key):
    with pytest.raises(ConfigException) as e:
        SslConfig.from_values(values)
    assert e.value.name == key


def test_secrets_stay_out_of_messages_and_reprs(stores):
    _ = stores
    config = SslConfig.from_values({"ssl.keystore.certificate.chain": "CHAIN-SECRET", "ssl.keystore.key": "KEY-SECRET",
                                    "ssl.key.password": "PASSWORD-SECRET"})
    assert "SECRET" not in repr(config)
    with pytest.raises(ConfigException) as e:
        server_context(config)
    assert "SECRET" not in str(e.value)


def test_server_and_client_contexts(stores):
    ca_path, keystore = stores
    server = server_context(SslConfig.from_values({"ssl.keystore.location": str(keystore),
                                                   "ssl.truststore.location": str(ca_path),
                                                   "ssl.client.auth": "required",
                                                   "ssl.enabled.protocols": "TLSv1.3"}))
    assert server.verify_mode == ssl.CERT_REQUIRED
    assert server.minimum_version == server.maximum_version == ssl.TLSVersion.TLSv1_3
    client = client_context(SslConfig.from_values({"ssl.truststore.location": str(ca_path)}))
    assert client.check_hostname and client.verify_mode == ssl.CERT_REQUIRED
    loose = client_context(SslConfig.from_values({"ssl.truststore.location": str(ca_path),
                                                  "ssl.endpoint.identification.algorithm": ""}))
    assert not loose.check_hostname and loose.verify_mode == ssl.CERT_REQUIRED


def test_inline_pem_key_store(ca, stores):
    ca_path, _ = stores
    key, cert = ca.issue("inline")
    context = server_context(SslConfig.from_values({"ssl.keystore.certificate.chain": cert.decode(),
                                                    "ssl.keystore.key": key.decode(),
                                                    "ssl.truststore.certificates": ca_path.read_text()}))
    assert context.verify_mode == ssl.CERT_NONE


def test_a_missing_key_store_is_one_clear_error(tmp_path):
    with pytest.raises(ConfigException) as e:
        server_context(SslConfig.from_values({"ssl.keystore.location": str(tmp_path / "nope.pem")}))
    assert "nope.pem" in str(e.value)


def test_cipher_suite_names():
    assert openssl_cipher_name("TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384") == "ECDHE-RSA-AES256-GCM-SHA384"
    assert openssl_cipher_name("TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256") == "ECDHE-ECDSA-CHACHA20-POLY1305"
    assert openssl_cipher_name("TLS_AES_128_GCM_SHA256") is None
    assert openssl_cipher_name("ECDHE-RSA-AES128-GCM-SHA256") == "ECDHE-RSA-AES128-GCM-SHA256"
    context = client_context(SslConfig.from_values({"ssl.cipher.suites": "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"}))
    assert "ECDHE-ECDSA-AES128-GCM-SHA256" in {c["name"] for c in context.get_ciphers()}


def test_listener_prefix_overrides_the_key():
    config = BrokerConfig.from_properties({
        "broker.id": "0", "zookeeper.connect": "z",
        "ssl.keystore.location": "/base.pem", "ssl.client.auth": "requested",
        "listener.name.internal.ssl.client.auth": "required",
        "listener.name.internal.ssl.keystore.location": "/internal.pem",
    })
    internal = SslConfig.from_values(config.listener_values("INTERNAL", SSL_KEYS))
    client = SslConfig.from_values(config.listener_values("CLIENT", SSL_KEYS))
    assert (internal.client_auth, internal.keystore_location) == ("required", "/internal.pem")
    assert (client.client_auth, client.keystore_location) == ("requested", "/base.pem")


def test_inter_broker_listener_rules():
    base = {"broker.id": "0", "zookeeper.connect": "z"}
    assert BrokerConfig.from_properties(base).inter_broker_listener == "PLAINTEXT"
    assert BrokerConfig.from_properties({**base, "security.inter.broker.protocol": "SSL"}).inter_broker_listener == "SSL"
    assert BrokerConfig.from_properties({**base, "inter.broker.listener.name": "INTERNAL"}).inter_broker_listener == "INTERNAL"
    with pytest.raises(ConfigException):
        BrokerConfig.from_properties({**base, "inter.broker.listener.name": "INTERNAL",
                                      "security.inter.broker.protocol": "SSL"})


def test_client_properties_files(stores, tmp_path):
    ca_path, _ = stores
    security = client_security_from_properties({"security.protocol": "SSL", "ssl.ca.location": str(ca_path)})
    assert security.tls and security.ssl_context() is not None
    plain = client_security_from_properties({})
    assert plain.security_protocol == "PLAINTEXT" and plain.ssl_context() is None
    with pytest.raises(ConfigException):
        client_security_from_properties({"security.protocol": "SSL", "enable.ssl.certificate.verification": "false"})


def test_reload_detects_replaced_files(ca, stores):
    ca_path, keystore = stores
    config = SslConfig.from_values({"ssl.keystore.location": str(keystore), "ssl.truststore.location": str(ca_path)})
    holder = ReloadingSslContext(config, server_context, "test")
    first = holder.current()
    assert not holder.check()  # nothing changed
    ca.write_keystore(keystore, "server")  # a new certificate, swapped in by rename
    assert holder.check()
    assert holder.current() is not first and holder.reloads == 1
    assert not holder.check()


def test_a_broken_replacement_keeps_the_old_context(ca, stores):
    _, keystore = stores
    holder = ReloadingSslContext(SslConfig.from_values({"ssl.keystore.location": str(keystore)}), server_context)
    first = holder.current()
    keystore.write_text("-----BEGIN PRIVATE KEY-----\nhalf")
    assert not holder.check() and holder.current() is first
    assert not holder.check()  # tried once per content, not on every poll
    ca.write_keystore(keystore, "server")
    assert holder.check() and holder.current() is not first


def test_watcher_polls_every_context(ca, stores):
    _, keystore = stores
    watcher = CertificateWatcher()
    holder = watcher.watch(ReloadingSslContext(SslConfig.from_values({"ssl.keystore.location": str(keystore)}),
                                               server_context))
    assert watcher.poll() == 0
    ca.write_keystore(keystore, "server")
    assert watcher.poll() == 1 and holder.reloads == 1


def test_dynamic_key_store_settings_rebuild_the_listeners_context(ca, stores, tmp_path):
    """listener.name.<l>.ssl.keystore.location changed dynamically: the listener's context is
    built from the new store; settings that do not load keep the previous context."""
    from odradek.common.security.listeners import reconfigure_listener_ssl

    _, keystore = stores
    base = {"broker.id": "0", "zookeeper.connect": "127.0.0.1:2181", "listeners": "SSL://127.0.0.1:9093",
            "ssl.keystore.location": str(keystore)}
    holder = ReloadingSslContext(SslConfig.from_values({"ssl.keystore.location": str(keystore)}), server_context)
    first = holder.current()
    assert reconfigure_listener_ssl(BrokerConfig.from_properties(base), {"SSL": holder}) == []
    other = ca.write_keystore(tmp_path / "other.pem", "other")
    moved = {**base, "listener.name.ssl.ssl.keystore.location": str(other)}
    assert reconfigure_listener_ssl(BrokerConfig.from_properties(moved), {"SSL": holder}) == ["SSL"]
    assert holder.current() is not first and holder.config.keystore_location == str(other)
    second = holder.current()
    broken = {**base, "listener.name.ssl.ssl.keystore.location": str(tmp_path / "missing.pem")}
    assert reconfigure_listener_ssl(BrokerConfig.from_properties(broken), {"SSL": holder}) == []
    assert holder.current() is second and holder.reloads == 1


def test_fingerprint_follows_content_not_time(tmp_path):
    path = tmp_path / "f"
    path.write_text("a")
    before = fingerprint((str(path),))
    os.utime(path, (0, 0))
    assert fingerprint((str(path),)) == before
    path.write_text("b")
    assert fingerprint((str(path),)) != before
    assert fingerprint((str(tmp_path / "missing"),)) != before

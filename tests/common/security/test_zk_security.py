"""ZooKeeper client security without a server: Kafka's default ACLs per path, the digest identity
from a JAAS Client section, the zookeeper.* keys, and the secure cluster's settings."""

import logging

import pytest
from kazoo.security import CREATOR_ALL_ACL, OPEN_ACL_UNSAFE, READ_ACL_UNSAFE

from odradek.common.config import BrokerConfig, ConfigException, ControllerConfig
from odradek.common.zk_connect import new_client
from odradek.common.zk_security import (
    ZkSecurity,
    ZkSecurityError,
    default_acls,
    digest_from_jaas_file,
    from_config,
    from_properties_file,
    is_sensitive,
    jaas_section,
)
from odradek.dev.security import ClusterSecurity

JAAS = """
// ZooKeeper's section, as Kafka's docs write it
KafkaServer { org.apache.kafka.common.security.plain.PlainLoginModule required username="a" password="b"; };
Client {
    org.apache.zookeeper.server.auth.DigestLoginModule required
    username="kafka"
    password="p}a\\"ss";
};
"""


def test_default_acls_are_kafkas():
    assert default_acls(False, "/config/users/alice") == list(OPEN_ACL_UNSAFE)
    assert default_acls(True, "/brokers/ids/1") == list(CREATOR_ALL_ACL) + list(READ_ACL_UNSAFE)
    for path in ("/config/users", "/config/users/alice", "/config/brokers/0", "/delegation_token/tokens/x",
                 "/scram_decoy_secret"):
        assert is_sensitive(path) and default_acls(True, path) == list(CREATOR_ALL_ACL)
    assert not is_sensitive("/config/topics/t") and not is_sensitive("/config/usersx")
    assert default_acls(True, "/consumers") == list(OPEN_ACL_UNSAFE)


def test_jaas_client_section_gives_the_digest(tmp_path):
    assert jaas_section(JAAS, "Client") == {"username": "kafka", "password": 'p}a"ss'}
    path = tmp_path / "jaas.conf"
    path.write_text(JAAS)
    assert digest_from_jaas_file(str(path)) == ("kafka", 'p}a"ss')
    with pytest.raises(ZkSecurityError, match="no Other section"):
        digest_from_jaas_file(str(path), "Other")
    path.write_text('Client { M required username="u"; };')
    with pytest.raises(ZkSecurityError) as e:
        digest_from_jaas_file(str(path))
    assert "needs username and password" in str(e.value)


def test_config_keys(tmp_path):
    jaas = tmp_path / "jaas.conf"
    jaas.write_text(JAAS)
    base = {"zookeeper.connect": "h:1/c", "broker.id": "0"}
    sec = from_config(BrokerConfig.from_properties({
        **base, "zookeeper.set.acl": "true", "java.security.auth.login.config": str(jaas),
        "zookeeper.ssl.client.enable": "true", "zookeeper.ssl.truststore.location": "/ca.pem",
        "zookeeper.ssl.endpoint.identification.algorithm": ""}))
    assert sec.set_acl and sec.digest == ("kafka", 'p}a"ss') and sec.ssl and not sec.check_hostname
    assert 'p}a"ss' not in repr(sec)
    kwargs = sec.client_kwargs()
    assert kwargs["auth_data"] == [("digest", 'kafka:p}a"ss')] and kwargs["use_ssl"] and kwargs["ca"] == "/ca.pem"
    controller = ControllerConfig.from_properties({"zookeeper.connect": "h:1", "controller.id": "1000"})
    assert from_config(controller) == ZkSecurity()
    for bad, what in (({"zookeeper.set.acl": "true"}, "needs an identity"),
                      ({"zookeeper.ssl.client.enable": "true"}, "truststore"),
                      ({"zookeeper.ssl.client.enable": "true", "zookeeper.ssl.truststore.location": "/ca",
                        "zookeeper.ssl.truststore.type": "JKS"}, "only PEM"),
                      ({"zookeeper.set.acl": "true", "java.security.auth.login.config": str(tmp_path / "none")},
                       "cannot read")):
        with pytest.raises(ConfigException, match=what):
            from_config(BrokerConfig.from_properties({**base, **bad}))


def test_kazoo_client_gets_the_policy_for_each_path():
    zk = new_client("127.0.0.1:1/c", 5, ZkSecurity(set_acl=True, digest=("u", "p")))
    assert zk.auth_data == {("digest", "u:p")}
    assert zk.zk_security.acls("/config/users/x") == list(CREATOR_ALL_ACL)
    transaction = zk.transaction()
    transaction.create("/config/users/x", b"")
    transaction.create("/brokers/topics/t", b"")
    assert [list(op.acl) for op in transaction.operations] == [
        list(CREATOR_ALL_ACL), list(CREATOR_ALL_ACL) + list(READ_ACL_UNSAFE)]


def test_secure_cluster_files(tmp_path):
    security = ClusterSecurity(tmp_path, zookeeper_acl=True, zookeeper_tls=True).prepare(1, 1)
    for path in (security.zookeeper_jaas_path, security.zookeeper_client_config_path):
        assert path.stat().st_mode & 0o077 == 0
    tool = from_properties_file(security.zookeeper_client_config_path)
    assert tool.set_acl and tool.ssl and tool.digest is not None and tool.digest[0] == "odradek"
    broker = security.broker_overrides(0)
    assert broker["zookeeper.ssl.keystore.location"].endswith("broker-0.pem")
    assert from_config(BrokerConfig.from_properties({"zookeeper.connect": "h:1", "broker.id": "0", **broker}
                                                    )).digest == tool.digest
    assert security.zookeeper_tls_files().keystore.exists()


def test_kazoo_never_logs_the_digest(caplog):
    from kazoo.protocol.serialization import Auth

    from odradek.common.zk_connect import KAZOO_LOG

    with caplog.at_level(logging.DEBUG, logger="kazoo"):
        KAZOO_LOG.debug("Sending request(xid=%s): %s", -4, Auth(0, "digest", "odradek:top-secret"))
        KAZOO_LOG.debug("Sending request(xid=%s): %s", 7, "GetData(path='/x')")
    assert "top-secret" not in caplog.text and "GetData" in caplog.text

"""`odradek dev --security` and `--advertised-host` as LocalCluster writes them (no process is
started): every listener on TLS, configs the broker and controller accept, certificates valid for
the hosts clients use, private files private."""

import ssl
import stat

import pytest
from cryptography import x509

from odradek.broker.server import check_listeners
from odradek.common.config import BrokerConfig, ControllerConfig, load_properties, parse_listeners, parse_protocol_map
from odradek.dev.cluster import ClusterError, LocalCluster
from odradek.dev.security import ClusterSecurity


def _cluster(tmp_path, **kwargs):
    return LocalCluster(tmp_path / "c", brokers=2, controllers=1, broker_ports=[19192, 19193],
                        zookeeper_connect="127.0.0.1:2181/odradek-test", **kwargs)


def test_secure_cluster_puts_every_listener_on_tls(tmp_path):
    cluster = _cluster(tmp_path, security=ClusterSecurity(tmp_path / "security"))
    for process in cluster.brokers:
        config = BrokerConfig.from_properties(process.overrides)
        check_listeners(config)
        protocols = parse_protocol_map(config.listener_security_protocol_map)
        assert {protocols[name] for name, _, _ in parse_listeners(config.listeners)} == {"SSL"}
        assert config.inter_broker_listener == "INTERNAL"
        assert config.listener_value("INTERNAL", "ssl.client.auth") == "required"
        assert config.listener_value("CLIENT", "ssl.client.auth") == "none"
    for process in cluster.controllers:
        config = ControllerConfig.from_properties(process.overrides)
        assert [name for name, _, _ in parse_listeners(config.listeners)] == ["CONTROLLER"]
        assert config.security_protocol("CONTROLLER") == "SSL"
    assert cluster.client_properties["security.protocol"] == "SSL"
    assert cluster.client_security.ssl_context() is not None


def test_key_stores_are_private_and_valid_for_the_advertised_host(tmp_path):
    security = ClusterSecurity(tmp_path / "security")
    cluster = _cluster(tmp_path, security=security, advertised_host="kafka.local")
    for name in ("ca-key.pem", "broker-0.pem", "controller-0.pem", "client.pem", "client.properties"):
        assert stat.S_IMODE((security.directory / name).stat().st_mode) == 0o600, name
    pem = (security.directory / "broker-1.pem").read_bytes()
    cert = x509.load_pem_x509_certificates(pem)[0]
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert {str(ip) for ip in sans.get_values_for_type(x509.IPAddress)} == {"127.0.0.1"}
    assert set(sans.get_values_for_type(x509.DNSName)) == {"localhost", "kafka.local"}
    assert cert.subject.rfc4514_string() == "CN=broker-1,O=odradek"
    context = ssl.create_default_context(cafile=str(security.ca_path))
    context.load_cert_chain(str(security.directory / "client.pem"))  # the key matches its certificate
    assert cluster.bootstrap == "kafka.local:19192,kafka.local:19193"


def test_advertised_host_is_the_client_listener_only(tmp_path):
    cluster = _cluster(tmp_path, advertised_host="localhost")
    overrides = cluster.brokers[0].overrides
    advertised = {name: host for name, host, _ in parse_listeners(overrides["advertised.listeners"])}
    assert advertised == {"PLAINTEXT": "localhost", "CONTROLLER": "127.0.0.1"}
    ports = {name: port for name, _, port in parse_listeners(overrides["listeners"])}
    assert ports == {name: port for name, _, port in parse_listeners(overrides["advertised.listeners"])}
    check_listeners(BrokerConfig.from_properties(overrides))
    assert cluster.bootstrap == "localhost:19192,localhost:19193"


def test_secret_overrides_never_reach_argv_or_the_process_log(tmp_path):
    """Secret values go to a 0600 properties file the process reads with --config, never to its
    command line (world-readable in `ps`) nor to the "starting:" line of its log."""
    jaas = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="s3cret-pw";'
    process = _cluster(tmp_path).brokers[0]
    process.overrides.update({"listener.name.client.plain.sasl.jaas.config": jaas,
                              "ssl.key.password": "s3cret-key", "zookeeper.digest.password": "s3cret-zk"})
    argv = process.argv()
    assert "s3cret" not in " ".join(argv)
    assert argv[argv.index("--config") + 1] == str(process.secrets_path)
    process.write_secrets()
    assert stat.S_IMODE(process.secrets_path.stat().st_mode) == 0o600
    assert stat.S_IMODE(process.secrets_path.parent.stat().st_mode) == 0o700
    overrides = [argv[i + 1] for i, a in enumerate(argv) if a == "--override"]
    props = load_properties(process.secrets_path, overrides)
    assert props["listener.name.client.plain.sasl.jaas.config"] == jaas  # the child still gets them
    assert props["ssl.key.password"] == "s3cret-key" and props == process.overrides


def test_a_secret_with_a_line_break_is_refused(tmp_path):
    process = _cluster(tmp_path).brokers[0]
    process.overrides["ssl.key.password"] = "two\nlines"
    with pytest.raises(ClusterError, match="line break"):
        process.write_secrets()
    assert not process.secrets_path.exists()

"""Secured clusters: listeners, authorization, certificates and network policies
(operator/cluster_security, operator/certificates), rendered and validated offline."""

import datetime

import yaml
from op_validation import restricted_violations, validate

from odradek.common.security.principal import SslPrincipalMapper
from odradek.operator import builders, certificates, cluster_security
from odradek.operator.models import parse_spec
from odradek.operator.render import render_objects

ACCEPTANCE = """
apiVersion: odradek.io/v1alpha1
kind: KafkaCluster
metadata: {name: demo, namespace: kafka}
spec:
  listeners: [{name: tls, port: 9093, type: internal, tls: true, authentication: {type: scram-sha-512}}]
  authorization: {type: simple, superUsers: [User:ops]}
"""


def objects(text: str = ACCEPTANCE) -> dict:
    return {(o["kind"], o["metadata"]["name"]): o for o in render_objects(list(yaml.safe_load_all(text)), "odradek:t")}


def properties(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#"))


def test_render_shows_the_sasl_ssl_listener_the_authorizer_and_network_policies():
    found = objects()
    broker = properties(found[("ConfigMap", "demo-broker")]["data"]["server.properties"])
    assert "TLS:SASL_SSL" in broker["listener.security.protocol.map"]
    assert "TLS://0.0.0.0:9093" in broker["listeners"]
    assert broker["listener.name.tls.sasl.enabled.mechanisms"] == "SCRAM-SHA-512"
    assert broker["authorizer.class.name"] == "kafka.security.authorizer.AclAuthorizer"
    supers = broker["super.users"].split(";")
    assert "User:ops" in supers and "User:CN=demo-broker,O=odradek.io" in supers
    assert "User:CN=demo-operator,O=odradek.io" in supers and "User:CN=demo-controller,O=odradek.io" in supers
    assert broker["inter.broker.listener.name"] == "REPLICATION" and broker["zookeeper.set.acl"] == "true"
    policies = {name for kind, name in found if kind == "NetworkPolicy"}
    assert {"demo-zookeeper", "demo-listener-tls", "demo-broker-internal", "demo-controller"} <= policies
    zk = found[("NetworkPolicy", "demo-zookeeper")]["spec"]
    assert zk["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "zookeeper"
    assert all("from" in rule for rule in zk["ingress"] if {"port": 2181, "protocol": "TCP"} in rule["ports"])
    for kind, name in (("StatefulSet", "demo-broker"), ("Deployment", "demo-controller"),
                       ("StatefulSet", "demo-zookeeper")):
        assert found[(kind, name)]["spec"]["template"]["spec"]["automountServiceAccountToken"] is False


def test_rendered_secured_objects_validate_strictly_and_meet_restricted():
    for obj in objects().values():
        validate(obj)
        if obj["kind"] in ("StatefulSet", "Deployment"):
            assert restricted_violations(obj["spec"]["template"]["spec"]) == [], obj["metadata"]["name"]


def test_brokers_and_controllers_mount_their_certificates_whole_and_read_their_own_key_store():
    found = objects()
    pod = found[("StatefulSet", "demo-broker")]["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["certs"]["secret"]["secretName"] == "demo-broker-certs"
    mounts = pod["containers"][0]["volumeMounts"]
    assert not any("subPath" in m for m in mounts)  # a subPath mount never sees a renewed file
    command = pod["containers"][0]["command"][-1]
    assert "ssl.keystore.location=/etc/odradek-certs/${POD_NAME}.pem" in command
    assert "REPLICATION://${POD_NAME}.demo-broker-headless.${POD_NAMESPACE}.svc:9090" in command
    controller = found[("Deployment", "demo-controller")]["spec"]["template"]["spec"]
    assert "--override listeners=CONTROLLER://${POD_IP}:9190" in controller["containers"][0]["command"][-1]
    assert {v["name"] for v in controller["volumes"]} >= {"certs", "zookeeper-client"}
    ports = {p["name"] for p in found[("Service", "demo-bootstrap")]["spec"]["ports"]}
    assert ports == {"tls", "replication"}


def test_rendered_keys_are_real_config_keys():
    from odradek.common.config import BrokerConfig, ControllerConfig

    def aliases(model):
        return {f.alias for f in model.model_fields.values() if f.alias}

    body = {"metadata": {"name": "demo", "namespace": "kafka", "uid": "u"}}
    spec = parse_spec(yaml.safe_load(ACCEPTANCE)["spec"])
    broker = {k for k in cluster_security.broker_properties(body, spec) if not k.startswith("listener.name.")}
    assert broker | {"broker.id", "advertised.listeners"} <= aliases(BrokerConfig)
    assert set(cluster_security.controller_properties(body, spec)) <= aliases(ControllerConfig)


def test_default_cluster_renders_as_before_but_without_a_token():
    body = {"metadata": {"name": "demo", "namespace": "kafka", "uid": "u"}}
    spec = parse_spec({})
    plain = builders.desired_objects(body, spec)
    secured = cluster_security.desired_objects(body, spec)
    for obj in secured:
        if obj["kind"] in ("StatefulSet", "Deployment"):
            assert obj["spec"]["template"]["spec"].pop("automountServiceAccountToken") is False
    assert plain == secured
    assert cluster_security.broker_config_hash(body, spec) == builders.broker_config_hash(body, spec)


def test_listener_with_allowed_peers_and_a_nodeport_listener():
    found = objects(ACCEPTANCE.replace(
        "authentication: {type: scram-sha-512}}]",
        "authentication: {type: scram-sha-512}, allowedPeers: [{podSelector: {matchLabels: {app: spark}}}]},"
        " {name: ext, port: 9094, type: nodeport, tls: true, authentication: {type: tls}}]"))
    rule = found[("NetworkPolicy", "demo-listener-tls")]["spec"]["ingress"][0]
    assert rule["from"] == [{"podSelector": {"matchLabels": {"app": "spark"}}}]
    assert "from" not in found[("NetworkPolicy", "demo-listener-ext")]["spec"]["ingress"][0]
    services = {name: o for (kind, name), o in found.items() if kind == "Service"}
    assert services["demo-ext-bootstrap"]["spec"]["type"] == "NodePort"
    assert services["demo-broker-2-ext"]["spec"]["selector"]["statefulset.kubernetes.io/pod-name"] == "demo-broker-2"
    broker = properties(found[("ConfigMap", "demo-broker")]["data"]["server.properties"])
    assert broker["listener.name.ext.ssl.client.auth"] == "required"
    assert broker["listener.name.ext.ssl.truststore.location"].endswith("clients-ca.crt")
    for obj in found.values():
        validate(obj)


def test_invalid_listeners_are_refused():
    import pydantic
    import pytest

    for listeners in ([{"name": "replication", "port": 9095}], [{"name": "a", "port": 9090}],
                      [{"name": "a", "port": 9093}, {"name": "a", "port": 9094}],
                      [{"name": "a", "port": 9093, "authentication": {"type": "tls"}}], []):
        with pytest.raises(pydantic.ValidationError):
            parse_spec({"listeners": listeners})


# --- certificates ----------------------------------------------------------------------------

NOW = datetime.datetime(2026, 11, 28, tzinfo=datetime.UTC)
SPEC = parse_spec({"authorization": {}, "clusterCa": {"validityDays": 30, "renewalDays": 10}})


def test_certificates_are_kept_until_renewal_days_then_renewed_without_new_cas():
    first = certificates.plan("demo", "kafka", SPEC, 3, {}, NOW)
    assert set(first.secrets["demo-cluster-ca-cert"]) == {"ca.crt"}  # the public half only
    again = certificates.plan("demo", "kafka", SPEC, 3, first.secrets, NOW + datetime.timedelta(days=19))
    assert again.secrets == first.secrets and again.renewed == []
    later = certificates.plan("demo", "kafka", SPEC, 3, first.secrets, NOW + datetime.timedelta(days=21))
    assert later.secrets["demo-cluster-ca"] == first.secrets["demo-cluster-ca"]
    old, new = first.secrets["demo-broker-certs"], later.secrets["demo-broker-certs"]
    assert old["demo-broker-0.pem"] != new["demo-broker-0.pem"] and old["ca.crt"] == new["ca.crt"]
    assert any("expires soon" in r for r in later.renewed)
    assert later.secrets["demo-zookeeper-client"] == first.secrets["demo-zookeeper-client"]


def test_broker_certificate_names_every_way_to_reach_it():
    from cryptography import x509

    plan = certificates.plan("demo", "kafka", SPEC, 2, {}, NOW)
    pem = plan.secrets["demo-broker-certs"]["demo-broker-1.pem"]
    cert = x509.load_pem_x509_certificate(pem[pem.index("-----BEGIN CERTIFICATE"):].encode())
    names = set(cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
                .get_values_for_type(x509.DNSName))
    assert {"demo-broker-1.demo-broker-headless.kafka.svc", "demo-bootstrap.kafka.svc"} <= names
    assert cert.subject.rfc4514_string() == "CN=demo-broker,O=odradek.io"


def test_a_user_supplied_ca_is_used_and_its_absence_stalls():
    spec = parse_spec({"authorization": {}, "clusterCa": {"generateCertificateAuthority": False}})
    assert certificates.plan("demo", "kafka", spec, 1, {}, NOW).missing_ca is not None
    ca = certificates.new_ca("my CA", NOW, 365)
    plan = certificates.plan("demo", "kafka", spec, 1, {"demo-cluster-ca": {"ca.key": ca.key_pem, "ca.crt": ca.cert_pem}},
                             NOW)
    assert plan.missing_ca is None
    assert plan.secrets["demo-broker-certs"]["ca.crt"] == ca.cert_pem
    assert certificates.needs_renewal(plan.secrets["demo-controller-certs"]["controller.pem"], ca,
                                      certificates.controller_hosts("demo", "kafka"), NOW, 30) is None


def test_renewal_reasons():
    ca, other = certificates.new_ca("a", NOW, 365), certificates.new_ca("b", NOW, 365)
    _, cert = certificates.issue(ca, "x", ("h",), NOW, 30)
    assert certificates.needs_renewal(None, ca, ("h",), NOW, 5) == "missing"
    assert certificates.needs_renewal(cert, other, ("h",), NOW, 5) == "another CA"
    assert certificates.needs_renewal(cert, ca, ("h", "i"), NOW, 5) == "names changed"
    assert certificates.needs_renewal(cert, ca, ("h",), NOW + datetime.timedelta(days=26), 5) == "expires soon"
    assert certificates.needs_renewal(cert, ca, ("h",), NOW, 5) is None


def test_external_listeners_advertise_the_address_once_known_and_roll_once():
    body = {"metadata": {"name": "demo", "namespace": "kafka", "uid": "u"}}
    spec = parse_spec({"listeners": [{"name": "lb", "port": 9094, "type": "loadbalancer", "tls": True},
                                     {"name": "np", "port": 9095, "type": "nodeport", "tls": True}],
                       "brokers": {"replicas": 2}})
    services = {"demo-broker-0-lb": {"status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.7"}]}}},
                "demo-broker-0-np": {"spec": {"ports": [{"port": 9095, "nodePort": 31234}]}},
                "demo-broker-1-lb": {"status": {}},  # not assigned yet
                "demo-broker-1-np": {"spec": {"ports": [{"port": 9095, "nodePort": 31235}]}}}
    addresses = cluster_security.advertised_addresses("demo", spec, 2, services)
    assert addresses == {"demo-broker-0": "LB://203.0.113.7:9094,NP://@HOST_IP@:31234"}
    before = cluster_security.broker_config_hash(body, spec, {})
    assert cluster_security.broker_config_hash(body, spec, addresses) != before  # the brokers read it at start
    objs = {(o["kind"], o["metadata"]["name"]): o
            for o in cluster_security.desired_objects(body, spec, addresses=addresses)}
    assert objs[("ConfigMap", "demo-broker-addresses")]["data"] == addresses
    pod = objs[("StatefulSet", "demo-broker")]["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert {"name": "HOST_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}} in container["env"]
    assert 'ext="LB://${POD_NAME}.demo-broker-headless' in container["command"][-1]  # until the address is known
    for obj in objs.values():
        validate(obj)
    assert restricted_violations(pod) == []


def test_a_clients_ca_certificate_cannot_spell_a_super_user():
    """On a tls client listener a KafkaUser's certificate is `User:CN=<name>`, and one that copies
    the cluster's own subject is not the super user that subject is on the operator's listeners."""
    client = SslPrincipalMapper(cluster_security.USER_PRINCIPAL_RULES)
    own = SslPrincipalMapper("DEFAULT")
    supers = certificates.super_users("demo")
    for role in ("broker", "controller", "operator"):
        subject = f"CN={certificates.common_name('demo', role)},O={certificates.ORGANIZATION}"
        assert f"User:{own.name(subject)}" in supers
        assert f"User:{client.name(subject)}" not in supers
    assert client.name("CN=orders-reader") == "CN=orders-reader"


def test_live_keys_stay_out_of_a_secured_clusters_restart_hash():
    """With its own listeners and TLS the brokers' hash is the secured server.properties, still
    without the keys the brokers apply live (sent by IncrementalAlterConfigs instead)."""
    body = {"metadata": {"name": "demo", "namespace": "kafka", "uid": "u"}}

    def spec(config):
        return parse_spec({"listeners": [{"name": "tls", "port": 9093, "type": "internal", "tls": True}],
                           "brokers": {"replicas": 2, "config": config}})

    base = cluster_security.broker_config_hash(body, spec({"log.retention.ms": 1000, "num.partitions": 3}))
    live = spec({"log.retention.ms": 2000, "num.partitions": 3, "listener.name.tls.ssl.keystore.location": "/k"})
    assert cluster_security.broker_config_hash(body, live) == base
    assert cluster_security.broker_config_hash(body, spec({"log.retention.ms": 1000, "num.partitions": 4})) != base
    objs = {(o["kind"], o["metadata"]["name"]): o for o in cluster_security.desired_objects(body, live)}
    assert objs[("StatefulSet", "demo-broker")]["spec"]["template"]["metadata"]["annotations"][
        builders.CONFIG_HASH] == base
    assert "log.retention.ms=2000\n" in objs[("ConfigMap", "demo-broker")]["data"]["server.properties"]

"""The security of a KafkaCluster's objects: spec.listeners, spec.authorization, certificates and
NetworkPolicies, laid over what operator/builders renders (a pure function, objects in, objects out).

A cluster with today's default (one PLAINTEXT listener, no authorization) renders exactly as
before. A secured one (a TLS or authenticated listener, or authorization) gets, as
`odradek dev --security` does locally:
- brokers: the client listeners of the spec, REPLICATION (inter-broker traffic and the operator's
  admin connections) and CONTROLLER (controller requests), both mutual TLS with cluster-CA
  certificates; each broker's key store from the Secret `<cluster>-broker-certs`, reloaded by
  content when the operator renews it (no restart);
- the controller's listener on mutual TLS; brokers do not check its host name (controllers are
  reached by pod IP), only that its certificate comes from the cluster CA;
- `zookeeper.set.acl` with the cluster's digest identity (Secret `<cluster>-zookeeper-client`);
- the authorizer with the cluster's own principals (operator/certificates.super_users) and the
  spec's super users;
- NetworkPolicies: ZooKeeper only from the cluster's pods and the operator, the operator's
  listeners only from the cluster's pods and the operator, each client listener from its
  allowedPeers (everyone when unset), metrics from everyone.
Every broker, controller and ZooKeeper pod runs without a service-account token: none of them
calls the Kubernetes API.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from odradek.operator import builders, certificates
from odradek.operator.certificates import CERTS_DIR, ZOOKEEPER_JAAS_DIR
from odradek.operator.models import KafkaClusterSpec, Listener

REPLICATION = "REPLICATION"
CONTROL_PLANE = "CONTROLLER"
ACL_AUTHORIZER = "kafka.security.authorizer.AclAuthorizer"
USER_PRINCIPAL_RULES = rf"RULE:^CN=([^,]+),O={certificates.ORGANIZATION}$/$1/,DEFAULT"
"""Client listeners with tls authentication: a KafkaUser's certificate (subject `CN=<user>`, see
operator/users.py) maps by DEFAULT to `User:CN=<user>`, the principal its ACLs name. The RULE is
a guard: a clients-CA certificate that spells the cluster's own subject `CN=<x>,O=odradek.io`
becomes `User:<x>`, never the super user `User:CN=<x>,O=odradek.io` that the operator's own
listeners (DEFAULT, cluster CA) give the brokers, controllers and operator."""
OPERATOR_PEER = {"namespaceSelector": {}, "podSelector": {"matchLabels": {
    "app.kubernetes.io/name": "odradek", "app.kubernetes.io/component": "operator"}}}
"""The operator's pods (the chart's labels), in whatever namespace they run."""
SECRET_MODE = 0o440
ADDRESSES_DIR = "/etc/odradek-addresses"
"""External listeners: the operator's per-broker advertised addresses (a ConfigMap), read at start."""
HOST_IP = "@HOST_IP@"
"""Stands for the node's address (the pod's status.hostIP) in a nodeport listener's address."""


def advertised_addresses(cluster: str, spec: KafkaClusterSpec, brokers: int,
                         services: Mapping[str, Mapping[str, Any] | None]) -> dict[str, str]:
    """Pod name -> the advertised entries of its external listeners (`EXT://host:port,...`), for
    the brokers whose every external address is known: a load balancer's ingress address, or the
    node's address (HOST_IP) and the Service's node port. `services` holds the per-broker Services
    found (name -> object or None)."""
    n = builders.names(cluster)
    out: dict[str, str] = {}
    for i in range(brokers):
        entries = []
        for lst in spec.listeners:
            if lst.type == "internal":
                continue
            svc = services.get(f"{n['broker']}-{i}-{lst.name}") or {}
            if lst.type == "loadbalancer":
                ingress = ((svc.get("status") or {}).get("loadBalancer") or {}).get("ingress") or [{}]
                host, port = ingress[0].get("ip") or ingress[0].get("hostname"), lst.port
            else:
                ports = (svc.get("spec") or {}).get("ports") or [{}]
                host, port = HOST_IP, ports[0].get("nodePort")
            if not host or not port:
                break
            entries.append(f"{lst.kafka_name}://{host}:{port}")
        else:
            if entries:
                out[f"{n['broker']}-{i}"] = ",".join(entries)
    return out


def default_listeners(spec: KafkaClusterSpec) -> bool:
    """Today's rendering: one plaintext `plaintext` listener on 9092 (the CONTROLLER control plane)."""
    return (not spec.secured and len(spec.listeners) == 1 and spec.listeners[0].name == "plaintext"
            and spec.listeners[0].port == builders.BROKER_PORT and spec.listeners[0].type == "internal")


def broker_properties(body: dict[str, Any], spec: KafkaClusterSpec) -> dict[str, Any]:
    """server.properties shared by every broker (the key store per pod comes with the command)."""
    props = builders.broker_properties(body, spec)
    if default_listeners(spec):
        return props
    own = [(REPLICATION, builders.REPLICATION_PORT)] if spec.secured else []
    own.append((CONTROL_PLANE, builders.BROKER_CONTROL_PORT))
    listeners = [(lst.kafka_name, lst.port) for lst in spec.listeners] + own
    props["listeners"] = ",".join(f"{n}://0.0.0.0:{p}" for n, p in listeners)
    own_protocol = "SSL" if spec.secured else "PLAINTEXT"
    protocols = [(lst.kafka_name, lst.security_protocol) for lst in spec.listeners]
    protocols += [(n, own_protocol) for n, _ in own]
    props["listener.security.protocol.map"] = ",".join(f"{n}:{p}" for n, p in protocols)
    props["control.plane.listener.name"] = CONTROL_PLANE
    if not spec.secured:
        props["inter.broker.listener.name"] = spec.listeners[0].kafka_name
        return props
    props.update({
        "inter.broker.listener.name": REPLICATION,
        "ssl.keystore.type": "PEM", "ssl.truststore.type": "PEM",
        "ssl.truststore.location": f"{CERTS_DIR}/ca.crt",
        "ssl.endpoint.identification.algorithm": "https",
        "listener.name.replication.ssl.client.auth": "required",
        "listener.name.controller.ssl.client.auth": "required",
        # controllers are reached by pod IP: their certificate is checked, their host name cannot be
        "listener.name.controller.ssl.endpoint.identification.algorithm": "",
        **_zookeeper_acl(),
    })
    for lst in spec.listeners:
        prefix = f"listener.name.{lst.name}."
        if lst.authentication.type == "tls":
            props.update({f"{prefix}ssl.client.auth": "required",
                          f"{prefix}ssl.truststore.location": f"{CERTS_DIR}/clients-ca.crt",
                          f"{prefix}ssl.principal.mapping.rules": USER_PRINCIPAL_RULES})
        elif lst.authentication.type == "scram-sha-512":
            props[f"{prefix}sasl.enabled.mechanisms"] = "SCRAM-SHA-512"
    if spec.authorization is not None:
        supers = [*certificates.super_users(body["metadata"]["name"]), *spec.authorization.super_users]
        props.update({"authorizer.class.name": ACL_AUTHORIZER, "super.users": ";".join(supers)})
    return props


def _zookeeper_acl() -> dict[str, str]:
    return {"zookeeper.set.acl": "true", "java.security.auth.login.config": f"{ZOOKEEPER_JAAS_DIR}/jaas.conf"}


def controller_properties(body: dict[str, Any], spec: KafkaClusterSpec) -> dict[str, Any]:
    props = builders.controller_properties(body, spec)
    if not spec.secured:
        return props
    props.update({
        "listener.security.protocol.map": f"{CONTROL_PLANE}:SSL",
        "control.plane.listener.name": CONTROL_PLANE, "inter.broker.listener.name": REPLICATION,
        "ssl.keystore.type": "PEM", "ssl.keystore.location": f"{CERTS_DIR}/controller.pem",
        "ssl.truststore.type": "PEM", "ssl.truststore.location": f"{CERTS_DIR}/ca.crt",
        "ssl.client.auth": "required", "ssl.endpoint.identification.algorithm": "https",
        **_zookeeper_acl(),
    })
    return props


def _broker_text(body: dict[str, Any], spec: KafkaClusterSpec, addresses: Mapping[str, str] | None = None,
                 static_only: bool = False) -> str:
    """server.properties; with external addresses known, a comment naming them: a broker reads
    its address at start, so a new one restarts the brokers (once, when the cloud assigns it).
    `static_only`: without the keys the brokers apply live (what the pods' config hash covers)."""
    props = broker_properties(body, spec)
    text = builders._properties({k: v for k, v in props.items() if builders.restarts(k)} if static_only else props)
    if addresses:
        text += f"# external advertised listeners: {json.dumps(dict(sorted(addresses.items())))}\n"
    if spec.brokers.rack:  # as builders._broker_properties_text
        text += (f"# broker.rack: the node label {spec.brokers.rack.topology_key} "
                 f"({builders.RACKS_DIR}/<node>)\n")
    return text


def broker_config_hash(body: dict[str, Any], spec: KafkaClusterSpec, addresses: Mapping[str, str] | None = None) -> str:
    """What forces a broker restart, security included (a renewed certificate is not in it)."""
    if default_listeners(spec):
        return builders.broker_config_hash(body, spec)
    return builders.config_hash(_broker_text(body, spec, addresses, static_only=True), builders.image(spec))


def _advertised(body: dict[str, Any], spec: KafkaClusterSpec, external: bool) -> str:
    """The pod's in-cluster names for the internal listeners (external: the external ones,
    advertised so until their addresses are known)."""
    n = builders.names(body["metadata"]["name"])
    pod_dns = f"${{POD_NAME}}.{n['broker_headless']}.${{POD_NAMESPACE}}.svc"
    listeners = [(lst.kafka_name, lst.port) for lst in spec.listeners if (lst.type != "internal") == external]
    if spec.secured and not external:
        listeners.append((REPLICATION, builders.REPLICATION_PORT))
    if not external:
        listeners.append((CONTROL_PLANE, builders.BROKER_CONTROL_PORT))
    return ",".join(f"{name}://{pod_dns}:{port}" for name, port in listeners)


def _advertised_command(body: dict[str, Any], spec: KafkaClusterSpec) -> tuple[str, str]:
    """(shell prefix, advertised.listeners value): external listeners take the address the
    operator found for this pod (ADDRESSES_DIR/<pod>), else the pod's in-cluster name."""
    internal = _advertised(body, spec, external=False)
    if all(lst.type == "internal" for lst in spec.listeners):
        return "", internal
    fallback = _advertised(body, spec, external=True)
    prefix = (f'ext=$(sed "s/{HOST_IP}/${{HOST_IP}}/g" "{ADDRESSES_DIR}/${{POD_NAME}}" 2>/dev/null); '
              f'[ -n "$ext" ] || ext="{fallback}"; ')
    return prefix, f"{internal},$ext"


def _secret_volume(name: str, secret: str, items: list[str] | None = None) -> dict[str, Any]:
    source: dict[str, Any] = {"secretName": secret, "defaultMode": SECRET_MODE}
    if items:
        source["items"] = [{"key": k, "path": k} for k in items]
    return {"name": name, "secret": source}


def _mount_security(pod_spec: dict[str, Any], container: dict[str, Any], certs_secret: str,
                    zookeeper_secret: str) -> None:
    """The certificate Secret and the ZooKeeper JAAS file, mounted whole (no subPath: the
    kubelet then swaps renewed files in place, and the process reloads them)."""
    pod_spec["volumes"] = [*pod_spec["volumes"], _secret_volume("certs", certs_secret),
                           _secret_volume("zookeeper-client", zookeeper_secret, ["jaas.conf"])]
    container["volumeMounts"] = [*container["volumeMounts"],
                                 {"name": "certs", "mountPath": CERTS_DIR, "readOnly": True},
                                 {"name": "zookeeper-client", "mountPath": ZOOKEEPER_JAAS_DIR, "readOnly": True}]


def _ports(spec: KafkaClusterSpec) -> list[tuple[str, int]]:
    return [(lst.name, lst.port) for lst in spec.listeners]


def desired_objects(body: dict[str, Any], spec: KafkaClusterSpec, broker_replicas: int | None = None,
                    zookeeper_replicas: int | None = None, racks: dict[str, str] | None = None,
                    addresses: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """builders.desired_objects with the cluster's listeners, security and network policies;
    `addresses` are the external listeners' advertised addresses (advertised_addresses)."""
    objects = builders.desired_objects(body, spec, broker_replicas, zookeeper_replicas, racks)
    external = any(lst.type != "internal" for lst in spec.listeners)
    for obj in objects:
        if obj["kind"] in ("StatefulSet", "Deployment"):
            obj["spec"]["template"]["spec"]["automountServiceAccountToken"] = False
    if default_listeners(spec):
        return objects
    meta = body["metadata"]
    n = builders.names(meta["name"])
    by_name = {(o["kind"], o["metadata"]["name"]): o for o in objects}
    # brokers
    by_name[("ConfigMap", n["broker"])]["data"]["server.properties"] = _broker_text(body, spec, addresses)
    sts = by_name[("StatefulSet", n["broker"])]
    template = sts["spec"]["template"]
    template["metadata"]["annotations"][builders.CONFIG_HASH] = broker_config_hash(body, spec, addresses)
    pod_spec = template["spec"]
    container = pod_spec["containers"][0]
    prefix, advertised = _advertised_command(body, spec)
    if prefix:
        advertised = f'"{advertised}"'
    if spec.secured:
        advertised += f" --override ssl.keystore.location={CERTS_DIR}/${{POD_NAME}}.pem"
    container["command"] = ["sh", "-c", prefix + builders._broker_command(advertised, spec)]
    address_map = []
    if external:
        container["env"] = [*container["env"], {"name": "HOST_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}}]
        container["volumeMounts"] = [*container["volumeMounts"], {"name": "addresses", "mountPath": ADDRESSES_DIR}]
        pod_spec["volumes"] = [*pod_spec["volumes"], {"name": "addresses", "configMap": {"name": f"{n['broker']}-addresses"}}]
        address_map = [builders._config_map(body, f"{n['broker']}-addresses", "broker", dict(sorted((addresses or {}).items())))]
    ports = [{"name": name, "containerPort": port} for name, port in _ports(spec)]
    if spec.secured:
        ports.append({"name": "replication", "containerPort": builders.REPLICATION_PORT})
    container["ports"] = ports + [p for p in container["ports"] if p["name"] != "kafka"]
    if spec.secured:
        _mount_security(pod_spec, container, n["broker_certs"], n["zookeeper_client"])
    own_port = [("replication", builders.REPLICATION_PORT)] if spec.secured else []
    for service in (n["broker_headless"], n["bootstrap"]):
        by_name[("Service", service)]["spec"]["ports"] = [
            {"name": p, "port": port, "targetPort": port} for p, port in _ports(spec) + own_port]
    # controllers
    if spec.secured:
        props = builders._properties(controller_properties(body, spec))
        by_name[("ConfigMap", n["controller"])]["data"]["controller.properties"] = props
        deployment = by_name[("Deployment", n["controller"])]
        template = deployment["spec"]["template"]
        template["metadata"]["annotations"][builders.CONFIG_HASH] = builders.config_hash(props, builders.image(spec))
        container = template["spec"]["containers"][0]
        container["command"] = [c.replace("--override listeners=PLAINTEXT://", f"--override listeners={CONTROL_PLANE}://")
                                for c in container["command"]]
        _mount_security(template["spec"], container, n["controller_certs"], n["zookeeper_client"])
    extra = external_services(body, spec, broker_replicas if broker_replicas is not None else spec.brokers.replicas)
    policies = network_policies(body, spec) if spec.secured else []
    return [*address_map, *objects, *extra, *policies]


def external_services(body: dict[str, Any], spec: KafkaClusterSpec, brokers: int) -> list[dict[str, Any]]:
    """For each nodeport/loadbalancer listener: a bootstrap Service and one Service per broker
    (its pod by name), of the listener's type."""
    meta = body["metadata"]
    n = builders.names(meta["name"])
    out = []
    for lst in spec.listeners:
        if lst.type == "internal":
            continue
        kind = "NodePort" if lst.type == "nodeport" else "LoadBalancer"
        targets = [(f"{meta['name']}-{lst.name}-bootstrap", builders.selector(meta["name"], "broker"))]
        targets += [(f"{n['broker']}-{i}-{lst.name}",
                     {**builders.selector(meta["name"], "broker"),
                      "statefulset.kubernetes.io/pod-name": f"{n['broker']}-{i}"}) for i in range(brokers)]
        for name, select in targets:
            svc = builders._service(body, name, "broker", [(lst.name, lst.port)])
            svc["spec"].update(type=kind, selector=select)
            out.append(svc)
    return out


def _cluster_peers(cluster: str) -> list[dict[str, Any]]:
    return [{"podSelector": {"matchLabels": {"app.kubernetes.io/instance": cluster,
                                             "app.kubernetes.io/part-of": "odradek"}}}, OPERATOR_PEER]


def _policy(body: dict[str, Any], name: str, component: str, rules: list[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": builders.object_meta(body, name, component),
            "spec": {"podSelector": {"matchLabels": builders.selector(body["metadata"]["name"], component)},
                     "policyTypes": ["Ingress"], "ingress": rules}}


def _tcp(*ports: int) -> list[dict[str, Any]]:
    return [{"protocol": "TCP", "port": p} for p in ports]


def network_policies(body: dict[str, Any], spec: KafkaClusterSpec) -> list[dict[str, Any]]:
    """Ingress rules of a secured cluster; a pod selected by a policy accepts only what a rule allows."""
    cluster = body["metadata"]["name"]
    own = _cluster_peers(cluster)
    metrics = {"ports": _tcp(builders.METRICS_PORT)}
    out = [
        _policy(body, f"{cluster}-broker-internal", "broker", [
            {"from": own, "ports": _tcp(builders.REPLICATION_PORT, builders.BROKER_CONTROL_PORT)}, metrics]),
        _policy(body, f"{cluster}-controller", "controller", [
            {"from": own, "ports": _tcp(builders.CONTROLLER_PORT)}, metrics]),
    ]
    for lst in spec.listeners:
        out.append(_policy(body, f"{cluster}-listener-{lst.name}", "broker", [_listener_rule(lst)]))
    if spec.zookeeper.managed:
        out.append(_policy(body, f"{cluster}-zookeeper", "zookeeper", [
            {"from": own, "ports": _tcp(builders.ZK_CLIENT_PORT, 2888, 3888)},
            {"ports": _tcp(builders.ZK_METRICS_PORT)}]))
    return out


def _listener_rule(lst: Listener) -> dict[str, Any]:
    rule: dict[str, Any] = {"ports": _tcp(lst.port)}
    if lst.allowed_peers is not None:
        rule["from"] = [p.model_dump(by_alias=True, exclude_none=True) for p in lst.allowed_peers]
    return rule

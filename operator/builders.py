"""Desired Kubernetes objects as pure functions of a KafkaCluster (no API server needed).

Broker id = StatefulSet ordinal (pod `<name>-broker-<id>`). Brokers roll under the operator's
control (`updateStrategy: OnDelete`): the pod template carries a config hash, and the operator
deletes one pod at a time whose hash differs (see odradek.operator.rolling).
"""

import hashlib
import json
from typing import Any

from odradek.common.dynamic_broker_keys import is_live, is_live_per_broker
from odradek.operator.models import (
    DEFAULT_IMAGE,
    GROUP,
    KIND,
    VERSION,
    KafkaClusterSpec,
    PodSettings,
    Resources,
    Storage,
    parse_spec,
)
from odradek.operator.zookeeper_reconfig import Member

BROKER_PORT = 9092
BROKER_CONTROL_PORT = 9091
"""The brokers' control-plane listener (control.plane.listener.name=CONTROLLER): only the
controller connects to it, as advertised in each broker's registration; no Service exposes it."""
REPLICATION_PORT = 9090
"""Secured clusters: the brokers' REPLICATION listener (inter-broker traffic and the operator's
admin connections), mutual TLS with cluster-CA certificates only."""
CONTROLLER_PORT = 9190  # the controller listener (ControllerConfig default), rendered explicitly
ZK_CLIENT_PORT = 2181
METRICS_PORT = 9404
"""Every broker and controller serves Prometheus metrics here (GET /metrics); spec.metrics.enabled
only exposes it (a named container port and the scrape annotations), so turning it on or off
restarts nothing."""
ZK_METRICS_PORT = 7000
"""ZooKeeper's own Prometheus provider (3.6+) serves GET /metrics here, always on; spec.metrics.enabled
exposes it like the brokers' (a container port named `metrics` and the scrape annotations)."""
ZK_METRICS_PROVIDER = "org.apache.zookeeper.metrics.prometheus.PrometheusMetricsProvider"
ZK_DATA = "/data"  # the ZooKeeper member's persistent volume
CONFIG_HASH = f"{GROUP}/config-hash"
CONFIG_DIR = "/etc/odradek"
DATA_DIR = "/var/lib/odradek"
PROBE = ["python", "-m", "odradek.operator.probe"]
PROBE_TIMEOUT_SECONDS = 5
"""The health endpoint answers from the process's event loop: no answer within this is a hung
loop (or one too busy to serve clients either); three in a row (30 s) fail a probe, so one slow
answer during a roll changes nothing."""


def health_probe(path: str, **extra: int) -> dict[str, Any]:
    """An httpGet probe on the process's own health endpoint (served on the metrics port by
    common/metrics.MetricsServer: /healthz while the event loop runs, /readyz its readiness)."""
    return {"httpGet": {"path": path, "port": METRICS_PORT}, "periodSeconds": 10,
            "timeoutSeconds": PROBE_TIMEOUT_SECONDS, "failureThreshold": 3, **extra}
RACKS_DIR = "/etc/odradek-racks"
"""With brokers.rack: the node -> rack ConfigMap, one file per node, read at broker start."""
RACK_WAIT_SECONDS = 120


def image(spec: KafkaClusterSpec) -> str:
    """The broker and controller image: the spec's, else this operator's (see reconciler)."""
    return spec.image or DEFAULT_IMAGE


def labels(name: str, component: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "odradek",
        "app.kubernetes.io/instance": name,
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/part-of": "odradek",
        "app.kubernetes.io/managed-by": "odradek-operator",
    }


def selector(name: str, component: str) -> dict[str, str]:
    return {k: v for k, v in labels(name, component).items()
            if k in ("app.kubernetes.io/instance", "app.kubernetes.io/component")}


def owner_reference(body: dict[str, Any]) -> dict[str, Any]:
    meta = body["metadata"]
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "name": meta["name"],
            "uid": meta["uid"], "controller": True, "blockOwnerDeletion": True}


def object_meta(body: dict[str, Any], name: str, component: str, **extra: Any) -> dict[str, Any]:
    """The metadata of an object the cluster owns (its labels and owner reference), for every
    module that renders one (builders, cluster_security, the Secrets the reconciler writes)."""
    meta = body["metadata"]
    return {"name": name, "namespace": meta["namespace"], "labels": labels(meta["name"], component),
            "ownerReferences": [owner_reference(body)], **extra}


ODRADEK_UID = 10001  # the image's user (Dockerfile)
ZOOKEEPER_UID = 1000  # the official zookeeper image's user
BROKER_GRACE_SECONDS = 180
"""Longer than the broker's worst-case bounded shutdown: controlled shutdown (3 attempts of up to
30 s plus 5 s back-off) and the bounded stops after it (about a minute)."""


def _pod_security(uid: int) -> dict[str, Any]:
    """Pod Security "restricted": a non-root user, the runtime's default seccomp profile; the
    volumes group-owned by the user's group."""
    return {"runAsNonRoot": True, "runAsUser": uid, "runAsGroup": uid, "fsGroup": uid,
            "seccompProfile": {"type": "RuntimeDefault"}}


def _container_security(read_only_root: bool) -> dict[str, Any]:
    return {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
            "readOnlyRootFilesystem": read_only_root}


def _scheduling(pod_spec: dict[str, Any], settings: PodSettings, selector_labels: dict[str, Any]) -> dict[str, Any]:
    """Node selector, tolerations, priority class and anti-affinity (by node) from PodSettings."""
    if settings.node_selector:
        pod_spec["nodeSelector"] = dict(settings.node_selector)
    if settings.tolerations:
        pod_spec["tolerations"] = [t.model_dump(by_alias=True, exclude_none=True) for t in settings.tolerations]
    if settings.priority_class_name:
        pod_spec["priorityClassName"] = settings.priority_class_name
    term = {"labelSelector": {"matchLabels": selector_labels}, "topologyKey": "kubernetes.io/hostname"}
    if settings.anti_affinity == "required":
        pod_spec["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    elif settings.anti_affinity == "preferred":
        pod_spec["affinity"] = {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 100, "podAffinityTerm": term}]}}
    return pod_spec


TMP_VOLUME = {"name": "tmp", "emptyDir": {"medium": "Memory", "sizeLimit": "64Mi"}}
TMP_MOUNT = {"name": "tmp", "mountPath": "/tmp"}


def _resources(res: Resources) -> dict[str, Any]:
    return {k: v for k, v in (("requests", res.requests), ("limits", res.limits)) if v}


def _claim(storage: Storage) -> dict[str, Any]:
    spec: dict[str, Any] = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": storage.size}}}
    if storage.storage_class:
        spec["storageClassName"] = storage.storage_class
    return {"metadata": {"name": "data"}, "spec": spec}


def _retention(storage: Storage) -> dict[str, Any]:
    return {"whenDeleted": "Delete" if storage.delete_claim else "Retain", "whenScaled": "Retain"}


def _text(v: object) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


def _properties(props: dict[str, Any]) -> str:
    return "".join(f"{k}={_text(v)}\n" for k, v in sorted(props.items()))


def _pdb(body: dict[str, Any], name: str, component: str) -> dict[str, Any]:
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": object_meta(body, name, component),
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": selector(body["metadata"]["name"], component)}}}


def _service(body: dict[str, Any], name: str, component: str, ports: list[tuple[str, int]],
             headless: bool = False) -> dict[str, Any]:
    spec: dict[str, Any] = {"selector": selector(body["metadata"]["name"], component),
            "ports": [{"name": n, "port": p, "targetPort": p} for n, p in ports]}
    if headless:
        spec.update(clusterIP="None", publishNotReadyAddresses=True)
    return {"apiVersion": "v1", "kind": "Service", "metadata": object_meta(body, name, component), "spec": spec}


def _config_map(body: dict[str, Any], name: str, component: str, data: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": object_meta(body, name, component), "data": data}


def _pod_env() -> list[dict[str, Any]]:
    def field(path: str) -> dict[str, Any]:
        return {"valueFrom": {"fieldRef": {"fieldPath": path}}}
    return [{"name": "POD_NAME", **field("metadata.name")}, {"name": "POD_IP", **field("status.podIP")},
            {"name": "POD_NAMESPACE", **field("metadata.namespace")}]


# --- names ------------------------------------------------------------------------------------

def names(name: str) -> dict[str, str]:
    return {
        "zookeeper": f"{name}-zookeeper", "zookeeper_headless": f"{name}-zookeeper-headless",
        "controller": f"{name}-controller", "broker": f"{name}-broker",
        "broker_headless": f"{name}-broker-headless", "bootstrap": f"{name}-bootstrap",
        "broker_racks": f"{name}-broker-racks",
        # security (operator/certificates): CAs, per-component certificates, ZooKeeper identity
        "cluster_ca": f"{name}-cluster-ca", "cluster_ca_cert": f"{name}-cluster-ca-cert",
        "clients_ca": f"{name}-clients-ca", "clients_ca_cert": f"{name}-clients-ca-cert",
        "broker_certs": f"{name}-broker-certs", "controller_certs": f"{name}-controller-certs",
        "operator_certs": f"{name}-operator-certs", "zookeeper_client": f"{name}-zookeeper-client",
        # the ensemble's seed member list (zookeeper_start_script) and its super user (reconfig)
        "zookeeper_members": f"{name}-zookeeper-members", "zookeeper_admin": f"{name}-zookeeper-admin",
    }


def zookeeper_connect(body: dict[str, Any], spec: KafkaClusterSpec) -> str:
    if spec.zookeeper.connect is not None:  # not managed: an existing ensemble
        return spec.zookeeper.connect
    meta = body["metadata"]
    return f"{names(meta['name'])['zookeeper']}.{meta['namespace']}.svc:{ZK_CLIENT_PORT}/odradek"


def replication_bootstrap(body: dict[str, Any]) -> tuple[str, int]:
    """Where the operator bootstraps its admin connections to a secured cluster (mutual TLS)."""
    meta = body["metadata"]
    return f"{names(meta['name'])['bootstrap']}.{meta['namespace']}.svc", REPLICATION_PORT


def bootstrap_servers(body: dict[str, Any]) -> str:
    """The bootstrap Service at the first internal client listener (spec.listeners; 9092 by default)."""
    meta = body["metadata"]
    port = BROKER_PORT
    try:
        listeners = parse_spec(body.get("spec")).listeners
        port = next((lst.port for lst in listeners if lst.type == "internal"), listeners[0].port)
    except ValueError:  # an invalid spec (pydantic's ValidationError) is reported elsewhere
        pass
    return f"{names(meta['name'])['bootstrap']}.{meta['namespace']}.svc:{port}"


# --- ZooKeeper ----------------------------------------------------------------------------------

def zookeeper_probe(word: str, expect: str, port: int = ZK_CLIENT_PORT) -> list[str]:
    """A probe command sending a four-letter word (whitelisted in ZOO_4LW_COMMANDS_WHITELIST) with
    bash builtins only, passing when a line of the answer starts with `expect` (ruok's imok ends
    without a newline: the last, unterminated line counts too)."""
    script = (f"exec 3<>/dev/tcp/127.0.0.1/{port} && printf {word} >&3 && "
              f"while IFS= read -r line <&3 || [[ -n $line ]]; do [[ $line == '{expect}'* ]] && exit 0; done; exit 1")
    return ["bash", "-c", script]


ZK_PEER_PORT, ZK_ELECTION_PORT = 2888, 3888
ZK_MEMBERS_DIR = "/etc/zookeeper-members"
"""The members ConfigMap's mount: `zoo.cfg.dynamic`, read only on a member's first start."""
ZK_DYNAMIC_FILE = "zoo.cfg.dynamic"
ZK_SUPER_DIGEST_ENV = "ZK_SUPER_DIGEST"
"""The super user's digest (`super:<base64 sha1>`), from the admin Secret, into the JVM's flags:
the operator's `reconfig` authenticates as that user (zookeeper_ensemble); the password itself
never reaches the pod."""


def zookeeper_members(body: dict[str, Any], count: int) -> dict[int, Member]:
    """Members 1..count (myid = StatefulSet ordinal + 1) at their pods' stable names."""
    meta = body["metadata"]
    n = names(meta["name"])
    return {i: Member(i, f"{n['zookeeper']}-{i - 1}.{n['zookeeper_headless']}.{meta['namespace']}.svc",
                      ZK_PEER_PORT, ZK_ELECTION_PORT, ZK_CLIENT_PORT) for i in range(1, count + 1)}


def zookeeper_start_script() -> str:
    """The member's start script (replacing the image's entrypoint, which writes a static server
    list). The dynamic configuration lives on the data volume: ZooKeeper rewrites it at every
    `reconfig` (a new `zoo.cfg.dynamic.<version>` beside the old ones), so a restart resumes from
    the newest version; only a member's first start (no file yet) copies the operator's seed
    list. zoo.cfg itself is written from the ZOO_* environment at every start (what the image's
    entrypoint reads), so config changes still reach members through the hashed ConfigMap."""
    return "\n".join([
        "set -eu",
        'data="$ZOO_DATA_DIR"; dir="$data/conf"; dyn=""; best=-1',
        'mkdir -p "$dir" "$ZOO_DATA_LOG_DIR"',
        'echo $(( ${HOSTNAME##*-} + 1 )) > "$data/myid"',
        f'for f in "$dir"/{ZK_DYNAMIC_FILE}.*; do',
        '  v="${f##*.}"',
        '  if [[ -f $f && $v =~ ^[0-9a-f]+$ ]] && (( 16#$v > best )); then best=$(( 16#$v )); dyn="$f"; fi',
        "done",
        'if [[ -z $dyn ]]; then',
        f'  dyn="$dir/{ZK_DYNAMIC_FILE}"',
        f'  [[ -s $dyn ]] || {{ cp "{ZK_MEMBERS_DIR}/{ZK_DYNAMIC_FILE}" "$dyn.tmp" && mv "$dyn.tmp" "$dyn"; }}',
        "fi",
        "{",
        '  echo "dataDir=$data"; echo "dataLogDir=$ZOO_DATA_LOG_DIR"',
        '  echo "tickTime=${ZOO_TICK_TIME:-2000}"; echo "initLimit=${ZOO_INIT_LIMIT:-5}"',
        '  echo "syncLimit=${ZOO_SYNC_LIMIT:-2}"; echo "maxClientCnxns=${ZOO_MAX_CLIENT_CNXNS:-60}"',
        '  echo "autopurge.snapRetainCount=$ZOO_AUTOPURGE_SNAPRETAINCOUNT"',
        '  echo "autopurge.purgeInterval=$ZOO_AUTOPURGE_PURGEINTERVAL"',
        '  echo "admin.enableServer=$ZOO_ADMINSERVER_ENABLED"',
        '  echo "4lw.commands.whitelist=$ZOO_4LW_COMMANDS_WHITELIST"',
        '  echo "standaloneEnabled=false"; echo "reconfigEnabled=true"',
        '  for line in ${ZOO_CFG_EXTRA:-}; do echo "$line"; done',
        '  echo "dynamicConfigFile=$dyn"',
        '} > "${ZOO_CONF_DIR:-/conf}/zoo.cfg"',
        'export SERVER_JVMFLAGS="${SERVER_JVMFLAGS:-} '
        f'-Dzookeeper.DigestAuthenticationProvider.superDigest=${ZK_SUPER_DIGEST_ENV}"',
        "exec zkServer.sh start-foreground",
        ""])


def zookeeper_members_config(body: dict[str, Any], count: int) -> dict[str, Any]:
    """The seed member list for a member's first start: members 1..count, the StatefulSet's size
    (during a scale-up the current voters plus the one being started, which syncs as a learner
    until `reconfig` adds it). Outside the pod template's hash: changing it rolls nothing."""
    text = "".join(m.line() + "\n" for m in zookeeper_members(body, count).values())
    return _config_map(body, names(body["metadata"]["name"])["zookeeper_members"], "zookeeper",
                       {ZK_DYNAMIC_FILE: text})


def zookeeper_objects(body: dict[str, Any], spec: KafkaClusterSpec, replicas: int | None = None) -> list[dict[str, Any]]:
    """`replicas` overrides the spec's ensemble size (during a scale the operator moves the
    StatefulSet one member at a time, operator/zookeeper_reconfig)."""
    if not spec.zookeeper.managed:
        return []
    meta, zk = body["metadata"], spec.zookeeper
    if replicas is not None:
        zk = zk.model_copy(update={"replicas": replicas})
    n = names(meta["name"])
    data = {
        "ZOO_ADMINSERVER_ENABLED": "false",  # unauthenticated commands on 8080; nothing uses it
        # conf: the operator reads the committed member list from the leader (zookeeper_ensemble)
        "ZOO_4LW_COMMANDS_WHITELIST": "srvr,ruok,conf",
        # Snapshots and transaction logs both on the volume (the image's default dataLogDir,
        # /datalog, is the container's own filesystem: a restarted member lost its log), and
        # autopurge on (hourly, keeping 3 snapshots with their logs), else the volume fills.
        "ZOO_DATA_DIR": ZK_DATA, "ZOO_DATA_LOG_DIR": f"{ZK_DATA}/datalog",
        "ZOO_AUTOPURGE_PURGEINTERVAL": "1", "ZOO_AUTOPURGE_SNAPRETAINCOUNT": "3",
        # zoo.cfg lines the start script appends (space-separated): the Prometheus provider.
        "ZOO_CFG_EXTRA": f"metricsProvider.className={ZK_METRICS_PROVIDER} "
                         f"metricsProvider.httpPort={ZK_METRICS_PORT} metricsProvider.exportJvmInfo=true",
    }
    # The image's zkEnv.sh turns ZK_SERVER_HEAP (MiB) into -Xmx; its default (1000) in a 1Gi
    # container left nothing for the rest of the JVM.
    if (heap := zk.heap_bytes()) is not None:
        data["ZK_SERVER_HEAP"] = str(max(1, heap // 2**20))
    if zk.jvm_options.xms is not None:
        data["SERVER_JVMFLAGS"] = f"-Xms{zk.jvm_options.xms}"
    config = _config_map(body, n["zookeeper"], "zookeeper", data)
    script = zookeeper_start_script()
    container = {
        "name": "zookeeper", "image": zk.image,
        "command": ["bash", "-c", script],
        "envFrom": [{"configMapRef": {"name": n["zookeeper"]}}],
        "env": [{"name": ZK_SUPER_DIGEST_ENV,
                 "valueFrom": {"secretKeyRef": {"name": n["zookeeper_admin"], "key": "digest"}}}],
        "ports": [{"name": "client", "containerPort": ZK_CLIENT_PORT},
                  {"name": "peer", "containerPort": ZK_PEER_PORT},
                  {"name": "election", "containerPort": ZK_ELECTION_PORT}],
        # Four-letter words over bash's /dev/tcp: no JVM started per probe (`zkServer.sh status`
        # started one every 10 s in the same memory limit). Ready = serving in the quorum (srvr
        # names its mode; a member without a quorum answers that it is not serving); alive =
        # its request threads answer (ruok), where a TCP connect passed while they hung.
        "readinessProbe": {"exec": {"command": zookeeper_probe("srvr", "Mode: ")},
                           "periodSeconds": 10, "timeoutSeconds": 5, "failureThreshold": 3},
        "livenessProbe": {"exec": {"command": zookeeper_probe("ruok", "imok")},
                          "initialDelaySeconds": 15, "periodSeconds": 10, "timeoutSeconds": 5,
                          "failureThreshold": 3},
        "volumeMounts": [{"name": "data", "mountPath": ZK_DATA},
                         {"name": "members", "mountPath": ZK_MEMBERS_DIR, "readOnly": True}],
        # The start script writes zoo.cfg to the image's /conf at start: the root filesystem stays writable.
        "securityContext": _container_security(read_only_root=False),
    }
    if _resources(zk.resources):
        container["resources"] = _resources(zk.resources)
    template_meta = {"labels": labels(meta["name"], "zookeeper"),
                     "annotations": {CONFIG_HASH: config_hash(json.dumps([data, script], sort_keys=True), zk.image)}}
    expose_metrics(container, template_meta, spec, ZK_METRICS_PORT)
    sts = {
        "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": object_meta(body, n["zookeeper"], "zookeeper"),
        "spec": {
            "serviceName": n["zookeeper_headless"], "replicas": zk.replicas,
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": selector(meta["name"], "zookeeper")},
            # A member removed by a scale-down is no longer in the ensemble and its data is in
            # every remaining member: its claim goes with it, so a later scale-up starts that
            # member fresh from the seed list instead of an old configuration.
            "persistentVolumeClaimRetentionPolicy": {**_retention(zk.storage), "whenScaled": "Delete"},
            # The environment comes from the ConfigMap, read at start: its hash in the template
            # makes the StatefulSet roll the members (one at a time, each Ready before the next).
            "template": {"metadata": template_meta,
                         "spec": _scheduling({"containers": [container],
                                              "securityContext": _pod_security(ZOOKEEPER_UID),
                                              "volumes": [{"name": "members",
                                                           "configMap": {"name": n["zookeeper_members"]}}]},
                                             zk.pod, selector(meta["name"], "zookeeper"))},
            "volumeClaimTemplates": [_claim(zk.storage)],
        },
    }
    return [
        config,
        zookeeper_members_config(body, zk.replicas),
        _service(body, n["zookeeper_headless"], "zookeeper",
                 [("client", ZK_CLIENT_PORT), ("peer", ZK_PEER_PORT), ("election", ZK_ELECTION_PORT)], headless=True),
        _service(body, n["zookeeper"], "zookeeper", [("client", ZK_CLIENT_PORT)]),
        sts,
        _pdb(body, n["zookeeper"], "zookeeper"),
    ]


# --- controller ---------------------------------------------------------------------------------

def controller_properties(body: dict[str, Any], spec: KafkaClusterSpec) -> dict[str, Any]:
    return {"zookeeper.connect": zookeeper_connect(body, spec),
            "default.replication.factor": min(3, spec.brokers.replicas),
            "metrics.port": METRICS_PORT, "metrics.host": "0.0.0.0"}


def expose_metrics(container: dict[str, Any], template_meta: dict[str, Any], spec: KafkaClusterSpec,
                   port: int = METRICS_PORT) -> None:
    """spec.metrics.enabled: the metrics port named on the container (for a PodMonitor) and the
    prometheus.io annotations (for annotation-based scraping)."""
    if not spec.metrics.enabled:
        return
    container["ports"].append({"name": "metrics", "containerPort": port})
    template_meta.setdefault("annotations", {}).update({
        "prometheus.io/scrape": "true", "prometheus.io/port": str(port), "prometheus.io/path": "/metrics"})


def controller_objects(body: dict[str, Any], spec: KafkaClusterSpec) -> list[dict[str, Any]]:
    meta = body["metadata"]
    n = names(meta["name"])
    props = _properties(controller_properties(body, spec))
    config = _config_map(body, n["controller"], "controller", {"controller.properties": props})
    container = {
        "name": "controller", "image": image(spec),
        # controller.id is derived from the pod name (the probe computes the same id).
        "command": ["sh", "-c",
                    f"exec odradek controller --config {CONFIG_DIR}/controller.properties "
                    f"--override controller.id=$({' '.join(PROBE)} controller-id) "
                    f"--override listeners=PLAINTEXT://${{POD_IP}}:{CONTROLLER_PORT}"],
        "env": _pod_env(),
        "ports": [{"name": "controller", "containerPort": CONTROLLER_PORT}],
        # Ready = connected to ZooKeeper, active or standby (the process's own word, /readyz).
        "readinessProbe": health_probe("/readyz"),
        # Alive = its event loop answers (/healthz); a ZooKeeper outage restarts no controller.
        "livenessProbe": health_probe("/healthz", initialDelaySeconds=10),
        "volumeMounts": [{"name": "config", "mountPath": CONFIG_DIR}, TMP_MOUNT],
        "securityContext": _container_security(read_only_root=True),
    }
    if _resources(spec.controller.resources):
        container["resources"] = _resources(spec.controller.resources)
    template_meta = {"labels": labels(meta["name"], "controller"),
                     "annotations": {CONFIG_HASH: config_hash(props, image(spec))}}
    expose_metrics(container, template_meta, spec)
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": object_meta(body, n["controller"], "controller"),
        "spec": {
            "replicas": spec.controller.replicas,
            "selector": {"matchLabels": selector(meta["name"], "controller")},
            "template": {
                "metadata": template_meta,
                "spec": _scheduling({"containers": [container], "securityContext": _pod_security(ODRADEK_UID),
                                     "volumes": [{"name": "config", "configMap": {"name": n["controller"]}},
                                                 TMP_VOLUME]},
                                    spec.controller.pod, selector(meta["name"], "controller")),
            },
        },
    }
    return [config, deployment, _pdb(body, n["controller"], "controller")]


# --- brokers --------------------------------------------------------------------------------------

def broker_properties(body: dict[str, Any], spec: KafkaClusterSpec) -> dict[str, Any]:
    """server.properties shared by every broker; broker.id and advertised.listeners come per pod."""
    defaults = {"default.replication.factor": min(3, spec.brokers.replicas),
                "min.insync.replicas": min(2, spec.brokers.replicas)}
    return {**defaults, **spec.brokers.config,
            "zookeeper.connect": zookeeper_connect(body, spec),
            "listeners": f"PLAINTEXT://0.0.0.0:{BROKER_PORT},CONTROLLER://0.0.0.0:{BROKER_CONTROL_PORT}",
            "log.dirs": f"{DATA_DIR}/logs", "metrics.port": METRICS_PORT, "metrics.host": "0.0.0.0"}


def config_hash(properties_text: str, image: str) -> str:
    """What forces a restart: the rendered config and the image (replica count is not in it)."""
    return hashlib.sha256(json.dumps([properties_text, image]).encode()).hexdigest()[:16]


def broker_config_hash(body: dict[str, Any], spec: KafkaClusterSpec) -> str:
    """The brokers' pod hash: the image and the keys a broker reads only at start. Keys it applies
    live (common/dynamic_broker_keys) are left out: the operator sends their changes through
    IncrementalAlterConfigs (dynamic_broker_config), so they restart nothing."""
    return config_hash(_broker_properties_text(body, spec, static_only=True), image(spec))


def restarts(key: str) -> bool:
    """Whether a change of broker key `key` needs a restart (it is in the pods' config hash):
    every key but those the brokers apply live, at the default or per broker."""
    return not is_live(key) and not is_live_per_broker(key)


def dynamic_broker_config(body: dict[str, Any], spec: KafkaClusterSpec) -> dict[str, str]:
    """The rendered keys every broker applies live, as text: the cluster-wide dynamic defaults
    (`/config/brokers/<default>`) and, for a listener's key stores, each broker's own dynamic
    configs, which the operator keeps equal to them (broker_config.apply_dynamic_defaults)."""
    return {k: _text(v) for k, v in broker_properties(body, spec).items() if not restarts(k)}


def _broker_properties_text(body: dict[str, Any], spec: KafkaClusterSpec, static_only: bool = False) -> str:
    """server.properties (every key: a broker starts with all of them); with a rack topology key,
    a comment naming it, so that turning the rack on or off (broker.rack is per pod, not in the
    file) changes the hash and rolls."""
    props = broker_properties(body, spec)
    text = _properties({k: v for k, v in props.items() if restarts(k)} if static_only else props)
    if spec.brokers.rack:
        text += f"# broker.rack: the node label {spec.brokers.rack.topology_key} ({RACKS_DIR}/<node>)\n"
    return text


def rack_map(nodes: list[dict[str, Any]], topology_key: str) -> dict[str, str]:
    """Node name -> its `topology_key` label, for every node that has the label (a broker on a
    node without it does not start: its placement would be wrong)."""
    out = {}
    for node in nodes:
        meta = node.get("metadata") or {}
        value = (meta.get("labels") or {}).get(topology_key)
        if value and meta.get("name"):
            out[meta["name"]] = value
    return dict(sorted(out.items()))


def _broker_command(advertised: str, spec: KafkaClusterSpec) -> str:
    start = (f"exec odradek broker --config {CONFIG_DIR}/server.properties "
             "--override broker.id=${POD_NAME##*-} "
             f"--override advertised.listeners={advertised}")
    if not spec.brokers.rack:
        return start
    # The operator keeps the node -> label map in a ConfigMap mounted here; a node that joined
    # the cluster a moment ago reaches the mounted copy at the kubelet's next sync.
    key = spec.brokers.rack.topology_key
    return (f'rack="{RACKS_DIR}/${{NODE_NAME}}"; i=0; '
            f'while [ ! -s "$rack" ] && [ $i -lt {RACK_WAIT_SECONDS} ]; do sleep 1; i=$((i+1)); done; '
            f'if [ ! -s "$rack" ]; then echo "node ${{NODE_NAME}} has no label {key}: '
            f'no broker.rack for this broker" >&2; exit 1; fi; '
            f'{start} --override "broker.rack=$(cat "$rack")"')


def broker_objects(body: dict[str, Any], spec: KafkaClusterSpec, replicas: int | None = None,
                   racks: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """`replicas` overrides the spec's count (the operator keeps brokers that still hold data);
    `racks` is the node -> rack map (rack_map) when the spec names a rack topology key."""
    meta = body["metadata"]
    n = names(meta["name"])
    props = _broker_properties_text(body, spec)
    config = _config_map(body, n["broker"], "broker", {"server.properties": props})
    pod_dns = f"${{POD_NAME}}.{n['broker_headless']}.${{POD_NAMESPACE}}.svc"
    advertised = f"PLAINTEXT://{pod_dns}:{BROKER_PORT},CONTROLLER://{pod_dns}:{BROKER_CONTROL_PORT}"
    container = {
        "name": "broker", "image": image(spec),
        "command": ["sh", "-c", _broker_command(advertised, spec)],
        "env": _pod_env(),
        "ports": [{"name": "kafka", "containerPort": BROKER_PORT},
                  {"name": "control", "containerPort": BROKER_CONTROL_PORT}],
        # Ready = registered (not fenced) and caught up (the controller's first UpdateMetadata),
        # client listeners serving: what the broker itself says on /readyz.
        "readinessProbe": health_probe("/readyz"),
        # Log recovery after an unclean stop can take long: liveness starts once the health
        # endpoint answers (startupProbe), allowing up to 30 minutes for that.
        "startupProbe": health_probe("/healthz", failureThreshold=180),
        "livenessProbe": health_probe("/healthz"),
        "volumeMounts": [{"name": "config", "mountPath": CONFIG_DIR}, {"name": "data", "mountPath": DATA_DIR},
                         TMP_MOUNT],
        "securityContext": _container_security(read_only_root=True),
    }
    if _resources(spec.brokers.resources):
        container["resources"] = _resources(spec.brokers.resources)
    pod_spec = _scheduling({"containers": [container], "terminationGracePeriodSeconds": BROKER_GRACE_SECONDS,
                            "securityContext": _pod_security(ODRADEK_UID),
                            "volumes": [{"name": "config", "configMap": {"name": n["broker"]}}, TMP_VOLUME]},
                           spec.brokers.pod, selector(meta["name"], "broker"))
    rack_objects = []
    if spec.brokers.rack:
        pod_spec["topologySpreadConstraints"] = [{
            "maxSkew": 1, "topologyKey": spec.brokers.rack.topology_key, "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": selector(meta["name"], "broker")}}]
        container["env"] = [*container["env"], {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]
        container["volumeMounts"] = [*container["volumeMounts"], {"name": "racks", "mountPath": RACKS_DIR}]
        pod_spec["volumes"] = [*pod_spec["volumes"], {"name": "racks", "configMap": {"name": n["broker_racks"]}}]
        rack_objects = [_config_map(body, n["broker_racks"], "broker", dict(racks or {}))]
    template_meta = {"labels": labels(meta["name"], "broker"),
                     "annotations": {CONFIG_HASH: broker_config_hash(body, spec)}}
    expose_metrics(container, template_meta, spec)
    sts = {
        "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": object_meta(body, n["broker"], "broker"),
        "spec": {
            "serviceName": n["broker_headless"],
            "replicas": spec.brokers.replicas if replicas is None else replicas,
            "podManagementPolicy": "Parallel",
            "updateStrategy": {"type": "OnDelete"},
            "selector": {"matchLabels": selector(meta["name"], "broker")},
            "persistentVolumeClaimRetentionPolicy": _retention(spec.brokers.storage),
            "template": {"metadata": template_meta, "spec": pod_spec},
            "volumeClaimTemplates": [_claim(spec.brokers.storage)],
        },
    }
    return [
        config,
        *rack_objects,
        _service(body, n["broker_headless"], "broker", [("kafka", BROKER_PORT)], headless=True),
        _service(body, n["bootstrap"], "broker", [("kafka", BROKER_PORT)]),
        sts,
        _pdb(body, n["broker"], "broker"),
    ]


def desired_objects(body: dict[str, Any], spec: KafkaClusterSpec, broker_replicas: int | None = None,
                    zookeeper_replicas: int | None = None, racks: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """Every object the cluster consists of, in the order to apply them."""
    objects = [*zookeeper_objects(body, spec, zookeeper_replicas), *controller_objects(body, spec),
               *broker_objects(body, spec, broker_replicas, racks), *metrics_objects(body, spec)]
    settings = {"zookeeper": spec.zookeeper.pod, "controller": spec.controller.pod, "broker": spec.brokers.pod}
    for obj in objects:
        component = obj["metadata"]["labels"].get("app.kubernetes.io/component", "")
        if obj["kind"] in ("StatefulSet", "Deployment") and component in settings:
            pod_template(obj["spec"]["template"], settings[component])
    return objects


def pod_template(template: dict[str, Any], settings: PodSettings) -> None:
    """The user's part of a component's pod template (spec.<component>.pod): extra labels,
    annotations and environment variables under the operator's own (which win: selectors, the
    config hash and the process's settings stay the operator's), pull secrets, a service account."""
    meta, pod = template["metadata"], template["spec"]
    if settings.labels:
        meta["labels"] = {**settings.labels, **meta["labels"]}
    if settings.annotations:
        meta["annotations"] = {**settings.annotations, **meta.get("annotations", {})}
    if settings.image_pull_secrets:
        pod["imagePullSecrets"] = [{"name": s.name} for s in settings.image_pull_secrets]
    if settings.service_account_name:
        pod["serviceAccountName"] = settings.service_account_name
    if settings.env:
        container = pod["containers"][0]
        own = {e["name"] for e in container.get("env", [])}
        extra = [{"name": e.name, "value": e.value} for e in settings.env if e.name not in own]
        container["env"] = [*container.get("env", []), *extra]


def metrics_objects(body: dict[str, Any], spec: KafkaClusterSpec) -> list[dict[str, Any]]:
    """spec.metrics.enabled: a headless Service `<name>-metrics` over every pod of the cluster for a
    ServiceMonitor; its port targets the containers' port named `metrics` (9404 on brokers and
    controllers, 7000 on ZooKeeper members)."""
    if not spec.metrics.enabled:
        return []
    name = body["metadata"]["name"]
    every_pod = {k: v for k, v in labels(name, "metrics").items() if k != "app.kubernetes.io/component"}
    return [{"apiVersion": "v1", "kind": "Service", "metadata": object_meta(body, f"{name}-metrics", "metrics"),
             "spec": {"clusterIP": "None", "publishNotReadyAddresses": True, "selector": every_pod,
                      "ports": [{"name": "metrics", "port": METRICS_PORT, "targetPort": "metrics"}]}}]

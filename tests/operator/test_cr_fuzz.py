"""Property test: no spec the CRD schemas admit crashes the operator's functional core.

Specs are generated from each CRD's openAPIV3Schema with hostile values (empty, huge, negative,
unicode and very long strings, integers at int64's edges, config maps with unknown keys and
invalid values, duplicate list entries), and only those the API server would admit are kept
(`admitted`: the schema, plus what jsonschema does not know of Kubernetes'). Each goes through
what one reconcile pass calls without the cluster: the model, then for a valid spec the rendered
objects, hashes and plans, and for an invalid one the status. The bar: only the models'
ValidationError (which becomes a condition) is raised, every condition carries a reason, a
KafkaUser's password never appears in a condition, and the brokers read the operator's own value
of every key it owns. Seeded and bounded: ODRADEK_CR_FUZZ_SEED and ODRADEK_CR_FUZZ_COUNT
change the run; a failure names the seed and the spec.
"""

import copy
import datetime
import json
import os
import random
import re
from collections.abc import Callable
from typing import Any

import jsonschema
import pytest
from pydantic import ValidationError

from odradek.common.config import BrokerConfig, parse_properties
from odradek.common.topic_config import TOPIC_CONFIGS
from odradek.operator import builders, certificates, cluster_security, crd, status, topic_reconciler, user_reconciler
from odradek.operator.broker_config import startup_problem
from odradek.operator.models import OPERATOR_OWNED_KEYS, parse_spec, spec_error_message
from odradek.operator.reconciler import zookeeper_switch
from odradek.operator.storage import plan_resize
from odradek.operator.topic_models import parse_topic_spec
from odradek.operator.topic_reconciler import ActionResult, Cluster, LiveTopic, Step
from odradek.operator.user_models import parse_user_spec
from odradek.operator.user_reconciler import Acl, LiveUser

pytestmark = pytest.mark.unit

SEED = int(os.environ.get("ODRADEK_CR_FUZZ_SEED", "4545"))
COUNT = int(os.environ.get("ODRADEK_CR_FUZZ_COUNT", "400"))
INT64 = 2**63
PASSWORD = "fuzz-S3cret-pw"

# --- what the API server admits ------------------------------------------------------------------


def _schema(build: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    schema: dict[str, Any] = build()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def _kubernetes_rules(node: dict[str, Any], value: Any) -> bool:
    """What the API server checks beyond jsonschema: int-or-string holds an integer or a string,
    integers fit int64 (its JSON decoder), no null where the schema does not allow it."""
    if value is None:
        return False
    if isinstance(value, int) and not isinstance(value, bool) and not -INT64 <= value < INT64:
        return False
    if node.get("x-kubernetes-int-or-string") and not (isinstance(value, (int, str)) and not isinstance(value, bool)):
        return False
    if node.get("x-kubernetes-preserve-unknown-fields"):
        return _json_ok(value)
    if isinstance(value, dict):
        props = node.get("properties")
        if props is not None:
            return all(k in props and _kubernetes_rules(props[k], v) for k, v in value.items())
        extra = node.get("additionalProperties")
        return not isinstance(extra, dict) or all(_kubernetes_rules(extra, v) for v in value.values())
    if isinstance(value, list):
        return all(_kubernetes_rules(node.get("items") or {}, v) for v in value)
    return True


def _json_ok(value: Any) -> bool:
    if isinstance(value, dict):
        return all(isinstance(k, str) and _json_ok(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_json_ok(v) for v in value)
    if isinstance(value, int) and not isinstance(value, bool):
        return -INT64 <= value < INT64
    return True


def admitted(schema: dict[str, Any], body: dict[str, Any], validator: Any = None) -> bool:
    """`validator`: the schema's, made once (checking the schema itself is most of the cost)."""
    validator = validator or jsonschema.Draft202012Validator(schema)
    return bool(validator.is_valid(body)) and _kubernetes_rules(schema["properties"]["spec"], body["spec"])


# --- hostile values ------------------------------------------------------------------------------

STRINGS = ["", "a", "x" * 300, "y" * 5_000, "ünïcødé", "名前", "\n", " ", "a b", "\t\r\n", "1Xi", "-1Gi", "0",
           "10Gi", "1e3", "0.5", "abc", "bogus", "*", "../..", "a=b", "x:y", "#c", "${POD_NAME}", "$(id)", "'\"`",
           "\x00", "\u2028", "1e99999999", "1.2.3", "-0", "zk:2181\nb=c",
           "User:x\nauthorizer.class.name=", "kafka-cluster", "User:x", "CN=x", "🙂" * 10, "-", ".", "..", "a\nb=c"]
INTS = [0, 1, -1, 2, 3, 5, 1023, 1024, 9090, 9092, 9404, 65535, 65536, 2**31 - 1, 2**31, 2**63 - 1, -2**63]
NUMBERS = [0.0, -0.5, 0.5, 1e308, 1.5, -1e308, 2.0]


def _string(rng: random.Random, node: dict[str, Any]) -> str:
    pattern = node.get("pattern")
    pool = STRINGS
    if pattern:  # mostly what the pattern takes, with its edges (length limits)
        candidates = [s for s in STRINGS + _pattern_candidates(rng) if re.search(pattern, s)]
        pool = candidates or STRINGS
    return rng.choice(pool)


def _pattern_candidates(rng: random.Random) -> list[str]:
    return ["a", "a" * 11, "a" * 12, "z9", "x1", "plain", "tls", "replication", "controller", "768m", "0", "0k",
            "99999999999999999999g", "1", "2g", "topology.kubernetes.io/zone", "a" * 63, "a" * 64,
            "a.b/" + "c" * 63, "-x", "X", "A_B", "a.b-c_d", f"t{rng.randrange(1000)}", "_", "."]


def _int(rng: random.Random, node: dict[str, Any]) -> int:
    low, high = node.get("minimum"), node.get("maximum")
    pool = list(INTS)
    if low is not None:
        pool += [int(low), int(low) + 1]
    if high is not None:
        pool += [int(high), int(high) - 1]
    return rng.choice(pool)


BROKER_KEYS = sorted(BrokerConfig.config_keys())
TOPIC_KEYS = sorted(TOPIC_CONFIGS)
HOSTILE_KEYS = ["", " ", "unknown.key", "listeners ", " log.dirs", "log.dirs\t", "a=b", "x\nlisteners",
                "zookeeper.connect:", "#comment", "ünï.key", "k" * 300, "listener.name.plain.ssl.keystore.type"]
CONFIG_VALUES: list[Any] = ["abc", "bogus", -1, 0, 1, 2, 2**31, 2**63 - 1, -2**63, 1.5, 6.048e8, 1e308, True, False,
                            "", " 100", "1e3", "delete,compact", "compact", "delete", "producer", "zstd", "none",
                            "3\nlisteners=PLAINTEXT://evil:1", "x\rlog.dirs=/tmp", "[]", "null", None, [1, 2],
                            {"nested": 1}, "\u2028zookeeper.connect=evil:2181"]


def _config(rng: random.Random, keys: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for _ in range(rng.choice([0, 1, 2, 4, 8])):
        key = rng.choice(HOSTILE_KEYS) if rng.random() < 0.2 else rng.choice(keys)
        out[key] = rng.choice(CONFIG_VALUES)
    if rng.random() < 0.2:
        out["min.insync.replicas"] = rng.choice([2, 5, 100, 0, -1])
    return out


def generate(rng: random.Random, node: dict[str, Any], path: str, config_keys: list[str]) -> Any:
    """A value for schema `node` (at `path`), hostile more often than not."""
    if node.get("x-kubernetes-preserve-unknown-fields"):
        return _config(rng, config_keys)
    if "enum" in node:
        return rng.choice(node["enum"]) if rng.random() < 0.9 else rng.choice(STRINGS)
    kind = node.get("type")
    if node.get("x-kubernetes-int-or-string"):
        kind = rng.choice(["integer", "string"])
    if kind == "object" or "properties" in node:
        props = node.get("properties")
        if props is None:
            extra = node.get("additionalProperties") or {"type": "string"}
            return {rng.choice(STRINGS[:12] + ["cpu", "memory", "app", "kubernetes.io/x", "a" * 64]):
                    generate(rng, extra, f"{path}.*", config_keys) for _ in range(rng.choice([0, 1, 2, 3]))}
        required = set(node.get("required") or ())
        return {k: generate(rng, v, f"{path}.{k}", config_keys) for k, v in props.items()
                if k in required or rng.random() < 0.45}
    if kind == "array":
        items = [generate(rng, node.get("items") or {}, f"{path}[]", config_keys)
                 for _ in range(rng.choice([0, 1, 1, 2, 3]))]
        if items and rng.random() < 0.3:
            items.append(copy.deepcopy(items[0]))  # a duplicate entry
        return items
    if kind == "integer":
        return _int(rng, node)
    if kind == "number":
        return rng.choice(NUMBERS + [float(i) for i in INTS[:8]])
    if kind == "boolean":
        return rng.random() < 0.5
    return _string(rng, node)


def specs(build: Callable[[], dict[str, Any]], kind: str, config_keys: list[str], seed: int,
          count: int) -> list[dict[str, Any]]:
    """`count` admitted bodies of `kind` (each generated until the schema takes it)."""
    rng = random.Random(seed)
    schema = _schema(build)
    validator = jsonschema.Draft202012Validator(schema)
    out = []
    for i in range(count):
        for _attempt in range(50):
            spec = generate(rng, schema["properties"]["spec"], "spec", config_keys)
            body = {"apiVersion": "odradek.io/v1alpha1", "kind": kind,
                    "metadata": {"name": f"fuzz{i}", "namespace": "kafka", "uid": f"uid-{i}", "generation": 1,
                                 "creationTimestamp": "2026-01-01T00:00:00Z"},
                    "spec": spec}
            if admitted(schema, body, validator):
                out.append(body)
                break
    return out


# --- the checks ----------------------------------------------------------------------------------


def _check_conditions(conditions: list[dict[str, Any]], secret: str | None = None) -> None:
    assert conditions
    for c in conditions:
        assert c["reason"] and re.fullmatch(r"[A-Za-z][A-Za-z0-9_,]*", c["reason"]), c  # Kubernetes' reason format
        assert c["status"] in ("True", "False")
        if secret is not None:
            assert secret not in json.dumps(c), c


def _rendered_properties(objects: list[dict[str, Any]], name: str) -> dict[str, str]:
    config_map = next(o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == f"{name}-broker")
    return parse_properties(config_map["data"]["server.properties"])


_ISSUED: set[tuple[int, int, int, int]] = set()


def _issued(spec: Any) -> bool:
    key = (spec.cluster_ca.validity_days, spec.cluster_ca.renewal_days, spec.clients_ca.validity_days,
           spec.clients_ca.renewal_days)
    seen = key in _ISSUED
    _ISSUED.add(key)
    return seen


def kafka_cluster_pass(body: dict[str, Any]) -> None:
    try:
        spec = parse_spec(body["spec"])
    except ValidationError as e:
        message = spec_error_message(e)
        _check_conditions(status.conditions(status.Observation(1, invalid=message)))
        return
    spec = spec.model_copy(update={"image": spec.image or "odradek:fuzz"})
    if (problem := startup_problem(cluster_security.broker_properties(body, spec))) is not None:
        _check_conditions(status.conditions(status.Observation(1, invalid=problem)))
        return  # the reconciler stops here too: nothing is rendered
    name = body["metadata"]["name"]
    for broker_replicas in (None, 1):
        objects = cluster_security.desired_objects(body, spec, broker_replicas=broker_replicas, addresses={})
        assert objects
    props = _rendered_properties(objects, name)
    # The keys the operator owns reach the brokers with its own values, whatever spec.brokers.config says.
    own = cluster_security.broker_properties(body, spec)
    for key in OPERATOR_OWNED_KEYS & set(props):
        assert props[key] == builders._text(own[key]), (key, props[key])
    cluster_security.broker_config_hash(body, spec, {})
    cluster_security.advertised_addresses(name, spec, spec.brokers.replicas, {})
    if spec.secured and not _issued(spec):  # key generation is the cost: once per CA setting
        certificates.plan(name, "kafka", spec, 1, {}, datetime.datetime(2100, 1, 1, tzinfo=datetime.UTC))
    builders.dynamic_broker_config(body, spec)
    builders.bootstrap_servers(body)
    zookeeper_switch(body, spec, "other-zookeeper:2181/odradek")
    spec.zookeeper.heap_bytes()
    live = {"metadata": {"name": "data"}, "spec": {"resources": {"requests": {"storage": "10Gi"}}}}
    claims = [{"metadata": {"name": f"data-{name}-broker-0"}, "spec": {"resources": {"requests": {"storage": "5Gi"}}}}]
    for storage in (spec.brokers.storage, spec.zookeeper.storage):
        plan_resize(storage.size, storage.storage_class, live, claims)
        plan_resize(storage.size, storage.storage_class, live, claims, expandable=True)
    _check_conditions(status.conditions(status.Observation(1, desired_brokers=spec.brokers.replicas,
                                                           stalled=(("Fuzz", "x"),))))


def topic_pass(body: dict[str, Any]) -> None:
    r = topic_reconciler.resource_from_body(body)
    g = topic_reconciler.gate(r, Cluster.PRESENT, None)
    if g.step is not Step.OBSERVE:
        assert g.outcome is not None
        _check_conditions(topic_reconciler.conditions(g.outcome))
        topic_reconciler.status(g.outcome)
        return
    assert r.spec is not None
    topic = topic_reconciler.topic_name_of(r)
    for live in (None, LiveTopic(3, 3, {"retention.ms": "1000", "cleanup.policy": "compact"}),
                 LiveTopic(2**31 - 1, 1, {})):
        keep = topic_reconciler.kept_overrides(r.spec, live, r.kept_config, r.adopting)
        p = topic_reconciler.plan(r.spec, topic, live, keep)
        for results in ([(a, ActionResult()) for a in p.actions],
                        [(a, ActionResult("invalid_config", "refused")) for a in p.actions]):
            o = topic_reconciler.outcome(r, topic, live, p, results, keep)
            _check_conditions(topic_reconciler.conditions(o))
            new = topic_reconciler.status(o, body.get("status"))
            topic_reconciler.status_patch(body.get("status"), new)


def user_pass(body: dict[str, Any]) -> None:
    r = user_reconciler.resource_from_body(body)
    g = user_reconciler.gate(r, Cluster.PRESENT)
    if g.step is not user_reconciler.Step.OBSERVE:
        assert g.outcome is not None
        _check_conditions(user_reconciler.conditions(g.outcome), PASSWORD)
        return
    assert r.spec is not None
    user = r.username
    stranger = Acl(2, "t", 3, f"User:{user}", "*", 3, 3)
    for live in (LiveUser(), LiveUser(scram={"SCRAM-SHA-256": 4096}, acls=frozenset({stranger}),
                                      quotas={"producer_byte_rate": 1.0}), LiveUser(acls=None)):
        p = user_reconciler.plan(r.spec, user, live, PASSWORD, False)
        assert all(PASSWORD not in str(a) and PASSWORD not in repr(a) for a in p.actions)
        for results in ([(a, user_reconciler.ActionResult()) for a in p.actions],
                        [(a, user_reconciler.ActionResult("invalid_request", "refused")) for a in p.actions]):
            o = user_reconciler.outcome(r, user, p, results, r.secret_name)
            _check_conditions(user_reconciler.conditions(o), PASSWORD)
            user_reconciler.status(o)
        user_reconciler.removal(user, live)
    user_reconciler.user_secret(r, user_reconciler.scram_secret_data(user, PASSWORD))


KINDS = {
    "KafkaCluster": (crd.crd, BROKER_KEYS, kafka_cluster_pass, parse_spec),
    "Topic": (crd.topic_crd, TOPIC_KEYS, topic_pass, parse_topic_spec),
    "KafkaUser": (crd.user_crd, [], user_pass, parse_user_spec),
}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_admitted_specs_never_crash_the_functional_core(kind):
    build, keys, run, parse = KINDS[kind]
    bodies = specs(build, kind, keys, SEED, COUNT)
    assert len(bodies) >= COUNT * 0.9, f"seed {SEED}: only {len(bodies)} admitted {kind} specs"
    valid = 0
    for body in bodies:
        try:
            run(body)
        except Exception as e:
            raise AssertionError(f"seed {SEED}, {kind} spec {json.dumps(body['spec'])[:600]}: {e!r:.300}") from e
        valid += _parses(parse, body)
    print(f"{kind}: {len(bodies)} admitted specs, seed {SEED}, {valid} valid")
    assert 0.1 * len(bodies) < valid < len(bodies), "the generator must reach both the render and the refusal"


def _parses(parse: Callable[[Any], Any], body: dict[str, Any]) -> bool:
    try:
        parse(body["spec"])
    except ValidationError:
        return False
    return True


def test_the_admission_check_refuses_what_the_api_server_refuses():
    """The filter is what makes the generated specs realistic: it must refuse what Kubernetes does."""
    schema = _schema(crd.crd)
    body = {"apiVersion": "odradek.io/v1alpha1", "kind": "KafkaCluster", "metadata": {"name": "x"}}
    assert admitted(schema, {**body, "spec": {"brokers": {"config": {"a": [1], "b": None}}}})
    assert not admitted(schema, {**body, "spec": {"brokers": {"replicas": 0}}})
    assert not admitted(schema, {**body, "spec": {"brokers": {"replicas": 2**63}}})
    assert not admitted(schema, {**body, "spec": {"brokers": {"replicaz": 3}}})
    assert not admitted(schema, {**body, "spec": {"image": None}})



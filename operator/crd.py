"""The KafkaCluster, Topic and KafkaUser CustomResourceDefinitions, generated from the pydantic models.

`python -m odradek.operator.crd` rewrites crds/*.yaml and the chart's copies; a test fails when a committed
file differs from what the models generate. Pydantic's JSON schema is turned into a structural
OpenAPI v3 schema: references inlined, optional fields unwrapped, titles dropped, and free-form
config maps marked to preserve their (scalar) values.
"""

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from odradek.operator import topic_models, user_models
from odradek.operator.models import (
    GROUP,
    KIND,
    PLURAL,
    SHORT_NAMES,
    SINGULAR,
    VERSION,
    KafkaClusterSpec,
    KafkaClusterStatus,
)

ROOT = Path(__file__).resolve().parent.parent
CRD_PATH = ROOT / "crds" / "kafkacluster.yaml"
CHART_CRD_PATH = ROOT / "helm" / "odradek" / "crds" / "kafkacluster.yaml"  # the chart installs this copy
TOPIC_CRD_PATH = ROOT / "crds" / "topic.yaml"
CHART_TOPIC_CRD_PATH = ROOT / "helm" / "odradek" / "crds" / "topic.yaml"
USER_CRD_PATH = ROOT / "crds" / "kafkauser.yaml"
CHART_USER_CRD_PATH = ROOT / "helm" / "odradek" / "crds" / "kafkauser.yaml"

_DROP = {"title"}


def _structural(node: Any, defs: dict[str, Any]) -> Any:
    """Pydantic JSON schema node → structural OpenAPI v3 node."""
    if isinstance(node, list):
        return [_structural(n, defs) for n in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = defs[node["$ref"].rsplit("/", 1)[-1]]
        merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
        return _structural(merged, defs)
    if "anyOf" in node:
        options = [o for o in node["anyOf"] if o.get("type") != "null"]
        rest = {k: v for k, v in node.items() if k != "anyOf"}
        if len(options) == 1:
            out: dict[str, Any] = _structural({**options[0], **rest}, defs)
            if rest.get("default", ...) is None:
                out.pop("default", None)
            return out
        # Scalars of several types (Kafka config values): let the server keep them as given.
        out = {k: _structural(v, defs) for k, v in rest.items() if k not in _DROP}
        out["x-kubernetes-int-or-string"] = True
        return out
    out = {}
    for key, value in node.items():
        if key in _DROP or key == "$defs":
            continue
        if key == "properties":
            out[key] = {name: _structural(v, defs) for name, v in value.items()}
        elif key == "additionalProperties" and isinstance(value, dict):
            out[key] = _structural(value, defs)
        else:
            out[key] = _structural(value, defs)
    if "const" in out:  # one allowed value: Kubernetes schemas have no `const`
        out["enum"] = [out.pop("const")]
    if out.get("default") is None and "default" in out:
        out.pop("default")
    if "properties" in out and out.get("additionalProperties") is False:
        out.pop("additionalProperties")  # not allowed beside properties; unknown fields are pruned
    return out


def _schema(model: type[BaseModel]) -> dict[str, Any]:
    raw = model.model_json_schema(by_alias=True)
    schema: dict[str, Any] = _structural(raw, raw.get("$defs", {}))
    return schema


def _free_form(config: dict[str, Any]) -> None:
    """A map of Kafka keys to scalars (strings, numbers, booleans), checked by the operator."""
    config.pop("additionalProperties", None)
    config["x-kubernetes-preserve-unknown-fields"] = True


def _strip_defaults(node: object) -> None:
    """Object-valued defaults are left to the operator's models (the server would freeze them)."""
    if isinstance(node, dict):
        if isinstance(node.get("default"), (dict, list)):
            node.pop("default")
        for value in node.values():
            _strip_defaults(value)


def _definition(kind: str, plural: str, singular: str, short_names: list[str], description: str,
                spec_schema: dict[str, Any], status_schema: dict[str, Any], columns: list[dict[str, Any]]) -> dict[str, Any]:
    names: dict[str, str | list[str]] = {"kind": kind, "listKind": f"{kind}List", "plural": plural, "singular": singular}
    if short_names:
        names["shortNames"] = short_names
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": names,
            "versions": [{
                "name": VERSION,
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "additionalPrinterColumns": columns,
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "description": description,
                    "properties": {
                        "apiVersion": {"type": "string"},
                        "kind": {"type": "string"},
                        "metadata": {"type": "object"},
                        "spec": spec_schema,
                        "status": status_schema,
                    },
                }},
            }],
        },
    }


READY_COLUMN = {"name": "Ready", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].status'}
AGE_COLUMN = {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}


def crd() -> dict[str, Any]:
    """The KafkaCluster CRD."""
    spec_schema = _schema(KafkaClusterSpec)
    _free_form(spec_schema["properties"]["brokers"]["properties"]["config"])
    _strip_defaults(spec_schema)
    status_schema = _schema(KafkaClusterStatus)
    _strip_defaults(status_schema)
    spec_schema.setdefault("description", "The desired cluster; defaults make 3 brokers.")
    status_schema.setdefault("description", "What the operator observed.")
    return _definition(KIND, PLURAL, SINGULAR, SHORT_NAMES, "An Odradek cluster: ZooKeeper, controllers and brokers.",
                       spec_schema, status_schema, [
                           {"name": "Brokers", "type": "integer", "jsonPath": ".status.brokers.ready",
                            "description": "Brokers ready"},
                           {"name": "Desired", "type": "integer", "jsonPath": ".status.brokers.desired"},
                           {"name": "Controllers", "type": "integer", "jsonPath": ".status.controllers.ready",
                            "description": "Controller pods ready (active or healthy standby)"},
                           READY_COLUMN, AGE_COLUMN,
                       ])


def topic_crd() -> dict[str, Any]:
    """The Topic CRD."""
    spec_schema = _schema(topic_models.TopicSpec)
    _free_form(spec_schema["properties"]["config"])
    _strip_defaults(spec_schema)
    status_schema = _schema(topic_models.TopicStatus)
    _strip_defaults(status_schema)
    spec_schema.setdefault("description", "The topic as it must be; the operator makes the cluster follow it.")
    status_schema.setdefault("description", "What the operator observed.")
    return _definition(topic_models.KIND, topic_models.PLURAL, topic_models.SINGULAR, [],
                       "A Kafka topic of a KafkaCluster in the same namespace.", spec_schema, status_schema, [
                           {"name": "Cluster", "type": "string", "jsonPath": ".spec.clusterRef"},
                           {"name": "Topic", "type": "string", "jsonPath": ".status.topicName"},
                           {"name": "Partitions", "type": "integer", "jsonPath": ".status.partitions"},
                           {"name": "Replicas", "type": "integer", "jsonPath": ".status.replicas"},
                           READY_COLUMN,
                           {"name": "Reason", "type": "string", "priority": 1,
                            "jsonPath": '.status.conditions[?(@.type=="Ready")].reason'},
                           AGE_COLUMN,
                       ])


def user_crd() -> dict[str, Any]:
    """The KafkaUser CRD."""
    spec_schema = _schema(user_models.KafkaUserSpec)
    _strip_defaults(spec_schema)
    status_schema = _schema(user_models.KafkaUserStatus)
    _strip_defaults(status_schema)
    spec_schema.setdefault("description", "What the user may do; the operator makes the cluster follow it.")
    status_schema.setdefault("description", "What the operator observed.")
    return _definition(user_models.KIND, user_models.PLURAL, user_models.SINGULAR, user_models.SHORT_NAMES,
                       "A Kafka user (credentials, ACLs, quotas) of a KafkaCluster in the same namespace.",
                       spec_schema, status_schema, [
                           {"name": "Cluster", "type": "string", "jsonPath": ".spec.clusterRef"},
                           {"name": "Authentication", "type": "string", "jsonPath": ".spec.authentication.type"},
                           {"name": "Username", "type": "string", "jsonPath": ".status.username"},
                           READY_COLUMN,
                           {"name": "Reason", "type": "string", "priority": 1,
                            "jsonPath": '.status.conditions[?(@.type=="Ready")].reason'},
                           AGE_COLUMN,
                       ])


FILES = {CRD_PATH: crd, CHART_CRD_PATH: crd, TOPIC_CRD_PATH: topic_crd, CHART_TOPIC_CRD_PATH: topic_crd,
         USER_CRD_PATH: user_crd, CHART_USER_CRD_PATH: user_crd}
SOURCES = {crd: "operator/models.py", topic_crd: "operator/topic_models.py", user_crd: "operator/user_models.py"}


def render(build: Callable[[], dict[str, Any]] = crd) -> str:
    header = f"# Generated by `python -m odradek.operator.crd` from {SOURCES[build]}; do not edit.\n"
    return header + yaml.safe_dump(build(), sort_keys=False, width=100)


def main(argv: list[str] | None = None) -> int:
    for path, build in FILES.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(render(build))
        print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

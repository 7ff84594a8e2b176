"""The KafkaCluster CustomResourceDefinition, generated from the pydantic models.

`python -m odradek.operator.crd` rewrites crds/kafkacluster.yaml and the chart's copy; a test fails when the committed
file differs from what the models generate. Pydantic's JSON schema is turned into a structural
OpenAPI v3 schema: references inlined, optional fields unwrapped, titles dropped, and free-form
config maps marked to preserve their (scalar) values.
"""

import sys
from pathlib import Path

import yaml

from odradek.operator.models import (
    GROUP, KIND, PLURAL, SHORT_NAMES, SINGULAR, VERSION, KafkaClusterSpec, KafkaClusterStatus,
)

ROOT = Path(__file__).resolve().parent.parent
CRD_PATH = ROOT / "crds" / "kafkacluster.yaml"
CHART_CRD_PATH = ROOT / "helm" / "odradek" / "crds" / "kafkacluster.yaml"  # the chart installs this copy

_DROP = {"title"}


def _structural(node, defs: dict):
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
            out = _structural({**options[0], **rest}, defs)
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
    if out.get("default") is None and "default" in out:
        out.pop("default")
    if "properties" in out and out.get("additionalProperties") is False:
        out.pop("additionalProperties")  # not allowed beside properties; unknown fields are pruned
    return out


def _schema(model) -> dict:
    raw = model.model_json_schema(by_alias=True)
    return _structural(raw, raw.get("$defs", {}))


def _fix_config(spec_schema: dict) -> None:
    """brokers.config: a map of Kafka keys to scalars (strings, numbers, booleans)."""
    config = spec_schema["properties"]["brokers"]["properties"]["config"]
    config.pop("additionalProperties", None)
    config["x-kubernetes-preserve-unknown-fields"] = True


def _strip_defaults(node) -> None:
    """Object-valued defaults are left to the operator's models (the server would freeze them)."""
    if isinstance(node, dict):
        if isinstance(node.get("default"), (dict, list)):
            node.pop("default")
        for value in node.values():
            _strip_defaults(value)


def crd() -> dict:
    spec_schema = _schema(KafkaClusterSpec)
    _fix_config(spec_schema)
    _strip_defaults(spec_schema)
    status_schema = _schema(KafkaClusterStatus)
    _strip_defaults(status_schema)
    spec_schema.setdefault("description", "The desired cluster; defaults make 3 brokers.")
    status_schema.setdefault("description", "What the operator observed.")
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{PLURAL}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": SINGULAR,
                "shortNames": SHORT_NAMES,
            },
            "versions": [{
                "name": VERSION,
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "additionalPrinterColumns": [
                    {"name": "Brokers", "type": "integer", "jsonPath": ".status.brokers.ready",
                     "description": "Brokers ready"},
                    {"name": "Desired", "type": "integer", "jsonPath": ".status.brokers.desired"},
                    {"name": "Controllers", "type": "integer", "jsonPath": ".status.controllers.ready",
                     "description": "Controller pods ready (active or healthy standby)"},
                    {"name": "Ready", "type": "string",
                     "jsonPath": '.status.conditions[?(@.type=="Ready")].status'},
                    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                ],
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "description": "An Odradek cluster: ZooKeeper, controllers and brokers.",
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


def render() -> str:
    header = "# Generated by `python -m odradek.operator.crd` from operator/models.py; do not edit.\n"
    return header + yaml.safe_dump(crd(), sort_keys=False, width=100)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    for path in [Path(a) for a in argv] or [CRD_PATH, CHART_CRD_PATH]:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(render())
        print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

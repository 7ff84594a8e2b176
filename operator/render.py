"""`odradek operator --render FILE`: every object the operator would apply for the KafkaClusters
in FILE, as YAML, with no cluster: a dry run for reviews and GitOps diffs.

It renders what a new cluster gets: what the operator decides from a running one (a broker count
held back during a scale-down, a ZooKeeper ensemble kept at its size, the live claim templates)
needs the cluster and is not shown, nor is the node -> rack map of `brokers.rack` (rendered
empty: it lists the cluster's nodes).
"""

import sys
from typing import Any

import yaml
from pydantic import ValidationError

from odradek.operator import cluster_security
from odradek.operator.broker_config import startup_problem
from odradek.operator.models import KIND, parse_spec, spec_error_message

PLACEHOLDER_UID = "00000000-0000-0000-0000-000000000000"  # the API server assigns the real one


def render_objects(documents: list[Any], image: str) -> list[dict[str, Any]]:
    """The desired objects of every KafkaCluster among `documents` (other kinds are skipped);
    ValueError naming the resource when a spec is invalid."""
    out: list[dict[str, Any]] = []
    for doc in documents:
        if not isinstance(doc, dict) or doc.get("kind") != KIND:
            continue
        meta = doc.get("metadata") or {}
        if not meta.get("name"):
            raise ValueError("a KafkaCluster without metadata.name")
        body = {"metadata": {"name": meta["name"], "namespace": meta.get("namespace") or "default",
                             "uid": meta.get("uid") or PLACEHOLDER_UID}, "spec": doc.get("spec") or {}}
        try:
            spec = parse_spec(body["spec"])
        except ValidationError as e:
            raise ValueError(f"KafkaCluster {body['metadata']['namespace']}/{meta['name']}: "
                             f"{spec_error_message(e)}") from None
        if spec.image is None:
            spec = spec.model_copy(update={"image": image})
        if (problem := startup_problem(cluster_security.broker_properties(body, spec))) is not None:
            raise ValueError(f"KafkaCluster {body['metadata']['namespace']}/{meta['name']}: spec.brokers.config: {problem}")
        out += cluster_security.desired_objects(body, spec)
    return out


def main(path: str, image: str) -> int:
    try:
        with (sys.stdin if path == "-" else open(path)) as f:
            documents = list(yaml.safe_load_all(f))
        objects = render_objects(documents, image)
    except (OSError, yaml.YAMLError, ValueError) as e:
        print(f"odradek operator --render: {e}", file=sys.stderr)
        return 2
    if not objects:
        print(f"odradek operator --render: no KafkaCluster in {path}", file=sys.stderr)
        return 2
    yaml.safe_dump_all(objects, sys.stdout, sort_keys=False)
    return 0

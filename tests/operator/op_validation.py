"""Offline validation of manifests: built-in kinds against Kubernetes' schemas (strict), custom
resources against the CRD's own openAPIV3Schema."""

import jsonschema
import kubernetes_validate

from odradek.operator import crd

K8S_VERSION = "1.30"


def validate(obj: dict) -> None:
    if obj["apiVersion"].startswith("odradek.io/"):
        build = crd.topic_crd if obj["kind"] == "Topic" else crd.crd
        schema = build()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        jsonschema.validate(obj, schema)
        return
    kubernetes_validate.validate(obj, K8S_VERSION, strict=True)

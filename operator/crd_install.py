"""The operator brings its CRDs up to date at start-up.

Helm installs a chart's `crds/` once and never upgrades them: after a chart upgrade the old
schema would prune the new fields. The operator carries the schema it was built with
(odradek.operator.crd), so it creates or updates the CRDs itself before serving; the chart's
`crds/` copy only serves the first install (a KafkaCluster in the same release needs its kind).
"""

import logging

from odradek.operator.apply import contains
from odradek.operator.crd import crd, topic_crd
from odradek.operator.kube import ApiError, KubeClient

log = logging.getLogger(__name__)


def wanted() -> list[dict]:
    return [crd(), topic_crd()]


async def ensure_crds(client: KubeClient) -> list[str]:
    """Create missing CRDs and patch those whose spec differs; returns what was written."""
    written = []
    for doc in wanted():
        name = doc["metadata"]["name"]
        live = await client.get("CustomResourceDefinition", None, name)
        if live is None:
            try:
                await client.create(doc)
                written.append(f"{name} created")
                continue
            except ApiError as e:
                if e.status != 409:
                    raise
                live = await client.get("CustomResourceDefinition", None, name)
        if live is not None and contains(live.get("spec"), doc["spec"]):
            continue
        await client.patch("CustomResourceDefinition", None, name, {"spec": doc["spec"]})
        written.append(f"{name} updated")
    for line in written:
        log.info("CustomResourceDefinition %s", line)
    return written

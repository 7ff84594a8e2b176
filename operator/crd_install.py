"""The operator brings its CRDs up to date at start-up.

Helm installs a chart's `crds/` once and never upgrades them: after a chart upgrade the old
schema would prune the new fields. The operator carries the schema it was built with
(odradek.operator.crd), so it creates or updates the CRDs itself before serving; the chart's
`crds/` copy only serves the first install (a KafkaCluster in the same release needs its kind).
"""

import logging
from typing import Any

from odradek.operator.apply import apply
from odradek.operator.crd import crd, topic_crd, user_crd
from odradek.operator.kube import KubeClient

log = logging.getLogger(__name__)


def wanted() -> list[dict[str, Any]]:
    return [crd(), topic_crd(), user_crd()]


async def ensure_crds(client: KubeClient) -> list[str]:
    """Apply the CRDs (server-side, as every object the operator renders); returns what was
    written."""
    written = []
    for doc in wanted():
        outcome = await apply(client, doc)
        if outcome != "unchanged":
            written.append(f"{doc['metadata']['name']} {outcome}")
    for line in written:
        log.info("CustomResourceDefinition %s", line)
    return written

"""The operator's metrics: how many reconcile passes ran, how long they took and how many failed:
per resource for KafkaClusters (few), per kind and namespace for Topics and KafkaUsers (thousands
of resources would be thousands of series)."""

import contextlib
import time
from collections.abc import Iterable, Iterator

from odradek.common.metrics import Family, Labels, Latency, latency_family


class ReconcileStats:
    def __init__(self) -> None:
        self.latency: dict[Labels, Latency] = {}
        self.errors: dict[Labels, int] = {}

    @contextlib.contextmanager
    def timed(self, key: Labels) -> Iterator[None]:
        """Time one pass of the resource `key`; a pass that raises counts as an error."""
        start = time.perf_counter()
        try:
            yield
        except Exception:  # (a cancelled pass, at shutdown, is no failure)
            self.errors[key] = self.errors.get(key, 0) + 1
            raise
        finally:
            lat = self.latency.get(key)
            if lat is None:
                lat = self.latency[key] = Latency()
            lat.observe(time.perf_counter() - start)

    def families(self) -> Iterable[Family]:
        yield latency_family("odradek_operator_reconcile_duration_seconds",
                             "Duration of reconcile passes, per resource.", self.latency, unit_scale=1.0)
        errors = Family("odradek_operator_reconcile_errors_total", "counter",
                        "Reconcile passes that failed (the API or the cluster answered an error), per resource.")
        for key in sorted(self.latency):
            errors.add(self.errors.get(key, 0), key)
        yield errors


def kind_key(kind: str, namespace: str) -> Labels:
    """The labels of a Topic's or KafkaUser's passes: the kind and namespace, never the name."""
    return (("kind", kind), ("namespace", namespace))

"""The safety tests start real clusters the way the acceptance tests do."""

from integration.conftest import cluster_factory  # noqa: F401 - a fixture, used by name

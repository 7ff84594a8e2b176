"""The Topic custom resource as pydantic models: the single source of truth for its CRD.

A Topic names a KafkaCluster in its namespace and says what one Kafka topic must look like.
`spec.topicName` defaults to `metadata.name` and exists for names Kubernetes cannot hold
(uppercase, `_`). Config values are checked with the broker's own rules
(common/topic_config), so what the operator accepts the broker accepts too.
"""

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic.alias_generators import to_camel

from odradek.common.topic_config import config_text, validate_topic_config
from odradek.operator.models import GROUP, Condition, spec_error_message

KIND = "Topic"
PLURAL = "topics"
SINGULAR = "topic"

MANAGED_ANNOTATION = f"{GROUP}/managed"
"""`"false"` stops managing the topic (nothing changed, nothing deleted)."""
FINALIZER = f"{GROUP}/topic"
"""Held while the operator manages the topic, so a deleted resource can delete its topic first."""

MAX_NAME_LENGTH = 249
LEGAL_NAME = r"^[a-zA-Z0-9._-]+$"
"""Kafka's legal topic names (its Topic.validate); "." and ".." are refused besides."""


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


ConfigValue = str | int | float | bool


class TopicSpec(_Model):
    cluster_ref: str = Field(min_length=1, description="The KafkaCluster (same namespace) holding the topic.")
    topic_name: str | None = Field(
        None, min_length=1, max_length=MAX_NAME_LENGTH, pattern=LEGAL_NAME,
        description="The Kafka topic's name; metadata.name when unset (set it for names with '_' or "
                    "uppercase letters). Cannot change once the topic is managed.")
    partitions: int | None = Field(
        None, ge=1, le=2**31 - 1,
        description="Partition count; can only grow. The broker's num.partitions when unset.")
    replicas: int | None = Field(
        None, ge=1, le=2**15 - 1,
        description="Replication factor. The broker's default.replication.factor when unset.")
    config: dict[str, ConfigValue] = Field(
        default_factory=dict,
        description="Kafka topic configs (retention.ms, cleanup.policy, ...). Overrides not listed here "
                    "are removed from the topic.")
    deletion_policy: Literal["Delete", "Retain"] = Field(
        "Delete", description="What deleting the resource does to the topic.")

    @field_validator("topic_name")
    @classmethod
    def _not_dots(cls, name: str | None) -> str | None:
        if name in (".", ".."):
            raise ValueError('a topic name cannot be "." or ".."')
        return name

    @field_validator("config")
    @classmethod
    def _kafka_config(cls, config: dict[str, Any]) -> dict[str, Any]:
        # JSON has one number type: 6.048e+08 from a YAML tool is the long 604800000 to Kafka.
        config = {k: int(v) if isinstance(v, float) and v.is_integer() else v for k, v in config.items()}
        problems = [problem for key, value in sorted(config.items())
                    if (problem := config_error(key, value)) is not None]
        if problems:
            raise ValueError("; ".join(problems))
        return config

    def config_texts(self) -> dict[str, str]:
        """spec.config as Kafka holds it: every value as text."""
        return {key: config_text(value) for key, value in self.config.items()}


def config_error(key: str, value: object) -> str | None:
    """Why the broker would refuse `key=value` (its own message), or None."""
    try:
        validate_topic_config({key: config_text(value)})
    except ValueError as e:
        return str(e)
    return None


class TopicStatus(_Model):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    observed_generation: int | None = None
    conditions: list[Condition] = Field(default_factory=list)
    topic_name: str | None = Field(None, description="The Kafka topic this resource manages.")
    partitions: int | None = Field(None, description="Partitions the topic has.")
    replicas: int | None = Field(None, description="Replication factor the topic has.")
    config: dict[str, str] = Field(default_factory=dict, description="The topic's config overrides, as the cluster reports them.")
    kept_config: list[str] = Field(
        default_factory=list, description="Overrides the topic had when adopted that the spec does not name: "
                                          "left as they are (naming one in spec.config manages it).")


def parse_topic_spec(spec: dict[str, Any] | None) -> TopicSpec:
    """The spec as a validated model (pydantic.ValidationError when invalid)."""
    return TopicSpec.model_validate(spec or {})


def spec_problem(error: ValidationError) -> tuple[str, str]:
    """(reason, message) for an invalid spec: InvalidConfig when only spec.config is wrong."""
    locations = {e.get("loc", ("",))[0] for e in error.errors()}
    return ("InvalidConfig" if locations == {"config"} else "InvalidSpec"), spec_error_message(error)


def topic_name(body: dict[str, Any], spec: TopicSpec) -> str:
    return spec.topic_name or str(body["metadata"]["name"])


def managed(body: dict[str, Any]) -> bool:
    annotations = body["metadata"].get("annotations") or {}
    return str(annotations.get(MANAGED_ANNOTATION, "true")).strip().lower() != "false"

"""The KafkaUser custom resource as pydantic models: the single source of truth for its CRD.

A KafkaUser names a KafkaCluster in its namespace and says what one Kafka principal may do:
how it authenticates (a SCRAM-SHA-512 password, or a client certificate of the clients CA), its
ACLs in Strimzi's shape, and its client quotas. The operator owns all three for that principal:
what the spec does not name is removed from the cluster.
"""

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from odradek.operator.models import GROUP, Condition, spec_error_message

KIND = "KafkaUser"
PLURAL = "kafkausers"
SINGULAR = "kafkauser"
SHORT_NAMES = ["ku"]

FINALIZER = f"{GROUP}/kafkauser"
"""Held while the operator manages the user, so a deleted resource removes its credentials,
ACLs and quotas first."""

SCRAM = "scram-sha-512"
TLS = "tls"


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class SecretKeyRef(_Model):
    name: str = Field(min_length=1, description="A Secret in the KafkaUser's namespace.")
    key: str = Field(min_length=1, description="The key of that Secret holding the password.")


class PasswordSource(_Model):
    secret_key_ref: SecretKeyRef


class Password(_Model):
    value_from: PasswordSource


class Authentication(_Model):
    type: Literal["scram-sha-512", "tls"] = Field(
        description="scram-sha-512: a password (generated unless spec.authentication.password names one); "
                    "tls: a client certificate signed by the cluster's clients CA.")
    password: Password | None = Field(
        None, description="scram-sha-512 only: take the password from this Secret key instead of generating one.")

    @model_validator(mode="after")
    def _password_for_scram_only(self) -> "Authentication":
        if self.password is not None and self.type != SCRAM:
            raise ValueError("password is only for type scram-sha-512")
        return self


ResourceType = Literal["topic", "group", "cluster", "transactionalId"]
Operation = Literal["Read", "Write", "Create", "Delete", "Alter", "Describe", "ClusterAction", "AlterConfigs",
                    "DescribeConfigs", "IdempotentWrite", "All"]


class AclResource(_Model):
    type: ResourceType
    name: str | None = Field(None, min_length=1, description="Not for type cluster; '*' matches every name.")
    pattern_type: Literal["literal", "prefix"] = Field(
        "literal", description="literal: the name only (or every name for '*'); prefix: names starting with it.")

    @model_validator(mode="after")
    def _name_unless_cluster(self) -> "AclResource":
        if self.type == "cluster" and self.name not in (None, "kafka-cluster"):
            raise ValueError("a cluster resource has no name")
        if self.type != "cluster" and self.name is None:
            raise ValueError(f"a {self.type} resource needs a name")
        return self


class AclRule(_Model):
    resource: AclResource
    operations: list[Operation] = Field(min_length=1)
    host: str = Field("*", min_length=1, description="The client host the rule applies to; '*' for any.")
    type: Literal["allow", "deny"] = "allow"


class Authorization(_Model):
    type: Literal["simple"] = Field("simple", description="Kafka's ACL authorizer (the cluster's authorization).")
    acls: list[AclRule] = Field(default_factory=list)


class Quotas(_Model):
    producer_byte_rate: int | None = Field(None, ge=1, description="Bytes per second a producer may send (per broker).")
    consumer_byte_rate: int | None = Field(None, ge=1, description="Bytes per second a consumer may fetch (per broker).")
    request_percentage: int | None = Field(None, ge=1, description="Percent of a request-handler thread's time.")
    controller_mutation_rate: float | None = Field(
        None, ge=0, description="Partitions created or deleted per second (topic admin).")

    def kafka(self) -> dict[str, float]:
        """The quotas under Kafka's keys (producer_byte_rate, ...)."""
        return {k: float(v) for k, v in self.model_dump(by_alias=False).items() if v is not None}


QUOTA_KEYS = ("producer_byte_rate", "consumer_byte_rate", "request_percentage", "controller_mutation_rate")


class KafkaUserSpec(_Model):
    cluster_ref: str = Field(min_length=1, description="The KafkaCluster (same namespace) the user belongs to.")
    authentication: Authentication | None = Field(
        None, description="How the user authenticates; unset: no credential is managed (ACLs and quotas only).")
    authorization: Authorization | None = Field(None, description="The user's ACLs; all of its ACLs are these.")
    quotas: Quotas | None = Field(None, description="The user's client quotas; unset ones are removed.")


class KafkaUserStatus(_Model):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    observed_generation: int | None = None
    conditions: list[Condition] = Field(default_factory=list)
    username: str | None = Field(None, description="The Kafka user name (the principal is User:<username>).")
    secret: str | None = Field(None, description="The Secret holding the user's credentials.")


def parse_user_spec(spec: dict[str, Any] | None) -> KafkaUserSpec:
    """The spec as a validated model (pydantic.ValidationError when invalid)."""
    return KafkaUserSpec.model_validate(spec or {})


def spec_problem(error: ValidationError) -> tuple[str, str]:
    return "InvalidSpec", spec_error_message(error)


def username(name: str, spec: KafkaUserSpec | None) -> str:
    """Kafka's user name: the resource's name, or `CN=<name>` for a certificate (its subject, which
    the default `ssl.principal.mapping.rules` turn into the principal)."""
    if spec is not None and spec.authentication is not None and spec.authentication.type == TLS:
        return f"CN={name}"
    return name

"""The project's one error convention, as Kafka's: a failure that crosses a module boundary is an
exception carrying the error code a response answers with (Kafka's ApiException and its
subclasses, each tied to one code by Errors); a pure decision returns an ErrorCode (or a result
holding one) instead of raising.

KafkaApis answers a KafkaError that a handler lets through with its `error_code`, anything else
with UNKNOWN_SERVER_ERROR. Exceptions that only steer control flow (CloseConnection, a deposed
controller) are not KafkaErrors: no response carries them.
"""

from kio.schema.errors import ErrorCode


class KafkaError(Exception):
    """Base of every exception that stands for a Kafka error code."""

    error_code: ErrorCode = ErrorCode.unknown_server_error

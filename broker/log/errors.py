"""Storage errors, each carrying the Kafka error code the broker answers with (common/errors)."""

from kio.schema.errors import ErrorCode

from odradek.common.errors import KafkaError


class LogError(KafkaError):
    """Base of every storage error; `error_code` is what a Produce/Fetch response carries."""


class CorruptRecordError(LogError):
    """Bytes that are not a whole, intact batch (bad length, CRC mismatch, truncated)."""

    error_code = ErrorCode.corrupt_message


class InvalidRecordError(LogError):
    """A well-formed batch that breaks a rule (magic, count, control batch from a client)."""

    error_code = ErrorCode.invalid_record


class RecordTooLargeError(LogError):
    """One batch larger than the topic's max.message.bytes."""

    error_code = ErrorCode.message_too_large


class RecordBatchTooLargeError(RecordTooLargeError):
    """A whole append larger than segment.bytes: it could never fit a segment."""

    error_code = ErrorCode.record_list_too_large


class OffsetOutOfRangeError(LogError):
    """A read outside [log_start_offset, log_end_offset]."""

    error_code = ErrorCode.offset_out_of_range


class UnexpectedAppendOffsetError(LogError):
    """A follower append whose first offset is below the log end offset (the fetcher must truncate)."""

    error_code = ErrorCode.unknown_server_error


class KafkaStorageError(LogError):
    """The disk failed under us (an OSError while writing, flushing or reading)."""

    error_code = ErrorCode.kafka_storage_error

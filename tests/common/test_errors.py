"""common/errors: every exception that stands for a Kafka error carries the code clients get."""

import pytest
from kio.schema.errors import ErrorCode

from odradek.broker.admin_manager import ApiError
from odradek.broker.log.errors import KafkaStorageError, LogError, OffsetOutOfRangeError
from odradek.broker.metadata_cache import StaleControllerEpochError
from odradek.broker.producer_id_manager import ProducerIdBlockUnavailableError, ProducerIdsExhaustedError
from odradek.broker.zk_client import TopicExistsError
from odradek.common.errors import KafkaError


@pytest.mark.parametrize(("error", "code"), [
    (KafkaStorageError("disk gone"), ErrorCode.kafka_storage_error),
    (OffsetOutOfRangeError("below the start"), ErrorCode.offset_out_of_range),
    (LogError("anything else"), ErrorCode.unknown_server_error),
    (ApiError(ErrorCode.invalid_partitions, "too many"), ErrorCode.invalid_partitions),
    (StaleControllerEpochError(3, 4), ErrorCode.stale_controller_epoch),
    (ProducerIdBlockUnavailableError("zk down"), ErrorCode.coordinator_load_in_progress),
    (ProducerIdsExhaustedError("all handed out"), ErrorCode.unknown_server_error),
    (TopicExistsError("Topic 't' already exists."), ErrorCode.topic_already_exists),
])
def test_boundary_errors_are_kafka_errors_with_their_code(error, code):
    assert isinstance(error, KafkaError)
    assert error.error_code == code


def test_an_api_error_keeps_its_message_and_defaults_to_the_code_name():
    assert str(ApiError(ErrorCode.invalid_request)) == "invalid_request"
    assert ApiError(ErrorCode.invalid_request, "why").message == "why"

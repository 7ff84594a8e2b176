"""How transactional ids are refused while Odradek has no transaction coordinator (one place, so
transactions can remove it whole).

FindCoordinator for a transaction key, InitProducerId and Produce with a transactional id answer
TRANSACTIONAL_ID_AUTHORIZATION_FAILED: librdkafka (rd_kafka_txn_handle_FindCoordinator) and
kafka-python (FindCoordinatorHandler, InitProducerIdHandler) treat it as fatal, so a transactional
producer fails at once with this message instead of retrying COORDINATOR_NOT_AVAILABLE until its
own timeout. Idempotent producers (no transactional id) are unaffected.
"""

from kio.schema.errors import ErrorCode

TRANSACTIONS_UNSUPPORTED = ErrorCode.transactional_id_authorization_failed
MESSAGE = "Odradek has no transaction coordinator: unset transactional.id (idempotence needs none)"

"""Which partitions a subscribed batch read plans, from the cluster's metadata answer."""

from types import SimpleNamespace

import pytest
from confluent_kafka import KafkaError, KafkaException

from odradek.pipeline import admin as admin_module
from odradek.pipeline.admin import OffsetReader
from odradek.pipeline.options import read_options


class _Admin:
    def __init__(self, answers):
        self.answers = list(answers)
        self.calls = 0

    def list_topics(self, timeout):
        self.calls += 1
        return SimpleNamespace(topics=self.answers[min(self.calls, len(self.answers)) - 1])


def _topic(partitions=(0, 1), error=None):
    return SimpleNamespace(partitions=dict.fromkeys(partitions), error=error)


@pytest.fixture
def admin_of(monkeypatch):
    """Every AdminClient the reader opens (it opens a fresh one after a failed attempt) is `admin`."""

    def use(admin):
        monkeypatch.setattr(admin_module, "AdminClient", lambda config: admin)
        return admin

    return use


def _reader(**extra) -> OffsetReader:
    options = read_options({"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "orders",
                            "fetchoffset.retryintervalms": "0", **extra}, streaming=False)
    return OffsetReader(options)


def test_a_subscribed_topic_without_a_leader_yet_is_asked_again(admin_of):
    admin = admin_of(_Admin([{"orders": _topic((), KafkaError(KafkaError.LEADER_NOT_AVAILABLE))},
                    {"orders": _topic((0, 1))}]))
    assert _reader().partitions() == [("orders", 0), ("orders", 1)]
    assert admin.calls == 2


def test_a_topic_that_stays_unreadable_fails_the_plan_instead_of_reading_nothing(admin_of):
    admin = admin_of(_Admin([{"orders": _topic((), KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))}]))
    with pytest.raises(KafkaException):
        _reader().partitions()
    assert admin.calls == 3  # fetchOffset.numRetries


def test_a_subscribed_topic_that_does_not_exist_has_no_partitions(admin_of):
    admin_of(_Admin([{"orders": _topic((), KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART))}]))
    assert _reader().partitions() == []

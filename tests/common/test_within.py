"""common/bounded_exit.within: a step of a stop is bounded, and a slow one says how long it took."""

import asyncio
import logging

import pytest

from odradek.common import bounded_exit
from odradek.common.bounded_exit import within

pytestmark = pytest.mark.unit

log = logging.getLogger("test_within")


async def _step() -> None:
    await asyncio.sleep(0)


def test_a_slow_step_is_logged_with_its_time(monkeypatch, caplog):
    monkeypatch.setattr(bounded_exit, "SLOW_STEP_S", 0.0)
    with caplog.at_level(logging.INFO, logger="test_within"):
        assert asyncio.run(within(_step(), 5, "stopping the thing", log))
    assert any(r.getMessage().startswith("stopping the thing took ") for r in caplog.records)


def test_a_quick_step_logs_nothing(caplog):
    with caplog.at_level(logging.INFO, logger="test_within"):
        assert asyncio.run(within(_step(), 5, "stopping the thing", log))
    assert not caplog.records


def test_a_failed_step_is_logged_and_reported(caplog):
    async def fail() -> None:
        raise RuntimeError("no")

    with caplog.at_level(logging.INFO, logger="test_within"):
        assert not asyncio.run(within(fail(), 5, "stopping the thing", log))
    assert [r.getMessage() for r in caplog.records] == ["stopping the thing failed"]

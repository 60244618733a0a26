from __future__ import annotations

import logging

import pytest

from brisvox.core.ratelog import LOG_INTERVAL, RateLimitedLog


def test_a_flood_of_events_logs_one_line_per_interval_with_the_counts(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    rl = RateLimitedLog(logging.getLogger("t.ratelog"), "edge", lambda: now[0])
    assert rl.note("frames refused", "first") is True
    for _ in range(999):
        now[0] += LOG_INTERVAL / 2000
        assert rl.note("frames refused") is False
    rl.note("pongs dropped")
    now[0] = LOG_INTERVAL + 0.1
    assert rl.note("frames refused", "later") is True
    assert [r.getMessage() for r in caplog.records] == [
        "edge: 1 frames refused (last: first)",
        "edge: 1000 frames refused, 1 pongs dropped (last: later)",
    ]
    assert rl.pending == {}

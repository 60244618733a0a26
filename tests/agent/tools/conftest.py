"""Every tool test also checks the trace: each settled call has its full set of fields."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from brisvox.agent.tools.results import Outcome

_FIELDS = {"session": str, "epoch": int, "call": str, "tool": str, "outcome": str, "duration_us": int, "retries": int}
_OUTCOMES = {o.value for o in Outcome}


class _Check(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.problems: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if not message.startswith(("tool call settled", "tool call held")):
            return
        for name, typ in _FIELDS.items():
            value = getattr(record, name, None)
            if not isinstance(value, typ):
                self.problems.append(f"{message!r}: field {name} is {value!r}")
        outcome = getattr(record, "outcome", None)
        if outcome not in _OUTCOMES:
            self.problems.append(f"{message!r}: unknown outcome {outcome!r}")
        if len(str(getattr(record, "tool", "")).encode()) > 64:
            self.problems.append(f"{message!r}: tool name over 64 bytes")
        if getattr(record, "duration_us", 0) < 0:
            self.problems.append(f"{message!r}: negative duration")


@pytest.fixture(autouse=True)
def _trace_fields_are_complete() -> Iterator[None]:
    logger = logging.getLogger("brisvox.tools")
    check = _Check()
    level = logger.level
    logger.addHandler(check)
    logger.setLevel(logging.DEBUG)
    try:
        yield
    finally:
        logger.removeHandler(check)
        logger.setLevel(level)
    assert check.problems == []

"""Fixtures of the inference tests."""

from __future__ import annotations

import pytest

from brisvox.inference.errors import ModelNotFound
from brisvox.inference.silero import SileroModel


@pytest.fixture(scope="module")
def model() -> SileroModel:
    """The Silero VAD model (the test is skipped when it is not fetched); modules with another
    model define their own ``model``."""
    try:
        return SileroModel.load()
    except ModelNotFound as exc:
        pytest.skip(str(exc))

from __future__ import annotations

import logging

import pytest

from brisvox.core.errors import ConfigError
from brisvox.core.secret import Secret


def test_a_secret_never_prints_its_value() -> None:
    s = Secret("sk-live-123")
    assert "sk-live" not in repr(s)
    assert "sk-live" not in str(s)
    assert "sk-live" not in f"{s} {s!r} {s:>20}"
    assert "sk-live" not in repr({"key": s})
    assert s.reveal() == "sk-live-123"


def test_a_secret_in_a_log_record_is_redacted(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO):
        logging.getLogger("t").info("using key %s", Secret("hunter2"))
    assert "hunter2" not in caplog.text
    assert "Secret(***)" in caplog.text


def test_a_missing_environment_variable_is_a_config_error_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BRISVOX_TEST_KEY", raising=False)
    with pytest.raises(ConfigError, match="BRISVOX_TEST_KEY"):
        Secret.from_env("BRISVOX_TEST_KEY")
    monkeypatch.setenv("BRISVOX_TEST_KEY", "v")
    assert Secret.from_env("BRISVOX_TEST_KEY").reveal() == "v"

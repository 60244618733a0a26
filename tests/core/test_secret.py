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


def test_mask_replaces_every_held_secret_longest_first_and_leaves_short_values_alone() -> None:
    from brisvox.core.secret import MIN_MASKED_LENGTH, mask

    Secret("sk-mask-0123456789")
    Secret("sk-mask-0123456789-longer")
    Secret("x" * (MIN_MASKED_LENGTH - 1))
    assert mask("a sk-mask-0123456789-longer b sk-mask-0123456789 c") == "a *** b *** c"
    assert mask("x" * (MIN_MASKED_LENGTH - 1)) == "x" * (MIN_MASKED_LENGTH - 1)


def test_log_masking_covers_messages_arguments_and_tracebacks_of_every_logger(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from brisvox.core.secret import install_log_masking

    value = Secret("sk-logged-0123456789").reveal()
    before = logging.getLogRecordFactory()
    try:
        install_log_masking()
        install_log_masking()  # idempotent: one wrapper
        with caplog.at_level(logging.INFO):
            logging.getLogger("uvicorn.error").info(f"plain {value}")
            logging.getLogger("t").warning("arg %s", value)
            try:
                raise ValueError(value)
            except ValueError:
                logging.getLogger("t").exception("failed")
    finally:
        logging.setLogRecordFactory(before)
    assert value not in caplog.text
    assert caplog.text.count("***") >= 3

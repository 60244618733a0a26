from pathlib import Path

import pytest

from brisvox.server.settings import VARIABLES, Settings, SettingsError


def test_an_empty_environment_gives_the_defaults() -> None:
    s = Settings.from_env({})
    assert (s.host, s.port, s.max_calls, s.ws_path, s.agent_file) == ("127.0.0.1", 8765, None, "/ws", None)
    assert s.shutdown_policy.drain_timeout == 30.0


def test_every_variable_is_read() -> None:
    s = Settings.from_env({
        "BRISVOX_HOST": "0.0.0.0", "BRISVOX_PORT": "9000", "BRISVOX_MAX_CALLS": "7",
        "BRISVOX_DRAIN_TIMEOUT": "500ms", "BRISVOX_CANCEL_TIMEOUT": "2s", "BRISVOX_ABORT_TIMEOUT": "0.5",
        "BRISVOX_WS_PATH": "/call", "BRISVOX_AGENT_FILE": "a.toml", "BRISVOX_LOG_LEVEL": "DEBUG",
    })
    assert s == Settings(host="0.0.0.0", port=9000, max_calls=7, drain_timeout=0.5, cancel_timeout=2.0,
                         abort_timeout=0.5, ws_path="/call", agent_file=Path("a.toml"), log_level="debug")
    assert {v.name for v in VARIABLES} >= {"BRISVOX_HOST", "BRISVOX_PORT"}


@pytest.mark.parametrize(("name", "value"), [
    ("BRISVOX_PORT", "http"), ("BRISVOX_PORT", "70000"), ("BRISVOX_MAX_CALLS", "0"),
    ("BRISVOX_DRAIN_TIMEOUT", "-1"), ("BRISVOX_DRAIN_TIMEOUT", "soon"), ("BRISVOX_CANCEL_TIMEOUT", "inf"),
    ("BRISVOX_HOST", "bad host"), ("BRISVOX_WS_PATH", "ws"), ("BRISVOX_LOG_LEVEL", "loud"),
])
def test_a_bad_value_is_an_error_naming_the_variable_and_the_value(name: str, value: str) -> None:
    with pytest.raises(SettingsError) as info:
        Settings.from_env({name: value})
    assert f"{name}={value!r}" in str(info.value)


def test_all_bad_values_are_reported_together() -> None:
    with pytest.raises(SettingsError) as info:
        Settings.from_env({"BRISVOX_PORT": "x", "BRISVOX_MAX_CALLS": "y"})
    assert len(info.value.problems) == 2

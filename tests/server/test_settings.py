from pathlib import Path

import pytest

from brisvox.server.settings import VARIABLES, Settings, SettingsError


def test_an_empty_environment_gives_the_defaults() -> None:
    s = Settings.from_env({})
    assert (s.host, s.port, s.max_calls, s.ws_path, s.agent_file) == ("127.0.0.1", 8765, 100, "/ws", None)
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


def test_the_limit_variables_reach_the_transport_and_the_edge() -> None:
    s = Settings.from_env({
        "BRISVOX_HANDSHAKE_TIMEOUT": "2s", "BRISVOX_MAX_UNSTARTED": "9", "BRISVOX_START_TIMEOUT": "3",
        "BRISVOX_PING_INTERVAL": "1", "BRISVOX_PING_TIMEOUT": "4", "BRISVOX_IDLE_TIMEOUT": "30",
        "BRISVOX_MAX_CALL_DURATION": "600", "BRISVOX_AUDIO_RATE": "1.5", "BRISVOX_AUDIO_FLOOD": "7",
        "BRISVOX_MAX_PONG_BACKLOG": "1024", "BRISVOX_WS_PATH": "/call", "BRISVOX_MAX_CALLS": "7",
    })
    t = s.transport_config()
    assert (t.handshake_timeout, t.start_timeout, t.ping_interval, t.ping_timeout, t.idle_timeout,
            t.max_call_duration, t.audio_rate, t.audio_flood, t.path, t.max_calls) == (
        2.0, 3.0, 1.0, 4.0, 30.0, 600.0, 1.5, 7.0, "/call", 7)
    t.validate()
    e = s.edge_config()
    assert (e.handshake_timeout, e.max_unstarted, e.max_pong_backlog) == (2.0, 9, 1024)
    assert Settings.from_env({"BRISVOX_AUDIO_RATE": "off"}).transport_config().audio_rate is None


@pytest.mark.parametrize(("name", "value"), [
    ("BRISVOX_HANDSHAKE_TIMEOUT", "0"), ("BRISVOX_MAX_UNSTARTED", "0"), ("BRISVOX_IDLE_TIMEOUT", "-1"),
    ("BRISVOX_AUDIO_RATE", "0.5"), ("BRISVOX_AUDIO_RATE", "nan"), ("BRISVOX_MAX_CALL_DURATION", "inf"),
    ("BRISVOX_PING_TIMEOUT", "5"),  # not longer than the 5 s ping interval
])
def test_a_bad_limit_is_refused_naming_its_variable(name: str, value: str) -> None:
    with pytest.raises(SettingsError) as info:
        Settings.from_env({name: value})
    assert name in str(info.value)

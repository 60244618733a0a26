import asyncio
import re
from pathlib import Path

import pytest

from brisvox.core.secret import Secret
from brisvox.server.auth import AuthMode
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
    ("BRISVOX_LOOP", "tokio"),
])
def test_a_bad_value_is_an_error_naming_the_variable_and_the_value(name: str, value: str) -> None:
    with pytest.raises(SettingsError) as info:
        Settings.from_env({name: value})
    assert f"{name}={value!r}" in str(info.value)


def test_the_event_loop_is_asyncio_unless_uvloop_is_asked_for() -> None:
    assert Settings.from_env({}).loop == "asyncio"
    assert Settings.from_env({"BRISVOX_LOOP": "uvloop"}).loop == "uvloop"


def test_uvloop_asked_for_and_not_installed_is_an_error_saying_how_to_install_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "uvloop" else find_spec(name, *a))
    with pytest.raises(SettingsError, match=re.escape("uvloop is not installed (pip install 'brisvox[fast]')")):
        Settings.from_env({"BRISVOX_LOOP": "uvloop"})


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_serve_runs_on_the_loop_the_settings_name(loop: str) -> None:
    from brisvox.server.cli import _run_loop

    async def main() -> str:
        return type(asyncio.get_running_loop()).__module__

    assert _run_loop(main(), loop).split(".")[0] == loop


def test_all_bad_values_are_reported_together() -> None:
    with pytest.raises(SettingsError) as info:
        Settings.from_env({"BRISVOX_PORT": "x", "BRISVOX_MAX_CALLS": "y"})
    assert len(info.value.problems) == 2


def test_the_auth_variables_are_read() -> None:
    s = Settings.from_env({
        "BRISVOX_AUTH": "Signed", "BRISVOX_AUTH_SECRET": "k" * 32,
        "BRISVOX_AUTH_TOKENS": " scraper-token-0123456 ,other-token-0123456789", "BRISVOX_ALLOWED_HOSTS":
        "Voice.Example.com:443, [::1]", "BRISVOX_ALLOWED_ORIGINS": "https://App.example.com,http://localhost:3000",
    })
    assert s.auth is AuthMode.SIGNED and s.auth_secret == Secret("k" * 32)
    assert s.auth_tokens == (Secret("scraper-token-0123456"), Secret("other-token-0123456789"))
    assert s.allowed_hosts == frozenset({"voice.example.com", "::1"}) == s.host_names
    assert s.allowed_origins == frozenset({"https://app.example.com", "http://localhost:3000"})
    assert "k" * 32 not in repr(s) and "scraper-token" not in repr(s)


@pytest.mark.parametrize(("env", "words"), [
    ({"BRISVOX_AUTH": "open"}, "BRISVOX_AUTH='open': expected one of none, bearer, signed"),
    ({"BRISVOX_AUTH": "bearer"}, "BRISVOX_AUTH=bearer needs BRISVOX_AUTH_TOKENS"),
    ({"BRISVOX_AUTH": "signed"}, "BRISVOX_AUTH=signed needs BRISVOX_AUTH_SECRET"),
    ({"BRISVOX_AUTH_SECRET": "k" * 40}, "is set but BRISVOX_AUTH is none"),
    ({"BRISVOX_AUTH": "bearer", "BRISVOX_AUTH_TOKENS": "a" * 20, "BRISVOX_AUTH_SECRET": "k" * 40},
     "BRISVOX_AUTH_SECRET is set but BRISVOX_AUTH is bearer"),
    ({"BRISVOX_ALLOWED_HOSTS": "bad host"}, "'bad host': expected a host name"),
    ({"BRISVOX_ALLOWED_ORIGINS": "https://a.example/path"}, "expected scheme://host[:port]"),
])
def test_auth_settings_that_cannot_work_are_refused(env: dict[str, str], words: str) -> None:
    with pytest.raises(SettingsError, match=re.escape(words)):
        Settings.from_env(env)


def test_a_bad_secret_value_is_reported_without_the_value() -> None:
    with pytest.raises(SettingsError) as info:
        Settings.from_env({"BRISVOX_AUTH": "signed", "BRISVOX_AUTH_SECRET": "tooshort-secret",
                           "BRISVOX_AUTH_TOKENS": "short,bad token with spaces"})
    text = str(info.value)
    assert "BRISVOX_AUTH_SECRET=(hidden): expected at least 32 characters" in text
    assert "BRISVOX_AUTH_TOKENS=(hidden): token 1 of 2" in text
    assert "tooshort" not in text and "spaces" not in text


def test_the_limit_variables_reach_the_transport_and_the_edge() -> None:
    s = Settings.from_env({
        "BRISVOX_HANDSHAKE_TIMEOUT": "2s", "BRISVOX_MAX_UNSTARTED": "9", "BRISVOX_START_TIMEOUT": "3",
        "BRISVOX_PING_INTERVAL": "1", "BRISVOX_PING_TIMEOUT": "4", "BRISVOX_IDLE_TIMEOUT": "30",
        "BRISVOX_MAX_CALL_DURATION": "600", "BRISVOX_AUDIO_RATE": "1.5", "BRISVOX_AUDIO_FLOOD": "7",
        "BRISVOX_MAX_PONG_BACKLOG": "1024", "BRISVOX_WS_PATH": "/call", "BRISVOX_MAX_CALLS": "7",
    })
    t = s.transport_config()
    assert (t.handshake_timeout, t.start_timeout, t.ping_interval, t.ping_timeout, t.idle_timeout,
            t.max_call_duration, t.audio_rate, t.audio_flood, t.path) == (
        2.0, 3.0, 1.0, 4.0, 30.0, 600.0, 1.5, 7.0, "/call")
    assert s.max_calls == 7  # admission is the session manager's, not the transport's
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


def test_a_global_call_cap_without_redis_is_refused_naming_both_variables() -> None:
    with pytest.raises(SettingsError, match="BRISVOX_GLOBAL_MAX_CALLS needs BRISVOX_REDIS_URL"):
        Settings.from_env({"BRISVOX_GLOBAL_MAX_CALLS": "100"})


def test_a_redis_url_is_a_secret_and_a_bad_one_is_named_without_its_value() -> None:
    s = Settings.from_env({"BRISVOX_REDIS_URL": "redis://:pw-123456@r:6379/0", "BRISVOX_NODE_ID": "pod-1"})
    assert s.redis_url is not None and s.redis_url.reveal().endswith("@r:6379/0") and "pw" not in repr(s)
    with pytest.raises(SettingsError) as bad:
        Settings.from_env({"BRISVOX_REDIS_URL": "http://pw-123456@r", "BRISVOX_NODE_ID": "a b"})
    assert "BRISVOX_REDIS_URL=(hidden)" in str(bad.value) and "pw-123456" not in str(bad.value)
    assert "BRISVOX_NODE_ID='a b'" in str(bad.value)
def test_the_webrtc_variables_are_read_and_checked() -> None:
    settings = Settings.from_env({"BRISVOX_WEBRTC_HOSTS": "127.0.0.1, 192.0.2.7",
                                  "BRISVOX_WEBRTC_TURN_URLS": "turn:turn.example.com:3478?transport=udp",
                                  "BRISVOX_WEBRTC_TURN_SECRET": "s" * 20, "BRISVOX_WEBRTC_PATH": "/rtc"})
    assert settings.webrtc and settings.webrtc_path == "/rtc"
    assert settings.webrtc_hosts == ("127.0.0.1", "192.0.2.7")
    assert settings.webrtc_turn_urls == ("turn:turn.example.com:3478?transport=udp",)
    for env, says in (({"BRISVOX_WEBRTC_HOSTS": "example.com"}, "not one"),
                      ({"BRISVOX_WEBRTC_TURN_URLS": "http://x"}, "turn:host:port"),
                      ({"BRISVOX_WEBRTC_TURN_URLS": "turn:a:1"}, "go together"),
                      ({"BRISVOX_WEBRTC_PATH": "/ws"}, "must differ")):
        with pytest.raises(SettingsError, match=says):
            Settings.from_env(env)


def test_webrtc_offers_the_listeners_address_or_loopback_for_a_wildcard() -> None:
    from brisvox.core.clock import SystemClock
    from brisvox.server.call import webrtc_endpoint

    def hosts(env: dict[str, str]) -> tuple[str, ...]:
        endpoint = webrtc_endpoint(Settings.from_env(env), SystemClock())
        assert endpoint is not None
        return endpoint.config.webrtc.hosts  # type: ignore[attr-defined, no-any-return]

    assert hosts({"BRISVOX_HOST": "192.0.2.7"}) == ("192.0.2.7",)
    assert hosts({"BRISVOX_HOST": "0.0.0.0"}) == ("127.0.0.1",)
    assert hosts({"BRISVOX_HOST": "0.0.0.0", "BRISVOX_WEBRTC_HOSTS": "192.0.2.9"}) == ("192.0.2.9",)
    assert webrtc_endpoint(Settings.from_env({"BRISVOX_WEBRTC": "off"}), SystemClock()) is None


def test_the_vad_period_is_read_as_a_duration_and_defaults_to_10_ms() -> None:
    assert Settings.from_env({}).vad_period == 0.01
    assert Settings.from_env({"BRISVOX_VAD_PERIOD": "5ms"}).vad_period == 0.005
    assert Settings.from_env({"BRISVOX_VAD_PERIOD": "0"}).vad_period == 0.0
    with pytest.raises(SettingsError, match="BRISVOX_VAD_PERIOD"):
        Settings.from_env({"BRISVOX_VAD_PERIOD": "-1"})

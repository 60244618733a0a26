"""The command line: check's exit codes, serve's startup failures, --version."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from brisvox import __version__, run_with_tools
from brisvox.__main__ import main
from brisvox.core.clock import SystemClock
from brisvox.server.auth import CallClaims, verify_call_token
from brisvox.server.tools import ToolSet

GOOD = '[agent]\nname = "a"\nprompt = "p"\ntools = ["get_time"]\n'


def tools() -> ToolSet:
    ts = ToolSet()

    @ts.read_only
    async def get_time() -> str:
        """time"""
        return "noon"

    return ts


def test_check_exits_0_for_a_valid_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "agent.toml"
    f.write_text(GOOD)
    assert run_with_tools(tools(), ["check", str(f)]) == 0
    assert ("ok, agent 'a' (tools: get_time; stt local, llm scripted (the restaurant host: keyword rules, no model), "
            "tts local)") in capsys.readouterr().out


def test_check_exits_1_with_every_problem(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "agent.toml"
    f.write_text(GOOD + "colour = 1\n")
    assert main(["check", str(f)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith(f"{f}:4:10: agent.tools[0]: tool 'get_time' is not provided")
    assert err[1].startswith(f"{f}:5:1: agent.colour: unknown key")
    assert err[2] == f"{f}: 2 problem(s)"


def test_check_exits_1_for_an_unknown_provider_option(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "agent.toml"
    f.write_text('[agent]\nname = "a"\nprompt = "p"\n[tts]\nprovider = "cartesia"\napi_key_env = "K"\n'
                 '[tts.options]\nvoce = "x"\n')
    assert main(["check", str(f)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith(f"{f}:8:1: tts.options.voce: unknown option for tts provider 'cartesia' (known: model,")
    assert err[1] == f"{f}: 1 problem(s)"


def test_check_with_env_requires_the_key_variables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "agent.toml"
    f.write_text('[agent]\nname = "a"\nprompt = "p"\n[llm]\nprovider = "openai"\napi_key_env = "BRISVOX_T_KEY"\n')
    monkeypatch.delenv("BRISVOX_T_KEY", raising=False)
    assert main(["check", str(f)]) == 0
    assert main(["check", "--env", str(f)]) == 1
    assert "environment variable BRISVOX_T_KEY is not set" in capsys.readouterr().err
    monkeypatch.setenv("BRISVOX_T_KEY", "secret-value")
    assert main(["check", "--env", str(f)]) == 0
    assert "secret-value" not in capsys.readouterr().out


def test_version_prints_the_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0 and capsys.readouterr().out.strip() == f"brisvox {__version__}"


def test_serve_with_a_bad_setting_is_a_startup_failure(monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("BRISVOX_PORT", "eighty")
    assert main(["serve"]) == 1
    assert "BRISVOX_PORT='eighty'" in capsys.readouterr().err


def test_serve_with_an_invalid_agent_file_is_a_startup_failure(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "agent.toml"
    f.write_text(GOOD)
    assert main(["serve", str(f)]) == 1
    assert "tool 'get_time' is not provided" in capsys.readouterr().err


def test_serve_on_a_port_in_use_is_a_startup_failure(monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        monkeypatch.setenv("BRISVOX_PORT", str(busy.getsockname()[1]))
        assert main(["serve"]) == 1
    assert "cannot listen on 127.0.0.1" in capsys.readouterr().err


def test_check_prints_the_llm_that_auto_resolves_to_as_serve_builds_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from brisvox.core.clock import SystemClock
    from brisvox.server.agent_file import load_agent_file
    from brisvox.server.call_providers import choose_llm

    f = tmp_path / "agent.toml"
    f.write_text('[agent]\nname = "a"\nprompt = "p"\n[llm]\nprovider = "auto"\n')
    for name in ("BRISVOX_LLM_BASE_URL", "ANTHROPIC_API_KEY", "BRISVOX_LLM_MODEL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-cli-0123456789")
    assert main(["check", str(f)]) == 0
    _, label = choose_llm(load_agent_file(f), SystemClock(), {"OPENAI_API_KEY": "sk-cli-0123456789"})
    assert f"llm {label}, tts local)" in capsys.readouterr().out
    assert label == "auto: openai (gpt-4o-mini); OPENAI_API_KEY is set"


def test_check_of_a_named_llm_ignores_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "agent.toml"
    f.write_text('[agent]\nname = "a"\nprompt = "p"\n[llm]\nprovider = "scripted"\n')
    monkeypatch.setenv("OPENAI_API_KEY", "sk-cli-0123456789")
    assert main(["check", str(f)]) == 0
    assert "llm scripted (" in capsys.readouterr().out


def test_the_servers_logging_setup_masks_every_held_secret(caplog: pytest.LogCaptureFixture) -> None:
    import logging

    from brisvox.core.secret import Secret
    from brisvox.server.cli import configure_logging

    key = Secret("sk-serve-log-0123456789").reveal()
    before = logging.getLogRecordFactory()
    try:
        configure_logging("info")
        with caplog.at_level(logging.INFO):
            logging.getLogger("brisvox.providers").warning("vendor said: bad key %s", key)
    finally:
        logging.setLogRecordFactory(before)
    assert "vendor said: bad key ***" in caplog.text and key not in caplog.text


def test_serve_without_auth_on_an_address_that_is_not_loopback_refuses_to_start(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("BRISVOX_HOST", "0.0.0.0")
    monkeypatch.delenv("BRISVOX_AUTH", raising=False)
    assert main(["serve"]) == 1
    err = capsys.readouterr().err
    assert "BRISVOX_HOST=0.0.0.0 is not a loopback address and BRISVOX_AUTH=none" in err
    assert "--insecure" in err and "not starting" in err


def test_token_prints_a_call_token_the_server_accepts(monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    key = "k" * 40
    monkeypatch.setenv("BRISVOX_AUTH_SECRET", key)
    assert main(["token", "--ttl", "120", "--agent", "lokanta", "--subject", "u1"]) == 0
    token = capsys.readouterr().out.strip()
    claims = verify_call_token(token, key, now=SystemClock().wall().timestamp(), agent="lokanta")
    assert isinstance(claims, CallClaims) and claims.subject == "u1"
    assert claims.issued is not None and claims.expires - claims.issued == 120


def test_token_without_a_key_or_with_a_bad_ttl_fails_and_new_secret_makes_a_key(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("BRISVOX_AUTH_SECRET", raising=False)
    assert main(["token"]) == 1
    assert "BRISVOX_AUTH_SECRET is not set" in capsys.readouterr().err
    monkeypatch.setenv("BRISVOX_AUTH_SECRET", "k" * 40)
    assert main(["token", "--ttl", "0"]) == 1
    assert "ttl 0" in capsys.readouterr().err
    assert main(["token", "--new-secret"]) == 0
    assert len(capsys.readouterr().out.strip()) >= 32

"""A Python agent named on the command line (``module:name``, ``file.py:name``) runs as
``brisvox.run(agent)`` does: check, serve, demo and console take the same object."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import brisvox
from brisvox.__main__ import main
from brisvox.server.agent import import_agent, is_agent_ref

PROGRAM = '''
import brisvox

@brisvox.tool.read_only
async def opening_hours() -> str:
    """When the restaurant is open."""
    return "18:00 to 23:00"

agent = brisvox.Agent(name="desk", prompt="You answer questions.", tools=[opening_hours])

def make():
    return brisvox.Agent(name="made", prompt="p")

not_an_agent = 3
'''


@pytest.fixture
def program(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    path = tmp_path / "desk_program.py"
    path.write_text(PROGRAM)
    monkeypatch.chdir(tmp_path)
    yield path
    sys.modules.pop("desk_program", None)


def test_a_reference_names_a_module_or_a_file_and_an_agent_in_it(program: Path) -> None:
    assert is_agent_ref("desk_program:agent") and is_agent_ref("pkg.mod:agent") and is_agent_ref("a/b.py:agent")
    assert not is_agent_ref("agents/host.toml") and not is_agent_ref("host.toml")
    assert import_agent("desk_program:agent").name == "desk"
    assert import_agent(f"{program}:agent").name == "desk"
    assert import_agent("desk_program:make").name == "made"  # a function that returns one


def test_a_reference_to_nothing_says_what_is_missing(program: Path) -> None:
    with pytest.raises(brisvox.AgentError, match="desk_program has no 'nobody'"):
        import_agent("desk_program:nobody")
    with pytest.raises(brisvox.AgentError, match=r"not_an_agent is int, not a brisvox\.Agent"):
        import_agent("desk_program:not_an_agent")
    with pytest.raises(brisvox.AgentError, match="cannot import 'no_such_module'"):
        import_agent("no_such_module:agent")
    with pytest.raises(brisvox.AgentError, match=r"no file missing\.py"):
        import_agent("missing.py:agent")


def test_brisvox_check_checks_a_named_python_agent(program: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "desk_program:agent"]) == 0
    assert "agent 'desk': ok, agent 'desk' (tools: opening_hours;" in capsys.readouterr().out
    assert main(["check", "desk_program:nobody"]) == 1
    assert "brisvox check: desk_program:nobody: desk_program has no 'nobody'" in capsys.readouterr().err


def _no_serving(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """run_serve's parts are recorded instead of served (the providers are stand-ins)."""
    served: list[Any] = []

    class Providers:
        llm_label = "scripted"

        def page_info(self, definition: Any) -> dict[str, str]:
            return {}

    async def serve_with(settings: Any, parts: Any, providers: Any, tracing: Any = None, node: Any = None,
                         prefix: Any = None) -> int:
        served.append(parts)
        return 0

    def runner(definition: Any, tools: Any, *rest: Any) -> None:
        served.append((definition.name, tools.names()))

    monkeypatch.setenv("BRISVOX_PORT", "8799")
    monkeypatch.delenv("BRISVOX_AGENT_FILE", raising=False)
    monkeypatch.setattr("brisvox.server.call_providers.build_call_providers", lambda *a, **kw: Providers())
    monkeypatch.setattr("brisvox.server.cli.session_runner", runner)
    monkeypatch.setattr("brisvox.server.page.page_routes", lambda info: [])
    monkeypatch.setattr("brisvox.server.cli._serve_with", serve_with)
    return served


def test_brisvox_serve_serves_a_named_python_agent_with_its_tools(
        program: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    served = _no_serving(monkeypatch)
    assert main(["serve", "desk_program:agent", "--workers", "1"]) == 0
    assert served[0] == ("desk", ["opening_hours"]) and served[1].agent == "desk"


def test_brisvox_demo_serves_the_programs_own_agent(monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    served = _no_serving(monkeypatch)
    assert brisvox.run(brisvox.Agent(name="mine", prompt="p"), ["demo"]) == 0
    assert served[0] == ("mine", []) and "open http://127.0.0.1:8799/" in capsys.readouterr().out


def test_brisvox_console_talks_to_a_named_python_agent(program: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    talked: list[brisvox.Agent] = []
    monkeypatch.setattr("brisvox.console.run_console", lambda agent: talked.append(agent) or 0)
    assert main(["console", f"{program}:agent"]) == 0
    assert [a.name for a in talked] == ["desk"]

"""The demo agent: its file loads against its tools, and book_table waits for a confirmation."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from brisvox.agent.context import ToolCall
from brisvox.agent.tools import CancelToken, ToolCallContext, ToolKind
from brisvox.server.agent_file import load_agent_file
from brisvox.server.demo import DEMO_AGENT_FILE, demo_tools

ROOT = Path(__file__).resolve().parents[2]


def test_the_demo_agent_file_loads_against_the_demo_tools_with_book_table_behind_the_gate() -> None:
    tools = demo_tools()
    agent = load_agent_file(DEMO_AGENT_FILE, available_tools=tools)
    assert agent.tools == ("check_availability", "book_table") and agent.confirm_tools == ("book_table",)
    assert tools.kinds() == {"check_availability": ToolKind.READ_ONLY, "book_table": ToolKind.SIDE_EFFECT}
    registry = tools.registry(agent.tools, agent.confirm_tools)
    spec = registry.spec("book_table")
    assert spec is not None and spec.confirm and registry.has_confirm_tools()


async def test_the_demo_tools_offer_alternatives_and_book() -> None:
    tools = demo_tools()
    check, book = tools.tool("check_availability"), tools.tool("book_table")
    assert check is not None and book is not None
    ctx = ToolCallContext("s", 1, ToolCall(id="c1", name="check_availability"), CancelToken())
    full = await check({"date": "2026-12-24", "time": "20:00", "party_size": 2}, ctx)
    assert full["free"] is False and full["alternatives"] == ["18:00", "19:00", "21:00"]
    done = await book({"name": "Ada", "date": "2026-12-24", "time": "19:00", "party_size": 2}, ctx)
    assert done == {"status": "confirmed", "reservation_id": "R001"}


def test_serve_without_an_agent_file_names_the_demo_agent_on_its_start_up_line() -> None:
    env = {**os.environ, "BRISVOX_PORT": "0", "PYTHONPATH": str(ROOT / "src")}
    env.pop("BRISVOX_AGENT_FILE", None)
    proc = subprocess.Popen([sys.executable, "-m", "brisvox", "serve", "--workers", "1"], env=env, cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        proc.terminate()
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "agent 'lokanta-deniz' (tools: check_availability, book_table" in line, line
    assert proc.returncode == 0


def test_make_demo_installs_every_library_an_auto_llm_needs() -> None:
    import re
    import tomllib

    from brisvox.server.providers import AUTO_CLOUD_LLMS, Stage, lookup

    demo = (ROOT / "Makefile").read_text().split("\ndemo:", 1)[1].split("\n\n", 1)[0]
    first_install = re.search(r"pip\)? install -q -e '\.\[([^\]]*)\]'", demo.replace("$(PIP)", "pip)"))
    assert first_install is not None, demo
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    installed = {dep for extra in first_install.group(1).split(",") for dep in extras[extra]}
    for provider, _ in AUTO_CLOUD_LLMS:
        entry = lookup(Stage.LLM, provider)
        assert entry is not None
        assert set(extras[entry.extra]) <= installed, (provider, entry.extra, first_install.group(0))


def test_make_demo_installs_the_webrtc_extra_because_the_demo_page_calls_over_webrtc_by_default() -> None:
    import re

    from brisvox.server.settings import Settings

    assert Settings.from_env({}).webrtc  # WebRTC is the demo page's default
    demo = (ROOT / "Makefile").read_text().split("\ndemo:", 1)[1].split("\n\n", 1)[0]
    installs = re.findall(r"install -q -e '\.\[([^\]]*)\]'", demo)
    assert len(installs) == 2, demo  # with the local LLM, and BRISVOX_DEMO_LLM=scripted without it
    for extras in installs:
        assert "webrtc" in extras.split(","), extras


def test_the_demo_agent_file_is_the_restaurant_example_and_checks_with_its_own_tools(capsys: pytest.CaptureFixture[str]) -> None:
    from brisvox.__main__ import main

    assert DEMO_AGENT_FILE == ROOT / "examples" / "restaurant" / "agent.toml"
    assert main(["check", str(DEMO_AGENT_FILE)]) == 0  # no program tools given: the demo's come with its file
    out = capsys.readouterr().out
    assert "ok, agent 'lokanta-deniz' (tools: check_availability, book_table" in out, out


def test_missing_demo_tools_are_a_config_error_naming_where_they_were_looked_for(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    from brisvox.core.errors import ConfigError
    from brisvox.server import demo

    monkeypatch.setattr(demo, "_TOOLS_FILE", tmp_path / "restaurant_agent.py")
    with pytest.raises(ConfigError, match=f"not at {tmp_path}"):
        demo.demo_tools()


def test_checking_the_demo_file_without_its_tools_reports_where_they_were_looked_for(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    from brisvox.__main__ import main
    from brisvox.server import demo

    monkeypatch.setattr(demo, "_TOOLS_FILE", tmp_path / "restaurant_agent.py")
    assert main(["check", str(DEMO_AGENT_FILE)]) != 0
    assert f"the demo agent's tools are not at {tmp_path}" in capsys.readouterr().err

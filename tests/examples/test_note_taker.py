"""The note-taker example: its agent file loads against its tools, and the tools behave."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from brisvox.agent.context import ToolCall
from brisvox.agent.tools import CancelToken, ToolCallContext, ToolError, ToolKind
from brisvox.server import load_agent_file

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "note_taker"


def example_tools() -> ModuleType:
    spec = importlib.util.spec_from_file_location("note_taker_tools", EXAMPLE / "tools.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def ctx(call_id: str, name: str, arguments: dict[str, Any], epoch: int = 1) -> ToolCallContext:
    return ToolCallContext("session-1", epoch, ToolCall(id=call_id, name=name, arguments=arguments), CancelToken())


def test_the_agent_file_loads_against_the_example_tools() -> None:
    mod = example_tools()
    tools = mod.build_tools(mod.NoteBook())
    agent = load_agent_file(EXAMPLE / "agent.toml", available_tools=tools)
    assert agent.tools == ("get_time", "save_note")
    assert tools.kinds() == {"get_time": ToolKind.READ_ONLY, "save_note": ToolKind.SIDE_EFFECT}
    registry = tools.registry(agent.tools, agent.confirm_tools)
    assert registry.names() == ["get_time", "save_note"]


async def test_get_time_answers_in_the_asked_zone_and_refuses_an_unknown_one() -> None:
    mod = example_tools()
    noon = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
    tools = mod.build_tools(mod.NoteBook(), now=lambda: noon)
    get_time = tools.tool("get_time")
    assert await get_time({"zone": "Europe/Istanbul"}, ctx("c1", "get_time", {})) == {
        "zone": "Europe/Istanbul", "time": "15:00", "date": "2026-12-02"}
    with pytest.raises(ToolError, match="unknown time zone"):
        await get_time({"zone": "Mars/Olympus"}, ctx("c2", "get_time", {}))


async def test_save_note_saves_once_per_idempotency_key() -> None:
    mod = example_tools()
    book = mod.NoteBook()
    save_note = mod.build_tools(book).tool("save_note")
    first = await save_note({"text": "buy milk"}, ctx("c1", "save_note", {}))
    replay = await save_note({"text": "buy milk"}, ctx("c1", "save_note", {}))
    other = await save_note({"text": "buy milk"}, ctx("c2", "save_note", {}))
    assert first == {"note_id": "note-1", "saved": True}
    assert replay == {"note_id": "note-1", "saved": False}
    assert other == {"note_id": "note-2", "saved": True}
    assert book.notes == {"note-1": "buy milk", "note-2": "buy milk"}


def test_the_example_program_checks_its_agent_file() -> None:
    root = EXAMPLE.parents[1]
    env = {"PYTHONPATH": str(root / "src"), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, str(EXAMPLE / "main.py"), "check", str(EXAMPLE / "agent.toml")],
                          capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "ok, agent 'note-taker' (tools: get_time, save_note" in done.stdout

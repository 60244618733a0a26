"""Python tools by name: the ToolSet and how agent files see it."""

from __future__ import annotations

import pytest

from brisvox.agent.tools import RegistryError, ToolKind
from brisvox.core.errors import ConfigError
from brisvox.server.agent_file import AgentFileError, parse_agent_file
from brisvox.server.tools import ToolSet


def toolset() -> ToolSet:
    tools = ToolSet()

    @tools.read_only
    async def lookup() -> str:
        """look up"""
        return "found"

    @tools.side_effect(name="book_table", timeout=2.0)
    async def book() -> str:
        """book"""
        return "booked"

    return tools


def test_decorators_register_tools_by_name_with_their_kind() -> None:
    tools = toolset()
    assert tools.names() == ["lookup", "book_table"] and len(tools) == 2 and "lookup" in tools
    assert tools.kinds() == {"lookup": ToolKind.READ_ONLY, "book_table": ToolKind.SIDE_EFFECT}
    spec = tools.spec("book_table")
    assert spec is not None and spec.timeout == 2.0 and spec.is_side_effect
    assert tools.tool("nothing") is None


def test_the_registry_rules_apply_when_a_tool_is_added() -> None:
    tools = toolset()
    with pytest.raises(RegistryError, match="already registered"):
        tools.read_only(name="lookup")(_again)
    with pytest.raises(RegistryError, match="reserved"):
        tools.side_effect(name="confirm_pending")(_again)
    with pytest.raises(RegistryError, match="must be 1 to 64"):
        tools.read_only(name="has space")(_again)


async def _again() -> str:
    """x"""
    return "x"



def test_an_agent_registry_holds_only_its_tools_and_turns_the_gate_on_for_confirm_tools() -> None:
    registry = toolset().registry(["book_table"], confirm=["book_table"])
    assert registry.names() == ["book_table", "confirm_pending"]
    spec = registry.spec("book_table")
    assert spec is not None and spec.confirm
    with pytest.raises(ConfigError, match="not registered"):
        toolset().registry(["missing"])


def test_a_read_only_tool_in_confirm_tools_is_an_agent_file_error_at_its_position() -> None:
    text = '[agent]\nname = "a"\nprompt = "p"\ntools = ["lookup", "book_table"]\nconfirm_tools = ["lookup"]\n'
    with pytest.raises(AgentFileError) as info:
        parse_agent_file(text, source="a.toml", available_tools=toolset())
    assert [str(p) for p in info.value.problems] == [
        "a.toml:5:18: agent.confirm_tools[0]: tool 'lookup' is read-only; only side-effect tools wait for a "
        "confirmation"
    ]
    ok = parse_agent_file(text.replace('["lookup"]', '["book_table"]'), source="a.toml", available_tools=toolset())
    assert ok.confirm_tools == ("book_table",)


def test_every_set_offers_the_telephony_tools_by_name_and_its_own_tool_of_that_name_wins() -> None:
    tools = ToolSet()
    assert len(tools) == 0 and tools.names() == []
    assert all(name in tools for name in ("end_call", "transfer_call", "send_dtmf"))
    registry = tools.registry(["end_call", "send_dtmf"], confirm=["end_call"])
    end, dtmf = registry.spec("end_call"), registry.spec("send_dtmf")
    assert end is not None and end.is_side_effect and not end.repeatable and end.confirm
    assert dtmf is not None and dtmf.repeatable

    @tools.read_only
    async def end_call() -> str:
        """my own"""
        return "mine"

    spec = tools.spec("end_call")
    assert spec is not None and spec.description == "my own"

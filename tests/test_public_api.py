"""The top-level package's public names are pinned; the examples use only public modules."""

from __future__ import annotations

import ast
from pathlib import Path

import brisvox

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def test_the_top_level_package_exports_exactly_these_names() -> None:
    assert sorted(brisvox.__all__) == sorted([
        "Agent", "AgentError", "FunctionTool", "Hook", "HookPoint", "ToolContext", "ToolError", "ToolSet", "__version__", "asgi", "run",
        "run_with_tools", "tool",
    ])
    for name in brisvox.__all__:
        assert getattr(brisvox, name) is not None


def test_the_examples_import_no_private_module() -> None:
    private = []
    for path in sorted(EXAMPLES.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            private += [f"{path.name}: {n}" for n in names
                        if n.startswith("brisvox") and any(p.startswith("_") for p in n.split("."))]
    assert private == []
    assert any(EXAMPLES.rglob("*.py"))


def test_the_testing_kit_exports_exactly_these_names() -> None:
    import brisvox.testing

    assert sorted(brisvox.testing.__all__) == ["AgentTest", "Replay", "Turn", "TurnExpect", "call", "virtual_time"]


def test_the_sdk_exports_exactly_these_names() -> None:
    import brisvox.sdk
    import brisvox.sdk.brain
    import brisvox.sdk.loop
    import brisvox.sdk.models
    import brisvox.sdk.protocol
    import brisvox.sdk.testing

    assert sorted(brisvox.sdk.__all__) == ["AnthropicBrain", "Brain", "GeminiBrain", "ModelBrain", "OpenAIBrain",
                                           "ToolChoice", "TurnReport", "needs_result_now", "serve"]
    assert len(brisvox.sdk.protocol.__all__) == 27 and "parse_agent_message" in brisvox.sdk.protocol.__all__
    assert {"UiCommand", "UiEvent", "UiMessage", "Transfer", "TurnRequest", "say_refusal"} <= set(
        brisvox.sdk.protocol.__all__)
    assert callable(brisvox.sdk.Brain.dispatch) and callable(brisvox.sdk.Brain.send_server_message)
    assert sorted(brisvox.sdk.brain.__all__) == ["Brain", "OUTBOX", "SEND_TIMEOUT", "START_TIMEOUT", "Wire", "serve",
                                                 "serve_wire"]
    assert sorted(brisvox.sdk.loop.__all__) == ["FALLBACK_LINE", "MAX_TOOL_HOPS", "ModelBrain", "SPEAKING_WATCHDOG",
                                                "TurnReport", "WATCHDOG_LINE", "needs_result_now"]
    assert sorted(brisvox.sdk.models.__all__) == ["AnthropicBrain", "GeminiBrain", "OpenAIBrain"]
    assert sorted(brisvox.sdk.testing.__all__) == ["BrainDriver", "TURN_LIMIT", "Turn", "call", "scripted"]

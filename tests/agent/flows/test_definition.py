"""FlowBuilder.build: every definition error, and the checked flow."""

from __future__ import annotations

import pytest

from brisvox.agent.flows import (
    Custom,
    FlowBuilder,
    FlowDefError,
    FlowDefErrorKind,
    Goto,
    Node,
    ResultEquals,
    Rule,
    Rules,
    ToolUse,
)
from brisvox.agent.flows.definition import CallOutcome, ErrorIs, Failure, Success, decide
from brisvox.core.errors import ConfigError

from ._support import Specs, spec

CATALOG = Specs(spec("a"), spec("b"), spec("end"))


def _node(name: str, *tools: ToolUse, text: str = "do it") -> Node:
    return Node(name=name, task_messages=(text,), tools=tools)


def _kind(builder: FlowBuilder) -> FlowDefErrorKind:
    with pytest.raises(FlowDefError) as err:
        builder.build(CATALOG)
    assert isinstance(err.value, ConfigError)
    return err.value.kind


def test_a_flow_without_nodes_is_rejected() -> None:
    assert _kind(FlowBuilder()) is FlowDefErrorKind.NO_NODES


def test_a_duplicate_node_is_rejected() -> None:
    assert _kind(FlowBuilder().node(_node("x")).node(_node("x"))) is FlowDefErrorKind.DUPLICATE_NODE


def test_an_unknown_initial_node_is_rejected() -> None:
    assert _kind(FlowBuilder().node(_node("x")).initial("y")) is FlowDefErrorKind.UNKNOWN_INITIAL


def test_a_node_without_prompt_text_is_rejected() -> None:
    assert _kind(FlowBuilder().node(_node("x", text="  "))) is FlowDefErrorKind.EMPTY_PROMPT


def test_a_tool_twice_in_one_scope_is_rejected_including_a_global_one() -> None:
    twice = FlowBuilder().node(_node("x", ToolUse(tool="a"), ToolUse(tool="a")))
    assert _kind(twice) is FlowDefErrorKind.DUPLICATE_TOOL
    shadow = FlowBuilder().node(_node("x", ToolUse(tool="end"))).global_tool(ToolUse(tool="end"))
    assert _kind(shadow) is FlowDefErrorKind.DUPLICATE_TOOL


def test_an_unregistered_tool_is_rejected_in_a_node_and_globally() -> None:
    assert _kind(FlowBuilder().node(_node("x", ToolUse(tool="nope")))) is FlowDefErrorKind.UNREGISTERED_TOOL
    assert (
        _kind(FlowBuilder().node(_node("x")).global_tool(ToolUse(tool="nope")))
        is FlowDefErrorKind.UNREGISTERED_TOOL
    )


def test_a_static_target_that_is_not_a_node_is_rejected_for_goto_and_rules() -> None:
    goto = FlowBuilder().node(_node("x", ToolUse(tool="a", transition=Goto("y"))))
    assert _kind(goto) is FlowDefErrorKind.UNKNOWN_TARGET
    rules = FlowBuilder().node(
        _node("x", ToolUse(tool="a", transition=Rules(Rule(Success(), "x"), Rule(Failure(), "z"))))
    )
    assert _kind(rules) is FlowDefErrorKind.UNKNOWN_TARGET
    dangling_global = FlowBuilder().node(_node("x")).global_tool(ToolUse(tool="end", transition=Goto("bye")))
    assert _kind(dangling_global) is FlowDefErrorKind.UNKNOWN_TARGET


def test_custom_targets_are_not_checked_at_build_time() -> None:
    flow = (
        FlowBuilder()
        .node(_node("x", ToolUse(tool="a", transition=Custom(lambda o, s: "nowhere"))))
        .build(CATALOG)
    )
    assert flow.initial == "x"


def test_a_built_flow_knows_its_scopes_specs_and_result_keys() -> None:
    flow = (
        FlowBuilder()
        .role("global role")
        .node(_node("x", ToolUse(tool="a", transition=Goto("y"), capture_result="found")))
        .node(_node("y", ToolUse(tool="b")))
        .global_tool(ToolUse(tool="end", transition=Goto("x")))
        .build(CATALOG)
    )
    assert flow.initial == "x"
    assert sorted(flow.tool_uses("x")) == ["a", "end"]
    assert sorted(flow.specs) == ["a", "b", "end"]
    assert flow.result_keys == frozenset({"found"})


def test_conditions_match_success_failure_result_values_and_error_kinds() -> None:
    good = CallOutcome.of("a", "t0.0", {}, '{"free": true, "n": 1, "list": [{"x": "y"}]}', False)
    bad = CallOutcome.of("a", "t0.1", {}, '{"error": "timeout", "tool": "a", "detail": ""}', True)
    assert bad.error_kind == "timeout"
    assert ResultEquals("free", True).matches(good)
    assert not ResultEquals("n", True).matches(good)  # 1 is not true
    assert ResultEquals("list.0.x", "y").matches(good)
    assert not ResultEquals("list.3.x", "y").matches(good)
    assert ErrorIs("timeout").matches(bad) and not ErrorIs("timeout").matches(good)
    assert decide(Goto("y"), good, {}) == "y"
    assert decide(Goto("y"), bad, {}) is None
    assert decide(Rules(Rule(Failure(), "sorry"), Rule(Success(), "next")), bad, {}) == "sorry"
    assert decide(Rules(Rule(ResultEquals("free", False), "alt")), good, {}) is None

"""Shared pieces of the flow tests: a spec catalog, hand-built executions, a scripted summarizer."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from brisvox.agent.context import Context, ToolCall, ToolMessage
from brisvox.agent.flows import FlowManager
from brisvox.agent.tools.spec import ToolKind, ToolSpec
from brisvox.agent.window import SummaryRequest


class Specs:
    def __init__(self, *specs: ToolSpec) -> None:
        self._specs = {s.name: s for s in specs}

    def spec(self, name: str) -> ToolSpec | None:
        return self._specs.get(name)


def spec(name: str, kind: ToolKind = ToolKind.READ_ONLY) -> ToolSpec:
    return ToolSpec(name=name, description=f"the {name} tool", kind=kind)


@dataclass
class HandExecution:
    results: Sequence[ToolMessage]
    late_notes: Sequence[Any] = ()
    budget_exhausted: bool = False
    delivered: bool = False

    def mark_delivered(self) -> None:
        self.delivered = True


def ok(call_id: str, body: Any) -> ToolMessage:
    return ToolMessage(call_id=call_id, content=json.dumps(body))


def err(call_id: str, kind: str, tool: str = "t") -> ToolMessage:
    return ToolMessage(
        call_id=call_id, content=json.dumps({"error": kind, "tool": tool, "detail": "x"}), is_error=True
    )


def push_calls(
    flow: FlowManager, ctx: Context, epoch: int, *calls: tuple[str, dict[str, Any]]
) -> list[ToolCall]:
    ids = flow.next_tool_call_ids(ctx, epoch, len(calls))
    made = [ToolCall(id=i, name=name, arguments=args) for i, (name, args) in zip(ids, calls, strict=True)]
    ctx.push_assistant("", made)
    return made


@dataclass
class ScriptedSummarizer:
    replies: list[Any] = field(default_factory=list)
    requests: list[SummaryRequest] = field(default_factory=list)
    delay: float = 0.0
    clock: Any = None

    async def summarize(self, request: SummaryRequest) -> str:
        self.requests.append(request)
        if self.delay and self.clock is not None:
            await self.clock.sleep(self.delay)
        reply = self.replies.pop(0) if self.replies else "a summary"
        if isinstance(reply, BaseException):
            raise reply
        return str(reply)


def generic_catalog() -> Specs:
    return Specs(
        spec("go_append"),
        spec("go_reset"),
        spec("go_summary"),
        spec("check"),
        spec("always"),
        spec("custom"),
        spec("end"),
        spec("book", ToolKind.SIDE_EFFECT),
        spec("book_next", ToolKind.SIDE_EFFECT),
    )


def generic_flow(catalog: Any = None, **summary: Any) -> Any:
    from brisvox.agent.flows import (
        Always,
        Custom,
        EndCall,
        Failure,
        FlowBuilder,
        Goto,
        Node,
        Reset,
        ResetWithSummary,
        ResultEquals,
        Rule,
        Rules,
        Say,
        Success,
        ToolUse,
    )

    rws = ResetWithSummary(**summary) if summary else ResetWithSummary()

    def custom(outcome: Any, state: Any) -> str | None:
        return outcome.result.get("to") if isinstance(outcome.result, dict) else "sorry"

    moves = (
        ToolUse(tool="go_append", transition=Goto("b")),
        ToolUse(tool="go_reset", transition=Goto("r")),
        ToolUse(tool="go_summary", transition=Goto("s")),
    )
    a_tools = (
        *moves,
        ToolUse(
            tool="check",
            transition=Rules(Rule(Failure(), "sorry"), Rule(ResultEquals("ok", True), "b")),
            capture_args=True,
            capture_result="checked",
        ),
        ToolUse(tool="always", transition=Rules(Rule(Always(), "sorry"))),
        ToolUse(tool="custom", transition=Custom(custom)),
        ToolUse(tool="book", transition=Rules(Rule(Success(), "b")), capture_result="booking"),
        ToolUse(tool="book_next", transition=Goto("r")),
    )
    return (
        FlowBuilder()
        .role("You are a test agent.")
        .node(
            Node(name="a", task_messages=("Node A. Checked: {checked.value}. Name: {name}.",), tools=a_tools)
        )
        .node(Node(name="b", task_messages=("Node B.",), tools=(*moves, ToolUse(tool="book"))))
        .node(
            Node(
                name="r",
                task_messages=("Node R.",),
                strategy=Reset(),
                tools=(*moves, ToolUse(tool="book_next", transition=Goto("s"))),
            )
        )
        .node(
            Node(
                name="s",
                task_messages=("Node S.",),
                strategy=rws,
                pre_actions=(Say("One moment."),),
                tools=(*moves, ToolUse(tool="book_next", transition=Goto("r2"))),
            )
        )
        .node(
            Node(
                name="r2",
                task_messages=("Node R2.",),
                strategy=Reset(),
                tools=(ToolUse(tool="book_next", transition=Goto("r3")),),
            )
        )
        .node(
            Node(
                name="r3",
                task_messages=("Node R3.",),
                strategy=Reset(),
                tools=(ToolUse(tool="book_next", transition=Goto("r")),),
            )
        )
        .node(
            Node(
                name="sorry",
                task_messages=("Apologize.",),
                post_actions=(EndCall(),),
                respond_immediately=False,
            )
        )
        .global_tool(ToolUse(tool="end", transition=Goto("sorry")))
        .initial("a")
        .build(catalog if catalog is not None else generic_catalog())
    )

"""The ``[window]`` and ``[flow]`` sections of agent files (docs/CONFIG.md).

``[window]`` bounds what each model request carries in a long call and says who
summarizes the rest; ``[flow]`` runs the call as a conversation flow
(:mod:`brisvox.agent.flows`): nodes with a prompt and tools, transitions on tool results,
and how the context changes on entering a node.  The pydantic models here check each
value's shape and range; :func:`window_settings` and :func:`flow_settings` run the
cross-field checks, reporting through the agent file's report.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal

from pydantic import Field

from brisvox.agent.flows import (
    Always,
    Append,
    EndCall,
    Failure,
    Flow,
    FlowBuilder,
    Node,
    Reset,
    ResetWithSummary,
    ResultEquals,
    Rule,
    Rules,
    Say,
    Strategy,
    Success,
    ToolUse,
)
from brisvox.agent.flows.definition import (
    DEFAULT_SUMMARY_INPUT_TOKENS,
    DEFAULT_SUMMARY_MAX_TOKENS,
    Condition,
    ToolCatalog,
)
from brisvox.agent.flows.manager import DEFAULT_SUMMARY_TIMEOUT
from brisvox.agent.window import WindowPolicy
from brisvox.server._section import Section

__all__ = ["FlowSettings", "WindowSettings", "flow_settings", "window_settings"]

KeyPath = tuple[str | int, ...]
Report = Callable[[KeyPath, str], None]

DEFAULT_KEEP_RECENT_TURNS = WindowPolicy().keep_recent_turns
DEFAULT_WINDOW_TOKENS = WindowPolicy().max_tokens
DEFAULT_WINDOW_SUMMARY_TIMEOUT = 20.0
_STATE_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")


class WindowSection(Section):
    ranges = MappingProxyType({
        "keep_recent_turns": (1, 200), "max_tokens": (500, 1_000_000), "summary_timeout": (0.1, 300.0),
    })
    enabled: bool = True
    keep_recent_turns: int | None = None
    max_tokens: int | None = None
    summarizer: Literal["llm", "off"] | None = None
    summary_model: str | None = Field(default=None, min_length=1, max_length=200)
    summary_timeout: float | None = None


class TransitionSection(Section):
    # ``equals`` may be any number a result holds; the range only keeps out inf and nan.
    ranges = MappingProxyType({"equals": (-1e15, 1e15)})
    tool: str = Field(min_length=1)
    to: str = Field(min_length=1)
    when: Literal["success", "failure", "always"] = "success"
    result: str | None = Field(default=None, min_length=1, max_length=200)  # a path into the result: "a.b.0"
    equals: str | int | float | bool | None = None


class NodeSection(Section):
    ranges = MappingProxyType({"summary_input_tokens": (50, 100_000), "summary_max_tokens": (20, 10_000)})
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")
    prompt: str = Field(min_length=1)
    tools: list[str] = Field(default_factory=list)
    strategy: Literal["append", "reset", "reset_with_summary"] = "append"
    say: str | None = Field(default=None, min_length=1, max_length=500)
    respond_immediately: bool = True
    keep_last_user: bool = False
    end_call: bool = False  # hang up once the node's first response has played
    capture_args: list[str] = Field(default_factory=list)  # tools whose arguments go into the state ({day})
    capture_results: dict[str, str] = Field(default_factory=dict)  # tool -> the state key its result goes under
    summary_input_tokens: int | None = None
    summary_max_tokens: int | None = None
    transitions: list[TransitionSection] = Field(default_factory=list)


class FlowSection(Section):
    ranges = MappingProxyType({"summary_timeout": (0.1, 60.0)})
    initial: str | None = None
    summary_timeout: float | None = None
    nodes: list[NodeSection] = Field(min_length=1, max_length=64)


@dataclass(frozen=True, slots=True)
class WindowSettings:
    """``policy`` None: every request carries the whole call.  ``summarize``: the agent's model
    (or ``summary_model`` of the same provider) summarizes what the window leaves out."""

    policy: WindowPolicy | None = field(default_factory=WindowPolicy)
    summarize: bool = True
    summary_model: str | None = None
    summary_timeout: float = DEFAULT_WINDOW_SUMMARY_TIMEOUT


@dataclass(frozen=True, slots=True)
class FlowSettings:
    """A checked ``[flow]``; :meth:`build` makes the :class:`~brisvox.agent.flows.Flow` over a tool registry."""

    nodes: tuple[Node, ...]
    initial: str
    summary_timeout: float = DEFAULT_SUMMARY_TIMEOUT

    def build(self, role: str, catalog: ToolCatalog) -> Flow:
        """The flow with the agent's prompt as its role (raises ``FlowDefError`` for a bad catalog)."""
        return FlowBuilder().role(role).nodes(self.nodes).initial(self.initial).build(catalog)


def window_settings(w: WindowSection, model_option: bool, report: Report) -> WindowSettings:
    """``model_option``: the agent's LLM provider takes a ``model`` option (so ``summary_model`` can apply)."""
    if not w.enabled:
        for key in ("keep_recent_turns", "max_tokens", "summarizer", "summary_model", "summary_timeout"):
            if getattr(w, key) is not None:
                report(("window", key), "has no effect with enabled = false")
        return WindowSettings(policy=None, summarize=False)
    summarize = w.summarizer != "off"
    if not summarize:
        for key in ("summary_model", "summary_timeout"):
            if getattr(w, key) is not None:
                report(("window", key), 'has no effect with summarizer = "off"')
    elif w.summary_model is not None and not model_option:
        report(("window", "summary_model"), "the agent's llm provider takes no model option")
    policy = WindowPolicy(
        max_tokens=w.max_tokens if w.max_tokens is not None else DEFAULT_WINDOW_TOKENS,
        keep_recent_turns=w.keep_recent_turns if w.keep_recent_turns is not None else DEFAULT_KEEP_RECENT_TURNS,
    )
    return WindowSettings(
        policy=policy,
        summarize=summarize,
        summary_model=w.summary_model,
        summary_timeout=w.summary_timeout if w.summary_timeout is not None else DEFAULT_WINDOW_SUMMARY_TIMEOUT,
    )


def flow_settings(f: FlowSection, agent_tools: Collection[str], report: Report) -> FlowSettings:
    """The cross-field checks of ``[flow]``: node names, targets, tools, strategy options."""
    names = [n.name for n in f.nodes]
    for i, name in enumerate(names):
        if name in names[:i]:
            report(("flow", "nodes", i, "name"), f"node {name!r} is defined twice")
    initial = f.initial if f.initial is not None else names[0]
    if initial not in names:
        report(("flow", "initial"), f"node {initial!r} is not a node of the flow (nodes: {', '.join(names)})")
    nodes = tuple(_node(i, n, set(names), agent_tools, report) for i, n in enumerate(f.nodes))
    timeout = f.summary_timeout if f.summary_timeout is not None else DEFAULT_SUMMARY_TIMEOUT
    return FlowSettings(nodes=nodes, initial=initial, summary_timeout=timeout)


def _node(i: int, n: NodeSection, names: set[str], agent_tools: Collection[str], report: Report) -> Node:
    base: KeyPath = ("flow", "nodes", i)
    for j, tool in enumerate(n.tools):
        if tool in n.tools[:j]:
            report((*base, "tools", j), f"tool {tool!r} is listed twice")
        if tool not in agent_tools:
            report((*base, "tools", j), f"tool {tool!r} is not in agent.tools")
    if n.strategy != "reset_with_summary":
        for key in ("summary_input_tokens", "summary_max_tokens"):
            if getattr(n, key) is not None:
                report((*base, key), 'applies only to strategy = "reset_with_summary"')
    for j, tool in enumerate(n.capture_args):
        if tool not in n.tools:
            report((*base, "capture_args", j), f"tool {tool!r} is not in this node's tools")
    for tool, key in n.capture_results.items():
        if tool not in n.tools:
            report((*base, "capture_results", tool), f"tool {tool!r} is not in this node's tools")
        if not _STATE_KEY.fullmatch(key):
            report((*base, "capture_results", tool), f"expected a state key (letters, digits, '_'), got {key!r}")
    rules: dict[str, list[Rule]] = {}
    for j, t in enumerate(n.transitions):
        where: KeyPath = (*base, "transitions", j)
        if t.tool not in n.tools:
            report((*where, "tool"), f"tool {t.tool!r} is not in this node's tools")
        if t.to not in names:
            report((*where, "to"), f"node {t.to!r} is not a node of the flow")
        if (t.result is None) != (t.equals is None):
            report(where, "result and equals go together: the transition fires when the result at that path equals it")
        elif t.result is not None and t.when != "success":
            report((*where, "when"), "a result test fires on success only; remove when")
        rules.setdefault(t.tool, []).append(Rule(_condition(t), t.to))
    uses = tuple(
        ToolUse(tool=tool, transition=Rules(*rules[tool]) if tool in rules else None,
                capture_args=tool in n.capture_args, capture_result=n.capture_results.get(tool))
        for tool in dict.fromkeys(n.tools)
    )
    return Node(
        name=n.name,
        task_messages=(n.prompt.strip(),),
        tools=uses,
        strategy=_strategy(n),
        pre_actions=(Say(n.say),) if n.say is not None else (),
        post_actions=(EndCall(),) if n.end_call else (),
        respond_immediately=n.respond_immediately,
        keep_last_user=n.keep_last_user,
    )


def _condition(t: TransitionSection) -> Condition:
    if t.result is not None:
        return ResultEquals(t.result, t.equals)
    if t.when == "failure":
        return Failure()
    return Always() if t.when == "always" else Success()


def _strategy(n: NodeSection) -> Strategy:
    if n.strategy == "append":
        return Append()
    if n.strategy == "reset":
        return Reset()
    return ResetWithSummary(
        summary_input_tokens=n.summary_input_tokens or DEFAULT_SUMMARY_INPUT_TOKENS,
        summary_max_tokens=n.summary_max_tokens or DEFAULT_SUMMARY_MAX_TOKENS,
    )

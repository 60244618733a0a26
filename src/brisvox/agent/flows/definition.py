"""What a flow is: nodes, the tools each offers, what their results lead to.

A flow is plain data, checked once by :meth:`FlowBuilder.build`:

* a :class:`Node` has role and task messages (rendered into message 0 of the context),
  the tools in its scope (each a :class:`ToolUse`), a context :data:`Strategy` for
  entering it, pre and post :data:`Action` values, ``respond_immediately`` and
  ``keep_last_user``;
* a :class:`ToolUse` names a registered tool and, optionally, the :data:`Transition`
  its result triggers and what to capture into the flow state;
* global tool uses are offered in every node (an ``end_call`` that leads to a farewell).

Transitions: :class:`Goto` (on success), :class:`Rules` (the first matching
:class:`Rule`), :class:`Custom` (a function of the outcome and the state, checked at
run time).
"""

from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeAlias

from brisvox.agent.tools.spec import ToolSpec
from brisvox.core.errors import BrisvoxError, ConfigError

__all__ = [
    "DEFAULT_SUMMARY_INPUT_TOKENS",
    "DEFAULT_SUMMARY_MAX_TOKENS",
    "Action",
    "Always",
    "Append",
    "CallOutcome",
    "Condition",
    "Custom",
    "CustomAction",
    "EndCall",
    "ErrorIs",
    "Failure",
    "Flow",
    "FlowBuilder",
    "FlowDefError",
    "FlowDefErrorKind",
    "FlowError",
    "Goto",
    "Node",
    "Reset",
    "ResetWithSummary",
    "ResultEquals",
    "Rule",
    "Rules",
    "Say",
    "Strategy",
    "Success",
    "ToolCatalog",
    "ToolUse",
    "Transition",
]

DEFAULT_SUMMARY_INPUT_TOKENS = 2000
DEFAULT_SUMMARY_MAX_TOKENS = 400


class FlowError(BrisvoxError):
    """A flow was used in a way its state does not allow (see the message)."""


class FlowDefErrorKind(enum.Enum):
    NO_NODES = "no_nodes"
    DUPLICATE_NODE = "duplicate_node"
    UNKNOWN_INITIAL = "unknown_initial"
    EMPTY_PROMPT = "empty_prompt"
    DUPLICATE_TOOL = "duplicate_tool"
    UNREGISTERED_TOOL = "unregistered_tool"
    UNKNOWN_TARGET = "unknown_target"


class FlowDefError(ConfigError):
    """The definition of a flow is inconsistent; ``kind`` says how, the message where."""

    def __init__(self, kind: FlowDefErrorKind, detail: str) -> None:
        super().__init__(f"{kind.value}: {detail}")
        self.kind = kind


# ---------------------------------------------------------------------------------------------
# Outcomes and conditions


@dataclass(frozen=True, slots=True, kw_only=True)
class CallOutcome:
    """One tool call's answer as transitions see it.

    ``result`` is the content parsed as JSON (``None`` when it does not parse);
    ``error_kind`` is the ``"error"`` field of an error result.
    """

    tool: str
    call_id: str
    arguments: Mapping[str, Any]
    content: str
    is_error: bool
    result: Any = None
    error_kind: str | None = None

    @classmethod
    def of(
        cls, tool: str, call_id: str, arguments: Mapping[str, Any], content: str, is_error: bool
    ) -> CallOutcome:
        try:
            parsed: Any = json.loads(content)
        except ValueError:
            parsed = None
        kind = None
        if is_error and isinstance(parsed, dict) and isinstance(parsed.get("error"), str):
            kind = parsed["error"]
        return cls(
            tool=tool,
            call_id=call_id,
            arguments=arguments,
            content=content,
            is_error=is_error,
            result=parsed,
            error_kind=kind,
        )

    def __repr__(self) -> str:
        return f"CallOutcome(tool={self.tool!r}, call_id={self.call_id!r}, is_error={self.is_error}, error_kind={self.error_kind!r})"


def lookup(value: Any, path: str) -> tuple[bool, Any]:
    """Walks ``a.b.0`` through dicts and lists; ``(False, None)`` when a step is missing."""
    if path == "":
        return True, value
    for step in path.split("."):
        if isinstance(value, Mapping) and step in value:
            value = value[step]
        elif isinstance(value, list) and step.isdigit() and int(step) < len(value):
            value = value[int(step)]
        else:
            return False, None
    return True, value


@dataclass(frozen=True, slots=True)
class Success:
    """The call succeeded."""

    def matches(self, outcome: CallOutcome) -> bool:
        return not outcome.is_error


@dataclass(frozen=True, slots=True)
class Failure:
    """The call ran and failed (only routable failures ever reach a condition)."""

    def matches(self, outcome: CallOutcome) -> bool:
        return outcome.is_error


@dataclass(frozen=True, slots=True)
class Always:
    def matches(self, outcome: CallOutcome) -> bool:
        return True


@dataclass(frozen=True, slots=True)
class ResultEquals:
    """A successful result whose value at ``path`` (dots; list indices) equals ``value``."""

    path: str
    value: Any

    def matches(self, outcome: CallOutcome) -> bool:
        if outcome.is_error:
            return False
        found, got = lookup(outcome.result, self.path)
        return found and bool(got == self.value) and type(got) is type(self.value)


@dataclass(frozen=True, slots=True)
class ErrorIs:
    """An error result of this kind (``timeout``, ``unknown_outcome``, ...)."""

    kind: str

    def matches(self, outcome: CallOutcome) -> bool:
        return outcome.is_error and outcome.error_kind == self.kind


Condition: TypeAlias = Success | Failure | Always | ResultEquals | ErrorIs


@dataclass(frozen=True, slots=True)
class Rule:
    when: Condition
    target: str


@dataclass(frozen=True, slots=True)
class Goto:
    """Go to ``target`` when the call succeeds."""

    target: str


@dataclass(frozen=True, slots=True)
class Rules:
    """The target of the first rule whose condition matches."""

    rules: tuple[Rule, ...]

    def __init__(self, *rules: Rule) -> None:
        object.__setattr__(self, "rules", tuple(rules))


@dataclass(frozen=True, slots=True)
class Custom:
    """``decide(outcome, state)`` returns a node name or ``None``; checked at run time."""

    decide: Callable[[CallOutcome, Mapping[str, Any]], str | None]


Transition: TypeAlias = Goto | Rules | Custom


def static_targets(transition: Transition | None) -> list[str]:
    if isinstance(transition, Goto):
        return [transition.target]
    if isinstance(transition, Rules):
        return [r.target for r in transition.rules]
    return []


def decide(transition: Transition | None, outcome: CallOutcome, state: Mapping[str, Any]) -> str | None:
    """The target ``transition`` names for ``outcome``, or ``None`` when it does not fire."""
    if transition is None:
        return None
    if isinstance(transition, Goto):
        return transition.target if not outcome.is_error else None
    if isinstance(transition, Rules):
        for rule in transition.rules:
            if rule.when.matches(outcome):
                return rule.target
        return None
    return transition.decide(outcome, state)


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolUse:
    """A tool in a node's scope: what its result triggers and what it adds to the state.

    ``capture_args`` merges the call's top-level arguments into the state on success;
    ``capture_result`` stores the result (parsed JSON when it parses) under that key.
    """

    tool: str
    transition: Transition | None = None
    capture_args: bool = False
    capture_result: str | None = None


# ---------------------------------------------------------------------------------------------
# Strategies and actions


@dataclass(frozen=True, slots=True)
class Append:
    """Keep the history; swap the node prompt (message 0)."""


@dataclass(frozen=True, slots=True)
class Reset:
    """The context becomes the node prompt alone (plus the last user message if kept)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ResetWithSummary:
    """Reset to the prompt plus a summary of the newest history.

    ``summary_input_tokens`` bounds the history sent (whole turns, the latest always);
    ``summary_max_tokens`` is the size the summary is asked for and clipped to.
    """

    summary_input_tokens: int = DEFAULT_SUMMARY_INPUT_TOKENS
    summary_max_tokens: int = DEFAULT_SUMMARY_MAX_TOKENS


Strategy: TypeAlias = Append | Reset | ResetWithSummary


@dataclass(frozen=True, slots=True)
class Say:
    """A canned utterance for the runner to speak; it is not added to the context."""

    text: str


@dataclass(frozen=True, slots=True)
class EndCall:
    """As a post action: hang up once this node's first response was played."""


@dataclass(frozen=True, slots=True)
class CustomAction:
    """Application-defined; the runner hands ``name`` and ``data`` to application code."""

    name: str
    data: Mapping[str, Any] = field(default_factory=dict)


Action: TypeAlias = Say | EndCall | CustomAction


@dataclass(frozen=True, slots=True, kw_only=True)
class Node:
    """One step of the conversation."""

    name: str
    task_messages: tuple[str, ...] = ()
    role_messages: tuple[str, ...] = ()
    tools: tuple[ToolUse, ...] = ()
    strategy: Strategy = field(default_factory=Append)
    pre_actions: tuple[Action, ...] = ()
    post_actions: tuple[Action, ...] = ()
    respond_immediately: bool = True
    keep_last_user: bool = False

    def with_keep_last_user(self, keep: bool = True) -> Node:
        return dataclasses.replace(self, keep_last_user=keep)


class ToolCatalog(Protocol):
    """What the builder needs of a tool registry: the spec of a registered tool."""

    def spec(self, name: str) -> ToolSpec | None: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class Flow:
    """A checked flow definition (made by :meth:`FlowBuilder.build`)."""

    role_messages: tuple[str, ...]
    nodes: Mapping[str, Node]
    initial: str
    global_tools: tuple[ToolUse, ...]
    specs: Mapping[str, ToolSpec]
    result_keys: frozenset[str]

    def node(self, name: str) -> Node:
        return self.nodes[name]

    def tool_uses(self, node: str) -> dict[str, ToolUse]:
        """The tool uses in ``node``'s scope (its own, then the global ones), by tool name."""
        uses = {u.tool: u for u in self.global_tools}
        uses.update({u.tool: u for u in self.nodes[node].tools})
        return uses


class FlowBuilder:
    """Collects a flow's parts; :meth:`build` checks them and raises :class:`FlowDefError`."""

    def __init__(self) -> None:
        self._role: list[str] = []
        self._nodes: list[Node] = []
        self._globals: list[ToolUse] = []
        self._initial: str | None = None

    def role(self, *messages: str) -> FlowBuilder:
        """Role messages for every node (global instructions), before each node's own."""
        self._role.extend(messages)
        return self

    def node(self, node: Node) -> FlowBuilder:
        self._nodes.append(node)
        return self

    def nodes(self, nodes: Iterable[Node]) -> FlowBuilder:
        self._nodes.extend(nodes)
        return self

    def global_tool(self, use: ToolUse) -> FlowBuilder:
        self._globals.append(use)
        return self

    def initial(self, name: str) -> FlowBuilder:
        self._initial = name
        return self

    def build(self, catalog: ToolCatalog) -> Flow:
        if not self._nodes:
            raise FlowDefError(FlowDefErrorKind.NO_NODES, "the flow has no nodes")
        nodes: dict[str, Node] = {}
        for node in self._nodes:
            if node.name in nodes:
                raise FlowDefError(FlowDefErrorKind.DUPLICATE_NODE, f"node {node.name!r} is defined twice")
            nodes[node.name] = node
        initial = self._initial if self._initial is not None else self._nodes[0].name
        if initial not in nodes:
            raise FlowDefError(FlowDefErrorKind.UNKNOWN_INITIAL, f"initial node {initial!r} is not a node")
        specs: dict[str, ToolSpec] = {}
        result_keys: set[str] = set()

        def check_scope(where: str, uses: Iterable[ToolUse], seen: set[str]) -> None:
            for use in uses:
                if use.tool in seen:
                    raise FlowDefError(
                        FlowDefErrorKind.DUPLICATE_TOOL, f"tool {use.tool!r} appears twice in {where}"
                    )
                seen.add(use.tool)
                spec = catalog.spec(use.tool)
                if spec is None:
                    raise FlowDefError(
                        FlowDefErrorKind.UNREGISTERED_TOOL, f"tool {use.tool!r} in {where} is not registered"
                    )
                specs[use.tool] = spec
                for target in static_targets(use.transition):
                    if target not in nodes:
                        raise FlowDefError(
                            FlowDefErrorKind.UNKNOWN_TARGET,
                            f"tool {use.tool!r} in {where} leads to {target!r}, which is not a node",
                        )
                if use.capture_result is not None:
                    result_keys.add(use.capture_result)

        global_names: set[str] = set()
        check_scope("the global tools", self._globals, global_names)
        for node in self._nodes:
            if not any(m.strip() for m in (*node.role_messages, *node.task_messages)):
                raise FlowDefError(FlowDefErrorKind.EMPTY_PROMPT, f"node {node.name!r} has no prompt text")
            check_scope(f"node {node.name!r}", node.tools, set(global_names))
        return Flow(
            role_messages=tuple(self._role),
            nodes=nodes,
            initial=initial,
            global_tools=tuple(self._globals),
            specs=specs,
            result_keys=frozenset(result_keys),
        )

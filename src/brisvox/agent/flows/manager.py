"""The flow state machine: which node is current, what it offers, where results lead.

:class:`FlowManager` runs no tool and does no I/O.  The runner asks it for the tools of
the current node (:meth:`~FlowManager.tool_specs`), mints call ids through it
(:meth:`~FlowManager.next_tool_call_ids`), lets it refuse calls outside the node
(:meth:`~FlowManager.screen`), runs the admitted calls in the tool engine, and hands the
execution back (:meth:`~FlowManager.apply`).  The only ``await`` is the summarizer of a
``ResetWithSummary`` node, timed on the injected clock, and it comes before any change.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from brisvox.agent.context import (
    AssistantMessage,
    Context,
    Message,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
    parse_tool_call_id,
)
from brisvox.agent.flows.definition import (
    Action,
    Append,
    CallOutcome,
    Flow,
    FlowError,
    Reset,
    ResetWithSummary,
    ToolUse,
    decide,
)
from brisvox.agent.flows.render import FlowState, render_prompt
from brisvox.agent.tools.spec import ToolSpec
from brisvox.agent.window import Summarizer, Summary, SummaryRequest, clip_message
from brisvox.core.clock import Clock, bounded
from brisvox.core.errors import ConfigError, DeadlineExceeded

__all__ = [
    "DEFAULT_SUMMARY_TIMEOUT",
    "FLOW_SUMMARY_PREFIX",
    "SUMMARY_MESSAGE_MAX_TOKENS",
    "TOOL_RESULT_ERRORS",
    "UNSETTLED_ERRORS",
    "Applied",
    "Entered",
    "ExecutionLike",
    "FlowConfig",
    "FlowManager",
    "Screened",
    "SummaryOutcome",
]

log = logging.getLogger(__name__)

DEFAULT_SUMMARY_TIMEOUT = 8.0
FLOW_SUMMARY_PREFIX = "Summary of the conversation so far: "
SUMMARY_MESSAGE_MAX_TOKENS = 1000
"""Each message of a flow summary's input is clipped to this many estimated tokens."""

TOOL_RESULT_ERRORS = frozenset({"tool_failed", "timeout", "unknown_outcome", "result_too_large"})
"""Error kinds of a tool that ran: the only errors a transition may route on."""

UNSETTLED_ERRORS = frozenset({"timeout", "unknown_outcome", "interrupted"})
"""A SideEffect call answered with one of these may still run (or have run)."""

_RELEASING_ERRORS = frozenset({"tool_failed"})
_MAX_VISIT_CALLS = 256


class ExecutionLike(Protocol):
    """What the flow reads of the tool engine's ``Execution``."""

    @property
    def results(self) -> Sequence[ToolMessage]: ...

    @property
    def late_notes(self) -> Sequence[Any]: ...

    @property
    def budget_exhausted(self) -> bool: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class FlowConfig:
    """``summary_timeout``: seconds (injected clock) a ResetWithSummary waits for its summary."""

    summary_timeout: float = DEFAULT_SUMMARY_TIMEOUT

    def __post_init__(self) -> None:
        if not self.summary_timeout > 0:
            raise ConfigError(f"FlowConfig.summary_timeout must be positive, got {self.summary_timeout}")


class SummaryOutcome(enum.Enum):
    """What a transition did about a summary."""

    NOT_ASKED = "not_asked"  # Append or Reset
    SUMMARIZED = "summarized"
    CARRIED_OVER = "carried_over"  # nothing new: the earlier flow summary was kept
    NOTHING_TO_SUMMARIZE = "nothing_to_summarize"  # no history: a plain Reset
    NO_SUMMARIZER = "no_summarizer"
    FAILED = "failed"
    EMPTY = "empty"
    TIMED_OUT = "timed_out"

    @property
    def fell_back(self) -> bool:
        return self in (
            SummaryOutcome.NO_SUMMARIZER,
            SummaryOutcome.FAILED,
            SummaryOutcome.EMPTY,
            SummaryOutcome.TIMED_OUT,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Entered:
    """A node was entered.  The runner performs the actions; the flow does not."""

    node: str
    previous: str | None
    pre_actions: tuple[Action, ...]
    post_actions: tuple[Action, ...]
    respond_immediately: bool
    context_replaced: bool
    summary: SummaryOutcome = SummaryOutcome.NOT_ASKED

    def fell_back(self) -> bool:
        """A ResetWithSummary kept the history (Append) because no summary came."""
        return self.summary.fell_back


@dataclass(frozen=True, slots=True, kw_only=True)
class Applied:
    """What :meth:`FlowManager.apply` (or :meth:`~FlowManager.apply_results`) did with a round.

    * ``pending``: a transition was decided and is not entered yet (apply_results).
    * ``respond``: whether the runner should run another LLM round now.
    * ``stale``: the round was screened before a transition; results of calls still in
      the context were appended, ``dropped_results`` others dropped, nothing captured.
    * ``rejected``: targets a Custom transition named that are not nodes of the flow.
    * ``not_routed``: answers skipped before any condition (refusals, budget, ...).
    """

    transition: Entered | None = None
    pending: str | None = None
    respond: bool = True
    context_replaced: bool = False
    ignored_transitions: int = 0
    rejected: tuple[str, ...] = ()
    stale: bool = False
    dropped_results: int = 0
    refused: int = 0
    missing_results: int = 0
    extra_results: int = 0
    not_routed: int = 0
    budget_exhausted: bool = False


def _error_body(kind: str, tool: str, detail: str) -> str:
    return json.dumps({"error": kind, "tool": tool[:64], "detail": detail[:512]}, ensure_ascii=False)


def _call_id(call: Any) -> str:
    value = getattr(call, "id", None)
    if not isinstance(value, str):
        raise FlowError(f"a screened call has no string id: {type(call).__name__}")
    return value


class Screened:
    """One response's calls after :meth:`FlowManager.screen`: the admitted and the refused.

    ``take_admitted()`` gives the calls for the engine; :meth:`merge` restores issue
    order.  A Screened is consumed by ``apply``: a round cannot be applied twice.
    """

    __slots__ = ("_admitted", "_calls", "_consumed", "_generation", "_refused", "_seq")

    def __init__(
        self, calls: Sequence[Any], refused: dict[int, ToolMessage], generation: int, seq: int
    ) -> None:
        self._calls = list(calls)
        self._refused = refused
        self._admitted = [c for i, c in enumerate(self._calls) if i not in refused]
        self._generation = generation
        self._seq = seq
        self._consumed = False

    @property
    def calls(self) -> tuple[Any, ...]:
        return tuple(self._calls)

    @property
    def admitted(self) -> tuple[Any, ...]:
        return tuple(self._admitted)

    @property
    def refused(self) -> tuple[ToolMessage, ...]:
        return tuple(self._refused[i] for i in sorted(self._refused))

    def take_admitted(self) -> list[Any]:
        """The calls to pass to the engine, in issue order."""
        return list(self._admitted)

    def merge(self, execution: ExecutionLike) -> tuple[list[ToolMessage], int, int]:
        """Every call's answer in issue order, with the counts of missing and extra results.

        Engine results are matched to the admitted calls by call id; an admitted call the
        engine did not answer gets a ``missing_result`` error, and results for calls not
        admitted here are dropped.
        """
        by_id: dict[str, ToolMessage] = {}
        extra = 0
        admitted_ids = {_call_id(c) for c in self._admitted}
        for result in execution.results:
            if result.call_id in admitted_ids and result.call_id not in by_id:
                by_id[result.call_id] = result
            else:
                extra += 1
        merged: list[ToolMessage] = []
        missing = 0
        for i, call in enumerate(self._calls):
            if i in self._refused:
                merged.append(self._refused[i])
                continue
            cid = _call_id(call)
            found = by_id.get(cid)
            if found is None:
                missing += 1
                name = getattr(call, "name", "") or "unknown_tool"
                found = ToolMessage(
                    call_id=cid,
                    content=_error_body(
                        "missing_result", str(name), "the tool engine returned no result for this call"
                    ),
                    is_error=True,
                )
            merged.append(found)
        return merged, missing, extra

    def __repr__(self) -> str:
        return f"Screened(calls={len(self._calls)}, refused={len(self._refused)}, consumed={self._consumed})"


def _is_flow_summary(message: Message) -> bool:
    return isinstance(message, SystemMessage) and message.text.startswith(FLOW_SUMMARY_PREFIX)


def _late_note_message(note: Any) -> Message | None:
    if isinstance(note, SystemMessage | UserMessage | AssistantMessage | ToolMessage):
        return note
    text = getattr(note, "text", None)
    if isinstance(text, str):
        return SystemMessage(text=text)
    return None


def _log_unknown_target(node: str, target: str) -> None:
    """A custom transition's target can come from a tool result: its text is logged at debug only."""
    log.warning("flow transition from %s to an unknown node rejected (%d chars)", node, len(target))
    log.debug("rejected flow target %r", target)


class FlowManager:
    """The state of one flow in one call (see the module docs for the runner protocol)."""

    def __init__(self, flow: Flow, clock: Clock, config: FlowConfig | None = None) -> None:
        self._flow = flow
        self._clock = clock
        self._config = config if config is not None else FlowConfig()
        self._state = FlowState()
        self._node: str | None = None
        self._prompt: str | None = None
        self._generation = 0
        self._seq = 0
        self._pending: str | None = None
        self._unsettled: dict[str, set[str]] = {}
        self._visit_calls: dict[str, str] = {}  # call id -> tool, this visit
        self._id_epoch = -1
        self._id_next = 0

    # -- reading ------------------------------------------------------------------------------

    @property
    def flow(self) -> Flow:
        return self._flow

    @property
    def current_node(self) -> str | None:
        return self._node

    @property
    def generation(self) -> int:
        """Counts node entries; a round screened in an older generation is stale."""
        return self._generation

    @property
    def state(self) -> Mapping[str, Any]:
        return self._state

    def state_dropped(self) -> int:
        return self._state.dropped

    def system_prompt(self) -> str:
        """What message 0 of the context holds."""
        return self._require_started()[1]

    def pending_transition(self) -> str | None:
        return self._pending

    def pending_pre_actions(self) -> tuple[Action, ...]:
        return self._flow.node(self._pending).pre_actions if self._pending is not None else ()

    def unsettled_tools(self) -> frozenset[str]:
        return frozenset(t for t, ids in self._unsettled.items() if ids)

    def allows_tool(self, name: str) -> bool:
        if self._node is None or self._pending is not None:
            return False
        return name in self._flow.tool_uses(self._node) and name not in self.unsettled_tools()

    def tool_specs(self) -> list[ToolSpec]:
        """The tools the current node offers now, in name order (none while a transition is pending)."""
        node, _ = self._require_started()
        if self._pending is not None:
            return []
        withheld = self.unsettled_tools()
        names = sorted(n for n in self._flow.tool_uses(node) if n not in withheld)
        return [self._flow.specs[n] for n in names]

    def __repr__(self) -> str:
        return (
            f"FlowManager(node={self._node!r}, generation={self._generation}, pending={self._pending!r}, "
            f"state_keys={sorted(self._state)}, unsettled={sorted(self.unsettled_tools())})"
        )

    # -- start, ids, state -------------------------------------------------------------------

    def start(self, ctx: Context) -> Entered:
        """Installs the initial node's prompt as message 0; returns its pre actions."""
        if self._node is not None:
            raise FlowError("the flow was already started")
        node = self._flow.node(self._flow.initial)
        prompt = render_prompt(self._flow, node, self._state)
        ctx.set_messages([SystemMessage(text=prompt), *ctx.messages])
        self._node, self._prompt = node.name, prompt
        log.info("flow started at node %s", node.name)
        return Entered(
            node=node.name,
            previous=None,
            pre_actions=node.pre_actions,
            post_actions=node.post_actions,
            respond_immediately=node.respond_immediately,
            context_replaced=False,
        )

    def next_tool_call_ids(self, ctx: Context, epoch: int, n: int) -> list[str]:
        """Fresh call ids that also skip the ids of calls a reset removed in this epoch."""
        ids = ctx.next_tool_call_ids(epoch, n)
        if n == 0:
            return ids
        parsed = parse_tool_call_id(ids[0])
        start = parsed[1] if parsed is not None else 0
        if epoch == self._id_epoch:
            start = max(start, self._id_next)
        return [f"t{epoch}.{seq}" for seq in range(start, start + n)]

    def set_state(self, key: str, value: Any) -> bool:
        """Application code writes the state (bounds apply); call :meth:`refresh_prompt` after."""
        return self._state.set(key, value)

    def refresh_prompt(self, ctx: Context) -> None:
        """Re-renders message 0 of the current node with the current state."""
        node, _ = self._require_started()
        self._check_prompt(ctx)
        prompt = render_prompt(self._flow, self._flow.node(node), self._state)
        ctx.replace(0, SystemMessage(text=prompt))
        self._prompt = prompt

    # -- screening ---------------------------------------------------------------------------

    def screen(self, calls: Sequence[Any]) -> Screened:
        """Refuses calls to tools the current node does not offer; the rest go to the engine.

        Calls the assembler could not parse (anything that is not a ``ToolCall``) are
        admitted: the engine answers them.
        """
        node, _ = self._require_started()
        refused: dict[int, ToolMessage] = {}
        for i, call in enumerate(calls):
            if not isinstance(call, ToolCall) or self.allows_tool(call.name):
                continue
            refused[i] = ToolMessage(call_id=call.id, content=self._refusal(node, call.name), is_error=True)
        return Screened(calls, refused, self._generation, self._seq)

    def _refusal(self, node: str, tool: str) -> str:
        offered = ", ".join(s.name for s in self.tool_specs()) or "none"
        if self._pending is not None:
            detail = f"{tool} is not available: the conversation is moving to its next step."
        elif tool in self.unsettled_tools():
            detail = (
                f"{tool} ended without a known outcome earlier in this step and may still complete. "
                "Do not call it again."
            )
        else:
            detail = f"{tool} is not available at this step."
        return _error_body("tool_not_available", tool, f"{detail} Available tools: {offered}.")

    # -- applying results --------------------------------------------------------------------

    async def apply(
        self, ctx: Context, screened: Screened, execution: ExecutionLike, summarizer: Summarizer | None = None
    ) -> Applied:
        """:meth:`apply_results` then, when a transition is pending, :meth:`resume_pending`."""
        applied = self.apply_results(ctx, screened, execution)
        if applied.pending is None:
            return applied
        entered = await self.resume_pending(ctx, summarizer)
        if entered is None:  # pragma: no cover - pending was set just above
            return applied
        return dataclasses.replace(
            applied,
            transition=entered,
            pending=None,
            respond=entered.respond_immediately,
            context_replaced=entered.context_replaced,
        )

    def apply_results(self, ctx: Context, screened: Screened, execution: ExecutionLike) -> Applied:
        """Appends a round's answers, captures state and decides the transition (synchronous).

        A decided transition is left pending (:meth:`pending_transition`); enter it with
        :meth:`resume_pending` or drop it with :meth:`abandon_pending`.
        """
        node, _ = self._require_started()
        if screened._consumed:
            raise FlowError("this round was already applied")
        merged, missing, extra = screened.merge(execution)
        open_ids = {c.id for c in ctx.open_tool_calls()}
        stale = screened._generation != self._generation or (
            screened._seq != self._seq and self._pending is not None
        )
        if not stale:
            unknown = [m.call_id for m in merged if m.call_id not in open_ids]
            if unknown:
                raise FlowError(
                    f"calls {', '.join(unknown)} are not open in the context; push the response's assistant "
                    "message before applying its round"
                )
        screened._consumed = True
        appended = [m for m in merged if m.call_id in open_ids]
        dropped = len(merged) - len(appended)
        for message in appended:
            ctx.push(message)
        self._push_notes(ctx, execution)
        # Delivered: what could reach the context did (results whose calls a reset removed are
        # dropped on purpose, so the context stays valid).
        mark = getattr(execution, "mark_delivered", None)
        if callable(mark):
            mark()
        base = Applied(
            refused=len(screened._refused),
            missing_results=missing,
            extra_results=extra,
            budget_exhausted=execution.budget_exhausted,
        )
        if stale:
            return dataclasses.replace(base, stale=True, dropped_results=dropped, pending=self._pending)
        if self._pending is not None:
            # Screened while a transition was pending: every call was refused; enter the node now.
            return dataclasses.replace(
                base, pending=self._pending, respond=self._flow.node(self._pending).respond_immediately
            )
        return self._decide(node, screened, merged, execution.budget_exhausted, base)

    def _push_notes(self, ctx: Context, execution: ExecutionLike) -> None:
        notes = [m for m in (_late_note_message(n) for n in execution.late_notes) if m is not None]
        if notes and ctx.has_open_tool_calls():
            log.warning("dropped %d late notes: the context still has open tool calls", len(notes))
            return
        for note in notes:
            ctx.push(note)

    def _decide(
        self, node: str, screened: Screened, merged: list[ToolMessage], exhausted: bool, base: Applied
    ) -> Applied:
        uses = self._flow.tool_uses(node)
        winner: str | None = None
        ignored = 0
        not_routed = 0
        rejected: list[str] = []
        for i, (call, answer) in enumerate(zip(screened._calls, merged, strict=True)):
            if i in screened._refused or not isinstance(call, ToolCall):
                not_routed += 1
                continue
            outcome = CallOutcome.of(call.name, call.id, call.arguments, answer.content, answer.is_error)
            self._note_call(call.name, call.id, outcome)
            if exhausted or not self._routable(outcome):
                not_routed += 1
                continue
            use = uses.get(call.name)
            if use is None:
                continue
            target = self._evaluate(use, outcome)
            if target is None:
                continue
            if target not in self._flow.nodes:
                _log_unknown_target(node, target)
                rejected.append(target)
            elif winner is None:
                winner = target
            else:
                ignored += 1
        result = dataclasses.replace(
            base, ignored_transitions=ignored, rejected=tuple(rejected), not_routed=not_routed
        )
        if winner is None:
            return result
        self._pending = winner
        self._seq += 1
        log.info("flow transition decided: %s -> %s", node, winner)
        return dataclasses.replace(
            result, pending=winner, respond=self._flow.node(winner).respond_immediately
        )

    @staticmethod
    def _routable(outcome: CallOutcome) -> bool:
        return not outcome.is_error or outcome.error_kind in TOOL_RESULT_ERRORS

    def _note_call(self, tool: str, call_id: str, outcome: CallOutcome) -> None:
        if len(self._visit_calls) < _MAX_VISIT_CALLS:
            self._visit_calls[call_id] = tool
        spec = self._flow.specs.get(tool)
        if (
            spec is not None
            and spec.is_side_effect
            and outcome.is_error
            and outcome.error_kind in UNSETTLED_ERRORS
        ):
            self._unsettled.setdefault(tool, set()).add(call_id)
            log.info("flow withholds %s: call %s ended without a known outcome", tool, call_id)

    def _evaluate(self, use: ToolUse, outcome: CallOutcome) -> str | None:
        if not outcome.is_error:
            self._capture(use, outcome)
        return decide(use.transition, outcome, self._state)

    def _capture(self, use: ToolUse, outcome: CallOutcome) -> None:
        if use.capture_args:
            for key, value in outcome.arguments.items():
                if key in self._flow.result_keys:
                    self._state.dropped += 1  # the model cannot shadow a captured result
                    continue
                self._state.set(key, value)
        if use.capture_result is not None:
            value = outcome.result if outcome.result is not None else outcome.content
            self._state.set(use.capture_result, value)

    def apply_recorded_result(self, call: ToolCall, content: str, is_error: bool) -> str | None:
        """Evaluates a result that arrived after its slot was answered (its late note is in the context).

        A real result (a success or ``tool_failed``) releases the call's withheld tool.  A
        routable result of a call made in this visit of the current node is evaluated by
        the node's binding; a firing target becomes pending and is returned.
        """
        node, _ = self._require_started()
        outcome = CallOutcome.of(call.name, call.id, call.arguments, content, is_error)
        ids = self._unsettled.get(call.name)
        if ids is not None and call.id in ids and (not is_error or outcome.error_kind in _RELEASING_ERRORS):
            ids.discard(call.id)
            log.info("flow releases %s: call %s has a known outcome", call.name, call.id)
        if self._visit_calls.get(call.id) != call.name or self._pending is not None:
            return None
        use = self._flow.tool_uses(node).get(call.name)
        if use is None or not self._routable(outcome):
            return None
        target = self._evaluate(use, outcome)
        if target is None or target not in self._flow.nodes:
            if target is not None:
                _log_unknown_target(node, target)
            return None
        self._pending = target
        self._seq += 1
        log.info("flow transition decided from a recorded result: %s -> %s", node, target)
        return target

    # -- entering nodes ----------------------------------------------------------------------

    async def resume_pending(self, ctx: Context, summarizer: Summarizer | None = None) -> Entered | None:
        """Enters the pending node (``None`` when nothing is pending)."""
        self._require_started()
        if self._pending is None:
            return None
        return await self._enter(ctx, self._pending, summarizer)

    def abandon_pending(self) -> str | None:
        """Drops a decided transition; the node stays and offers its tools again."""
        target, self._pending = self._pending, None
        if target is not None:
            self._seq += 1
            log.info("flow transition to %s abandoned", target)
        return target

    async def transition_to(self, ctx: Context, node: str, summarizer: Summarizer | None = None) -> Entered:
        """The explicit transition for application code (a DTMF key, a timer)."""
        self._require_started()
        if node not in self._flow.nodes:
            raise FlowError(f"unknown node {node!r}")
        return await self._enter(ctx, node, summarizer)

    def _require_started(self) -> tuple[str, str]:
        if self._node is None or self._prompt is None:
            raise FlowError("the flow has not been started (call start first)")
        return self._node, self._prompt

    def _check_prompt(self, ctx: Context) -> None:
        if len(ctx) == 0 or ctx[0] != SystemMessage(text=self._prompt or ""):
            raise FlowError("message 0 of the context is not this flow's node prompt")

    async def _enter(self, ctx: Context, target: str, summarizer: Summarizer | None) -> Entered:
        current, _ = self._require_started()
        if ctx.has_open_tool_calls():
            open_ids = ", ".join(c.id for c in ctx.open_tool_calls())
            raise FlowError(f"cannot change node while tool calls are open ({open_ids})")
        self._check_prompt(ctx)
        node = self._flow.node(target)
        prompt = render_prompt(self._flow, node, self._state)
        head = SystemMessage(text=prompt)
        messages = ctx.messages
        kept_user: list[Message] = []
        if node.keep_last_user:
            last = next((m for m in reversed(messages[1:]) if isinstance(m, UserMessage)), None)
            kept_user = [last] if last is not None else []
        outcome = SummaryOutcome.NOT_ASKED
        strategy = node.strategy
        new: list[Message]
        if isinstance(strategy, Append):
            new = [head, *messages[1:]]
        elif isinstance(strategy, Reset):
            new = [head, *kept_user]
        else:
            new, outcome = await self._summarized(ctx, messages, strategy, head, kept_user, summarizer)
            if ctx.messages != messages:
                raise FlowError("the context changed while the flow summary was made")
        replaced = not isinstance(strategy, Append) and not outcome.fell_back
        if replaced:
            self._remember_removed_ids(messages, new)
        ctx.set_messages(new)
        self._node, self._prompt = target, prompt
        self._generation += 1
        self._seq += 1
        self._pending = None
        self._unsettled.clear()
        self._visit_calls.clear()
        log.info("flow entered node %s from %s (summary: %s)", target, current, outcome.value)
        return Entered(
            node=target,
            previous=current,
            pre_actions=node.pre_actions,
            post_actions=node.post_actions,
            respond_immediately=node.respond_immediately,
            context_replaced=replaced,
            summary=outcome,
        )

    async def _summarized(
        self,
        ctx: Context,
        messages: tuple[Message, ...],
        strategy: ResetWithSummary,
        head: SystemMessage,
        kept_user: list[Message],
        summarizer: Summarizer | None,
    ) -> tuple[list[Message], SummaryOutcome]:
        previous: str | None = None
        start = 1
        if len(messages) > 1 and _is_flow_summary(messages[1]):
            previous = messages[1].text[len(FLOW_SUMMARY_PREFIX) :]  # type: ignore[union-attr]
            start = 2
        if start >= len(messages):
            if previous is None:
                return [head, *kept_user], SummaryOutcome.NOTHING_TO_SUMMARIZE
            return [head, messages[1], *kept_user], SummaryOutcome.CARRIED_OVER
        append = [head, *messages[1:]]
        if summarizer is None:
            return append, SummaryOutcome.NO_SUMMARIZER
        first, inputs = self._summary_input(ctx, messages, start, strategy.summary_input_tokens)
        request = SummaryRequest(
            previous=Summary(previous, first) if previous is not None else None,
            messages=inputs,
            start=first,
            end=len(messages),
            max_tokens=strategy.summary_max_tokens,
        )
        try:
            text = await bounded(
                self._clock, self._config.summary_timeout, summarizer.summarize(request), "flow summary"
            )
        except DeadlineExceeded:
            log.warning(
                "flow summary timed out after %g s; keeping the history", self._config.summary_timeout
            )
            return append, SummaryOutcome.TIMED_OUT
        except Exception as e:
            log.warning("flow summary failed (%s); keeping the history", type(e).__name__)
            return append, SummaryOutcome.FAILED
        if not text.strip():
            return append, SummaryOutcome.EMPTY
        summary = clip_message(
            SystemMessage(text=FLOW_SUMMARY_PREFIX + text), strategy.summary_max_tokens, ctx.estimator
        )
        return [head, summary, *kept_user], SummaryOutcome.SUMMARIZED

    @staticmethod
    def _summary_input(
        ctx: Context, messages: tuple[Message, ...], start: int, limit: int
    ) -> tuple[int, tuple[Message, ...]]:
        """The newest whole turns of ``messages[start:]`` within ``limit`` (the latest always), clipped."""
        est = ctx.estimator
        cuts = [i for i in range(start, len(messages)) if isinstance(messages[i], UserMessage)]
        if not cuts:
            cuts = [i for i in range(start, len(messages)) if isinstance(messages[i], AssistantMessage)]
        if not cuts:
            cuts = [start]
        clipped = [clip_message(m, SUMMARY_MESSAGE_MAX_TOKENS, est) for m in messages]
        first = cuts[-1]
        size = sum(est.estimate(m) for m in clipped[first:])
        for cut in reversed(cuts[:-1]):
            turn = sum(est.estimate(m) for m in clipped[cut:first])
            if size + turn > limit:
                break
            size += turn
            first = cut
        return first, tuple(clipped[first:])

    def _remember_removed_ids(self, before: Sequence[Message], after: Sequence[Message]) -> None:
        kept = {c.id for m in after if isinstance(m, AssistantMessage) for c in m.tool_calls}
        removed: list[tuple[int, int]] = []
        for m in before:
            if isinstance(m, AssistantMessage):
                for c in m.tool_calls:
                    parsed = parse_tool_call_id(c.id)
                    if c.id not in kept and parsed is not None:
                        removed.append(parsed)
        if not removed:
            return
        newest = max(e for e, _ in removed)
        if newest < self._id_epoch:
            return
        if newest > self._id_epoch:
            self._id_epoch, self._id_next = newest, 0
        top = max(s for e, s in removed if e == newest)
        self._id_next = max(self._id_next, top + 1)

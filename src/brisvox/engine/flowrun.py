"""A conversation flow inside the LLM runner: the runner protocol of docs/FLOWS.md.

:class:`FlowRun` wraps the call's :class:`~brisvox.agent.flows.FlowManager` for the
runner.  The flow owns message 0 of the context (the node prompt) and decides which tools
a request offers; the runner screens each response's calls through it (a tool outside
the node is refused ``tool_not_available`` and never runs), runs the admitted ones in the
tool engine, and hands the execution back.  A decided transition is
entered at once: its ``Say`` lines are spoken first, while a ``ResetWithSummary`` waits
for its summary.

``EndCall`` (a post action) is the runner's: the call ends once the node's first response
has played (its ``BotAudioEnded``).  Not performed: ``CustomAction`` (the runner hands
nothing to application code yet); a flow that has one is logged once at the start.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from brisvox.agent.context import Context, ToolCall
from brisvox.agent.flows import Applied, EndCall, Entered, FlowManager, Say, Screened
from brisvox.agent.flows.manager import ExecutionLike
from brisvox.agent.tools.spec import ToolSpec
from brisvox.agent.window import Summarizer

__all__ = ["FlowRun"]

log = logging.getLogger(__name__)


class FlowRun:
    """One call's flow, as the runner uses it (see the module docs)."""

    def __init__(self, manager: FlowManager, summarizer: Summarizer | None) -> None:
        self.manager = manager
        self.summarizer = summarizer
        self.transitions = 0
        self.refused = 0

    def start(self, context: Context) -> None:
        """Installs the initial node's prompt as message 0."""
        self.manager.start(context)
        flow = self.manager.flow
        unperformed = sorted(
            {type(a).__name__ for n in flow.nodes.values() for a in n.pre_actions if not isinstance(a, Say)}
            | {type(a).__name__ for n in flow.nodes.values() for a in n.post_actions if not isinstance(a, EndCall)}
        )
        if unperformed:
            log.warning("this flow's %s actions are not performed by the engine", ", ".join(unperformed))
        if self.manager.flow.node(flow.initial).pre_actions:
            log.warning("the initial node's pre actions are not performed (use the greeting)")

    def tool_specs(self) -> tuple[ToolSpec, ...]:
        return tuple(self.manager.tool_specs())

    def screen(self, calls: Sequence[object]) -> Screened:
        screened = self.manager.screen(calls)
        self.refused += len(screened.refused)
        return screened

    def decide(self, context: Context, screened: Screened, execution: ExecutionLike) -> Applied:
        """Appends the round's answers (refusals included) and decides the transition."""
        return self.manager.apply_results(context, screened, execution)

    def pending_lines(self) -> list[str]:
        """The ``Say`` lines of the node being entered."""
        return [a.text for a in self.manager.pending_pre_actions() if isinstance(a, Say)]

    async def enter(self, context: Context) -> Entered | None:
        """Enters the pending node (a ResetWithSummary waits for its summary, bounded)."""
        entered = await self.manager.resume_pending(context, self.summarizer)
        if entered is not None:
            self.transitions += 1
        return entered

    def late_result(self, call_id: str, tool: str, content: str, is_error: bool) -> str | None:
        """A side effect's late result: may release its withheld tool or decide a transition."""
        return self.manager.apply_recorded_result(ToolCall(id=call_id, name=tool, arguments={}), content, is_error)

    @property
    def pending(self) -> str | None:
        return self.manager.pending_transition()

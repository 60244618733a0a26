"""A long call's memory: the context window of each request and its chained summary.

The runner asks :meth:`CallMemory.request_messages` for what a request carries: the
window of :mod:`brisvox.agent.window` over the full context, with the newest accepted
summary in place of the turns the window drops.  Summaries are made off the hot path:
:meth:`CallMemory.after_turn` (called when a turn's answer is done) starts one background
refresh when the window drops turns no summary covers, and never waits for it.

Policy (docs/FLOWS.md, "Long calls in the engine"):

* The refresh looks one turn ahead: it summarizes what the window will drop once the
  caller's next words are in the context, so the next request finds its summary ready.
* It runs on a snapshot of the context, round by round through the
  :class:`~brisvox.agent.window.Summarizer`, all rounds bounded together by
  ``SummaryConfig.timeout`` on the injected clock.  The rounds accepted before a failure
  or the deadline are kept.
* A summary is tied to the caller message its coverage ends at (not only to an index):
  the context may lose an unheard reply before it is used, and a flow's reset replaces
  the context (:meth:`CallMemory.context_replaced` drops it).
* Honest fallback: a refresh that fails is logged with its traceback and counted
  (``MemoryStats.summary_failures``); a request that drops turns no summary covers is
  logged and counted (``MemoryStats.uncovered_requests``).  Facts are never lost
  without both.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from brisvox.agent.context import Context, Message, UserMessage
from brisvox.agent.window import (
    Summarizer,
    SummarizerFailed,
    Summary,
    SummaryRequest,
    SummaryTooLarge,
    WindowError,
    WindowPolicy,
    build_window,
    needs_summary,
    refresh_summary,
)
from brisvox.core.clock import Clock, bounded
from brisvox.core.errors import DeadlineExceeded
from brisvox.core.tasks import TaskScope
from brisvox.engine.config import SummaryConfig

__all__ = ["CallMemory", "MemoryStats"]

log = logging.getLogger(__name__)

_NEXT_TURN = UserMessage(text="(the caller's next words)")
"""Stands for the next caller message when the refresh looks one turn ahead; never sent."""


class MemoryStats:
    __slots__ = ("summaries", "summaries_dropped", "summary_failures", "uncovered_requests")

    def __init__(self) -> None:
        self.summaries = 0  # refreshes that stored a newer summary
        self.summary_failures = 0  # refreshes that failed or ran out of time (logged with a traceback)
        self.summaries_dropped = 0  # summaries whose context went away (a flow's reset, a lost anchor)
        self.uncovered_requests = 0  # requests that dropped turns no summary covered


@dataclass(frozen=True, slots=True)
class _Anchored:
    """A summary and the caller message at its ``covers_until`` (the first message it does not cover).

    ``anchor`` None: the summary ends at the caller message that follows ``after`` (it was
    made one turn ahead, before that message existed).
    """

    summary: Summary
    anchor: Message | None
    after: Message | None = None


class _Bounded:
    """A summarizer whose rounds share one deadline on the injected clock."""

    __slots__ = ("_clock", "_inner", "_until")

    def __init__(self, inner: Summarizer, clock: Clock, seconds: float) -> None:
        self._inner, self._clock, self._until = inner, clock, clock.now() + seconds

    async def summarize(self, request: SummaryRequest) -> str:
        left = self._until - self._clock.now()
        if left <= 0:
            raise DeadlineExceeded("the window summary", 0.0)
        return await bounded(self._clock, left, self._inner.summarize(request), "the window summary")


class CallMemory:
    """The window and summary of one call (see the module docs).

    ``policy`` None: every request carries the whole context.  ``summarizer`` None: the
    window drops old turns without a summary (logged and counted per request).
    """

    def __init__(
        self,
        policy: WindowPolicy | None,
        summarizer: Summarizer | None,
        config: SummaryConfig,
        clock: Clock,
        scope: TaskScope,
    ) -> None:
        self.policy = policy
        self.summarizer = summarizer
        self.config = config
        self.stats = MemoryStats()
        self._clock = clock
        self._scope = scope
        self._current: _Anchored | None = None
        self._refresh: asyncio.Task[None] | None = None
        self._generation = 0  # counts context replacements; a refresh of an older one is not stored
        self._warned = False

    @property
    def summary(self) -> Summary | None:
        """The newest accepted summary, as its indices were when it was made."""
        return self._current.summary if self._current is not None else None

    @property
    def refreshing(self) -> bool:
        return self._refresh is not None and not self._refresh.done()

    def request_messages(self, context: Context) -> tuple[Message, ...]:
        """The messages of the next request over ``context`` (which is not changed)."""
        if self.policy is None:
            return context.messages
        summary = self._locate(context)
        window = build_window(context, self.policy, context.estimator, summary)
        if window.uncovered is not None:
            self.stats.uncovered_requests += 1
            level = logging.INFO if self._warned else logging.WARNING
            self._warned = True
            why = "summaries are off" if self.summarizer is None else "its summary is not ready or failed"
            log.log(level, "this request leaves out %d earlier messages (%s); the window keeps %d turns",
                    len(window.uncovered), why, window.kept_turns)
        if window.over_budget:
            log.warning("the request is over its window budget (%d of %d estimated tokens): shorten the prompt",
                        window.estimated_tokens, self.policy.max_tokens)
        return window.context.messages

    def after_turn(self, context: Context) -> None:
        """Between turns: start a background refresh when the next request would need one."""
        if self.policy is None or self.summarizer is None or self.refreshing:
            return
        snapshot = self._snapshot(context)
        if snapshot is None:
            return
        base = self._locate(snapshot)
        try:
            todo = needs_summary(snapshot, self.policy, snapshot.estimator, base)
        except WindowError:
            log.exception("the window cannot be built over this context; no summary is made")
            self.stats.summary_failures += 1
            return
        if todo is None:
            return
        self._refresh = self._scope.spawn(
            self._run_refresh(snapshot, base, self._generation, self.summarizer, self.policy), name="window-summary"
        )

    def context_replaced(self) -> None:
        """A flow rebuilt the context: the summary's messages are gone (and so is a running refresh's base)."""
        self._generation += 1
        if self._current is not None:
            self._current = None
            self.stats.summaries_dropped += 1
            log.info("the window summary was dropped: the context was replaced")
        if self._refresh is not None:
            self._refresh.cancel()
            self._refresh = None

    def _snapshot(self, context: Context) -> Context | None:
        """A copy of ``context`` with the next caller message standing in (see the module docs)."""
        messages = list(context.messages)
        assert self.policy is not None
        if self.policy.keep_recent_turns > 1 and not context.has_open_tool_calls():
            messages.append(_NEXT_TURN)
        return Context(messages, estimator=context.estimator)

    def _locate(self, context: Context) -> Summary | None:
        """The current summary with its index in ``context``, or None when its anchor is gone."""
        current = self._current
        if current is None:
            return None
        messages = context.messages
        at = current.summary.covers_until
        if at < len(messages) and current.anchor is not None and messages[at] is current.anchor:
            return current.summary
        key = current.anchor if current.anchor is not None else current.after
        found = next((i for i, m in enumerate(messages) if m is key), None)
        if found is None:
            self._current = None
            self.stats.summaries_dropped += 1
            log.warning("the window summary was dropped: the message it ends at is no longer in the context")
            return None
        if current.anchor is None:
            found = next((i for i in range(found + 1, len(messages)) if isinstance(messages[i], UserMessage)), -1)
            if found < 0:
                return None  # made for a caller message that has not come yet
            if messages[found] is _NEXT_TURN:
                return Summary(current.summary.text, found)  # a snapshot: its stand-in is that message
            current = _Anchored(Summary(current.summary.text, found), messages[found])
        else:
            current = _Anchored(Summary(current.summary.text, found), current.anchor)
        self._current = current
        return current.summary

    async def _run_refresh(
        self, snapshot: Context, base: Summary | None, generation: int, summarizer: Summarizer, policy: WindowPolicy
    ) -> None:
        bounded = _Bounded(summarizer, self._clock, self.config.timeout)
        result: Summary | None
        try:
            result = await refresh_summary(snapshot, policy, snapshot.estimator, base, bounded)
        except (SummarizerFailed, SummaryTooLarge) as exc:
            self.stats.summary_failures += 1
            log.warning("the window summary could not be refreshed; requests leave out what it does not cover",
                        exc_info=exc)
            result = exc.kept
        except Exception:  # a bug here must not end the call: logged with its traceback, counted
            self.stats.summary_failures += 1
            log.exception("the window summary could not be refreshed")
            return
        if generation != self._generation or result is None or result is base:
            return
        anchor = snapshot.messages[result.covers_until]
        if anchor is _NEXT_TURN:  # everything before the next caller message is summarized
            self._current = _Anchored(result, None, snapshot.messages[result.covers_until - 1])
        else:
            self._current = _Anchored(result, anchor)
        self.stats.summaries += 1
        log.debug("window summary now covers %d messages", result.covers_until)

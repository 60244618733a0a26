"""The long-call window: a bounded view of a call's context for one LLM request.

A call can last an hour; the model's context cannot grow with it.  :func:`build_window`
makes a new, smaller :class:`~brisvox.agent.context.Context` for each request and never
touches the full one (the transcript keeps everything).

Vocabulary:

* **header**: the leading system messages (the prompt).  Always sent first, never clipped.
* **turn**: a user message and everything after it up to the next user message
  (assistant text, tool calls and their results, late notes).  Messages between the
  header and the first user message form one turn of their own.  A tool call and its
  results are always in one turn, so a cut at a turn start never splits them.
* **cut**: the window keeps the newest turns: at most ``keep_recent_turns``, fewer when
  ``max_tokens`` (header and summary included) asks for it, never fewer than the latest.
* **clipping**: a message over ``max_message_tokens`` is sent as the longest prefix that
  fits plus :data:`CLIP_MARKER`; tool-call arguments are never clipped.
* **summary**: a :class:`Summary` covers the messages from the end of the header up to
  ``covers_until`` (a turn start).  The window sends it as one system message
  (:data:`SUMMARY_PREFIX` + text) right after the header.

:func:`needs_summary` names the next round of dropped turns that no summary covers yet,
and :func:`refresh_summary` runs rounds of a :class:`Summarizer` until the summary covers
exactly what the window drops.  This module is pure: no clock, no tasks, no I/O; the one
``await`` is the caller's summarizer.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from brisvox.agent.context import (
    AssistantMessage,
    Context,
    ContextError,
    Message,
    SystemMessage,
    TokenEstimator,
    ToolMessage,
    UserMessage,
)
from brisvox.core.errors import BrisvoxError, ConfigError

__all__ = [
    "CLIP_MARKER",
    "SUMMARY_PREFIX",
    "InvalidSummary",
    "InvalidWindowContext",
    "Summarizer",
    "SummarizerFailed",
    "Summary",
    "SummaryRequest",
    "SummaryTooLarge",
    "Window",
    "WindowError",
    "WindowPolicy",
    "build_window",
    "clip_message",
    "header_end",
    "needs_summary",
    "refresh_summary",
    "summary_message",
    "turn_starts",
]

CLIP_MARKER = " [clipped]"
"""Appended to the text of a message sent shorter than it is."""

SUMMARY_PREFIX = "Summary of the earlier part of this call: "
"""Starts the system message that carries a :class:`Summary` in the window."""


class WindowError(BrisvoxError):
    """The window could not be built or its summary could not be refreshed."""


class InvalidWindowContext(WindowError):
    """The full context breaks the ordering rules (``Context.validate`` failed)."""


class InvalidSummary(WindowError):
    """A summary does not end at a turn start of the context it is used with."""


class SummaryTooLarge(WindowError):
    """The summarizer returned a summary over ``max_summary_tokens``; it was not stored.

    ``kept`` is the newest summary that was accepted (the one passed in, or the result
    of an earlier round of the same refresh): store it and retry later.
    """

    def __init__(self, tokens: int, limit: int, kept: Summary | None) -> None:
        super().__init__(f"summary of {tokens} estimated tokens is over the limit of {limit}; not stored")
        self.tokens = tokens
        self.limit = limit
        self.kept = kept


class SummarizerFailed(WindowError):
    """The summarizer raised; ``kept`` is the newest accepted summary, ``__cause__`` the error."""

    def __init__(self, kept: Summary | None, cause: BaseException) -> None:
        super().__init__(f"summarizer failed: {type(cause).__name__}")
        self.kept = kept


@dataclass(frozen=True, slots=True, kw_only=True)
class WindowPolicy:
    """Bounds of the window, in estimated tokens.

    ``max_message_tokens`` and ``max_summary_tokens`` default to a quarter of
    ``max_tokens``; ``max_summary_input_tokens`` (the size of one summarizer round)
    defaults to ``max_tokens``.
    """

    max_tokens: int = 4000
    keep_recent_turns: int = 8
    max_message_tokens: int | None = None
    max_summary_tokens: int | None = None
    max_summary_input_tokens: int | None = None

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise ConfigError(f"WindowPolicy.max_tokens must be at least 1, got {self.max_tokens}")
        if self.keep_recent_turns < 1:
            raise ConfigError(
                f"WindowPolicy.keep_recent_turns must be at least 1, got {self.keep_recent_turns}"
            )
        for name in ("max_message_tokens", "max_summary_tokens", "max_summary_input_tokens"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ConfigError(f"WindowPolicy.{name} must be at least 1, got {value}")

    @property
    def message_limit(self) -> int:
        return (
            self.max_message_tokens if self.max_message_tokens is not None else max(1, self.max_tokens // 4)
        )

    @property
    def summary_limit(self) -> int:
        return (
            self.max_summary_tokens if self.max_summary_tokens is not None else max(1, self.max_tokens // 4)
        )

    @property
    def summary_input_limit(self) -> int:
        if self.max_summary_input_tokens is not None:
            return self.max_summary_input_tokens
        return self.max_tokens


@dataclass(frozen=True, slots=True)
class Summary:
    """``text`` stands for the messages from the end of the header up to ``covers_until``."""

    text: str
    covers_until: int

    def __repr__(self) -> str:
        return f"Summary(text=<{len(self.text)} chars>, covers_until={self.covers_until})"


@dataclass(frozen=True, slots=True, kw_only=True)
class SummaryRequest:
    """One summarizer round.

    ``messages`` (clipped as the window clips them) are the full context's
    ``[start, end)``; ``previous`` is the summary to extend (it covers up to ``start``),
    and the answer should fit ``max_tokens`` estimated tokens.
    """

    previous: Summary | None
    messages: tuple[Message, ...]
    start: int
    end: int
    max_tokens: int


@runtime_checkable
class Summarizer(Protocol):
    """Condenses a summary plus newer messages into one new summary text."""

    async def summarize(self, request: SummaryRequest) -> str: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class Window:
    """The request-sized context and what the cut did.

    * ``kept_from``: index in the full context of the first turn sent.
    * ``uncovered``: dropped messages (full-context indices) that no summary covers yet.
    * ``over_budget``: a piece that cannot be dropped (the header, or the latest turn
      after clipping) is larger than the budget alone; it was still sent.
    """

    context: Context
    estimated_tokens: int
    header_len: int
    kept_from: int
    kept_turns: int
    summary_sent: bool
    uncovered: range | None
    over_budget: bool
    clipped_messages: int


# ---------------------------------------------------------------------------------------------
# Turns and clipping


def header_end(messages: Sequence[Message]) -> int:
    """Index of the first message after the leading system messages."""
    i = 0
    while i < len(messages) and isinstance(messages[i], SystemMessage):
        i += 1
    return i


def turn_starts(messages: Sequence[Message], start: int | None = None) -> list[int]:
    """Indices where turns begin, from ``start`` (default: the end of the header)."""
    h = header_end(messages) if start is None else start
    starts: list[int] = []
    if h < len(messages) and not isinstance(messages[h], UserMessage):
        starts.append(h)
    starts.extend(i for i in range(h, len(messages)) if isinstance(messages[i], UserMessage))
    return starts


def _with_text(message: Message, text: str) -> Message:
    if isinstance(message, ToolMessage):
        return dataclasses.replace(message, content=text)
    return dataclasses.replace(message, text=text)


def _text_of(message: Message) -> str:
    if isinstance(message, ToolMessage):
        return message.content
    return message.text


def clip_message(message: Message, limit: int, estimator: TokenEstimator) -> Message:
    """``message`` as sent under a limit of ``limit`` estimated tokens.

    A message within the limit is returned as it is.  Otherwise its text is cut to the
    longest prefix (on a character boundary) that fits with :data:`CLIP_MARKER` after
    it.  Tool-call arguments are not clipped, so an assistant message whose arguments
    alone exceed the limit stays over it (with its text reduced to the marker).
    """
    if estimator.estimate(message) <= limit:
        return message
    text = _text_of(message)
    if isinstance(message, AssistantMessage) and not text:
        return message  # only arguments: never clipped
    lo, hi = 0, len(text)
    # Largest k with estimate(text[:k] + marker) <= limit; k = 0 when nothing fits.
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if estimator.estimate(_with_text(message, text[:mid] + CLIP_MARKER)) <= limit:
            lo = mid
        else:
            hi = mid - 1
    return _with_text(message, text[:lo] + CLIP_MARKER)


def summary_message(summary: Summary, policy: WindowPolicy, estimator: TokenEstimator) -> SystemMessage:
    """The system message that carries ``summary`` in a window, clipped to the summary limit."""
    message = clip_message(SystemMessage(text=SUMMARY_PREFIX + summary.text), policy.summary_limit, estimator)
    assert isinstance(message, SystemMessage)
    return message


# ---------------------------------------------------------------------------------------------
# The cut


@dataclass(frozen=True, slots=True)
class _Plan:
    header: int  # end of the header
    starts: list[int]
    covered: int  # end of what the summary covers (>= header)
    kept_from: int
    kept_turns: int
    summary_msg: SystemMessage | None
    kept: list[Message]  # clipped kept messages
    clipped: int
    tokens: int


def _check_context(context: Context) -> None:
    try:
        context.validate()
    except ContextError as e:
        raise InvalidWindowContext(f"the full context is invalid: {e}") from e


def _check_summary(summary: Summary | None, header: int, starts: Sequence[int], n: int) -> int:
    if summary is None:
        return header
    if summary.covers_until == header or summary.covers_until in starts:
        return summary.covers_until
    raise InvalidSummary(
        f"summary covers_until={summary.covers_until} is not a turn start of this context "
        f"({n} messages, header of {header})"
    )


def _plan(
    context: Context, policy: WindowPolicy, estimator: TokenEstimator, summary: Summary | None
) -> _Plan:
    _check_context(context)
    messages = context.messages
    h = header_end(messages)
    starts = turn_starts(messages, h)
    covered = _check_summary(summary, h, starts, len(messages))
    summary_msg = None
    tokens = sum(estimator.estimate(m) for m in messages[:h])
    if summary is not None and covered > h:
        summary_msg = summary_message(summary, policy, estimator)
        tokens += estimator.estimate(summary_msg)
    candidates = [s for s in starts if s >= covered]
    limit = policy.message_limit
    kept_from = len(messages) if not candidates else candidates[-1]
    kept_rev: list[list[Message]] = []
    clipped = 0
    kept_turns = 0
    # Add turns from the newest back while the count and the budget allow; the latest always.
    for pos in range(len(candidates) - 1, -1, -1):
        if kept_turns >= policy.keep_recent_turns:
            break
        begin = candidates[pos]
        end = candidates[pos + 1] if pos + 1 < len(candidates) else len(messages)
        turn = [clip_message(m, limit, estimator) for m in messages[begin:end]]
        size = sum(estimator.estimate(m) for m in turn)
        if kept_turns > 0 and tokens + size > policy.max_tokens:
            break
        tokens += size
        clipped += sum(1 for a, b in zip(turn, messages[begin:end], strict=True) if a is not b)
        kept_rev.append(turn)
        kept_turns += 1
        kept_from = begin
    kept = [m for turn in reversed(kept_rev) for m in turn]
    return _Plan(h, starts, covered, kept_from, kept_turns, summary_msg, kept, clipped, tokens)


def build_window(
    context: Context, policy: WindowPolicy, estimator: TokenEstimator, summary: Summary | None = None
) -> Window:
    """The window for the next request over ``context``; ``context`` itself is not changed.

    Raises :class:`InvalidWindowContext` for an invalid context and
    :class:`InvalidSummary` for a summary that does not end at a turn start.
    """
    plan = _plan(context, policy, estimator, summary)
    messages = context.messages
    out: list[Message] = list(messages[: plan.header])
    if plan.summary_msg is not None:
        out.append(plan.summary_msg)
    out.extend(plan.kept)
    uncovered = range(plan.covered, plan.kept_from) if plan.kept_from > plan.covered else None
    return Window(
        context=Context(out, estimator=context.estimator),
        estimated_tokens=plan.tokens,
        header_len=plan.header,
        kept_from=plan.kept_from,
        kept_turns=plan.kept_turns,
        summary_sent=plan.summary_msg is not None,
        uncovered=uncovered,
        over_budget=plan.tokens > policy.max_tokens,
        clipped_messages=plan.clipped,
    )


def needs_summary(
    context: Context, policy: WindowPolicy, estimator: TokenEstimator, summary: Summary | None = None
) -> range | None:
    """The next round of messages the window drops that ``summary`` does not cover, or ``None``.

    The round is made of whole turns, starting where the summary ends, whose clipped
    size fits ``max_summary_input_tokens``; it always holds at least one turn.
    """
    plan = _plan(context, policy, estimator, summary)
    if plan.kept_from <= plan.covered:
        return None
    messages = context.messages
    limit = policy.message_limit
    turn_bounds = [s for s in plan.starts if plan.covered <= s <= plan.kept_from]
    if not turn_bounds or turn_bounds[-1] != plan.kept_from:
        turn_bounds.append(plan.kept_from)
    end = turn_bounds[0]
    size = 0
    for begin, stop in itertools.pairwise(turn_bounds):
        turn_size = sum(estimator.estimate(clip_message(m, limit, estimator)) for m in messages[begin:stop])
        if end > turn_bounds[0] and size + turn_size > policy.summary_input_limit:
            break
        size += turn_size
        end = stop
    return range(plan.covered, end)


async def refresh_summary(
    context: Context,
    policy: WindowPolicy,
    estimator: TokenEstimator,
    summary: Summary | None,
    summarizer: Summarizer,
) -> Summary | None:
    """Runs summarizer rounds until the summary covers exactly what the window drops.

    Each round passes the summary of the round before (the first: ``summary``), the
    clipped messages of :func:`needs_summary` and the limit ``max_summary_tokens``.  A
    reply whose message would exceed that limit is not stored: :class:`SummaryTooLarge`
    is raised with the newest accepted summary in ``kept``, so the window stays within
    budget and names the rest in ``Window.uncovered``.  A summarizer error is raised as
    :class:`SummarizerFailed`, also with ``kept``.
    """
    current = summary
    limit = policy.message_limit
    while (todo := needs_summary(context, policy, estimator, current)) is not None:
        messages = context.messages
        request = SummaryRequest(
            previous=current,
            messages=tuple(clip_message(m, limit, estimator) for m in messages[todo.start : todo.stop]),
            start=todo.start,
            end=todo.stop,
            max_tokens=policy.summary_limit,
        )
        try:
            text = await summarizer.summarize(request)
        except Exception as e:
            raise SummarizerFailed(current, e) from e
        tokens = estimator.estimate(SystemMessage(text=SUMMARY_PREFIX + text))
        if tokens > policy.summary_limit:
            raise SummaryTooLarge(tokens, policy.summary_limit, current)
        current = Summary(text, todo.stop)
    return current

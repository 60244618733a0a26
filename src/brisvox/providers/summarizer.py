"""A :class:`~brisvox.agent.window.Summarizer` that asks a language model.

:class:`LlmSummarizer` turns one summary round (the previous summary, the messages to
fold in, the size limit) into a single request to any :class:`LlmProvider` and returns
the streamed text.  It serves both the long-call window (``refresh_summary``) and the
flows' ``ResetWithSummary``.  It has no timeout of its own: the flow manager bounds its
wait on the injected clock, and a window refresh is run by its caller's task, which
bounds it.
"""

from __future__ import annotations

from dataclasses import dataclass

from brisvox.agent.context import AssistantMessage, Message, SystemMessage, ToolMessage, UserMessage
from brisvox.agent.window import SummaryRequest
from brisvox.providers.llm import Done, LlmError, LlmProvider, LlmRequest, TextDelta

__all__ = ["DEFAULT_SUMMARY_INSTRUCTIONS", "LlmSummarizer"]

DEFAULT_SUMMARY_INSTRUCTIONS = (
    "You keep the running summary of a phone call between a caller and a voice agent. "
    "Merge the previous summary with the new part of the conversation into one summary. "
    "Keep every fact the agent may need later: names, dates, times, numbers, what was booked "
    "or promised, open questions. Drop greetings and small talk. Write plain sentences, no lists, "
    "at most {max_words} words."
)


def _line(message: Message) -> str:
    match message:
        case UserMessage(text=text):
            return f"Caller: {text}"
        case AssistantMessage():
            parts = [f"Agent: {message.text}"] if message.text else []
            parts.extend(f"Agent called {c.name}." for c in message.tool_calls)
            return "\n".join(parts)
        case ToolMessage(content=content, is_error=is_error):
            return f"Tool {'error' if is_error else 'result'}: {content}"
        case SystemMessage(text=text):
            return f"Note: {text}"
    raise TypeError(f"not a message: {type(message).__name__}")  # pragma: no cover


@dataclass(frozen=True, slots=True, kw_only=True)
class LlmSummarizer:
    """Summarizes with ``provider``; ``instructions`` may use ``{max_words}``."""

    provider: LlmProvider
    instructions: str = DEFAULT_SUMMARY_INSTRUCTIONS
    temperature: float | None = 0.2

    def build_request(self, request: SummaryRequest) -> LlmRequest:
        """The model request for one round (exposed for tests and logging of sizes)."""
        max_words = max(10, request.max_tokens * 3 // 4)
        previous = request.previous.text if request.previous is not None else "(none yet)"
        transcript = "\n".join(_line(m) for m in request.messages)
        body = f"Previous summary:\n{previous}\n\nNew part of the conversation:\n{transcript}"
        return LlmRequest(
            messages=(
                SystemMessage(text=self.instructions.format(max_words=max_words)),
                UserMessage(text=body),
            ),
            max_tokens=request.max_tokens,
            temperature=self.temperature,
        )

    async def summarize(self, request: SummaryRequest) -> str:
        pieces: list[str] = []
        async with self.provider.stream(self.build_request(request)) as stream:
            async for event in stream:
                if isinstance(event, TextDelta):
                    pieces.append(event.text)
                elif isinstance(event, LlmError):
                    raise event.error
                elif isinstance(event, Done):
                    break
        # An empty reply is returned as it is: the flows fall back on it, the window stores it.
        return "".join(pieces).strip()

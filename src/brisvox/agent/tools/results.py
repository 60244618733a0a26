"""Bounded, structured tool results: error bodies, outcomes, and byte-exact cuts.

Every refusal or failure reaches the model as a tool message with ``is_error=True``
and a JSON body ``{"error": kind, "tool": name, "detail": text}`` whose fields are
bounded (tool 64 bytes, detail 512 bytes, the ellipsis included), so a hostile name or
a huge exception message can never blow up a request.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Sequence
from dataclasses import dataclass

from brisvox.agent.context import ToolMessage

__all__ = [
    "MAX_DETAIL_BYTES",
    "MAX_ISSUES",
    "MAX_ISSUE_PATH_BYTES",
    "MAX_ISSUE_REASON_BYTES",
    "MAX_TOOL_NAME_BYTES",
    "TRUNCATION_MARKER",
    "ErrorKind",
    "Issue",
    "Outcome",
    "cut_utf8",
    "error_body",
    "error_message",
    "truncate_result",
]

MAX_TOOL_NAME_BYTES = 64
MAX_DETAIL_BYTES = 512
MAX_ISSUES = 5
MAX_ISSUE_PATH_BYTES = 128
MAX_ISSUE_REASON_BYTES = 200
ELLIPSIS = "…"
TRUNCATION_MARKER = "...[truncated]"


class ErrorKind(enum.Enum):
    """The ``error`` field of an error result."""

    INVALID_TOOL_CALL = "invalid_tool_call"
    UNKNOWN_TOOL = "unknown_tool"
    INVALID_ARGUMENTS = "invalid_arguments"
    ARGUMENTS_TOO_LARGE = "arguments_too_large"
    TOO_MANY_CALLS = "too_many_calls"
    BUDGET_EXHAUSTED = "budget_exhausted"
    STALE_TURN = "stale_turn"
    TIMEOUT = "timeout"
    INTERRUPTED = "interrupted"
    TOOL_FAILED = "tool_failed"
    RESULT_TOO_LARGE = "result_too_large"
    DUPLICATE_CALL = "duplicate_call"
    STORE_FULL = "store_full"
    UNKNOWN_OUTCOME = "unknown_outcome"
    ALREADY_DONE = "already_done"
    ALREADY_REPORTED = "already_reported"
    CONFIRMATION_REFUSED = "confirmation_refused"


class Outcome(enum.Enum):
    """How one call settled, as traced (one event per call)."""

    OK = "ok"
    OK_TRUNCATED = "ok_truncated"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    TIMED_OUT_RUNNING = "timed_out_running"
    INTERRUPTED = "interrupted"
    INTERRUPTED_RUNNING = "interrupted_running"
    NOT_STARTED = "not_started"
    RECORDED = "recorded"
    DUPLICATE = "duplicate"
    REPEAT_REFUSED = "repeat_refused"
    LOST = "lost"
    STORE_FULL = "store_full"
    MALFORMED = "malformed"
    UNKNOWN_TOOL = "unknown_tool"
    INVALID_ARGUMENTS = "invalid_arguments"
    ARGUMENTS_TOO_LARGE = "arguments_too_large"
    TOO_MANY_CALLS = "too_many_calls"
    BUDGET_EXHAUSTED = "budget_exhausted"
    STALE_TURN = "stale_turn"
    RESULT_TOO_LARGE = "result_too_large"
    HELD = "held"
    LATE_RESULT = "late_result"
    ORPHAN_REPLAYED = "orphan_replayed"
    ORPHAN_IN_FLIGHT = "orphan_in_flight"
    ORPHAN_LOST = "orphan_lost"
    ORPHAN_REPORTED = "orphan_reported"
    CONFIRMATION_REQUIRED = "confirmation_required"
    CONFIRMATION_REFUSED = "confirmation_refused"


@dataclass(frozen=True, slots=True)
class Issue:
    """One schema problem: a JSON pointer (``(root)`` for the whole object) and a reason."""

    path: str
    reason: str

    def to_json(self) -> dict[str, str]:
        return {"path": self.path, "reason": self.reason}


def cut_utf8(text: str, max_bytes: int, suffix: str = ELLIPSIS) -> str:
    """``text`` if it fits ``max_bytes`` UTF-8 bytes, else a prefix plus ``suffix`` that fits.

    The cut never splits a character; the result (suffix included) is at most
    ``max_bytes`` bytes.
    """
    raw = text.encode()
    if len(raw) <= max_bytes:
        return text
    room = max_bytes - len(suffix.encode())
    if room <= 0:
        return suffix.encode()[:max_bytes].decode(errors="ignore")
    return raw[:room].decode(errors="ignore") + suffix


def error_body(
    kind: ErrorKind, tool: str, detail: str, *, issues: Sequence[Issue] | None = None, truncated: bool = False
) -> str:
    """The JSON body of an error result, with every field bounded."""
    body: dict[str, object] = {
        "error": kind.value,
        "tool": cut_utf8(tool, MAX_TOOL_NAME_BYTES),
        "detail": cut_utf8(detail, MAX_DETAIL_BYTES),
    }
    if issues is not None:
        body["issues"] = [
            Issue(cut_utf8(i.path, MAX_ISSUE_PATH_BYTES), cut_utf8(i.reason, MAX_ISSUE_REASON_BYTES)).to_json()
            for i in issues[:MAX_ISSUES]
        ]
        body["truncated"] = truncated or len(issues) > MAX_ISSUES
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"))


def error_message(
    call_id: str,
    kind: ErrorKind,
    tool: str,
    detail: str,
    *,
    issues: Sequence[Issue] | None = None,
    truncated: bool = False,
) -> ToolMessage:
    """An error tool message answering ``call_id``."""
    return ToolMessage(
        call_id=call_id,
        content=error_body(kind, tool, detail, issues=issues, truncated=truncated),
        is_error=True,
    )


def truncate_result(text: str, max_bytes: int) -> tuple[str, bool]:
    """Cuts ``text`` to ``max_bytes`` UTF-8 bytes with the marker ``...[truncated]``.

    Returns the text and whether it was cut.  Exactly at the limit is not cut.
    """
    if len(text) * 4 <= max_bytes or len(text.encode()) <= max_bytes:
        return text, False
    return cut_utf8(text, max_bytes, TRUNCATION_MARKER), True

"""Tool calls that a small local model writes as JSON text in its answer.

In auto mode a small model (Qwen2.5 0.5B through llama.cpp) does not emit structured tool
calls: it writes them into the content, as ``<tool_call>{"name": ..., "arguments": ...}</tool_call>``
blocks, as a fenced JSON block, or as bare JSON.  :class:`ToolTextSplitter` separates the
two while the text streams: plain text passes through at once (holding back only what
could be the start of a tool-call marker), and from the first marker on everything is
held and parsed once at the end.  Only calls to declared tool names are accepted; the
rest are counted as rejected and never spoken.  This module is pure (no I/O, no clock).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ParsedCall", "ToolTextSplitter"]

_OPENERS = ("<tool_call>", "```", "{")
_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)
_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*(?:```)?\s*$", re.DOTALL)


@dataclass(frozen=True, slots=True)
class ParsedCall:
    name: str
    arguments: str  # a JSON object, serialized

    def __repr__(self) -> str:
        return f"ParsedCall({self.name!r}, <{len(self.arguments)} chars>)"


@dataclass(slots=True)
class ToolTextSplitter:
    """Feed content pieces; get the speakable text back; ``finish`` returns the calls."""

    tool_names: frozenset[str]
    rejected: int = 0
    _pending: str = ""  # text not yet released (a possible marker prefix)
    _held: str | None = None  # everything from the first marker on
    _started: bool = field(default=False)  # any non-space text seen

    def feed(self, piece: str) -> str:
        if not self.tool_names:
            return piece
        if self._held is not None:
            self._held += piece
            return ""
        text = self._pending + piece
        self._pending = ""
        if not self._started:
            stripped = text.lstrip()
            if not stripped:
                self._pending = text
                return ""
            self._started = True
            if _opens_call(stripped):
                self._held = stripped
                return ""
            if any(o.startswith(stripped) for o in _OPENERS):
                self._pending = text
                self._started = False
                return ""
        marker = text.find("<tool_call>")
        if marker >= 0:
            self._held = text[marker:]
            return text[:marker]
        keep = _marker_prefix_len(text)
        self._pending = text[len(text) - keep :] if keep else ""
        return text[: len(text) - keep]

    def finish(self) -> tuple[str, list[ParsedCall]]:
        """(text still to speak, accepted calls in order)."""
        if self._held is None:
            rest, self._pending = self._pending, ""
            return rest, []
        calls: list[ParsedCall] = []
        found = False
        for obj in _json_objects(self._held):
            found = True
            call = self._accept(obj)
            if call is None:
                self.rejected += 1
            else:
                calls.append(call)
        if not found:
            self.rejected += 1
        return "", calls

    def _accept(self, obj: Any) -> ParsedCall | None:
        if not isinstance(obj, dict):
            return None
        name = obj.get("name")
        args = obj.get("arguments", obj.get("parameters", {}))
        if isinstance(args, str):
            try:
                args = json.loads(args) if args.strip() else {}
            except json.JSONDecodeError:
                return None
        if not isinstance(name, str) or name not in self.tool_names or not isinstance(args, dict):
            return None
        return ParsedCall(name, json.dumps(args, separators=(",", ":"), ensure_ascii=False))


def _opens_call(text: str) -> bool:
    return text.startswith(_OPENERS)


def _marker_prefix_len(text: str) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of the marker."""
    marker = "<tool_call>"
    for n in range(min(len(marker) - 1, len(text)), 0, -1):
        if text.endswith(marker[:n]):
            return n
    return 0


def _json_objects(held: str) -> list[Any]:
    """Every JSON value found in the held text: per <tool_call> block, or the whole (fenced) text."""
    blocks = [m.group(1) for m in _BLOCK.finditer(held)] if "<tool_call>" in held else [held]
    values: list[Any] = []
    for block in blocks:
        body = block.strip()
        fenced = _FENCE.match(body)
        if fenced:
            body = fenced.group(1)
        try:
            value = json.loads(body)
        except json.JSONDecodeError:
            value = _first_object(body)
            if value is None:
                continue
        values.extend(value if isinstance(value, list) else [value])
    return values


def _first_object(body: str) -> Any:
    """The first complete JSON object in ``body`` (text around it is ignored), or None."""
    start = body.find("{")
    if start < 0:
        return None
    try:
        value, _end = json.JSONDecoder().raw_decode(body[start:])
    except json.JSONDecodeError:
        return None
    return value

"""Tool calls of the embedded model: the grammar that constrains them and the parser that reads them.

A small model asked to write tool calls freely writes them badly (wrong names, arguments
that fail the schema, calls spoken as text).  So the embedded LLM's output is constrained
by a grammar built from the offered tools' JSON Schemas: a reply is *either* plain text
(which never starts with ``<`` or a brace and never contains a brace) *or* the marker
``<call>`` and exactly one JSON object ``{"name": <an offered tool>, "arguments": <that
tool's schema>}``.  The marker matters: a coder model's first choice is ``{`` for any
reply, and with ``{`` opening the call every greeting became a call (measured); with the
brace forbidden first, it chooses between the marker and words.  The grammar is in
llguidance's Lark form (what llama.cpp's ``grammar`` field takes in the xllamacpp wheels),
its JSON parts given as JSON Schema (``%json``), so every schema keyword llguidance knows
(patterns, bounds, enums, ``additionalProperties: false``) holds token by token.

:func:`tools_prompt` is the part of the system prompt that tells the model the same
format; it is byte-identical for the same tools, so llama.cpp's prompt cache keeps it
evaluated across turns.  :class:`ReplyParser` reads the streamed reply: text passes
through as it arrives; a reply whose first non-blank character is ``<`` is held and read
once at the end into a :class:`ParsedCall` (or a :class:`MalformedCall` when it was cut,
by the token limit for instance).  This module is pure (no I/O, no clock).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from brisvox.core.errors import BrisvoxError

__all__ = ["MalformedCall", "ParsedCall", "ReplyParser", "ToolSchema", "call_text", "text_grammar", "tool_grammar", "tools_prompt"]

# Text may not open with a brace or blank (the call's first character), nor hold braces.
_TEXT_RULE = r"say: /[^{}<\s][^{}]*/"
CALL_MARK = "<call>"
# The grammar fixes the separators, so a call's name is known once this much has streamed.
_NAME_FIRST = re.compile(r'<call>\{"name": "([^"\\]+)", ')


@dataclass(frozen=True, slots=True)
class ToolSchema:
    """What the grammar needs of an offered tool."""

    name: str
    description: str
    parameters: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class ParsedCall:
    name: str
    arguments: str  # a JSON object, serialized compactly

    def __repr__(self) -> str:
        return f"ParsedCall({self.name!r}, <{len(self.arguments)} chars>)"


class MalformedCall(BrisvoxError):
    """The reply opened a tool call that is not a complete call of an offered tool."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"malformed tool call: {reason}")
        self.reason = reason


def _arguments_schema(tool: ToolSchema) -> dict[str, Any]:
    # A small model invents extra keys (it copied "type": "object" into the arguments):
    # unless the tool's schema allows more, only its own properties may appear.
    schema = dict(tool.parameters)
    schema.setdefault("additionalProperties", False)
    return schema


def _call_schema(tool: ToolSchema) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"name": {"const": tool.name}, "arguments": _arguments_schema(tool)},
        "required": ["name", "arguments"],
        "additionalProperties": False,
    }


def tool_grammar(tools: Sequence[ToolSchema], *, allow_text: bool = True) -> str:
    """The llguidance grammar of a reply: text (when ``allow_text``) or one call of one of ``tools``."""
    if not tools:
        raise ValueError("tool_grammar needs at least one tool")
    schema: dict[str, Any] = {"anyOf": [_call_schema(t) for t in tools]} if len(tools) > 1 else _call_schema(tools[0])
    # Fixed separators: a small model otherwise pads the JSON with blanks until the token
    # limit cuts the call (measured), and every blank is a token the caller waits for.
    schema["x-guidance"] = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
    start = "start: say | call" if allow_text else "start: call"
    # Keys in schema order: the name before the arguments (sorted, the model wrote the
    # arguments first and chose the tool after them).
    lines = ["%llguidance {}", start, f'call: "{CALL_MARK}" %json {json.dumps(schema)}']
    if allow_text:
        lines.append(_TEXT_RULE)
    return "\n".join(lines) + "\n"


def tools_prompt(tools: Sequence[ToolSchema]) -> str:
    """The system-prompt section that describes the tools and the call format (stable bytes)."""
    lines = [
        f"Most replies are plain spoken text. To use a tool, reply with {CALL_MARK} and one JSON object, nothing else: "
        f'{CALL_MARK}{{"name": "<tool name>", "arguments": {{...}}}}. Use a tool only when the caller gave every required argument.',
        "Tools:",
    ]
    for t in tools:
        props: Mapping[str, Any] = t.parameters.get("properties", {})
        required = set(t.parameters.get("required", ()))
        args = "; ".join(_argument(name, props[name], name in required) for name in sorted(props))
        lines.append(f"- {t.name}: {t.description} Arguments: {args or 'none'}.")
    return "\n".join(lines)


def _argument(name: str, schema: Mapping[str, Any], required: bool) -> str:
    """One argument in words: a small model reads "party_size (integer, 1 to 20): how many
    people" better than the JSON Schema, and the grammar holds the rest (patterns, lengths)
    token by token, so the prompt need not spend tokens on them."""
    kind = str(schema.get("type", "value"))
    if "minimum" in schema and "maximum" in schema:
        kind += f", {schema['minimum']} to {schema['maximum']}"
    if "const" in schema:  # fixed by the state (docs/TOOLS.md, "Offered now"): the grammar writes it
        kind += f", fixed: {json.dumps(schema['const'])}"
    elif "enum" in schema:
        kind += ", one of " + ", ".join(json.dumps(v) for v in schema["enum"])
    described = f": {schema['description']}" if schema.get("description") else ""
    return f"{name} ({kind}{'' if required else ', optional'}){described}"


def call_text(name: str, arguments: Mapping[str, Any]) -> str:
    """A call in the reply format (how the model sees its own earlier calls in the history)."""
    return CALL_MARK + json.dumps({"name": name, "arguments": dict(arguments)}, ensure_ascii=False)


class ReplyParser:
    """Feed streamed pieces; get speakable text back; :meth:`finish` returns the call, if any."""

    __slots__ = ("_held", "_lead", "_mode", "_tool_names")

    def __init__(self, tool_names: frozenset[str]) -> None:
        self._tool_names = tool_names
        self._lead = ""  # leading blanks, not yet decided
        self._held = ""  # a call's text, read at the end
        self._mode: str | None = None  # None (undecided), "text" or "call"

    @property
    def is_call(self) -> bool:
        return self._mode == "call"

    def call_name(self) -> str | None:
        """The offered tool the call names, as soon as its name has streamed whole (else None)."""
        if self._mode != "call":
            return None
        match = _NAME_FIRST.match(self._held)
        return match.group(1) if match and match.group(1) in self._tool_names else None

    def feed(self, piece: str) -> str:
        if self._mode == "text":
            return piece
        if self._mode == "call":
            self._held += piece
            return ""
        text = self._lead + piece
        stripped = text.lstrip()
        if not stripped:
            self._lead = text
            return ""
        self._lead = ""
        if stripped.startswith("<") and self._tool_names:
            self._mode = "call"
            self._held = stripped
            return ""
        self._mode = "text"
        return stripped

    def finish(self) -> ParsedCall | None:
        """The call the reply made (None for a text reply); raises :class:`MalformedCall`."""
        if self._mode != "call":
            return None
        if not self._held.startswith(CALL_MARK):
            raise MalformedCall(f"no {CALL_MARK} marker")
        try:
            value = json.loads(self._held[len(CALL_MARK) :])
        except json.JSONDecodeError:
            raise MalformedCall(f"not complete JSON ({len(self._held)} chars)") from None
        if not isinstance(value, dict):
            raise MalformedCall("not a JSON object")
        name, args = value.get("name"), value.get("arguments")
        if not isinstance(name, str) or name not in self._tool_names:
            raise MalformedCall("names no offered tool")
        if not isinstance(args, dict):
            raise MalformedCall(f"{name}: arguments are not an object")
        return ParsedCall(name, json.dumps(args, separators=(",", ":"), ensure_ascii=False))


def text_grammar() -> str:
    """The grammar of a round that offers no tool while the prompt still describes them
    (a reply of text only, as :func:`tool_grammar`'s text alternative): the prompt keeps its
    bytes, so the prefix cache holds, and no call can be written."""
    return "\n".join(["%llguidance {}", "start: say", _TEXT_RULE]) + "\n"

"""Flow state and the node prompt: bounded captures and ``{key.sub.0}`` placeholders."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from typing import Any

from brisvox.agent.flows.definition import Flow, Node, lookup

__all__ = [
    "MAX_PLACEHOLDER_CHARS",
    "MAX_STATE_ENTRIES",
    "MAX_STATE_KEY_BYTES",
    "MAX_STATE_VALUE_BYTES",
    "FlowState",
    "render_prompt",
    "render_text",
]

MAX_STATE_ENTRIES = 64
MAX_STATE_KEY_BYTES = 64
MAX_STATE_VALUE_BYTES = 4096
MAX_PLACEHOLDER_CHARS = 256

_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_\-]*(?:\.[A-Za-z0-9_\-]+)*)\}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def _value_bytes(value: Any) -> int:
    if isinstance(value, str):
        return len(value.encode())
    try:
        return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())
    except (TypeError, ValueError):
        return MAX_STATE_VALUE_BYTES + 1


class FlowState(Mapping[str, Any]):
    """The flow's state map, bounded in entries, key size and value size.

    A write over a bound is dropped and counted in :attr:`dropped`; an existing key can
    always be overwritten.  A value dropped for its size also removes the key's earlier
    value, so a prompt never shows an older call's data as current.
    """

    __slots__ = ("_data", "dropped")

    def __init__(self) -> None:
        self._data: dict[str, Any] = {}
        self.dropped = 0

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __repr__(self) -> str:
        return f"FlowState(keys={sorted(self._data)}, dropped={self.dropped})"

    def set(self, key: str, value: Any) -> bool:
        """Stores ``value``; ``False`` (and counted) when a bound refused it."""
        if len(key.encode()) > MAX_STATE_KEY_BYTES:
            self.dropped += 1
            return False
        if _value_bytes(value) > MAX_STATE_VALUE_BYTES:
            self._data.pop(key, None)
            self.dropped += 1
            return False
        if key not in self._data and len(self._data) >= MAX_STATE_ENTRIES:
            self.dropped += 1
            return False
        self._data[key] = value
        return True


def _sanitize(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return _CONTROL.sub(" ", text[:MAX_PLACEHOLDER_CHARS])


def render_text(template: str, state: Mapping[str, Any]) -> str:
    """``template`` with each resolvable placeholder replaced; unresolved ones stay literal.

    Substituted text is cut to :data:`MAX_PLACEHOLDER_CHARS`, control characters become
    spaces, and it is never scanned for placeholders again (one pass).
    """

    def replace(match: re.Match[str]) -> str:
        key, _, rest = match.group(1).partition(".")
        if key not in state:
            return match.group(0)
        found, value = lookup(state[key], rest)
        return _sanitize(value) if found else match.group(0)

    return _PLACEHOLDER.sub(replace, template)


def render_prompt(flow: Flow, node: Node, state: Mapping[str, Any]) -> str:
    """Message 0 for ``node``: flow role, node role and rendered task messages, blank-line joined."""
    parts = [*flow.role_messages, *node.role_messages, *(render_text(t, state) for t in node.task_messages)]
    return "\n\n".join(p for p in parts if p.strip())

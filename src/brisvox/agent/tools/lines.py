"""What the agent says itself for a tool: its result line, its declined line, its question.

Pure: a tool's declared words filled from a call's arguments (and, for a result line, the
value the tool returned), with an ISO date said as a person says it ("Sunday 6 December").
The engine asks for them; the runner speaks them and ends the turn without a model round
(docs/TOOLS.md, "Offered now").
"""

from __future__ import annotations

import datetime
import logging
import string
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["RESULT", "ResultLine", "fill", "line_fields", "make_line", "spoken"]

log = logging.getLogger(__name__)

ResultLine = str | Callable[[Mapping[str, Any], Any], "str | None"]
"""A tool's result line: a ``str.format`` template (fields: the call's arguments, and
``result``, the value the tool returned: ``{result[reservation_id]}``), or a function of the
call's arguments and that value returning the line (``None``: nothing to say, the model answers)."""

RESULT = "result"
"""The template field that names the tool's returned value."""


def spoken(value: object) -> str:
    """An argument as the agent says it: an ISO date as its day and month ("Sunday 6 December")."""
    if isinstance(value, str):
        try:
            day = datetime.date.fromisoformat(value)
        except ValueError:
            return value
        return f"{day:%A} {day.day} {day:%B}"
    return str(value)


def line_fields(template: str) -> list[str]:
    """The names a template's fields start with (``{result[id]}`` gives ``result``); raises
    ``ValueError`` for a template ``str.format`` cannot read."""
    names = []
    for _, field, _, _ in string.Formatter().parse(template):
        if field is None:
            continue
        root = field.split(".", 1)[0].split("[", 1)[0]
        if not root or root.isdigit():
            raise ValueError(f"field {{{field}}} must name an argument")
        names.append(root)
    return names


_NO_RESULT = object()


def fill(template: str, arguments: Mapping[str, Any], result: object = _NO_RESULT) -> str:
    """``template`` with the call's arguments spoken (and ``result``, the returned value, as it
    is); raises ``KeyError``/``IndexError``/``AttributeError`` for a field the call does not have."""
    values: dict[str, Any] = {k: spoken(v) for k, v in arguments.items()}
    if result is not _NO_RESULT:
        values[RESULT] = result
    return template.format_map(values)


def make_line(tool: str, what: str, line: ResultLine, arguments: Mapping[str, Any],
              result: object = _NO_RESULT) -> str | None:
    """A declared line for a call (``what``: which of the tool's lines, for the log; with
    ``result``: a success's result line), or None when it says none (the model answers).  A line
    that cannot be made (an argument the call left out, a function that raised) is logged with
    the tool's name and the model answers instead."""
    try:
        text = fill(line, arguments, result) if isinstance(line, str) else line(arguments, result)
    except Exception as exc:  # a bad line must not cost the caller the answer: logged, the model answers
        log.warning("tool %s: its %s could not be made (%s: %s); the model answers instead",
                    tool, what, type(exc).__name__, exc, exc_info=True)
        return None
    if text is not None and not isinstance(text, str):
        log.warning("tool %s: its %s returned %s, not a str; the model answers instead",
                    tool, what, type(text).__name__)
        return None
    return text if text else None

"""JSON Schema for tool arguments: compiled once at registration, offline, draft 2020-12.

The validator is jsonschema-rs (see docs/DECISIONS.md for the measurement).  Remote
``$ref`` retrieval is disabled: a schema that needs the network does not compile.  Valid
arguments take the ``is_valid`` fast path, which builds no error values; only invalid
ones pay for at most :data:`~brisvox.agent.tools.results.MAX_ISSUES` + 1 error reports.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jsonschema_rs

from brisvox.agent.tools.results import MAX_ISSUES, Issue
from brisvox.core.errors import ConfigError

__all__ = ["FULL_REPORT_MAX_VALUES", "CompiledSchema", "SchemaError", "compile_schema", "json_pointer"]

FULL_REPORT_MAX_VALUES = 64
"""Invalid arguments with more JSON values than this report their first issue only."""


def _at_most_values(value: Any, limit: int) -> bool:
    """Whether ``value`` holds at most ``limit`` JSON values (stops counting past the limit)."""
    stack = [value]
    seen = 0
    while stack:
        v = stack.pop()
        seen += 1
        if seen > limit:
            return False
        if isinstance(v, dict):
            if seen + len(v) > limit:
                return False
            stack.extend(v.values())
        elif isinstance(v, list):
            if seen + len(v) > limit:
                return False
            stack.extend(v)
    return True


class SchemaError(ConfigError):
    """A tool's parameter schema is not an object schema or does not compile offline."""


def _refuse(uri: str) -> Any:
    raise ValueError(f"remote $ref {uri!r} is not allowed (schemas compile offline)")


def json_pointer(path: Any) -> str:
    """The JSON pointer of an instance path, ``(root)`` for the whole object."""
    parts = list(path)
    if not parts:
        return "(root)"
    return "/" + "/".join(str(p).replace("~", "~0").replace("/", "~1") for p in parts)


class CompiledSchema:
    """One compiled argument schema."""

    __slots__ = ("_validator", "schema")

    def __init__(self, schema: Mapping[str, Any], validator: Any) -> None:
        self.schema = schema
        self._validator = validator

    def is_valid(self, arguments: Any) -> bool:
        return bool(self._validator.is_valid(arguments))

    def issues(self, arguments: Any) -> tuple[list[Issue], bool]:
        """At most ``MAX_ISSUES`` problems (path, reason), and whether more (may) exist.

        The validator's error iterator is eager (it builds every error, about 14 us
        each), so a full report is built only for arguments of at most
        :data:`FULL_REPORT_MAX_VALUES` JSON values.  Larger invalid arguments report the
        first problem only, flagged ``truncated``: a hostile array at the 16 KiB cap
        costs microseconds instead of milliseconds.
        """
        if not _at_most_values(arguments, FULL_REPORT_MAX_VALUES):
            try:
                self._validator.validate(arguments)
            except jsonschema_rs.ValidationError as first:
                return [Issue(json_pointer(first.instance_path), str(first.message))], True
            return [], False  # pragma: no cover - only called for invalid arguments
        found: list[Issue] = []
        for error in self._validator.iter_errors(arguments):
            if len(found) == MAX_ISSUES:
                return found, True
            # Reasons may quote the value; the caller cuts them to 200 bytes.
            found.append(Issue(json_pointer(error.instance_path), str(error.message)))
        return found, False


def compile_schema(schema: Any) -> CompiledSchema:
    """Compiles an argument schema; raises :class:`SchemaError` naming the problem."""
    if not isinstance(schema, Mapping) or schema.get("type") != "object":
        raise SchemaError('a tool\'s parameters must be a JSON Schema with "type": "object"')
    try:
        validator = jsonschema_rs.Draft202012Validator(dict(schema), retriever=_refuse)
    except Exception as e:  # the library raises its own ValidationError/ReferencingError/ValueError
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise SchemaError(f"the parameter schema does not compile offline: {first}") from None
    return CompiledSchema(schema, validator)

"""Registry rules and argument schemas (draft 2020-12, offline)."""

from __future__ import annotations

from typing import Any

import pytest

from brisvox.agent.tools.registry import CONFIRM_PENDING, RegistryError, RegistryErrorKind, ToolRegistry
from brisvox.agent.tools.schema import compile_schema

from ._helpers import RO, SE, spec


async def _noop(args: dict[str, Any], ctx: Any) -> str:
    return "ok"


def _kind(reg: ToolRegistry, s: Any) -> RegistryErrorKind:
    with pytest.raises(RegistryError) as e:
        reg.register(s, _noop)
    return e.value.kind


def test_valid_names_with_underscore_dash_and_64_bytes_are_accepted() -> None:
    reg = ToolRegistry()
    for name in ("a", "get_weather", "book-table", "X" * 64, "v2"):
        reg.register(spec(name), _noop)
    assert len(reg) == 5 and not reg.is_empty()


@pytest.mark.parametrize("name", ["", "x" * 65, "çay", "has space", "dot.name", "slash/x"])
def test_invalid_names_are_rejected(name: str) -> None:
    assert _kind(ToolRegistry(), spec(name)) is RegistryErrorKind.INVALID_NAME


def test_a_duplicate_keeps_the_first_tool() -> None:
    reg = ToolRegistry()
    reg.register(spec("a"), _noop)
    first = reg.get("a")
    assert _kind(reg, spec("a", SE)) is RegistryErrorKind.DUPLICATE
    assert reg.get("a") is first and len(reg) == 1


def test_zero_or_negative_timeouts_are_rejected() -> None:
    assert _kind(ToolRegistry(), spec("a", timeout=0.0)) is RegistryErrorKind.ZERO_TIMEOUT
    assert _kind(ToolRegistry(), spec("a", timeout=-1.0)) is RegistryErrorKind.ZERO_TIMEOUT


def test_confirm_and_repeatable_need_a_side_effect_tool() -> None:
    assert _kind(ToolRegistry(), spec("a", RO, confirm=True)) is RegistryErrorKind.CONFIRM_NEEDS_SIDE_EFFECT
    assert _kind(ToolRegistry(), spec("a", RO, repeatable=True)) is RegistryErrorKind.REPEATABLE_NEEDS_SIDE_EFFECT
    reg = ToolRegistry()
    reg.register(spec("a", SE, repeatable=True), _noop)


@pytest.mark.parametrize(
    "params",
    [
        {"type": "array"},
        {"properties": {}},
        {"type": "object", "properties": {"a": {"$ref": "https://example.com/schema.json"}}},
        {"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}},
        {"type": "object", "properties": {"a": {"type": "strnig"}}},
        {"type": "object", "properties": {"a": {"type": "string", "pattern": "(["}}},
    ],
)
def test_schemas_that_are_not_object_schemas_or_do_not_compile_offline_are_rejected(params: dict[str, Any]) -> None:
    reg = ToolRegistry()
    assert _kind(reg, spec("a", params=params)) is RegistryErrorKind.INVALID_SCHEMA
    assert reg.is_empty()


def test_specs_are_listed_in_name_order() -> None:
    reg = ToolRegistry()
    for name in ("zeta", "alpha", "mid"):
        reg.register(spec(name), _noop)
    assert [s.name for s in reg.specs()] == ["alpha", "mid", "zeta"]
    s = reg.spec("mid")
    assert s is not None and s.name == "mid" and reg.spec("none") is None
    assert "mid" in reg


def test_a_confirm_tool_adds_the_reserved_confirm_pending_tool() -> None:
    reg = ToolRegistry()
    reg.register(spec("look"), _noop)
    assert CONFIRM_PENDING not in reg
    reg.register(spec("transfer_call", SE, confirm=True), _noop)
    assert CONFIRM_PENDING in reg and reg.has_confirm_tools()
    assert _kind(ToolRegistry(), spec(CONFIRM_PENDING, SE)) is RegistryErrorKind.RESERVED_NAME


SCHEMA = {
    "type": "object",
    "$defs": {"city": {"type": "string", "minLength": 2}},
    "properties": {
        "city": {"$ref": "#/$defs/city"},
        "days": {"type": "integer", "minimum": 1, "maximum": 3},
        "when": {"type": "object", "properties": {"hour": {"type": "integer"}}, "required": ["hour"]},
    },
    "required": ["city"],
    "additionalProperties": False,
}


@pytest.mark.parametrize(
    ("args", "paths"),
    [
        ({"city": "Izmir", "days": 2}, None),
        ({"days": 2}, {"(root)"}),
        ({"city": "Izmir", "days": "2"}, {"/days"}),
        ({"city": "Izmir", "extra": 1}, {"(root)"}),
        ({"city": "Izmir", "when": {"hour": "x"}}, {"/when/hour"}),
        ({"city": "I"}, {"/city"}),
        ({"city": "Izmir", "days": 9}, {"/days"}),
    ],
)
def test_arguments_are_checked_against_the_schema_with_json_pointer_paths(
    args: dict[str, Any], paths: set[str] | None
) -> None:
    schema = compile_schema(SCHEMA)
    if paths is None:
        assert schema.is_valid(args)
        return
    assert not schema.is_valid(args)
    issues, more = schema.issues(args)
    assert {i.path for i in issues} == paths and not more


def test_at_most_five_issues_are_reported_and_more_is_flagged() -> None:
    schema = compile_schema({"type": "object", "additionalProperties": {"type": "integer"}})
    issues, more = schema.issues({f"k{i}": "x" for i in range(9)})
    assert len(issues) == 5 and more


def test_json_pointer_escapes_tilde_and_slash() -> None:
    schema = compile_schema({"type": "object", "properties": {"a/b~c": {"type": "integer"}}})
    issues, _ = schema.issues({"a/b~c": "x"})
    assert issues[0].path == "/a~1b~0c"


def test_large_invalid_arguments_report_their_first_issue_only_and_say_so() -> None:
    from brisvox.agent.tools.schema import FULL_REPORT_MAX_VALUES

    schema = compile_schema({"type": "object", "properties": {"xs": {"type": "array", "items": {"type": "string"}}}})
    small, more = schema.issues({"xs": [0] * (FULL_REPORT_MAX_VALUES - 2)})
    assert len(small) == 5 and more
    big, more = schema.issues({"xs": [0] * 5000})
    assert [i.path for i in big] == ["/xs/0"] and more
    one, more = schema.issues({"xs": ["a", 1]})
    assert [i.path for i in one] == ["/xs/1"] and not more

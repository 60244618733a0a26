"""Tools declared from functions: the schema from a model or from plain parameters, the
docstring, the context parameter, a sync tool refused, bound methods, the slow-tool log."""

from __future__ import annotations

import logging
from typing import Literal

import pytest
from pydantic import BaseModel, Field

import brisvox
from brisvox.agent.context import ToolCall
from brisvox.agent.tools import CancelToken, ToolCallContext, ToolError, ToolKind, ToolRegistry
from brisvox.core.errors import ConfigError


class Query(BaseModel):
    day: str = Field(description="the day, as YYYY-MM-DD")
    party_size: int = Field(ge=1, le=12)


def ctx(call_id: str = "c1") -> ToolCallContext:
    return ToolCallContext("session-1", 3, ToolCall(id=call_id, name="t", arguments={}), CancelToken())


@brisvox.tool.read_only(timeout=2.0)
async def check_availability(args: Query) -> str:
    """Free tables on a day for a party."""
    return f"{args.day}:{args.party_size}"


@brisvox.tool.side_effect(confirm=True, repeatable=True, filler_after=None)
async def book_table(day: str, mode: Literal["inside", "outside"] = "inside", *,
                     ctx: brisvox.ToolContext) -> str:
    """Book a table."""
    return f"{day}/{mode}/{ctx.call.id}/{ctx.idempotency_key().epoch}"


def test_one_model_parameter_is_the_schema_and_the_docstring_the_description() -> None:
    spec = check_availability.spec
    assert spec.name == "check_availability" and spec.description == "Free tables on a day for a party."
    assert spec.kind is ToolKind.READ_ONLY and spec.timeout == 2.0
    assert spec.parameters["required"] == ["day", "party_size"]
    assert spec.parameters["properties"]["party_size"]["maximum"] == 12
    assert spec.parameters["properties"]["day"]["description"] == "the day, as YYYY-MM-DD"


def test_plain_parameters_make_a_closed_schema_and_the_context_is_not_in_it() -> None:
    spec = book_table.spec
    assert spec.kind is ToolKind.SIDE_EFFECT and spec.confirm and spec.repeatable and spec.filler_after is None
    assert set(spec.parameters["properties"]) == {"day", "mode"}
    assert spec.parameters["required"] == ["day"] and spec.parameters["additionalProperties"] is False
    assert spec.parameters["properties"]["mode"]["enum"] == ["inside", "outside"]


async def test_arguments_are_validated_and_converted_before_the_call_and_the_context_is_passed() -> None:
    assert await check_availability({"day": "2026-12-04", "party_size": 2}, ctx()) == "2026-12-04:2"
    assert await book_table({"day": "fri"}, ctx("c9")) == "fri/inside/c9/3"
    with pytest.raises(ToolError, match="party_size") as info:
        await check_availability({"day": "secret-day", "party_size": 40}, ctx())
    assert "secret-day" not in str(info.value)  # the model's values are not echoed into errors or logs


def test_a_synchronous_function_is_refused_where_it_is_declared() -> None:
    with pytest.raises(ConfigError, match="must be `async def`"):
        @brisvox.tool.read_only
        def lookup() -> str:
            """Look up."""
            return ""


def test_a_tool_without_a_docstring_or_an_annotation_is_refused_by_name() -> None:
    with pytest.raises(ConfigError, match="'nodoc' needs a docstring"):
        @brisvox.tool.read_only
        async def nodoc() -> str:
            return ""
    with pytest.raises(ConfigError, match="parameter 'ctx' is object: give it a type"):
        @brisvox.tool.read_only
        async def raw_shape(arguments: dict[str, object], ctx: object) -> str:
            """The registry's raw (arguments, ctx) shape."""
            return ""
    with pytest.raises(ConfigError, match="parameter 'x' needs a type annotation"):
        @brisvox.tool.read_only
        async def untyped(x) -> str:  # type: ignore[no-untyped-def]
            """Untyped."""
            return ""


class Notes:
    def __init__(self) -> None:
        self.pool: list[str] = []

    @brisvox.tool.side_effect
    async def save(self, text: str) -> int:
        """Save a note."""
        self.pool.append(text)
        return len(self.pool)


async def test_methods_work_bound_and_share_their_object() -> None:
    notes = Notes()
    assert await notes.save({"text": "a"}, ctx()) == 1 and await notes.save({"text": "b"}, ctx()) == 2
    assert notes.pool == ["a", "b"] and notes.save == notes.save and notes.save != Notes().save
    assert notes.save.spec.parameters["required"] == ["text"]  # self is not an argument
    tools = brisvox.ToolSet()
    with pytest.raises(ConfigError, match="is a method"):
        tools.include(Notes.save)
    tools.include(notes.save)
    assert tools.names() == ["save"]


def test_declared_tools_go_into_the_one_registry() -> None:
    registry = ToolRegistry()
    registry.register(book_table.spec, book_table)
    assert registry.names() == ["book_table", "confirm_pending"]


async def test_a_tool_over_the_budget_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    @brisvox.tool.read_only
    async def slow() -> str:
        """Slow on purpose."""
        sum(range(3_000_000))  # blocks the loop on purpose: the budget is real time
        return "done"

    with caplog.at_level(logging.WARNING, logger="brisvox.tool"):
        await slow({}, ctx())
        await slow({}, ctx())
    assert [r.getMessage().split(" took")[0] for r in caplog.records] == ["tool slow"]

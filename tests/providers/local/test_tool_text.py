from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from brisvox.providers.local._tool_text import ParsedCall, ToolTextSplitter

TOOLS = frozenset({"get_weather", "book_table"})


def _run(pieces: list[str], tools: frozenset[str] = TOOLS) -> tuple[str, list[ParsedCall], int]:
    splitter = ToolTextSplitter(tools)
    spoken = "".join(splitter.feed(p) for p in pieces)
    rest, calls = splitter.finish()
    return spoken + rest, calls, splitter.rejected


def test_plain_text_passes_through_as_it_streams() -> None:
    splitter = ToolTextSplitter(TOOLS)
    assert splitter.feed("Hello") == "Hello"
    assert splitter.feed(" there.") == " there."
    assert splitter.finish() == ("", [])


def test_a_tool_call_block_is_parsed_and_never_spoken() -> None:
    spoken, calls, rejected = _run(['<tool_call>\n{"name": "get_weather", ', '"arguments": {"city": "Oslo"}}\n</tool_call>'])
    assert spoken == "" and rejected == 0
    assert calls == [ParsedCall("get_weather", '{"city":"Oslo"}')]


def test_text_before_a_call_is_spoken_and_a_marker_split_across_pieces_is_held() -> None:
    spoken, calls, _ = _run(["Let me check. <tool", '_call>{"name": "get_weather", "arguments": {}}</tool_call>'])
    assert spoken == "Let me check. "
    assert [c.name for c in calls] == ["get_weather"]


def test_bare_and_fenced_json_calls_are_parsed_with_string_arguments_too() -> None:
    _, calls, _ = _run(['{"name": "book_table", "arguments": "{\\"people\\": 2}"}'])
    assert calls == [ParsedCall("book_table", '{"people":2}')]
    _, calls, _ = _run(['```json\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n```'])
    assert calls == [ParsedCall("get_weather", '{"city":"Rome"}')]


def test_undeclared_names_and_broken_json_are_rejected_and_not_spoken() -> None:
    spoken, calls, rejected = _run(['<tool_call>{"name": "rm_rf", "arguments": {}}</tool_call><tool_call>{"name": "get_weather", "arguments": {}}</tool_call>'])
    assert spoken == "" and [c.name for c in calls] == ["get_weather"] and rejected == 1
    spoken, calls, rejected = _run(['{"name": "get_weather", "argu'])
    assert spoken == "" and calls == [] and rejected == 1


def test_without_tools_everything_is_text() -> None:
    spoken, calls, _ = _run(['{"name": "get_weather"}'], frozenset())
    assert spoken == '{"name": "get_weather"}' and calls == []


def test_a_lone_angle_bracket_that_is_not_a_marker_is_released() -> None:
    assert _run(["<", "b> bold"])[0] == "<b> bold"
    assert _run(["less < more"])[0] == "less < more"


@given(st.text(alphabet=st.characters(blacklist_characters="<{`"), max_size=60), st.lists(st.integers(0, 60), max_size=5))
def test_any_split_of_plain_text_is_spoken_exactly_once(text: str, cuts: list[int]) -> None:
    points = sorted({min(c, len(text)) for c in cuts})
    pieces = [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)]
    spoken, calls, rejected = _run(pieces)
    assert spoken == text and calls == [] and rejected == 0


@given(st.integers(1, 40))
def test_a_call_split_anywhere_assembles_the_same(cut: int) -> None:
    raw = '<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>'
    cut = min(cut, len(raw) - 1)
    _, calls, _ = _run([raw[:cut], raw[cut:]])
    assert [json.loads(c.arguments) for c in calls] == [{"city": "Oslo"}]

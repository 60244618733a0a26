from __future__ import annotations

import json

import jsonschema_rs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from brisvox.agent.tools.offer import Grounds
from brisvox.agent.tools.spec import ToolSpec
from brisvox.providers.local._tool_grammar import (
    MalformedCall,
    ParsedCall,
    ReplyParser,
    ToolSchema,
    call_text,
    tool_grammar,
    tools_prompt,
)

CHECK = ToolSchema(
    "check_availability",
    "Check a table.",
    {"type": "object", "properties": {"party_size": {"type": "integer", "minimum": 1}}, "required": ["party_size"]},
)
BOOK = ToolSchema("book_table", "Book it.", {"type": "object", "properties": {"name": {"type": "string"}}})
NAMES = frozenset({"check_availability", "book_table"})


def _call_schema_of(grammar: str) -> dict[str, object]:
    line = next(x for x in grammar.splitlines() if x.startswith('call: "<call>" %json '))
    schema = json.loads(line.removeprefix('call: "<call>" %json '))
    assert isinstance(schema, dict)
    return schema


def test_the_grammar_offers_text_or_one_call_of_each_offered_tool_with_its_schema() -> None:
    grammar = tool_grammar([CHECK, BOOK])
    assert grammar.startswith("%llguidance {}\n")
    assert "start: say | call" in grammar
    schema = _call_schema_of(grammar)
    alternatives = schema["anyOf"]
    assert isinstance(alternatives, list)
    assert list(alternatives[0]["properties"]) == ["name", "arguments"]  # the model names the tool first
    assert [a["properties"]["name"] for a in alternatives] == [{"const": "check_availability"}, {"const": "book_table"}]
    assert alternatives[0]["properties"]["arguments"] == {**CHECK.parameters, "additionalProperties": False}
    assert all(a["required"] == ["name", "arguments"] and a["additionalProperties"] is False for a in alternatives)


def test_a_forced_call_grammar_has_no_text_alternative() -> None:
    grammar = tool_grammar([CHECK], allow_text=False)
    assert "start: call\n" in grammar and "say" not in grammar
    arguments = {**CHECK.parameters, "additionalProperties": False}
    assert _call_schema_of(grammar)["properties"] == {"name": {"const": "check_availability"}, "arguments": arguments}


def test_a_schema_that_allows_more_keys_keeps_its_word() -> None:
    open_tool = ToolSchema("note", "Note.", {"type": "object", "additionalProperties": True})
    assert _call_schema_of(tool_grammar([open_tool]))["properties"]["arguments"]["additionalProperties"] is True


def test_a_grammar_of_no_tools_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one tool"):
        tool_grammar([])


def test_the_tools_prompt_is_the_same_bytes_for_the_same_tools_so_the_prefix_cache_holds() -> None:
    first = tools_prompt([CHECK, BOOK])
    again = tools_prompt([ToolSchema(CHECK.name, CHECK.description, dict(reversed(list(CHECK.parameters.items())))), BOOK])
    assert first == again
    assert "- check_availability: Check a table. Arguments: party_size (integer)." in first
    assert '<call>{"name": "<tool name>"' in first


def test_the_tools_prompt_says_each_argument_in_words_and_leaves_patterns_to_the_grammar() -> None:
    slot = {"type": "object", "required": ["time"], "properties": {
        "time": {"type": "string", "pattern": "^[0-9]{2}:[0-9]{2}$", "title": "Time", "description": "HH:MM"},
        "seats": {"type": "integer", "minimum": 1, "maximum": 8},
        "area": {"type": "string", "enum": ["inside", "terrace"]}}}
    prompt = tools_prompt([ToolSchema("hold", "Hold a table.", slot)])
    assert prompt.endswith('- hold: Hold a table. Arguments: area (string, one of "inside", "terrace", optional); '
                           "seats (integer, 1 to 8, optional); time (string): HH:MM.")
    assert "pattern" not in prompt and "Time" not in prompt


def test_a_tool_without_arguments_says_none() -> None:
    assert tools_prompt([ToolSchema("hang_up", "End the call.", {"type": "object"})]).endswith(
        "- hang_up: End the call. Arguments: none.")



def _feed_all(parser: ReplyParser, pieces: list[str]) -> str:
    return "".join(parser.feed(p) for p in pieces)


def test_text_streams_through_as_it_arrives_without_its_leading_blanks() -> None:
    parser = ReplyParser(NAMES)
    assert parser.feed("  ") == ""
    assert parser.feed(" Hello") == "Hello"
    assert parser.feed(", we open at six {ish}") == ", we open at six {ish}"
    assert parser.finish() is None and not parser.is_call


def test_the_call_name_is_known_as_soon_as_it_streamed_whole_and_only_for_an_offered_tool() -> None:
    parser = ReplyParser(NAMES)
    assert parser.feed('<call>{"name": "book_ta') == "" and parser.call_name() is None
    parser.feed('ble", "arguments": {')
    assert parser.call_name() == "book_table"
    other = ReplyParser(NAMES)
    other.feed('<call>{"name": "drop_tables", ')
    assert other.call_name() is None
    text = ReplyParser(NAMES)
    text.feed("Hello")
    assert text.call_name() is None


def test_a_call_is_held_then_read_into_a_parsed_call_with_compact_arguments() -> None:
    parser = ReplyParser(NAMES)
    spoken = _feed_all(parser, ["<ca", 'll>{"name": "check_av', 'ailability", "arguments": {"party_size"', ": 2}}"])
    assert spoken == ""
    assert parser.finish() == ParsedCall("check_availability", '{"party_size":2}')


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        ('<call>{"name": "check_availability", "arguments": {"party', "not complete JSON"),
        ('<call>{"name": "drop_tables", "arguments": {}}', "names no offered tool"),
        ('<call>{"name": "book_table", "arguments": [1]}', "arguments are not an object"),
        ("<call>{}", "names no offered tool"),
        ('<cal{"name": "book_table", "arguments": {}}', "no <call> marker"),
    ],
)
def test_a_cut_or_wrong_call_is_a_malformed_call_naming_what_was_wrong(reply: str, reason: str) -> None:
    parser = ReplyParser(NAMES)
    assert parser.feed(reply) == ""
    with pytest.raises(MalformedCall, match=reason):
        parser.finish()


def test_with_no_tools_offered_a_brace_is_plain_text() -> None:
    parser = ReplyParser(frozenset())
    assert parser.feed('{"name": "x"}') == '{"name": "x"}'
    assert parser.finish() is None


def test_an_earlier_call_is_shown_in_the_format_the_model_writes() -> None:
    text = call_text("book_table", {"name": "Ayşe"})
    assert text.startswith("<call>")
    assert json.loads(text.removeprefix("<call>")) == {"name": "book_table", "arguments": {"name": "Ayşe"}}


def _split(text: str, cuts: list[int]) -> list[str]:
    points = sorted({c % (len(text) + 1) for c in cuts})
    return [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)]


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200), st.lists(st.integers(min_value=0, max_value=400), max_size=8))
def test_fuzz_any_reply_in_any_chunking_is_text_or_a_call_or_a_typed_refusal(reply: str, cuts: list[int]) -> None:
    parser = ReplyParser(NAMES)
    spoken = _feed_all(parser, _split(reply, cuts))
    try:
        call = parser.finish()
    except MalformedCall:
        call = None
        assert parser.is_call and spoken == ""
    if parser.is_call:
        assert spoken == "" and reply.lstrip().startswith("<")
        if call is not None:
            assert call.name in NAMES and isinstance(json.loads(call.arguments), dict)
    else:
        assert spoken == reply.lstrip() and call is None


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(sorted(NAMES)),
    st.dictionaries(st.text(max_size=10), st.one_of(st.integers(), st.text(max_size=10), st.none()), max_size=4),
    st.lists(st.integers(min_value=0, max_value=200), max_size=6),
)
def test_fuzz_a_well_formed_call_split_anywhere_parses_to_its_name_and_arguments(
    name: str, args: dict[str, object], cuts: list[int]
) -> None:
    parser = ReplyParser(NAMES)
    assert _feed_all(parser, _split(call_text(name, args), cuts)) == ""
    call = parser.finish()
    assert call is not None and call.name == name and json.loads(call.arguments) == args


def test_a_from_caller_argument_can_only_be_written_as_a_span_the_caller_said() -> None:
    # The offer (docs/TOOLS.md, "Offered now") narrows the name to the caller's spans; the
    # grammar's JSON part is that schema, which llguidance holds token by token.
    grounds = Grounds("lokanta-deniz")
    grounds.note_user_text("Hello, is this Lokanta Deniz? It's Ayşe Kaya.")
    book = ToolSpec(name="book_table", description="Book it.", parameters=BOOK.parameters, from_caller=("name",))
    (offered,) = grounds.offer([book], {})
    schema = _call_schema_of(tool_grammar([ToolSchema(offered.name, offered.description, offered.parameters)]))
    assert schema["properties"]["arguments"]["properties"]["name"] == {  # type: ignore[index]
        "type": "string", "enum": ["Ayşe", "Kaya", "Ayşe Kaya"]}
    valid = jsonschema_rs.validator_for(schema).is_valid
    assert valid({"name": "book_table", "arguments": {"name": "Ayşe Kaya"}})
    for unheard in ("John Doe", "Lokanta Deniz", "ayşe kaya", "Ayşe Kaya Smith", ""):
        assert not valid({"name": "book_table", "arguments": {"name": unheard}})

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from brisvox.agent.assemble import (
    CALL_SLOT_BYTES,
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_CALLS,
    AssembleError,
    AssembleErrorKind,
    CallErrorKind,
    InvalidCall,
    ProviderDataDelta,
    ResponseAssembler,
    TextDelta,
    ToolCallDelta,
)
from brisvox.agent.context import Context, ToolCall


def test_text_and_interleaved_fragments_of_two_calls_assemble_in_index_order() -> None:
    a = ResponseAssembler()
    a.push(TextDelta("Let me "))
    a.push(ToolCallDelta(index=1, id="call_b", name="weather", arguments_fragment='{"ci'))
    a.push(ToolCallDelta(index=0, id="call_a", name="lookup", arguments_fragment='{"order'))
    a.push(TextDelta("check."))
    a.push(ToolCallDelta(index=1, arguments_fragment='ty": "Iz\\u00'))
    a.push(ToolCallDelta(index=0, arguments_fragment='": 12'))
    a.push(ToolCallDelta(index=1, arguments_fragment='e9mir"}'))
    a.push(ToolCallDelta(index=0, arguments_fragment="34}"))
    r = a.finish(2, Context())
    assert r.text == "Let me check."
    assert r.calls == (
        ToolCall(id="t2.0", name="lookup", arguments={"order": 1234}, provider_id="call_a"),
        ToolCall(id="t2.1", name="weather", arguments={"city": "Izémir"}, provider_id="call_b"),
    )


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_arguments_split_anywhere_parse_the_same(data: st.DataObject) -> None:
    raw = json.dumps({"q": 'a "quoted" \\ text é', "n": -12.5e3, "l": [1, True, None]})
    cuts = sorted(data.draw(st.lists(st.integers(0, len(raw)), max_size=8)))
    a = ResponseAssembler()
    prev = 0
    for c in [*cuts, len(raw)]:
        a.push(ToolCallDelta(index=0, name="f", arguments_fragment=raw[prev:c]))
        prev = c
    (call,) = a.finish(0, Context()).calls
    assert isinstance(call, ToolCall) and call.arguments == json.loads(raw)


def test_nothing_is_parsed_while_streaming_so_broken_json_fails_only_at_finish() -> None:
    a = ResponseAssembler()
    a.push(ToolCallDelta(index=0, name="f", arguments_fragment='{"a": '))  # partial JSON is fine mid-stream
    a.push(ToolCallDelta(index=1, name="g", arguments_fragment='{"b": 1}'))
    r = a.finish(0, Context())
    bad, good = r.calls
    assert isinstance(bad, InvalidCall) and bad.error.kind is CallErrorKind.INVALID_JSON
    assert isinstance(good, ToolCall) and good.arguments == {"b": 1}


def test_empty_or_blank_arguments_mean_an_empty_object() -> None:
    a = ResponseAssembler()
    a.push(ToolCallDelta(index=0, name="f"))
    a.push(ToolCallDelta(index=1, name="g", arguments_fragment="  \n"))
    r = a.finish(0, Context())
    assert [c.arguments for c in r.valid_calls()] == [{}, {}]


def test_a_missing_name_and_a_non_object_are_invalid_calls_answered_with_a_structured_error() -> None:
    a = ResponseAssembler()
    a.push(ToolCallDelta(index=0, arguments_fragment='{"x": 1}'))
    a.push(ToolCallDelta(index=1, name="f", arguments_fragment="[1, 2]"))
    a.push(ToolCallDelta(index=2, name="g", arguments_fragment="NaN"))
    r = a.finish(5, Context())
    kinds = [c.error.kind for c in r.invalid_calls()]
    assert kinds == [CallErrorKind.MISSING_NAME, CallErrorKind.NOT_AN_OBJECT, CallErrorKind.INVALID_JSON]
    first = r.invalid_calls()[0].error_result()
    body = json.loads(first.content)
    assert first.is_error and first.call_id == "t5.0"
    assert body["error"] == "invalid_tool_call" and body["tool"] == "unknown_tool"


def test_the_recorded_assistant_message_keeps_invalid_calls_under_their_name_with_empty_arguments() -> None:
    ctx = Context()
    a = ResponseAssembler()
    a.push(TextDelta("ok"))
    a.push(ToolCallDelta(index=0, arguments_fragment="{}", provider_data={"sig": "A"}))
    a.push(ToolCallDelta(index=1, name="book", arguments_fragment="{oops", provider_data={"sig": "B"}))
    a.push(ToolCallDelta(index=2, name="lookup", arguments_fragment='{"id": 1}'))
    a.push(ProviderDataDelta({"thinking": "sig"}))
    r = a.finish(1, ctx)
    msg = r.assistant_message()
    assert msg is not None
    assert [(c.id, c.name, c.arguments) for c in msg.tool_calls] == [
        ("t1.0", "unknown_tool", {}),
        ("t1.1", "book", {}),
        ("t1.2", "lookup", {"id": 1}),
    ]
    assert [c.provider_data for c in msg.tool_calls] == [{"sig": "A"}, {"sig": "B"}, None]
    assert msg.provider_data == {"thinking": "sig"}
    ctx.push(msg)
    for inv in r.invalid_calls():
        ctx.push(inv.error_result())
    ctx.push_tool_result("t1.2", "found")
    ctx.validate()


def test_no_text_and_no_call_is_no_message_even_with_provider_data() -> None:
    a = ResponseAssembler()
    a.push(ProviderDataDelta({"sig": 1}))
    assert a.finish(0, Context()).assistant_message() is None


def test_the_first_non_empty_id_and_name_win_and_a_different_later_value_is_refused_unapplied() -> None:
    a = ResponseAssembler()
    a.push(ToolCallDelta(index=0, id="", name="", arguments_fragment='{"a":'))
    a.push(ToolCallDelta(index=0, id="call_1", name="f", arguments_fragment=""))
    a.push(ToolCallDelta(index=0, id="call_1", name="f", arguments_fragment=" 1"))
    a.push(ToolCallDelta(index=0, id="", name="", arguments_fragment=""))
    with pytest.raises(AssembleError) as e:
        a.push(ToolCallDelta(index=0, id="call_2", arguments_fragment="999"))
    assert e.value.kind is AssembleErrorKind.CONFLICTING_ID
    with pytest.raises(AssembleError) as e:
        a.push(ToolCallDelta(index=0, name="g", arguments_fragment="999"))
    assert e.value.kind is AssembleErrorKind.CONFLICTING_NAME
    a.push(ToolCallDelta(index=0, arguments_fragment="}"))
    (call,) = a.finish(0, Context()).calls
    assert call == ToolCall(id="t0.0", name="f", arguments={"a": 1}, provider_id="call_1")


def test_conflicting_provider_data_is_refused_per_call_and_per_response() -> None:
    a = ResponseAssembler()
    a.push(ToolCallDelta(index=0, name="f", provider_data={"s": 1}))
    a.push(ToolCallDelta(index=0, provider_data={"s": 1}))
    with pytest.raises(AssembleError) as e:
        a.push(ToolCallDelta(index=0, provider_data={"s": 2}))
    assert e.value.kind is AssembleErrorKind.CONFLICTING_CALL_PROVIDER_DATA
    a.push(ProviderDataDelta("x"))
    with pytest.raises(AssembleError) as e:
        a.push(ProviderDataDelta("y"))
    assert e.value.kind is AssembleErrorKind.CONFLICTING_RESPONSE_PROVIDER_DATA


def test_the_byte_cap_refuses_the_delta_that_crosses_it_and_counts_call_slots() -> None:
    assert DEFAULT_MAX_BYTES == 256 * 1024
    a = ResponseAssembler(max_bytes=100)
    a.push(TextDelta("x" * 30))
    a.push(ToolCallDelta(index=0))  # 64 bytes for the slot
    assert a.buffered_bytes == 30 + CALL_SLOT_BYTES
    a.push(TextDelta("y" * 6))
    with pytest.raises(AssembleError) as e:
        a.push(TextDelta("z"))
    assert e.value.kind is AssembleErrorKind.TOO_LARGE
    with pytest.raises(AssembleError):
        a.push(ToolCallDelta(index=1))
    assert a.finish(0, Context()).text == "x" * 30 + "y" * 6


def test_empty_fragments_for_new_indices_cannot_grow_the_buffer_forever() -> None:
    a = ResponseAssembler(max_bytes=64 * 10, max_calls=1000)
    for i in range(10):
        a.push(ToolCallDelta(index=i))
    with pytest.raises(AssembleError):
        a.push(ToolCallDelta(index=10))


def test_provider_data_is_charged_at_its_serialized_size() -> None:
    a = ResponseAssembler(max_bytes=20)
    with pytest.raises(AssembleError):
        a.push(ProviderDataDelta({"signature": "0123456789"}))
    a.push(ProviderDataDelta({"s": "0"}))
    assert a.buffered_bytes == len('{"s":"0"}')


def test_the_call_cap_refuses_a_new_call_but_accepts_fragments_of_open_ones() -> None:
    assert DEFAULT_MAX_CALLS == 32
    a = ResponseAssembler.with_limits(DEFAULT_MAX_BYTES, 2)
    a.push(ToolCallDelta(index=0, name="f", arguments_fragment="{"))
    a.push(ToolCallDelta(index=1, name="g"))
    with pytest.raises(AssembleError) as e:
        a.push(ToolCallDelta(index=2, name="h"))
    assert e.value.kind is AssembleErrorKind.TOO_MANY_CALLS
    a.push(ToolCallDelta(index=0, arguments_fragment="}"))
    assert len(a.finish(0, Context()).valid_calls()) == 2


def test_a_cancelled_assembler_yields_nothing_and_cannot_be_finished() -> None:
    a = ResponseAssembler()
    a.push(TextDelta("hello"))
    a.cancel()
    with pytest.raises(AssembleError) as e:
        a.finish(0, Context())
    assert e.value.kind is AssembleErrorKind.CLOSED
    with pytest.raises(AssembleError):
        a.push(TextDelta("more"))


def test_a_finished_assembler_cannot_be_finished_twice() -> None:
    a = ResponseAssembler()
    a.finish(0, Context())
    with pytest.raises(AssembleError):
        a.finish(0, Context())


def test_ids_continue_from_the_calls_already_in_the_context() -> None:
    ctx = Context()
    first = ResponseAssembler()
    first.push(ToolCallDelta(index=0, name="f"))
    r1 = first.finish(4, ctx)
    msg = r1.assistant_message()
    assert msg is not None
    ctx.push(msg)
    ctx.push_tool_result("t4.0", "x")
    second = ResponseAssembler()
    second.push(ToolCallDelta(index=7, name="f"))
    second.push(ToolCallDelta(index=3, name="g"))
    r2 = second.finish(4, ctx)
    assert [(c.id, c.name) for c in r2.calls] == [("t4.1", "g"), ("t4.2", "f")]


def test_two_responses_finished_before_either_is_pushed_collide_in_the_context() -> None:
    from brisvox.agent.context import ContextError

    ctx = Context()
    r = []
    for _ in range(2):
        a = ResponseAssembler()
        a.push(ToolCallDelta(index=0, name="f"))
        r.append(a.finish(1, ctx))
    m0, m1 = (x.assistant_message() for x in r)
    assert m0 is not None and m1 is not None
    ctx.push(m0)
    ctx.push_tool_result("t1.0", "x")
    with pytest.raises(ContextError):
        ctx.push(m1)

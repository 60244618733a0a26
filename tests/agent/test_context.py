from __future__ import annotations

import json

import pytest

from brisvox.agent.context import (
    AssistantMessage,
    CharsPerToken,
    Context,
    ContextError,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
    late_note_text,
    parse_tool_call_id,
)


def _call(cid: str, name: str = "lookup", **args: object) -> ToolCall:
    return ToolCall(id=cid, name=name, arguments=dict(args))


def test_ids_are_minted_per_epoch_and_continue_across_rounds() -> None:
    ctx = Context()
    assert ctx.next_tool_call_ids(3, 2) == ["t3.0", "t3.1"]
    ctx.push_assistant(tool_calls=[_call("t3.0"), _call("t3.1")])
    ctx.push_tool_result("t3.1", "b")
    ctx.push_tool_result("t3.0", "a")
    assert ctx.next_tool_call_ids(3, 1) == ["t3.2"]
    assert ctx.next_tool_call_id(4) == "t4.0"
    assert parse_tool_call_id("t3.2") == (3, 2)
    assert parse_tool_call_id("call_abc") is None


def test_two_responses_minted_before_either_is_pushed_collide_and_the_second_push_is_rejected() -> None:
    ctx = Context()
    first = ctx.next_tool_call_ids(1, 1)
    second = ctx.next_tool_call_ids(1, 1)
    assert first == second
    ctx.push_assistant(tool_calls=[_call(first[0])])
    ctx.push_tool_result(first[0], "ok")
    with pytest.raises(ContextError, match="duplicate"):
        ctx.push_assistant(tool_calls=[_call(second[0])])
    assert len(ctx) == 2


def test_ids_stay_unique_after_the_calls_that_used_them_are_edited_away() -> None:
    ctx = Context()
    ctx.push_user("hi")
    ctx.push_assistant("a", [_call("t1.0")])
    ctx.push_tool_result("t1.0", "r")
    ctx.set_messages(ctx.messages[:1])
    assert ctx.next_tool_call_id(1) == "t1.1"


def test_a_message_between_a_call_and_its_result_is_rejected_even_a_system_message() -> None:
    ctx = Context()
    ctx.push_assistant(tool_calls=[_call("t0.0"), _call("t0.1")])
    ctx.push_tool_result("t0.0", "a")
    with pytest.raises(ContextError, match="unanswered"):
        ctx.push_system("note")
    with pytest.raises(ContextError, match="unanswered"):
        ctx.push_user("hello")
    with pytest.raises(ContextError, match="unanswered"):
        ctx.push_assistant("more")
    ctx.push_tool_result("t0.1", "b")
    ctx.push_user("hello")
    ctx.validate()


def test_a_result_for_an_unknown_or_already_answered_call_is_rejected() -> None:
    ctx = Context()
    with pytest.raises(ContextError, match="unknown call"):
        ctx.push_tool_result("t0.0", "x")
    ctx.push_assistant(tool_calls=[_call("t0.0")])
    ctx.push_tool_result("t0.0", "x")
    with pytest.raises(ContextError, match="twice"):
        ctx.push_tool_result("t0.0", "x")


def test_an_empty_assistant_message_is_rejected_and_provider_data_alone_does_not_count() -> None:
    ctx = Context()
    with pytest.raises(ContextError, match="empty"):
        ctx.push_assistant("", provider_data={"sig": "x"})
    assert len(ctx) == 0


def test_open_calls_at_the_end_are_valid_and_interrupting_closes_them_in_order() -> None:
    ctx = Context()
    ctx.push_user("book it")
    ctx.push_assistant("ok", [_call("t2.0", "book"), _call("t2.1", "lookup")])
    ctx.push_tool_result("t2.1", "found")
    ctx.validate()
    assert [c.id for c in ctx.open_tool_calls()] == ["t2.0"]
    assert ctx.interrupt_pending_tool_calls() == ["t2.0"]
    last = ctx[-1]
    assert isinstance(last, ToolMessage) and last.is_error
    assert json.loads(last.content)["error"] == "interrupted"
    assert json.loads(last.content)["tool"] == "book"
    assert not ctx.has_open_tool_calls()
    ctx.push_user("next")
    ctx.validate()
    assert ctx.interrupt_pending_tool_calls() == []


def test_a_late_result_becomes_a_system_note_and_needs_no_open_call() -> None:
    ctx = Context()
    ctx.push_assistant(tool_calls=[_call("t2.0", "book")])
    with pytest.raises(ContextError):
        ctx.push_late_tool_result("book", "t1.0", "BK-1")
    ctx.interrupt_pending_tool_calls()
    ctx.push_late_tool_result("book", "t2.0", '{"booking": "BK-1"}')
    note = ctx[-1]
    assert isinstance(note, SystemMessage)
    assert note.text == late_note_text("book", "t2.0", '{"booking": "BK-1"}', False)
    assert "BK-1" in note.text and "t2.0" in note.text


def test_edits_are_checked_whole_and_leave_the_context_unchanged_on_error() -> None:
    ctx = Context()
    ctx.push_user("a")
    ctx.push_assistant("said", [_call("t0.0")])
    ctx.push_tool_result("t0.0", "r")
    before = ctx.messages
    with pytest.raises(ContextError):
        ctx.remove(1)  # the result would lose its call
    assert ctx.messages == before
    ctx.replace(1, AssistantMessage(text="sa", tool_calls=(_call("t0.0"),)))
    a = ctx[1]
    assert isinstance(a, AssistantMessage) and a.text == "sa"
    with pytest.raises(ContextError, match="empty"):
        ctx.replace(1, AssistantMessage(text=""))


def test_the_default_estimate_is_bytes_over_four_plus_four_per_message() -> None:
    est = CharsPerToken()
    assert est.estimate(UserMessage(text="x" * 40)) == 14
    assert est.estimate(UserMessage(text="é" * 4)) == 6  # 8 bytes
    call = _call("t0.0", "ab", k=1)  # name 2 bytes + '{"k":1}' 7 bytes
    assert est.estimate(AssistantMessage(text="", tool_calls=(call,))) == 9 // 4 + 4
    ctx = Context([UserMessage(text="x" * 40), SystemMessage(text="")])
    assert ctx.estimate_tokens() == 14 + 4


def test_a_custom_estimator_is_used() -> None:
    class One:
        def estimate(self, message: object) -> int:
            return 1

    ctx = Context([UserMessage(text="long text")], estimator=One())
    assert ctx.estimate_tokens() == 1


def test_the_json_form_round_trips_with_roles_and_provider_data() -> None:
    ctx = Context()
    ctx.push_system("be brief")
    ctx.push_user("weather?")
    ctx.push_assistant(
        "checking",
        [ToolCall(id="t1.0", name="weather", arguments={"city": "Izmir"}, provider_id="call_9", provider_data={"s": 1})],
        provider_data={"signature": "abc"},
    )
    ctx.push_tool_result("t1.0", '{"temp": 21}')
    ctx.push_assistant("21 degrees")
    data = json.loads(ctx.dumps())
    assert [m["role"] for m in data] == ["system", "user", "assistant", "tool", "assistant"]
    back = Context.loads(ctx.dumps())
    assert back.messages == ctx.messages
    assert back.next_tool_call_id(1) == "t1.1"


@pytest.mark.parametrize(
    ("payload", "match"),
    [
        ('{"role": "user"}', "list"),
        ('[{"role": "robot", "text": "x"}]', "role"),
        ('[{"role": "assistant", "text": "", "tool_calls": [{"id": "t0.0", "name": "n", "arguments": [1]}]}]', "JSON object"),
        ('[{"role": "tool", "call_id": "t0.0", "content": "x"}]', "unknown call"),
        ("[{", "parse"),
        ('[{"role": "user", "text": 3}]', "text"),
    ],
)
def test_a_malformed_json_form_is_refused_with_the_bad_field_named(payload: str, match: str) -> None:
    with pytest.raises(ContextError, match=match):
        Context.loads(payload)


def test_reprs_never_show_text_or_arguments() -> None:
    secret = "+90 555 123 4567"
    call = _call("t0.0", "transfer", number=secret)
    for obj in (
        call,
        UserMessage(text=secret),
        SystemMessage(text=secret),
        AssistantMessage(text=secret, tool_calls=(call,)),
        ToolMessage(call_id="t0.0", content=secret),
    ):
        assert secret not in repr(obj)


def test_context_errors_are_brisvox_invalid_input() -> None:
    from brisvox.core.errors import InvalidInput

    assert issubclass(ContextError, InvalidInput)

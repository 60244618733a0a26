"""Brain mode's LLM provider on virtual time: a request goes to the agent as a ``turn.request``, its
reply lines stream back as the model's text, a barge-in makes the later lines stale, and the agent
file's model answers when the agent is gone or silent past the first-line deadline."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from brisvox.agent.context import UserMessage
from brisvox.core.clock import SystemClock
from brisvox.core.errors import ChannelClosed
from brisvox.engine.agent_input import BotLine
from brisvox.engine.events import UserTurn
from brisvox.providers.llm import Done, LlmError, LlmEvent, LlmRequest, LlmStream, TextDelta
from brisvox.sdk import protocol as p
from brisvox.server.agent_brain import REPLY_LINES, BrainLlm, BrainReplies
from brisvox.server.agent_link import AgentLink, AgentLinkConfig
from brisvox.sim.mock_llm import Say, ScriptedLlm

REQUEST = LlmRequest(messages=(UserMessage(text="when do you open"),))
FIRST_LINE = 2.0


class Link:
    """The link's side BrainLlm uses: what it sent, whether it is lost, and its replies."""

    def __init__(self) -> None:
        self.call_id = "c1"
        self.lost = False
        self.sent: list[p.ServerMessage] = []
        self.replies = BrainReplies("c1")
        self.arrived = asyncio.Event()

    async def send(self, message: p.ServerMessage) -> None:
        if self.lost:
            raise ChannelClosed("the agent link is lost")
        self.sent.append(message)
        self.arrived.set()

    def line(self, request_id: str, text: str, *, final: bool = False) -> str | None:
        return self.replies.deliver(p.Say(type="say", text=text, reply_to=request_id, final=final))


def brain(fallback_text: str = "The agent file's answer.") -> tuple[BrainLlm, Link, ScriptedLlm]:
    link = Link()
    fallback = ScriptedLlm(SystemClock(), [[Say(fallback_text)]] * 4)
    llm = BrainLlm(cast(AgentLink, link), link.replies, fallback, SystemClock(), first_line=FIRST_LINE)
    llm.listen(UserTurn(epoch=3, at=0.0, text="when do you open"))
    return llm, link, fallback


async def collect(stream: LlmStream) -> list[LlmEvent]:
    async with stream:
        return [event async for event in stream]


def text_of(events: list[LlmEvent]) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta))


async def requested(link: Link, count: int = 1) -> str:
    """The id of the ``count``-th turn.request, once it was sent."""
    while len(link.sent) < count:
        link.arrived.clear()
        await link.arrived.wait()
    message = link.sent[count - 1]
    assert isinstance(message, p.TurnRequest)
    return message.id


async def test_a_request_goes_out_with_the_callers_turn_and_its_reply_lines_stream_back_to_the_end() -> None:
    llm, link, fallback = brain()
    answer = asyncio.ensure_future(collect(llm.stream(REQUEST)))
    request_id = await requested(link)
    assert link.sent == [p.TurnRequest(type="turn.request", id=request_id, turn=3, text="when do you open")]
    assert link.line(request_id, "Monday, ") is None
    await asyncio.sleep(0.5)
    link.line(request_id, "nine to five.")
    link.line(request_id, "", final=True)
    events = await answer
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["Monday, ", "nine to five."]
    assert isinstance(events[-1], Done)
    assert (llm.answered, llm.fell_back, fallback.requests) == (1, 0, [])


async def test_lines_of_a_request_whose_stream_was_closed_by_a_barge_in_are_dropped_and_counted() -> None:
    llm, link, _ = brain()
    stream = llm.stream(REQUEST)
    first = asyncio.ensure_future(anext(aiter(stream)))
    request_id = await requested(link)
    link.line(request_id, "Monday, ")
    assert await first == TextDelta(text="Monday, ")
    await stream.aclose()  # the runner's round task was cancelled by the barge-in
    assert link.line(request_id, "nine to five.") is None
    assert link.line(request_id, "", final=True) is None
    assert link.replies.stale_lines == 2


async def test_a_brain_silent_past_the_first_line_deadline_leaves_the_turn_and_the_next_to_the_agent_files_model() -> None:
    llm, link, fallback = brain()
    start = asyncio.get_running_loop().time()
    events = await collect(llm.stream(REQUEST))
    assert asyncio.get_running_loop().time() - start == FIRST_LINE
    assert text_of(events) == "The agent file's answer." and isinstance(events[-1], Done)
    assert (llm.missed, llm.fell_back, link.replies.silent) == (1, 1, True)
    # The next request is answered by the agent file's model at once, and still sent to the brain.
    start = asyncio.get_running_loop().time()
    events = await collect(llm.stream(REQUEST))
    assert asyncio.get_running_loop().time() == start and text_of(events) == "The agent file's answer."
    assert len(link.sent) == 2 and len(fallback.requests) == 2
    # The brain's late reply to the first request is dropped, and proves it is back.
    first_id = await requested(link)
    assert link.line(first_id, "Late.") is None
    assert link.replies.stale_lines == 1 and not link.replies.silent
    answer = asyncio.ensure_future(collect(llm.stream(REQUEST)))
    third = await requested(link, 3)
    link.line(third, "Back.", final=True)
    assert text_of(await answer) == "Back." and len(fallback.requests) == 2


async def test_a_link_lost_before_the_first_line_leaves_the_request_to_the_agent_files_model() -> None:
    llm, link, fallback = brain()
    answer = asyncio.ensure_future(collect(llm.stream(REQUEST)))
    await requested(link)
    link.lost = True
    link.replies.lost()
    assert text_of(await answer) == "The agent file's answer."
    # While the link is down, requests are not sent at all.
    assert text_of(await collect(llm.stream(REQUEST))) == "The agent file's answer."
    assert len(link.sent) == 1 and len(fallback.requests) == 2 and llm.missed == 0


async def test_a_link_lost_in_the_middle_of_a_reply_ends_it_with_an_error() -> None:
    llm, link, fallback = brain()
    answer = asyncio.ensure_future(collect(llm.stream(REQUEST)))
    request_id = await requested(link)
    link.line(request_id, "Monday, ")
    await asyncio.sleep(0.1)
    link.replies.lost()
    events = await answer
    assert text_of(events) == "Monday, " and isinstance(events[-1], LlmError)
    assert fallback.requests == []


async def test_a_reply_with_too_many_lines_waiting_is_refused_and_cut() -> None:
    llm, link, _ = brain()
    answer = asyncio.ensure_future(collect(llm.stream(REQUEST)))
    request_id = await requested(link)
    refusals: list[Any] = [link.line(request_id, "word ") for _ in range(REPLY_LINES + 2)]
    assert refusals[:REPLY_LINES] == [None] * REPLY_LINES
    assert refusals[REPLY_LINES] is not None and "cut" in refusals[REPLY_LINES]
    assert refusals[-1] is None and link.replies.stale_lines == 1  # the reply is over: the next line is stale
    assert link.line(request_id, "", final=True) is None
    events = await answer  # nothing of it was read yet: the cut reply is an error, not a fallback
    assert isinstance(events[-1], LlmError) and "cut" in str(events[-1].error)


class FrameSocket:
    """The agent's frames, as the link's reader iterates its socket."""

    def __init__(self, *frames: p.AgentMessage) -> None:
        self.frames = [p.encode(f) for f in frames]

    def __aiter__(self) -> FrameSocket:
        return self

    async def __anext__(self) -> str:
        if not self.frames:
            raise StopAsyncIteration
        return self.frames.pop(0)


def link_reading(answers_turns: bool, *frames: p.AgentMessage) -> AgentLink:
    ready = p.Ready(type="ready", v=1, answers_turns=answers_turns)
    return AgentLink(AgentLinkConfig(url="ws://127.0.0.1:1"), SystemClock(), "c1", cast(Any, FrameSocket(*frames)),
                     ready)


def errors_out(link: AgentLink) -> list[p.ProtocolErrorMessage]:
    out = []
    while (frame := link._out.try_recv()) is not None:
        message = p.parse_server_message(frame[0])
        assert isinstance(message, p.ProtocolErrorMessage)
        out.append(message)
    return out


async def test_the_links_reader_hands_reply_lines_to_their_request_and_lines_of_their_own_to_the_call() -> None:
    link = link_reading(True, p.Say(type="say", text="We open at nine.", reply_to="t1"),
                        p.Say(type="say", text="", reply_to="t1", final=True), p.Say(type="say", text="Hello."))
    assert link.replies is not None
    reply = link.replies.open("t1")
    await link._read()
    assert [await reply.lines.recv()] == ["We open at nine."] and reply.lines.closed
    assert link.input.commands.try_recv() == BotLine("Hello.")
    assert errors_out(link) == []


async def test_the_links_reader_refuses_a_reply_from_an_agent_that_does_not_answer_the_turns_naming_the_field() -> None:
    link = link_reading(False, p.Say(type="say", text="We open at nine.", reply_to="t1"),
                        p.Say(type="say", text="", final=True))
    await link._read()
    assert link.replies is None and link.input.commands.try_recv() is None
    assert [(e.code, e.field) for e in errors_out(link)] == [("unexpected", "reply_to"), ("bad_field", "final")]
    assert link.protocol_errors == 2

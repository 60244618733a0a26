"""brisvox.testing beyond typed turns: the tools' view of the call, UI actions, flows and audio."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel

import brisvox
from brisvox.agent.context import AssistantMessage
from brisvox.audio import write_wav
from brisvox.core.errors import ConfigError
from brisvox.sim import ScenarioBuilder
from brisvox.testing import AgentTest, call


class ShowMenu(BaseModel):
    section: str


def menu_agent(seen: list[brisvox.ToolContext]) -> brisvox.Agent:
    @brisvox.tool.read_only
    async def show_menu(section: str, ctx: brisvox.ToolContext) -> str:
        """Put a section of the menu on the caller's screen."""
        seen.append(ctx)
        ctx.dispatch(ShowMenu(section=section))
        return "shown"

    return brisvox.Agent(name="host", prompt="You show the menu.", tools=[show_menu])


async def test_a_tool_context_describes_the_call_the_transport_and_the_agent() -> None:
    seen: list[brisvox.ToolContext] = []
    llm = [[call("show_menu", section="desserts")], "It is on your screen."]
    async with AgentTest(menu_agent(seen), llm=llm, screen=True, parameters={"customer": "c-42"}) as test:
        turn = await test.user_says("show me the desserts")
    (ctx,) = seen
    assert ctx.meta.agent == "host" and ctx.meta.transport == "loopback"
    assert ctx.meta.call_id == ctx.session and ctx.meta.call_id.startswith("loopback-")
    assert ctx.meta.parameters["customer"] == "c-42"
    assert ctx.epoch == turn.epoch and ctx.call.name == "show_menu"
    assert "c-42" not in repr(ctx.meta)  # what the caller sent stays out of logs


async def test_a_ui_action_reaches_the_screen_and_the_tool_returns_at_once() -> None:
    shown: list[BaseModel] = []
    llm = [[call("show_menu", section="desserts")], "It is on your screen."]
    async with AgentTest(menu_agent([]), llm=llm, screen=shown.append) as test:
        turn = await test.user_says("show me the desserts")
        turn.expect.ui_action(ShowMenu, section="desserts")
        with pytest.raises(AssertionError, match=r"dispatched: ShowMenu\(section='desserts'\)"):
            turn.expect.ui_action(ShowMenu, section="mains")
    assert turn.tool_calls[0].outcome == "ok"
    assert test.ui_actions == shown == [ShowMenu(section="desserts")]


async def test_a_ui_action_on_a_call_without_a_screen_fails_the_tool_saying_so() -> None:
    llm = [[call("show_menu", section="desserts")], "Sorry, I cannot show it."]
    async with AgentTest(menu_agent([]), llm=llm) as test:
        turn = await test.user_says("show me the desserts")
    (seen,) = turn.tool_calls
    assert seen.outcome == "failed"
    assert seen.content is not None and "has no screen for ShowMenu" in seen.content
    assert test.ui_actions == []


def progress_agent() -> brisvox.Agent:
    @brisvox.tool.read_only
    async def track_order(order: str, ctx: brisvox.ToolContext) -> str:
        """Show the order's progress on the caller's page."""
        ctx.send_server_message({"order": order, "steps": ["cooking", "on its way"]})
        if order == "bad":
            ctx.send_server_message({"order": {order}})
        return "shown"

    return brisvox.Agent(name="host", prompt="You track orders.", tools=[track_order])


async def test_a_tools_server_message_is_recorded_per_turn_and_the_tool_returns_at_once() -> None:
    llm = [[call("track_order", order="A7")], "It is on your screen.",
           [call("track_order", order="bad")], "Sorry."]
    async with AgentTest(progress_agent(), llm=llm, screen=True) as test:
        turn = await test.user_says("where is my order")
        bad = await test.user_says("and the other one")
    assert turn.tool_calls[0].outcome == "ok"
    assert turn.server_messages == [{"order": "A7", "steps": ["cooking", "on its way"]}]
    (failed,) = bad.tool_calls  # data that is not JSON fails the tool, naming the value, as on a real screen
    assert failed.outcome == "failed" and failed.content is not None and "data.order: a set is not JSON" in failed.content
    assert test.server_messages == [turn.server_messages[0], {"order": "bad", "steps": ["cooking", "on its way"]}]


async def test_a_server_message_on_a_call_without_a_screen_fails_the_tool_saying_so() -> None:
    llm = [[call("track_order", order="A7")], "Sorry, I cannot show it."]
    async with AgentTest(progress_agent(), llm=llm) as test:
        turn = await test.user_says("where is my order")
    (seen,) = turn.tool_calls
    assert seen.outcome == "failed"
    assert seen.content is not None and "has no screen for a server message" in seen.content
    assert test.server_messages == []


FLOW_AGENT = """\
[agent]
name = "booker"
prompt = "You take table bookings."
tools = ["check_availability", "book_table"]

[flow]
initial = "collect"

[[flow.nodes]]
name = "collect"
prompt = "Ask for the day, then check it."
tools = ["check_availability"]

[[flow.nodes.transitions]]
tool = "check_availability"
to = "confirm"
result = "free"
equals = true

[[flow.nodes]]
name = "confirm"
prompt = "Ask the caller to confirm, then book."
tools = ["book_table"]
"""


@brisvox.tool.read_only
async def check_availability(day: str) -> dict[str, bool]:
    """Whether a table is free on a day."""
    return {"free": day != "monday"}


@brisvox.tool.side_effect
async def book_table(day: str) -> str:
    """Book a table."""
    return "booked"


def flow_agent(tmp_path: Path) -> brisvox.Agent:
    path = tmp_path / "agent.toml"
    path.write_text(FLOW_AGENT)
    return brisvox.Agent.from_file(path, tools=[check_availability, book_table])


async def test_an_agent_with_a_flow_offers_each_nodes_tools_and_moves_on_results(tmp_path: Path) -> None:
    llm = [
        [call("book_table", day="friday")], "Let me check first.",
        [call("check_availability", day="friday")], "Friday is free. Shall I book it?",
        [call("book_table", day="friday")], "Booked.",
    ]
    async with AgentTest(flow_agent(tmp_path), llm=llm) as test:
        assert test.node == "collect" and test.offered == ("check_availability",)
        early = await test.user_says("book friday")
        assert early.tool_calls[0].outcome == "unknown_tool" and test.tool_runs("book_table") == 0
        checked = await test.user_says("is friday free?")
        checked.expect.entered("confirm")
        assert test.node == "confirm" and test.offered == ("book_table",)
        booked = await test.user_says("yes please")
        booked.expect.tool_call("book_table", day="friday")
        with pytest.raises(AssertionError, match=r"entered: none"):
            booked.expect.entered("collect")
    assert test.tool_runs("book_table") == 1 and test.tool_runs("check_availability") == 1


async def test_audio_mode_hears_synthesized_speech_through_the_vad_and_the_stt() -> None:
    llm = [[call("show_menu", section="desserts")], "Here are the desserts.", "You are welcome."]
    async with AgentTest(menu_agent([]), llm=llm, audio=True, screen=True) as test:
        first = await test.user_says("show me the desserts please")
        first.expect.tool_call("show_menu", section="desserts")
        first.expect.said(contains="desserts")
        second = await test.user_says("thank you")
    assert first.heard == "show me the desserts please" and second.heard == "thank you"
    stt = test._mock_stt
    assert stt is not None and stt.sessions[0].audio_seconds > 2.0  # the line sent audio all along


async def test_audio_mode_sends_a_wav_and_speaking_over_the_reply_interrupts_it(tmp_path: Path) -> None:
    scenario = ScenarioBuilder(sample_rate=8000).pause(0.3).say("what is on the menu").pause(0.5).build()
    wav = tmp_path / "question.wav"
    write_wav(wav, scenario.render(), 8000)  # resampled to the call's rate
    long_reply = "Our menu today has " + ", ".join(f"dish number {i}" for i in range(40)) + "."
    async with AgentTest(menu_agent([]), llm=[long_reply, "Sure."], audio=True) as test:
        first = await test.user_says("what is on the menu", audio=wav, wait=False)
        second = await test.barge_in(after=0.5, text="stop")
    assert first.heard == "what is on the menu" and first.interrupted
    second.expect.said(equals="Sure.")
    cut = next(m for m in test.context.messages if isinstance(m, AssistantMessage))
    assert 0 < len(cut.text) < len(long_reply)  # the context keeps what the caller heard before speaking


async def test_typing_and_speaking_are_refused_in_the_other_mode_with_a_clear_error() -> None:
    async with AgentTest(menu_agent([]), llm=["Hi."]) as test:
        with pytest.raises(ConfigError, match=r"the caller types text \(AgentTest\(..., audio=True\) to speak\)"):
            await test.user_says("hello", audio=b"")
    async with AgentTest(menu_agent([]), llm=["Hi."], audio=True) as test:
        with pytest.raises(ConfigError, match="give the words the mock STT hears"):
            await test.user_says(audio=b"")


@pytest.mark.slow
async def test_audio_mode_with_the_local_whisper_hears_real_speech(tmp_path: Path) -> None:
    from brisvox.providers.local.whisper import WhisperConfig, WhisperStt
    from tests._speech import espeak_wav

    config = WhisperConfig()
    if not (config.resolve_dir() / "model.bin").is_file():
        pytest.skip("the Whisper model is not fetched (run `brisvox models fetch`)")
    speech = espeak_wav("show me the desserts", tmp_path)
    llm = [[call("show_menu", section="desserts")], "Here they are."]
    stt = WhisperStt(config)
    try:
        async with AgentTest(menu_agent([]), llm=llm, stt=stt, screen=True) as test:
            turn = await test.user_says(audio=speech)
    finally:
        await stt.aclose()
    assert "dessert" in turn.heard.lower() and turn.text == "<audio>"
    turn.expect.ui_action(ShowMenu, section="desserts")


async def test_the_agent_speaks_with_the_tts_given() -> None:
    from brisvox.core.clock import SimClock
    from brisvox.sim import MockTts, MockTtsConfig

    clock = SimClock()
    voice = MockTts(clock, MockTtsConfig(chars_per_second=50.0), name="slow-voice")
    async with AgentTest(menu_agent([]), llm=["Hello there, how can I help?"], clock=clock, tts=voice) as test:
        started = clock.now()
        await test.user_says("hi")
        took = clock.now() - started
    assert len(voice.sessions) == 1 and took > 0.5  # 28 characters at 50 a second, then the settle


async def test_a_node_that_ends_the_call_ends_it_once_the_farewell_played(tmp_path: Path) -> None:
    path = tmp_path / "agent.toml"
    path.write_text(FLOW_AGENT + "end_call = true\n")  # the confirm node hangs up after its first response
    agent = brisvox.Agent.from_file(path, tools=[check_availability, book_table])
    llm = [[call("check_availability", day="friday")], "Friday is free. Goodbye!"]
    async with AgentTest(agent, llm=llm) as test:
        (await test.user_says("is friday free?")).expect.entered("confirm")
        played = test.clock.now()
        ended = test._call
        assert ended is not None
        while not ended.done() and test.clock.now() - played < 10.0:
            await test.clock.sleep(0.05)
        # The test caller echoes the farewell's mark as it hears it: no wait for the engine's echo timeout (5 s).
        assert ended.done() and test.clock.now() - played < 1.0

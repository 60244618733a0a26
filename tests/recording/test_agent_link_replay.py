"""A recorded call whose agent link serves a tool (an SDK brain on 127.0.0.1): the remote tool's
spec and results are recorded, and ``brisvox replay`` (which has no link) replays the call the same."""

from __future__ import annotations

import argparse
import asyncio
import io
from collections.abc import Callable
from pathlib import Path

import pytest

from brisvox.core.clock import SystemClock
from brisvox.providers.llm import GeneratorLlmStream, LlmRequest
from brisvox.recording import load_recording
from brisvox.recording.replay import ReplayLlm
from brisvox.sdk import Brain, protocol, serve
from brisvox.server.agent_file import load_agent_file
from brisvox.server.replay import run_replay
from brisvox.server.tools import ToolSet
from brisvox.sim import Call, Say, ScenarioBuilder, ScriptedLlm
from brisvox.sim.scenario import CallerScenario
from tests.recording._calls import recordings, scenario_call
from tests.server.test_agent_link_call import Shop


async def linked_call(directory: Path, brain: Callable[[], Brain], scenario: CallerScenario, llm: ScriptedLlm,
                      sections: str = "", link: str = "") -> None:
    """One call of a recording agent (``sections`` added) linked to ``brain`` served on 127.0.0.1
    in this process (``link``: more of its ``[agent_link]``)."""
    server = await serve(brain, "127.0.0.1", 0)
    try:
        url = f"ws://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        (directory / "agent.toml").write_text(
            '[agent]\nname = "shop"\nprompt = "p"\n\n[turn]\npolicy = "fixed_silence"\nsilence = 0.4\n\n'
            f'{sections}[agent_link]\nurl = "{url}"\nconnect_timeout = 2\n{link}\n'
            f'[record]\nenabled = true\ndir = "{directory}"\n')
        agent = load_agent_file(directory / "agent.toml", available_tools=set())
        await scenario_call(agent, ToolSet(), scenario, llm)
    finally:
        server.close()
        await server.wait_closed()


async def _linked_call(directory: Path) -> None:
    """One call of a recording agent whose link serves the shop's tools; the model calls ``opening_hours``."""
    scenario = ScenarioBuilder().pause(0.4).say("when are you open on monday").pause(2.0).build()
    llm = ScriptedLlm(SystemClock(), [[Call(name="opening_hours", arguments={"day": "monday"})],
                                      [Say("Nine to five.")]])
    await linked_call(directory, Shop, scenario, llm)


@pytest.mark.realtime
def test_a_call_whose_agent_link_serves_a_tool_is_recorded_and_replays_without_the_link(tmp_path: Path) -> None:
    asyncio.run(_linked_call(tmp_path))
    [path] = recordings(tmp_path)
    recording = load_recording(path)
    assert recording.header.tools is not None
    assert [(t["name"], t.get("agent_link"), t.get("timeout")) for t in recording.header.tools] == [
        ("book", True, 3.0), ("opening_hours", True, 2.0)]
    assert [(r["name"], r["result"]) for r in recording.of("tool")] == [("opening_hours", "monday: nine to five")]
    out = io.StringIO()
    code = run_replay(argparse.Namespace(recording=path, agent=None, silence=None, tolerance=None), ToolSet(), out=out)
    assert code == 0, out.getvalue()
    assert "ToolCallSettled" in out.getvalue() and "the replay matches" in out.getvalue()


class Desk(Shop):
    """A brain that acts on its own: after the caller's first turn it adds a note and offers only
    ``opening_hours``, after the first reply it says a line, and after the tool's refusal it ends the
    call with a farewell."""

    def __init__(self) -> None:
        super().__init__()
        self.done = 0

    async def on_event(self, event: protocol.CallEvent) -> None:
        await super().on_event(event)
        if event.kind == "user_turn" and event.text == "hello":
            await self.append_note("The caller is a member.")
            await self._send("tools_set", protocol.ToolsSet(type="tools.set", names=("opening_hours",)))
        elif event.kind == "bot_done":
            self.done += 1
            if self.done == 1:
                await self.say_line("We are open until five today.")
        elif event.kind == "tool_settled":
            await self.end("Goodbye.")


async def _acting_call(directory: Path) -> None:
    """A virtual-time call of a recording agent whose linked brain (on 127.0.0.1, in this process) says
    a line, updates the context, sets the tools and ends the call."""
    scenario = ScenarioBuilder().pause(0.4).say("hello").pause(4.0).say("book me in for monday").pause(6.0).build()
    llm = ScriptedLlm(SystemClock(), [[Say("Hello, how can I help?")], [Call(name="book", arguments={"day": "monday"})],
                                      [Say("I cannot book that.")]])
    await linked_call(directory, Desk, scenario, llm)


async def test_a_virtual_time_call_whose_agent_says_notes_sets_tools_and_ends_replays_identically(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    await _acting_call(tmp_path)
    [path] = recordings(tmp_path)
    recording = load_recording(path)
    assert recording.header.clock == "virtual" and recording.header.agent_link == {"answers_turns": False}
    commands = [{k: v for k, v in r.items() if k != "t"} for r in recording.of("agent")]
    assert commands == [
        {"k": "agent", "cmd": "context.update", "note": "The caller is a member."},
        {"k": "agent", "cmd": "tools.set", "names": ["opening_hours"]},
        {"k": "agent", "cmd": "say", "text": "We are open until five today.", "interrupt": False},
        {"k": "agent", "cmd": "end", "farewell": "Goodbye."}]
    events = recording.of("event")
    settled = [r for r in events if r["e"] == "ToolCallSettled"]
    assert [(r["name"], r["outcome"]) for r in settled] == [("book", "unknown_tool")]  # tools.set narrowed them
    said = "".join(r["text"] for r in events if r["e"] == "BotText")
    assert "We are open until five today." in said and said.endswith("Goodbye.")
    asked: list[LlmRequest] = []
    stream = ReplayLlm.stream

    def spy(self: ReplayLlm, request: LlmRequest) -> GeneratorLlmStream:
        asked.append(request)
        return stream(self, request)

    monkeypatch.setattr(ReplayLlm, "stream", spy)
    out = io.StringIO()
    code = await asyncio.to_thread(  # brisvox replay runs its own virtual-time loop
        run_replay, argparse.Namespace(recording=path, agent=None, silence=None, tolerance=None), ToolSet(), out=out)
    assert code == 0, out.getvalue()
    assert "the replay matches" in out.getvalue()
    # The replay put the agent's note into the context, as the call did: the model was asked with it.
    assert any("The caller is a member." in str(getattr(message, "text", "")) for message in asked[-1].messages)
    assert [tool.name for tool in asked[-1].tools] == ["opening_hours"]  # and offered only the tools it set


class Kitchen(Brain):
    """A brain that answers the turns (brain mode): the first reply in two lines, the second never
    (the agent file's model answers it once the first line is late)."""

    answers_turns = True

    def __init__(self) -> None:
        super().__init__()
        self.requests = 0

    async def on_turn_request(self, request: protocol.TurnRequest) -> None:
        self.requests += 1
        if self.requests == 1:
            self._spawn(self._reply(request.id), name="reply")

    async def _reply(self, request_id: str) -> None:
        await self.clock.sleep(0.3)
        await self.reply_line(request_id, "The kitchen opens ")
        await self.clock.sleep(0.2)
        await self.reply_line(request_id, "at noon.", final=True)


async def test_a_brain_mode_call_records_the_agents_reply_lines_and_the_fallback_and_replays_identically(
        tmp_path: Path) -> None:
    scenario = (ScenarioBuilder().pause(0.4).say("when does the kitchen open").pause(4.0)
                .say("and the bar").pause(5.0).build())
    # Speculation on: the call turns it off in brain mode, and its replay does too (the header says brain).
    await linked_call(tmp_path, Kitchen, scenario, ScriptedLlm(SystemClock(), [[Say("The bar opens at five.")]]),
                      sections="[speculation]\nenabled = true\n\n", link="first_line = 1.0\n")
    [path] = recordings(tmp_path)
    recording = load_recording(path)
    assert recording.header.brain
    replies = [[event for _dt, event in r["events"]] for r in recording.of("llm")]
    assert replies[0] == [{"text": "The kitchen opens "}, {"text": "at noon."}, {"done": "stop", "usage": None}]
    assert [dt for dt, _event in recording.of("llm")[0]["events"]][:2] == pytest.approx([0.3, 0.2], abs=0.002)
    # The agent file's model, in the agent's place.
    assert "".join(event.get("text", "") for event in replies[1]) == "The bar opens at five."
    assert [r["fallback"] for r in recording.of("brain")] == ["the agent sent no line in time"]
    out = io.StringIO()
    code = await asyncio.to_thread(  # brisvox replay runs its own virtual-time loop
        run_replay, argparse.Namespace(recording=path, agent=None, silence=None, tolerance=None), ToolSet(), out=out)
    assert code == 0, out.getvalue()

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from brisvox.agent.context import SystemMessage
from brisvox.agent.window import SummaryRequest
from brisvox.core.clock import SystemClock
from brisvox.core.frames import ReplyMode
from brisvox.inference.vad import energy_vad
from brisvox.providers.llm import LlmRequest
from brisvox.providers.summarizer import LlmSummarizer
from brisvox.recording import load_recording, parse_recording
from brisvox.recording.format import SUMMARY
from brisvox.recording.replay import VIRTUAL_TOLERANCE, compare, compared_events, judge
from brisvox.server import replay as served_replay
from brisvox.server.agent_file import AgentDefinition, load_agent_file
from brisvox.server.replay import offered_tools, replay_recording
from brisvox.server.tools import ToolSet
from brisvox.sim import Call, Say, ScenarioBuilder, ScriptedLlm
from brisvox.transport.loopback import LoopbackClient
from tests.recording._calls import (
    keyed_call,
    lookup_tools,
    recorded_call,
    recording_agent,
    recordings,
    scenario_call,
)
from tests.server.test_agent_flow import BASE, FLOW


async def test_a_recorded_simulated_call_replays_with_the_same_events_at_the_same_virtual_times(
        tmp_path: Path) -> None:
    agent, tools = recording_agent(tmp_path), lookup_tools()
    await recorded_call(agent, tools)
    [path] = recordings(tmp_path)
    recording = load_recording(path)
    assert recording.header.clock == "virtual" and recording.dropped == 0
    recorded = compared_events(list(recording.records))
    names = [seen.line.split()[0] for seen in recorded]
    assert names.count("TurnEnded") == 3 and "ToolCallStarted" in names and "BotHeard" in names
    assert any("barge_in=True" in seen.line for seen in recorded)
    replayed = compared_events(await replay_recording(recording, agent, tools, SystemClock()))
    _rows, differences = compare(recorded, replayed, VIRTUAL_TOLERANCE)
    assert differences == [], "\n".join(map(str, differences))
    assert recorded == replayed  # the same events at the same times, to the microsecond


async def test_a_shorter_silence_threshold_in_the_replay_shows_the_turns_ending_earlier(tmp_path: Path) -> None:
    agent, tools = recording_agent(tmp_path), lookup_tools()
    await recorded_call(agent, tools)
    recording = load_recording(recordings(tmp_path)[0])
    recorded = compared_events(list(recording.records))
    replayed = compared_events(await replay_recording(recording, agent, tools, SystemClock(), silence=0.3,
                                                      vad=energy_vad))
    _rows, differences = compare(recorded, replayed, VIRTUAL_TOLERANCE)
    ends = [(d.recorded, d.replayed) for d in differences
            if d.recorded is not None and d.replayed is not None and d.recorded.line.startswith("TurnEnded")]
    assert ends, "\n".join(map(str, differences))
    assert all(b.t < a.t - 0.4 for a, b in ends)  # 0.5 s sooner, give or take a frame


async def test_a_call_with_a_key_and_a_typed_turn_replays_them_identically(tmp_path: Path) -> None:
    agent, tools = recording_agent(tmp_path), lookup_tools()
    await keyed_call(agent, tools)
    recording = load_recording(recordings(tmp_path)[0])
    inputs = [(r["kind"], r["text"]) for r in recording.of("event") if r["e"] == "CallerInput"]
    assert inputs == [("key", "5"), ("text", "what about the blue shoes")]
    recorded = compared_events(list(recording.records))
    replayed = compared_events(await replay_recording(recording, agent, tools, SystemClock()))
    assert sum(1 for seen in replayed if seen.line.startswith("TurnEnded")) == 3  # spoken, key, typed
    assert any("ToolCallStarted" in seen.line and "blue shoes" in seen.line for seen in replayed)
    _rows, differences = compare(recorded, replayed, VIRTUAL_TOLERANCE)
    assert differences == [], "\n".join(map(str, differences))
    assert recorded == replayed


# The served flow of tests/server/test_agent_flow.py, recorded; no end_call: the test's caller echoes no marks.
FLOW_AGENT = BASE + FLOW.replace("end_call = true\n", "") + '\n[record]\nenabled = true\ndir = "{dir}"\n'


def _booking_tools() -> ToolSet:
    tools = ToolSet()

    @tools.read_only
    async def check_availability(day: str) -> object:
        """Is a day free?"""
        return {"free": True}

    @tools.side_effect
    async def book_table() -> object:
        """Book a table."""
        return {"booked": True}

    return tools


async def _flow_call(agent: AgentDefinition, tools: ToolSet) -> ScriptedLlm:
    scenario = (ScenarioBuilder().pause(0.4).say("a table on friday").pause(3.0).say("yes please book it")
                .pause(3.0).build())
    replies = [[Call(name="check_availability", arguments={"day": "Friday"})], [Say("Friday is free. Book it?")],
               [Call(name="book_table", arguments={})], [Say("Booked, see you on Friday.")]]

    def answer(request: LlmRequest) -> list[Any]:
        system = request.messages[0]
        if isinstance(system, SystemMessage) and "summar" in system.text.lower():
            return [Say("The caller wants a table on Friday.")]  # the ResetWithSummary's request
        return replies.pop(0)

    llm = ScriptedLlm(SystemClock(), answer)
    await scenario_call(agent, tools, scenario, llm)
    return llm


async def test_a_flow_call_with_a_summary_through_the_model_replays_identically(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "agent.toml").write_text(FLOW_AGENT.replace("{dir}", str(tmp_path)))
    tools = _booking_tools()
    agent = load_agent_file(tmp_path / "agent.toml", available_tools=set(tools))
    llm = await _flow_call(agent, tools)
    assert len(llm.requests) == 5  # four turns' and the summary's
    recording = load_recording(recordings(tmp_path)[0])
    assert recording.header.summaries
    uses = [r.get("use") for r in recording.of("llm")]
    assert uses.count(SUMMARY) == 1 and len(uses) == 5
    recorded = compared_events(list(recording.records))
    assert any(seen.line.startswith("FlowEntered") and "'confirm'" in seen.line for seen in recorded)
    summaries: list[str] = []

    class Summarizer(LlmSummarizer):  # the replay's summarizer, watched
        async def summarize(self, request: SummaryRequest) -> str:
            summaries.append(await super().summarize(request))
            return summaries[-1]

    monkeypatch.setattr(served_replay, "LlmSummarizer", Summarizer)
    replayed = compared_events(await replay_recording(recording, agent, tools, SystemClock()))
    assert summaries == ["The caller wants a table on Friday."]  # the recorded summary, asked for again
    _rows, differences = compare(recorded, replayed, VIRTUAL_TOLERANCE)
    assert differences == [], "\n".join(map(str, differences))
    assert recorded == replayed


async def test_a_replay_against_a_changed_tool_says_which_tool_changed(tmp_path: Path) -> None:
    agent, tools = recording_agent(tmp_path), lookup_tools()
    await recorded_call(agent, tools)
    recording = load_recording(recordings(tmp_path)[0])
    assert recording.header.tools is not None
    assert [(t["name"], t["kind"]) for t in recording.header.tools] == [("lookup", "read_only")]
    assert recording.header.tools[0]["parameters"]["properties"]["item"]["type"] == "string"
    changed = ToolSet()

    @changed.read_only
    async def lookup(item: str, size: int = 40) -> str:  # a new optional argument: the call still runs
        "Look an item up."
        return f"{item}: in stock"

    replayed = await replay_recording(recording, agent, changed, SystemClock())
    judged = judge(recording, replayed, offered=offered_tools(agent, changed))
    [difference] = judged.differences
    assert difference.recorded is not None and difference.replayed is not None
    assert difference.recorded.line.startswith("Tool 'lookup'") and "arguments=['item']" in difference.recorded.line
    assert "arguments=['item', 'size']" in difference.replayed.line
    same = judge(recording, await replay_recording(recording, agent, tools, SystemClock()),
                 offered=offered_tools(agent, tools))
    assert same.differences == [] and same.rows[0][0] is not None and same.rows[0][0].line.startswith("Tool '")


async def test_a_recording_made_before_the_header_kept_tools_and_summaries_still_replays(tmp_path: Path) -> None:
    agent, tools = recording_agent(tmp_path), lookup_tools()
    await recorded_call(agent, tools)
    [path] = recordings(tmp_path)
    lines = gzip.decompress(path.read_bytes()).splitlines()
    head = json.loads(lines[0])
    for later in ("pipeline", "summaries", "tools"):
        del head[later]
    old = parse_recording([json.dumps(head).encode(), *lines[1:]])
    assert old.header.tools is None and old.header.pipeline == "cascade"
    replayed = await replay_recording(old, agent, tools, SystemClock())
    judged = judge(old, replayed, offered=offered_tools(agent, tools))
    assert judged.differences == [] and not any(a is not None and a.line.startswith("Tool '") for a, _, _ in judged.rows)


async def test_a_call_whose_screen_sends_notes_records_them_and_replays_them_identically(tmp_path: Path) -> None:
    agent, tools = recording_agent(tmp_path), lookup_tools()
    scenario = ScenarioBuilder().pause(0.4).say("is the red one in stock").pause(3.0).build()
    llm = ScriptedLlm(SystemClock(), [[Call(name="lookup", arguments={"item": "red shoes"})], [Say("It is.")]])

    async def note(client: LoopbackClient) -> None:  # what an app event from the caller's screen becomes
        await client.send_note("the caller selected: red shoes, size 38")

    await scenario_call(agent, tools, scenario, llm, at={0.2: note})
    assert any("size 38" in getattr(m, "text", "") for r in llm.requests for m in r.messages)  # the model read it
    recording = load_recording(recordings(tmp_path)[0])
    notes = [(r["kind"], r["text"]) for r in recording.of("event") if r["e"] == "CallerInput"]
    assert notes == [("note", "the caller selected: red shoes, size 38")]
    recorded = compared_events(list(recording.records))
    replayed = compared_events(await replay_recording(recording, agent, tools, SystemClock()))
    _rows, differences = compare(recorded, replayed, VIRTUAL_TOLERANCE)
    assert differences == [], "\n".join(map(str, differences))
    assert recorded == replayed


async def test_a_typed_turn_that_asked_for_a_text_answer_is_answered_in_text_again_in_the_replay(
        tmp_path: Path) -> None:
    agent, tools = recording_agent(tmp_path), lookup_tools()
    scenario = ScenarioBuilder().pause(0.4).say("hello there").pause(5.0).build()
    llm = ScriptedLlm(SystemClock(), [[Say("Hello, type if you like.")], [Say("Here is the answer in text.")]])

    async def typed(client: LoopbackClient) -> None:
        await client.send_text("show me the answer", ReplyMode.TEXT)

    await scenario_call(agent, tools, scenario, llm, at={3.0: typed})
    recording = load_recording(recordings(tmp_path)[0])
    [typed_in] = [r for r in recording.of("event") if r["e"] == "CallerInput"]
    assert (typed_in["kind"], typed_in["reply"]) == ("text", "text")
    answer = {r["epoch"] for r in recording.of("event") if r["e"] == "BotText" and r["reply"] == "text"}
    assert answer  # the call answered it in text
    replayed = await replay_recording(recording, agent, tools, SystemClock())
    assert {r["epoch"] for r in replayed if r["e"] == "BotText" and r["reply"] == "text"} == answer
    _rows, differences = compare(compared_events(list(recording.records)), compared_events(replayed),
                                 VIRTUAL_TOLERANCE)
    assert differences == [], "\n".join(map(str, differences))

"""The [window] and [flow] sections of agent files, and what brisvox serve does with them."""

from __future__ import annotations

import asyncio
import contextlib
import json

import pytest

from brisvox.agent.context import SystemMessage, ToolMessage, UserMessage
from brisvox.agent.flows import Append, EndCall, ResetWithSummary, ResultEquals, Rule, Rules, Say, Success
from brisvox.agent.window import WindowPolicy
from brisvox.core.clock import SimClock
from brisvox.core.errors import ChannelClosed
from brisvox.engine import Providers
from brisvox.engine.config import SummaryConfig
from brisvox.inference.vad import energy_vad
from brisvox.server.agent_file import AgentDefinition, AgentFileError, parse_agent_file
from brisvox.server.call import EngineCall, engine_config, engine_runner
from brisvox.server.call_providers import CallProviders, _summary_llm
from brisvox.server.demo_llm import scripted_demo_llm
from brisvox.server.metrics import ServerMetrics
from brisvox.server.tools import ToolSet
from brisvox.sim import Call, CallerScenario, MockStt, MockTts, ScenarioBuilder, ScriptedLlm
from brisvox.sim import Say as Speak
from brisvox.transport import LoopbackTransport
from brisvox.transport.events import WireMark

BASE = """\
[agent]
name = "booker"
prompt = "You take table bookings."
tools = ["check_availability", "book_table"]
"""
TOOLS = {"check_availability", "book_table"}

FLOW = """
[flow]
initial = "collect"
summary_timeout = 3.0

[[flow.nodes]]
name = "collect"
prompt = "Ask for the day, then check it."
tools = ["check_availability"]

capture_args = ["check_availability"]
capture_results = { check_availability = "availability" }

[[flow.nodes.transitions]]
tool = "check_availability"
to = "confirm"
result = "free"
equals = true

[[flow.nodes]]
name = "confirm"
prompt = "{day} is free. Ask the caller to confirm, then book."
tools = ["book_table"]
strategy = "reset_with_summary"
say = "Good news."
keep_last_user = true
end_call = true
"""


def problems(text: str) -> list[str]:
    with pytest.raises(AgentFileError) as info:
        parse_agent_file(text, source="agent.toml", available_tools=TOOLS)
    return [str(p) for p in info.value.problems]


def test_without_a_window_section_calls_keep_8_turns_and_summarize_the_rest_with_the_agents_model() -> None:
    d = parse_agent_file(BASE, source="agent.toml", available_tools=TOOLS)
    config = engine_config(d)
    assert config.window == WindowPolicy(max_tokens=4000, keep_recent_turns=8)
    assert config.summary == SummaryConfig(enabled=True, timeout=20.0)
    assert d.flow is None


def test_the_window_section_sets_the_engines_window_and_summaries() -> None:
    d = parse_agent_file(BASE + "\n[window]\nkeep_recent_turns = 4\nmax_tokens = 2000\nsummary_timeout = 5.0\n",
                         source="agent.toml", available_tools=TOOLS)
    config = engine_config(d)
    assert config.window == WindowPolicy(max_tokens=2000, keep_recent_turns=4)
    assert config.summary == SummaryConfig(enabled=True, timeout=5.0)
    off = engine_config(parse_agent_file(BASE + '\n[window]\nsummarizer = "off"\n', available_tools=TOOLS))
    assert off.window == WindowPolicy() and not off.summary.enabled
    whole = engine_config(parse_agent_file(BASE + "\n[window]\nenabled = false\n", available_tools=TOOLS))
    assert whole.window is None and not whole.summary.enabled


def test_window_problems_are_reported_at_their_keys() -> None:
    assert problems(BASE + "\n[window]\nkeep_recent_turns = 0\n") == [
        "agent.toml:7:21: window.keep_recent_turns: expected a value from 1 to 200 (got 0)"
    ]
    assert problems(BASE + "\n[window]\nenabled = false\nmax_tokens = 3000\n") == [
        "agent.toml:8:1: window.max_tokens: has no effect with enabled = false"
    ]
    assert problems(BASE + '\n[window]\nsummarizer = "off"\nsummary_model = "small"\n') == [
        'agent.toml:8:1: window.summary_model: has no effect with summarizer = "off"'
    ]
    assert problems(BASE + '\n[window]\nsummary_model = "small"\n') == [
        "agent.toml:7:1: window.summary_model: the agent's llm provider takes no model option"
    ]


def test_window_and_flow_numbers_outside_their_ranges_or_not_finite_are_reported_with_the_range() -> None:
    assert problems(BASE + "\n[window]\nsummary_timeout = inf\n") == [
        "agent.toml:7:19: window.summary_timeout: expected a value from 0.1 to 300 (got inf)"
    ]
    assert problems(BASE + FLOW.replace("summary_timeout = 3.0", "summary_timeout = 0.0")) == [
        "agent.toml:8:19: flow.summary_timeout: expected a value from 0.1 to 60 (got 0.0)"
    ]
    assert problems(BASE + FLOW.replace("equals = true", "equals = nan")) == [
        "agent.toml:22:10: flow.nodes[0].transitions[0].equals: expected a value from -1000000000000000 to "
        "1000000000000000 (got nan)"
    ]


def test_a_flow_section_becomes_nodes_with_their_tools_transitions_and_strategies() -> None:
    d = parse_agent_file(BASE + FLOW, source="agent.toml", available_tools=TOOLS)
    assert d.flow is not None and d.flow.initial == "collect" and d.flow.summary_timeout == 3.0
    collect, confirm = d.flow.nodes
    assert collect.strategy == Append() and collect.task_messages == ("Ask for the day, then check it.",)
    assert collect.tools[0].transition == Rules(Rule(ResultEquals("free", True), "confirm"))
    assert collect.tools[0].capture_args and collect.tools[0].capture_result == "availability"
    assert not confirm.tools[0].capture_args and confirm.tools[0].capture_result is None
    assert confirm.strategy == ResetWithSummary() and confirm.pre_actions == (Say("Good news."),)
    assert confirm.keep_last_user and confirm.tools[0].transition is None
    assert confirm.post_actions == (EndCall(),) and collect.post_actions == ()


def test_a_transition_without_a_result_test_fires_on_success() -> None:
    text = BASE + FLOW.replace('result = "free"\nequals = true\n', "")
    d = parse_agent_file(text, available_tools=TOOLS)
    assert d.flow is not None
    assert d.flow.nodes[0].tools[0].transition == Rules(Rule(Success(), "confirm"))


def test_flow_problems_name_the_node_and_key() -> None:
    bad = (FLOW.replace('to = "confirm"', 'to = "confrim"')
           .replace('tools = ["book_table"]', 'tools = ["book_table", "transfer"]')
           .replace('equals = true\n', "")
           .replace('initial = "collect"', 'initial = "start"'))
    assert problems(BASE + bad + 'summary_input_tokens = 300\n\n[[flow.nodes]]\nname = "collect"\nprompt = "x"\n'
                    'summary_max_tokens = 100\n') == [
        "agent.toml:7:1: flow.initial: node 'start' is not a node of the flow (nodes: collect, confirm, collect)",
        "agent.toml:18:14: flow.nodes[0].transitions[0]: result and equals go together: the transition fires when "
        "the result at that path equals it",
        "agent.toml:20:1: flow.nodes[0].transitions[0].to: node 'confrim' is not a node of the flow",
        "agent.toml:26:24: flow.nodes[1].tools[1]: tool 'transfer' is not in agent.tools",
        "agent.toml:34:1: flow.nodes[2].name: node 'collect' is defined twice",
        'agent.toml:36:1: flow.nodes[2].summary_max_tokens: applies only to strategy = "reset_with_summary"',
    ]


def test_the_scripted_demo_host_makes_no_summaries_and_a_summary_model_gets_its_own_provider() -> None:
    clock = SimClock()
    d = parse_agent_file(BASE, available_tools=TOOLS)
    assert _summary_llm(d, scripted_demo_llm(clock), clock, {}) == (False, None)
    assert _summary_llm(d, ScriptedLlm(clock, []), clock, {}) == (True, None)
    cloud = parse_agent_file(BASE + '\n[window]\nsummary_model = "gpt-4o-mini"\n\n[llm]\nprovider = "openai"\n'
                                    'api_key_env = "OPENAI_API_KEY"\noptions = { model = "gpt-4o" }\n',
                             available_tools=TOOLS, environ={"OPENAI_API_KEY": "sk-test"})
    summaries, llm = _summary_llm(cloud, ScriptedLlm(clock, []), clock, {})
    assert summaries and llm is not None and llm.name != "scripted-llm"
    assert llm._options.model == "gpt-4o-mini"  # type: ignore[attr-defined]


async def test_a_served_call_runs_the_agent_files_flow() -> None:
    clock = SimClock()
    tools = ToolSet()
    ran: list[str] = []

    @tools.read_only
    async def check_availability(day: str) -> object:
        """Is a day free?"""
        ran.append("check")
        return {"free": True}

    @tools.side_effect
    async def book_table() -> object:
        """Book a table."""
        ran.append("book")
        return {"booked": True}

    agent = parse_agent_file(BASE + FLOW.replace('strategy = "reset_with_summary"', 'strategy = "append"'),
                             available_tools={"check_availability", "book_table"})
    # long enough for the farewell to play and its mark to be echoed before the caller hangs up
    scenario = ScenarioBuilder().pause(0.4).say("a table on friday").pause(8.0).build()
    script = [
        [Call(name="book_table", arguments={})],  # not offered in "collect": refused, never run
        [Call(name="check_availability", arguments={"day": "Friday"})],
        [Speak("Friday is free. Shall I book it?")],
    ]
    llm = ScriptedLlm(clock, script)
    assert await _serve_one_call(clock, agent, tools, scenario, llm)  # "confirm" ends the call (end_call)
    assert ran == ["check"]
    assert [[s.name for s in r.tools] for r in llm.requests] == [
        ["check_availability"], ["check_availability"], ["book_table"],
    ]
    first, last = llm.requests[0].messages[0], llm.requests[-1].messages[0]
    assert isinstance(first, SystemMessage) and first.text.startswith("You take table bookings.")
    assert isinstance(last, SystemMessage) and "Friday is free. Ask the caller to confirm" in last.text
    refused = [m for m in llm.requests[1].messages if isinstance(m, ToolMessage)]
    assert json.loads(refused[0].content)["error"] == "tool_not_available"


async def _serve_one_call(
    clock: SimClock, agent: AgentDefinition, tools: ToolSet, scenario: CallerScenario, llm: ScriptedLlm,
    metrics: ServerMetrics | None = None,
) -> bool:
    """One call through ``brisvox serve``'s session runner, the caller playing ``scenario``;
    True when the engine hung up before the caller did."""
    providers = CallProviders(
        providers=Providers(stt=MockStt.for_scenario(clock, scenario), llm=llm, tts=MockTts(clock), vad=energy_vad),
        llm_label="scripted (test)", vad_label="energy",
    )
    runner = engine_runner(agent, tools, clock, providers, metrics)

    async def no_text(_: str) -> None:
        return None

    async with LoopbackTransport(clock) as transport:
        client = await transport.connect(metadata={"sample_rate": "16000"})
        call = asyncio.ensure_future(runner(EngineCall(await transport.accept(), no_text), asyncio.Event()))

        async def echo_marks() -> None:  # as a phone does once the audio before a mark played
            with contextlib.suppress(ChannelClosed):
                while True:
                    heard = await client.recv()
                    if isinstance(heard.item, WireMark):
                        await client.echo_mark(heard.item.id)

        listener = asyncio.ensure_future(echo_marks())
        try:
            for pcm in scenario.frames(0.02):
                await client.send_audio(pcm)
                await clock.sleep(0.02)
            await client.hangup()
        except ChannelClosed:
            await call
            return True
        finally:
            listener.cancel()
            await asyncio.gather(listener, return_exceptions=True)
        await call
        return False


async def test_requests_that_leave_out_turns_without_a_summary_are_counted_in_the_servers_metrics() -> None:
    clock = SimClock()
    agent = parse_agent_file('[agent]\nname = "a"\nprompt = "p"\n\n[window]\nkeep_recent_turns = 1\n'
                             'summarizer = "off"\n')
    builder = ScenarioBuilder().pause(0.4)
    for words in ("one", "two", "three"):
        builder.say(words).pause(3.0)
    metrics = ServerMetrics()
    llm = ScriptedLlm(clock, [[Speak("Fine.")]] * 3)
    assert not await _serve_one_call(clock, agent, ToolSet(), builder.build(), llm, metrics)
    assert [sum(isinstance(m, UserMessage) for m in r.messages) for r in llm.requests] == [1, 1, 1]
    text = metrics.render().decode()
    assert "brisvox_window_uncovered_requests_total 2.0" in text
    assert 'brisvox_window_summaries_total{outcome="stored"} 0.0' in text


def test_capture_keys_must_name_a_tool_of_the_node_and_a_plain_state_key() -> None:
    text = BASE + FLOW.replace('capture_results = { check_availability = "availability" }',
                               'capture_results = { check_availability = "a.b", book_table = "x" }\n'
                               'capture_args = ["book_table"]').replace('capture_args = ["check_availability"]\n', "")
    assert problems(text) == [
        "agent.toml:15:21: flow.nodes[0].capture_results.check_availability: expected a state key (letters, digits, "
        "'_'), got 'a.b'",
        "agent.toml:15:49: flow.nodes[0].capture_results.book_table: tool 'book_table' is not in this node's tools",
        "agent.toml:16:17: flow.nodes[0].capture_args[0]: tool 'book_table' is not in this node's tools",
    ]

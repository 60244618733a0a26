"""brisvox.Agent: built in code or read from a file through the same checks, and equal when
they say the same thing; its problems listed; ``brisvox check`` on a Python agent."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel

import brisvox
from brisvox import providers
from brisvox.agent.interrupt import InterruptionPolicy
from brisvox.agent.tools import FillerConfig
from brisvox.agent.turn import Adaptive, FixedSilence
from brisvox.core.secret import Secret
from brisvox.server.agent_file import AgentFileError


class Booking(BaseModel):
    day: str
    party_size: int


@brisvox.tool.read_only(timeout=2.0)
async def check_availability(day: str) -> str:
    """Free tables on a day."""
    return "19:00"


@brisvox.tool.side_effect
async def book_table(args: Booking, ctx: brisvox.ToolContext) -> str:
    """Book a table."""
    return "booked"


FILE = '''
[agent]
name = "host"
prompt = "You take table bookings."
greeting = "Hello!"
tools = ["check_availability", "book_table"]
confirm_tools = ["book_table"]

[turn]
policy = "fixed_silence"
silence = 0.6

[interruption]
preset = "recommended"

[filler]
phrases = ["Un momento."]
delay = 0.9

[speculation]
enabled = true

[llm]
provider = "openai"
api_key_env = "OPENAI_API_KEY"
[llm.options]
model = "gpt-4o-mini"
temperature = 0.2

[stt]
provider = "deepgram"
api_key_env = "DEEPGRAM_API_KEY"

[tts]
provider = "cartesia"
api_key_env = "CARTESIA_API_KEY"
[tts.options]
voice = "v1"
'''


def code_built() -> brisvox.Agent:
    return brisvox.Agent(
        name="host", prompt="You take table bookings.", greeting="Hello!",
        tools=[check_availability, book_table], confirm_tools=["book_table"],
        turn=FixedSilence(silence=0.6), interruption=InterruptionPolicy.recommended(),
        filler=FillerConfig(phrases=("Un momento.",), delay=0.9), speculation=True,
        llm=providers.OpenAI(model="gpt-4o-mini", temperature=0.2), stt=providers.Deepgram(),
        tts=providers.Cartesia(voice="v1"),
    )


def test_the_file_and_the_code_build_equal_agents(tmp_path: Path) -> None:
    path = tmp_path / "host.toml"
    path.write_text(FILE)
    from_file = brisvox.Agent.from_file(path, tools=[book_table, check_availability])
    assert from_file == code_built()
    assert from_file.source == path and from_file.tools == (check_availability, book_table)
    assert from_file.definition().stt == code_built().definition().stt


def test_a_minimal_agent_equals_a_minimal_file_with_the_same_defaults(tmp_path: Path) -> None:
    path = tmp_path / "a.toml"
    path.write_text('[agent]\nname = "agent"\nprompt = "p"\n')
    assert brisvox.Agent.from_file(path) == brisvox.Agent(prompt="p")
    assert brisvox.Agent(prompt="p").turn == Adaptive()


def test_from_file_reports_a_listed_tool_it_was_not_given(tmp_path: Path) -> None:
    path = tmp_path / "host.toml"
    path.write_text(FILE)
    with pytest.raises(AgentFileError, match=r"host.toml:6:\d+: agent.tools\[1\]: tool 'book_table' is not provided"):
        brisvox.Agent.from_file(path, tools=[check_availability])


def test_a_code_built_agent_is_checked_like_a_file_and_every_problem_listed() -> None:
    with pytest.raises(brisvox.AgentError) as info:
        brisvox.Agent(prompt="p", language="xx_1", confirm_tools=["nope"],
                      llm=providers.OpenAI(temperature=9, bogus=1))
    assert set(info.value.problems) == {
        "agent.language: expected a language tag such as 'en' or 'tr-TR', got 'xx_1'",
        "agent.confirm_tools[0]: tool 'nope' is not in agent.tools",
        "llm.options.bogus: unknown option for llm provider 'openai' (known: model, temperature, max_tokens, "
        "base_url, reasoning_effort, parallel_tool_calls)",
        "llm.options.temperature: expected a value from 0 to 2 for llm provider 'openai', got 9 (an integer)",
        "stt.provider: stt provider 'local' does not speak 'xx_1' (it speaks en)",
        "tts.provider: tts provider 'local' does not speak 'xx_1' (it speaks en)",
    }


def test_a_provider_for_another_stage_and_an_unbound_method_are_refused() -> None:
    with pytest.raises(brisvox.AgentError, match="is not a stt provider"):
        brisvox.Agent(prompt="p", stt=providers.OpenAI())

    class Desk:
        @brisvox.tool.read_only
        async def look(self) -> str:
            """Look."""
            return ""

    with pytest.raises(brisvox.AgentError, match="is a method"):
        brisvox.Agent(prompt="p", tools=[Desk.look])
    assert brisvox.Agent(prompt="p", tools=[Desk().look]).tools[0].name == "look"


def test_the_key_is_read_from_the_variable_the_provider_names_when_checked() -> None:
    agent = code_built()
    with pytest.raises(brisvox.AgentError, match="environment variable DEEPGRAM_API_KEY is not set"):
        agent.check({"OPENAI_API_KEY": "k", "CARTESIA_API_KEY": "k"})
    agent.check({"OPENAI_API_KEY": "k", "CARTESIA_API_KEY": "k", "DEEPGRAM_API_KEY": "k"})
    assert providers.OpenAI().api_key_env == "OPENAI_API_KEY" and providers.OpenAI().api_key is None
    assert isinstance(Secret("x"), Secret)


def test_brisvox_check_checks_a_python_agent(capsys: pytest.CaptureFixture[str]) -> None:
    assert brisvox.run(brisvox.Agent(name="desk", prompt="p", tools=[check_availability]), ["check"]) == 0
    assert "agent 'desk': ok, agent 'desk' (tools: check_availability;" in capsys.readouterr().out
    assert brisvox.run(code_built(), ["check", "--env"]) == 1
    assert "environment variable OPENAI_API_KEY is not set" in capsys.readouterr().err


def test_a_files_window_and_flow_reach_the_agent_and_what_it_runs(tmp_path: Path) -> None:
    path = tmp_path / "a.toml"
    path.write_text('[agent]\nname = "agent"\nprompt = "p"\n\n[window]\nenabled = false\n')
    agent = brisvox.Agent.from_file(path)
    assert agent.window.policy is None and agent.definition().window.policy is None
    assert agent != brisvox.Agent(prompt="p")

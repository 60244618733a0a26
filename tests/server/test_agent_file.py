"""Agent files: each error class with its exact file:line:column and key path."""

from __future__ import annotations

from pathlib import Path

import pytest

from brisvox.agent.interrupt import Confirm, InterruptionPolicy
from brisvox.agent.turn import Adaptive, FixedSilence
from brisvox.core.secret import Secret
from brisvox.server.agent_file import AgentFileError, load_agent_file, parse_agent_file
from brisvox.server.providers import Stage

BASE = """\
[agent]
name = "front-desk"
prompt = "You answer the phone."
"""


def problems(text: str, **kwargs: object) -> list[str]:
    with pytest.raises(AgentFileError) as info:
        parse_agent_file(text, source="agent.toml", **kwargs)  # type: ignore[arg-type]
    return [str(p) for p in info.value.problems]


def test_a_minimal_file_takes_the_defaults() -> None:
    d = parse_agent_file(BASE, source="agent.toml")
    assert (d.name, d.language, d.tools, d.greeting) == ("front-desk", "en", (), None)
    assert d.turn == Adaptive()
    assert d.interruption == InterruptionPolicy.disabled()
    assert (d.stt.provider, d.llm.provider, d.tts.provider) == ("local", "scripted", "local")
    assert not d.speculation and d.filler.enabled and d.filler.delay == 1.2


def test_a_full_file_maps_onto_the_turn_interruption_and_provider_settings() -> None:
    text = BASE + """\
language = "en-US"
tools = ["get_time", "save_note"]
confirm_tools = ["save_note"]

[turn]
policy = "fixed_silence"
silence = 0.6

[interruption]
preset = "recommended"
min_words = 2
min_speech = 0.4
confirm = "any"

[speculation]
enabled = true

[filler]
per_tool = true
model_delay = 3.5

[llm]
provider = "anthropic"
api_key_env = "MY_ANTHROPIC_KEY"

[llm.options]
model = "claude-x"
temperature = 0.2
"""
    d = parse_agent_file(text, source="agent.toml", available_tools={"get_time", "save_note"},
                         environ={"MY_ANTHROPIC_KEY": "sk-ant-1"})
    assert d.turn == FixedSilence(silence=0.6)
    assert d.interruption.min_words == 2 and d.interruption.confirm is Confirm.ANY
    assert d.interruption.echo_guard == InterruptionPolicy.recommended().echo_guard
    assert d.tools == ("get_time", "save_note") and d.confirm_tools == ("save_note",)
    assert d.speculation and d.filler.per_tool and d.filler.model_delay == 3.5
    llm = d.provider(Stage.LLM)
    assert llm.api_key == Secret("sk-ant-1") and dict(llm.options) == {"model": "claude-x", "temperature": 0.2}
    assert "sk-ant-1" not in repr(d)


def test_the_adaptive_turn_keys_map_onto_the_policy_including_the_punctuated_grace() -> None:
    text = BASE + "\n[turn]\nrequire_final = true\nfinal_grace = 0.6\npunctuated_grace = 0.25\n"
    d = parse_agent_file(text, source="agent.toml", available_tools=set(), environ={})
    assert d.turn == Adaptive(require_final=True, final_grace=0.6, punctuated_grace=0.25)
    text = BASE + "\n[turn]\npunctuated_grace = 11\n"
    assert problems(text) == ["agent.toml:6:20: turn.punctuated_grace: expected a value from 0 to 10 (got 11)"]


def test_the_min_pause_and_final_timeout_keys_set_the_policy_within_their_ranges() -> None:
    text = BASE + "\n[turn]\nmin_pause = 0.3\nfinal_timeout = 4.5\n"
    d = parse_agent_file(text, source="agent.toml", available_tools=set(), environ={})
    assert d.turn == Adaptive(min_pause=0.3, final_timeout=4.5)
    assert problems(BASE + "\n[turn]\nfinal_timeout = 31\n") == [
        "agent.toml:6:17: turn.final_timeout: expected a value from 0 to 30 (got 31)"]
    assert parse_agent_file(BASE, source="agent.toml", available_tools=set(), environ={}).turn == Adaptive()
    assert problems(BASE + "\n[turn]\nmin_pause = 11\n") == [
        "agent.toml:6:13: turn.min_pause: expected a value from 0 to 10 (got 11)"]
    assert problems(BASE + "\n[turn]\npolicy = \"fixed_silence\"\nmin_pause = 0.3\n") == [
        "agent.toml:7:1: turn.min_pause: applies only to policy = \"adaptive\""]


LLM = BASE + """
[llm]
provider = "openai"
api_key_env = "OPENAI_API_KEY"

[llm.options]
"""


def test_an_unknown_llm_option_is_reported_at_its_key_with_the_options_the_provider_takes() -> None:
    assert problems(LLM + "model = \"gpt-4o\"\ntop_k = 40\n") == [
        "agent.toml:11:1: llm.options.top_k: unknown option for llm provider 'openai' (known: model, temperature, "
        "max_tokens, base_url, reasoning_effort, parallel_tool_calls)"
    ]


def test_an_llm_temperature_out_of_range_or_of_the_wrong_type_is_reported_at_its_value() -> None:
    assert problems(LLM + "temperature = 2.5\nmax_tokens = 0\n") == [
        "agent.toml:10:15: llm.options.temperature: expected a value from 0 to 2 for llm provider 'openai', "
        "got 2.5 (a number)",
        "agent.toml:11:14: llm.options.max_tokens: expected a value from 1 to 1000000 for llm provider 'openai', got 0 (an integer)",
    ]
    assert problems(LLM + "temperature = \"warm\"\n") == [
        "agent.toml:10:15: llm.options.temperature: expected a number for llm provider 'openai', got 'warm' (a string)"
    ]


def test_the_scripted_llm_takes_no_options() -> None:
    text = BASE + "\n[llm]\nprovider = \"scripted\"\noptions = { temperature = 0.5 }\n"
    assert problems(text) == [
        "agent.toml:7:13: llm.options.temperature: unknown option for llm provider 'scripted' (it takes none)"
    ]


def test_openai_speech_needs_no_key_since_a_compatible_server_may_take_none() -> None:
    d = parse_agent_file(BASE + "\n[tts]\nprovider = \"openai\"\n", source="agent.toml", environ={})
    assert d.tts.provider == "openai" and d.tts.api_key is None


def test_a_toml_syntax_error_names_its_line_and_column() -> None:
    assert problems(BASE + "language = \n") == ["agent.toml:4:12: TOML syntax: Invalid value"]


def test_an_unknown_key_is_rejected_at_its_position_with_a_suggestion() -> None:
    text = BASE + "\n[turn]\npolicy = \"adaptive\"\nfalback_silence = 2.0\n"
    assert problems(text) == ["agent.toml:7:1: turn.falback_silence: unknown key (did you mean 'fallback_silence'?)"]


def test_an_unknown_section_is_rejected_at_its_header() -> None:
    assert problems(BASE + "\n[voice]\nthreshold = 0.5\n") == [
        "agent.toml:5:2: voice: unknown key (known keys: agent, turn, interruption, vad, speculation, filler, window, "
        "flow, agent_link, stt, llm, tts, s2s, telephony, record, tracing)"
    ]


def test_a_value_of_the_wrong_type_is_reported_at_the_value() -> None:
    text = BASE + "\n[turn]\nfallback_silence = \"2s\"\n"
    assert problems(text) == ["agent.toml:6:20: turn.fallback_silence: input should be a valid number (got '2s')"]


def test_a_wrong_type_inside_a_list_names_the_element() -> None:
    text = BASE + "tools = [\"a\",\n  7]\n"
    assert problems(text, available_tools={"a"}) == [
        "agent.toml:5:3: agent.tools[1]: input should be a valid string (got 7)"
    ]


def test_a_missing_required_key_is_reported_at_its_table() -> None:
    assert problems("# no prompt\n[agent]\nname = \"x\"\n") == ["agent.toml:2:2: agent.prompt: required key is missing"]


def test_a_missing_agent_table_is_reported_at_the_top() -> None:
    assert problems("[turn]\npolicy = \"adaptive\"\n") == ["agent.toml:1:1: agent: required key is missing"]


def test_an_out_of_range_value_is_reported_at_the_value() -> None:
    text = BASE + "\n[interruption]\nmin_speech = -0.5\n"
    assert problems(text) == [
        "agent.toml:6:14: interruption.min_speech: expected a value from 0 to 5 (got -0.5)"
    ]


def test_a_bad_choice_lists_the_choices() -> None:
    text = BASE + "\n[turn]\npolicy = \"smart\"\n"
    assert problems(text) == [
        "agent.toml:6:10: turn.policy: input should be 'adaptive' or 'fixed_silence' (got 'smart')"
    ]


def test_a_secret_written_in_the_file_is_refused() -> None:
    text = BASE + "\n[llm]\nprovider = \"openai\"\napi_key = \"sk-123\"\n"
    out = problems(text)
    assert out == ["agent.toml:7:1: llm.api_key: unknown key; secrets never go in the file: "
                   "name an environment variable with api_key_env"]
    assert "sk-123" not in "".join(out)


def test_a_secret_in_an_options_table_is_refused() -> None:
    text = BASE + "\n[tts]\nprovider = \"cartesia\"\napi_key_env = \"CARTESIA\"\noptions = { token = \"t\" }\n"
    assert problems(text) == ["agent.toml:8:13: tts.options.token: secrets never go in the file: "
                              "name an environment variable with api_key_env"]


CARTESIA = BASE + """
[tts]
provider = "cartesia"
api_key_env = "CARTESIA_API_KEY"

[tts.options]
model = "sonic-2"
"""


def test_an_unknown_option_names_its_position_key_path_and_the_known_options() -> None:
    assert problems(CARTESIA + "voce = \"abc\"\n") == [
        "agent.toml:11:1: tts.options.voce: unknown option for tts provider 'cartesia' "
        "(known: model, voice, base_url, api_version, max_buffer_delay_ms)"
    ]


def test_an_option_of_the_wrong_type_names_its_value_position_and_key_path() -> None:
    text = BASE + '\n[stt]\nprovider = "deepgram"\napi_key_env = "DG"\noptions = { smart_format = "yes" }\n'
    assert problems(text) == [
        "agent.toml:8:28: stt.options.smart_format: expected a boolean for stt provider 'deepgram', "
        "got 'yes' (a string)"
    ]


def test_a_boolean_is_not_an_integer_option_and_an_integer_is_a_number_option() -> None:
    assert problems(CARTESIA + "max_buffer_delay_ms = true\n") == [
        "agent.toml:11:23: tts.options.max_buffer_delay_ms: expected an integer for tts provider 'cartesia', "
        "got True (a boolean)"
    ]
    text = BASE + '\n[tts]\nprovider = "elevenlabs"\napi_key_env = "EL"\noptions = { stability = 1 }\n'
    options = parse_agent_file(text, source="agent.toml").tts.options
    assert options["stability"] == 1.0 and isinstance(options["stability"], float)


def test_the_local_stt_takes_a_prompt_and_its_early_decode_settings_and_the_local_tts_no_options() -> None:
    text = BASE + '\n[stt]\nprovider = "local"\noptions = { model = "tiny" }\n'
    assert problems(text) == ["agent.toml:7:13: stt.options.model: unknown option for stt provider 'local' "
                              "(known: prompt, trailing_quiet, partial_every)"]
    d = parse_agent_file(BASE + '\n[stt]\nprovider = "local"\noptions = { partial_every = 1.0, trailing_quiet = 0.1 }\n',
                         source="agent.toml")
    assert dict(d.stt.options) == {"partial_every": 1.0, "trailing_quiet": 0.1}
    text = BASE + '\n[tts]\nprovider = "local"\noptions = { voice = "heart" }\n'
    assert problems(text) == ["agent.toml:7:13: tts.options.voice: unknown option for tts provider 'local' "
                              "(it takes none)"]
    d = parse_agent_file(BASE + '\n[stt]\nprovider = "local"\noptions = { prompt = "A table for two." }\n',
                         source="agent.toml")
    assert dict(d.stt.options) == {"prompt": "A table for two."}


def test_option_problems_are_reported_together_with_the_other_problems() -> None:
    text = CARTESIA.replace('name = "front-desk"', 'name = "front-desk"\ntools = ["nope"]') + "voice = 3\n"
    assert problems(text) == [
        "agent.toml:3:10: agent.tools[0]: tool 'nope' is not provided by this server (this server provides "
        "no tools; register Python tools with brisvox.run_with_tools)",
        "agent.toml:12:9: tts.options.voice: expected a string for tts provider 'cartesia', got 3 (an integer)",
    ]


def test_cross_field_problems_are_reported_together_in_file_order() -> None:
    text = BASE + """\
tools = ["get_time", "get_time"]
confirm_tools = ["book_table"]

[turn]
policy = "fixed_silence"
final_grace = 0.5

[interruption]
backchannel_cap = 1.0

[filler]
per_tool = true
delay = 0.5

[stt]
provider = "deepgram"

[tts]
provider = "local"
api_key_env = "TTS_KEY"
"""
    assert problems(text, available_tools={"get_time"}) == [
        "agent.toml:4:22: agent.tools[1]: tool 'get_time' is listed twice",
        "agent.toml:5:18: agent.confirm_tools[0]: tool 'book_table' is not in agent.tools",
        "agent.toml:9:1: turn.final_grace: applies only to policy = \"adaptive\"",
        "agent.toml:12:1: interruption.backchannel_cap: has no effect without backchannels",
        "agent.toml:16:1: filler.delay: per_tool = true uses each tool's own delay; remove delay",
        "agent.toml:19:1: stt.provider: stt provider 'deepgram' needs a key: name the environment variable "
        "that holds it with api_key_env (for example api_key_env = \"DEEPGRAM_API_KEY\")",
        "agent.toml:23:1: tts.api_key_env: tts provider 'local' takes no key",
    ]


def test_a_tool_the_server_does_not_provide_stops_the_load_at_its_position() -> None:
    text = BASE + "tools = [\n  \"get_time\",\n  \"transfer_call\",\n]\n"
    assert problems(text, available_tools={"get_time", "save_note"}) == [
        "agent.toml:6:3: agent.tools[1]: tool 'transfer_call' is not provided by this server "
        "(this server provides: get_time, save_note; register Python tools with brisvox.run_with_tools)"
    ]


def test_an_unknown_provider_and_an_unspoken_language_are_reported_at_the_provider() -> None:
    text = BASE + "language = \"tr\"\n\n[stt]\nprovider = \"local\"\n\n[llm]\nprovider = \"gpt\"\n"
    assert problems(text) == [
        "agent.toml:7:12: stt.provider: stt provider 'local' does not speak 'tr' (it speaks en)",
        "agent.toml:10:12: llm.provider: unknown llm provider 'gpt' (known: auto, scripted, mock, local, openai, "
        "openrouter, ollama, vllm, anthropic, gemini)",
    ]


def test_a_key_variable_that_is_not_set_is_reported_when_the_environment_is_checked() -> None:
    text = BASE + "\n[llm]\nprovider = \"openai\"\napi_key_env = \"OPENAI_KEY_FOR_TEST\"\n"
    assert parse_agent_file(text, source="agent.toml").llm.api_key is None  # offline: not checked
    assert problems(text, environ={}) == [
        "agent.toml:7:15: llm.api_key_env: environment variable OPENAI_KEY_FOR_TEST is not set"
    ]


def test_a_bad_variable_name_and_a_bad_language_tag_are_reported_at_their_values() -> None:
    text = BASE + "language = \"English\"\n\n[llm]\nprovider = \"openai\"\napi_key_env = \"sk-live-abc\"\n"
    assert problems(text) == [
        "agent.toml:4:12: agent.language: expected a language tag such as 'en' or 'tr-TR', got 'English'",
        "agent.toml:8:15: llm.api_key_env: expected an environment variable name (A-Z, 0-9, _), got 'sk-live-abc'",
    ]


def test_load_agent_file_names_the_file_and_an_unreadable_file_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(BASE + "colour = 1\n")
    with pytest.raises(AgentFileError) as info:
        load_agent_file(path)
    assert str(info.value) == f"{path}:4:1: agent.colour: unknown key (known keys: name, prompt, language, " \
                              "greeting, tools, confirm_tools)"
    with pytest.raises(AgentFileError, match="cannot read the file"):
        load_agent_file(tmp_path / "missing.toml")


def test_filler_phrases_must_say_something_and_mean_nothing_with_fillers_off() -> None:
    text = BASE + "\n[filler]\nenabled = false\nphrases = [\"One moment.\", \"  \"]\n"
    found = problems(text)
    assert any("filler.phrases[1]: a filler phrase must say something" in p for p in found), found
    assert any("filler.phrases: has no effect with enabled = false" in p for p in found), found


def test_filler_at_call_reaches_the_filler_config_and_means_nothing_with_fillers_off() -> None:
    assert parse_agent_file(BASE + "\n[filler]\nat_call = true\n", source="agent.toml").filler.at_call
    assert not parse_agent_file(BASE, source="agent.toml").filler.at_call
    found = problems(BASE + "\n[filler]\nenabled = false\nat_call = true\n")
    assert any("filler.at_call: has no effect with enabled = false" in p for p in found), found


def test_non_finite_and_absurd_numbers_are_refused_with_their_position_and_the_allowed_range() -> None:
    text = BASE + "\n[turn]\nfallback_silence = 1e308\nfinal_grace = nan\n\n[filler]\ndelay = inf\n"
    assert problems(text) == [
        "agent.toml:6:20: turn.fallback_silence: expected a value from 0 to 30 (got 1e+308)",
        "agent.toml:7:15: turn.final_grace: expected a value from 0 to 10 (got nan)",
        "agent.toml:10:9: filler.delay: expected a value from 0 to 30 (got inf)",
    ]
    assert problems(BASE + "\n[interruption]\nmin_words = 1000\n") == [
        "agent.toml:6:13: interruption.min_words: expected a value from 0 to 20 (got 1000)"]


def test_a_provider_option_that_is_not_finite_is_refused_with_its_range() -> None:
    text = BASE + '\n[stt]\nprovider = "deepgram"\napi_key_env = "K"\noptions = { keepalive_interval = inf }\n'
    assert problems(text) == [
        "agent.toml:8:34: stt.options.keepalive_interval: expected a value from 1 to 9 for stt provider 'deepgram', "
        "got inf (a number)"]


def test_every_numeric_key_of_every_section_has_an_allowed_range() -> None:
    from brisvox.server._section import Section

    with pytest.raises(TypeError, match=r"_Window\.seconds is a number without an allowed range"):
        type("_Window", (Section,), {"__annotations__": {"seconds": float}, "seconds": 1.0})


def test_deeply_nested_inline_tables_are_refused_at_the_bracket_that_goes_too_deep() -> None:
    text = BASE + "x = " + "{a = " * 340 + "1" + "}" * 340 + "\n"
    assert problems(text) == [
        "agent.toml:4:105: TOML: arrays and inline tables nested more than 20 deep"]


def test_a_syntax_error_at_the_end_of_the_file_has_its_line_and_column() -> None:
    assert problems(BASE + "greeting = ") == ["agent.toml:4:12: TOML syntax: Invalid value"]
    assert problems(BASE + 'greeting = "hello') == ["agent.toml:4:18: TOML syntax: Unterminated string"]


def test_a_file_that_is_not_utf8_is_reported_at_the_bad_byte(tmp_path: Path) -> None:
    f = tmp_path / "agent.toml"
    f.write_bytes(BASE.encode() + b'greeting = "caf\xe9"\n')
    with pytest.raises(AgentFileError) as info:
        load_agent_file(f)
    assert [str(p) for p in info.value.problems] == [
        f"{f}:4:16: not UTF-8 text: byte 0xe9 (invalid continuation byte)"]


def test_the_vad_section_sets_the_detectors_timing_and_leaves_the_rest_at_its_defaults() -> None:
    d = parse_agent_file(BASE + "\n[vad]\nthreshold = 0.7\nhysteresis = 0\nmin_silence = 0.192\n", source="agent.toml")
    assert dict(d.vad) == {"threshold": 0.7, "hysteresis": 0.0, "min_silence": 0.192}
    assert dict(parse_agent_file(BASE, source="agent.toml").vad) == {}


def test_the_vad_silence_skip_can_be_turned_off() -> None:
    assert dict(parse_agent_file(BASE + "\n[vad]\nskip_silence = false\n", source="agent.toml").vad) == {
        "skip_silence": False}
    assert problems(BASE + "\n[vad]\nskip_silence = 0\n")[0].startswith("agent.toml:6:16: vad.skip_silence:")


def test_a_vad_hysteresis_not_below_the_threshold_is_refused_at_its_key() -> None:
    assert problems(BASE + "\n[vad]\nthreshold = 0.3\nhysteresis = 0.3\n") == [
        "agent.toml:7:1: vad.hysteresis: VAD hysteresis must be in [0, threshold), got 0.3"]


def test_a_vad_value_out_of_its_range_or_an_unknown_vad_key_is_refused() -> None:
    assert problems(BASE + "\n[vad]\nmin_silence = 6.0\nstop_secs = 0.2\n") == [
        "agent.toml:6:15: vad.min_silence: expected a value from 0 to 5 (got 6.0)",
        "agent.toml:7:1: vad.stop_secs: unknown key (known keys: threshold, hysteresis, min_speech, min_silence, "
        "skip_silence)",
    ]

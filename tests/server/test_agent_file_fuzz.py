"""The agent-file parser is a wire parser: whatever bytes it is given, it answers with an
AgentDefinition or an AgentFileError whose problems carry a line and a column, never with
another exception (a RecursionError, a KeyError in a check, an OverflowError)."""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from brisvox.server.agent_file import AgentDefinition, AgentFileError, load_agent_file, parse_agent_file
from brisvox.server.demo import DEMO_AGENT_FILE

TOOLS = frozenset({"get_time", "save_note"})
ENVIRON = {"OPENAI_API_KEY": "sk-fuzz-0123456789", "DG": "dg-fuzz-0123456789"}

COMPLETE = """\
[agent]
name = "note-taker"
prompt = \"\"\"
You are a friendly assistant on the phone. Keep answers short.
\"\"\"
language = "en"
greeting = "Hi! How can I help?"
tools = ["get_time", "save_note"]
confirm_tools = ["save_note"]

[turn]
policy = "adaptive"
fallback_silence = 3.0
require_final = false
final_grace = 0.8

[interruption]
preset = "recommended"
min_speech = 0.3
min_words = 0
echo_guard = 0.4
echo_min_words = 1
transcript_wait = 0.35
backchannels = ["english", "turkish"]
backchannel_cap = 1.5
vad_hangover = 0.1

[speculation]
enabled = false

[filler]
enabled = true
delay = 1.2
phrases = ["One moment, please."]
prerender = false

[stt]
provider = "deepgram"
api_key_env = "DG"
options = { model = "nova-3", endpointing_ms = 250, smart_format = true }

[llm]
provider = "openai"
api_key_env = "OPENAI_API_KEY"

[llm.options]
model = "gpt-4o-mini"
temperature = 0.3
max_tokens = 200

[tts]
provider = "local"
"""
SEEDS = (COMPLETE, DEMO_AGENT_FILE.read_text(encoding="utf-8"))

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def check(text: str) -> None:
    """The parser's contract on ``text``."""
    try:
        result = parse_agent_file(text, source="fuzz.toml", available_tools=TOOLS, environ=ENVIRON)
    except AgentFileError as exc:
        assert exc.problems
        lines = text.count("\n") + 1
        for p in exc.problems:
            assert 1 <= p.line <= lines and p.column >= 1, str(p)
            assert str(p).startswith(f"fuzz.toml:{p.line}:{p.column}: ")
        return
    assert isinstance(result, AgentDefinition)
    assert math.isfinite(result.filler.delay)


@FUZZ
@given(st.text())
def test_arbitrary_text_gives_a_definition_or_problems_with_positions(text: str) -> None:
    check(text)


@FUZZ
@given(st.binary())
def test_arbitrary_bytes_give_a_definition_or_problems_with_positions(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "fuzz.toml"
        path.write_bytes(data)
        try:
            load_agent_file(path, available_tools=TOOLS, environ=ENVIRON)
        except AgentFileError as exc:
            assert all(p.line >= 1 and p.column >= 1 for p in exc.problems), exc.problems


_WEIRD_VALUES = ("inf", "-inf", "nan", "1e308", "-1e308", "9223372036854775807", "-9223372036854775808", "0",
                 "-1", "1e-320", "true", '"3"', "[]", "{}", "[[[[1]]]]", "{ a = { b = 1 } }", "1979-05-27T07:32:00Z",
                 '"""x"""', "0x7fffffffffffffff", "+0.0")


@st.composite
def mutated(draw: st.DrawFn) -> str:
    """A valid file with a few edits: a value swapped for an odd one, a slice cut or repeated,
    a random snippet or bracket run spliced in."""
    text = draw(st.sampled_from(SEEDS))
    for _ in range(draw(st.integers(1, 4))):
        lines = text.split("\n")
        kind = draw(st.integers(0, 4))
        at = draw(st.integers(0, len(text)))
        if kind == 0:
            i = draw(st.integers(0, len(lines) - 1))
            if "=" in lines[i]:
                key = lines[i].split("=", 1)[0]
                depth = draw(st.sampled_from((2, 21, 400, 1000)))
                nested = draw(st.sampled_from(["[" * depth + "]" * depth, "{a=" * depth + "1" + "}" * depth]))
                lines[i] = f"{key}= {draw(st.sampled_from((*_WEIRD_VALUES, nested)))}"
            text = "\n".join(lines)
        elif kind == 1:
            end = draw(st.integers(at, min(len(text), at + 40)))
            text = text[:at] + text[end:]
        elif kind == 2:
            end = draw(st.integers(at, min(len(text), at + 40)))
            text = text[:end] + text[at:end] + text[end:]
        elif kind == 3:
            text = text[:at] + draw(st.text(alphabet=st.sampled_from('[]{}="\'#,.\n =x1\\'), max_size=12)) + text[at:]
        else:
            depth = draw(st.integers(1, 30) | st.integers(300, 1000))
            opener = draw(st.sampled_from(["[", "{a=", "[{a=["]))
            text = text[:at] + opener * depth + text[at:]
    return text


@FUZZ
@given(mutated())
def test_mutated_valid_files_give_a_definition_or_problems_with_positions(text: str) -> None:
    check(text)


_KEYS = st.sampled_from(["agent", "name", "prompt", "tools", "turn", "policy", "silence", "fallback_silence", "llm",
                         "provider", "options", "api_key_env", "filler", "delay", "phrases", "interruption",
                         "min_words", "backchannels", "stt", "tts", "model", "temperature", "x y", "é", ""])
_SCALARS = st.one_of(
    st.booleans(), st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20),
    st.sampled_from(["adaptive", "fixed_silence", "openai", "auto", "scripted", "local", "english", "OPENAI_API_KEY"]),
)


_ESCAPES = {'"': '\\"', "\\": "\\\\"}


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf") if math.isinf(value) else repr(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return '"' + "".join(_ESCAPES.get(c) or (f"\\u{ord(c):04x}" if ord(c) < 0x20 or ord(c) == 0x7F else c)
                             for c in value) + '"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    assert isinstance(value, dict)
    return "{" + ", ".join(f"{_toml(k)} = {_toml(v)}" for k, v in value.items()) + "}"


_TREES = st.recursive(_SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_KEYS, inner, max_size=4),
                      max_leaves=20)


@FUZZ
@given(st.dictionaries(_KEYS, _TREES, max_size=6))
def test_well_formed_toml_of_any_shape_gives_a_definition_or_problems_with_positions(tree: dict[str, object]) -> None:
    check("\n".join(f"{_toml(k)} = {_toml(v)}" for k, v in tree.items()) + "\n")

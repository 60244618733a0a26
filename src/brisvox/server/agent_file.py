"""Agent files: one TOML file per agent, checked completely before a call can use it.

:func:`load_agent_file` reads a file and returns an :class:`AgentDefinition`, or raises
:class:`AgentFileError` listing *every* problem found, each as
``file:line:column: key.path: message``.  Checks, in order:

1. TOML syntax (``tomllib``; the position comes from its message).
2. Shape: unknown keys, wrong types, missing required keys, bad values (pydantic models
   with ``extra="forbid"`` and strict types; each error's location is a key path, and
   :mod:`brisvox.server._toml_positions` turns it into a line and column).
3. Cross-field checks, all reported together: keys that only apply to another policy,
   ``confirm_tools`` outside ``tools``, duplicated tools, a provider unknown for its
   stage or not speaking the agent's language, a provider that needs a key without
   ``api_key_env`` (or one that takes none with it), an option the provider does not take,
   a value of the wrong type or out of range (``ProviderEntry.options`` and ``bounds``).
4. Tools: each listed tool must be one the server provides (``available_tools``); a
   missing one is reported at its position in the list.
5. Secrets: with ``environ`` given, each ``api_key_env`` must name a set variable; its
   value becomes a :class:`~brisvox.core.secret.Secret`.  A secret written in the file
   itself is refused (there is no key for it).

The format is documented in docs/CONFIG.md.
"""

from __future__ import annotations

import difflib
import math
import re
import tomllib
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, ValidationError

from brisvox.agent.guards import ThinkBudget
from brisvox.agent.interrupt import BackchannelSet, Confirm, InterruptionPolicy
from brisvox.agent.tools.filler import (
    DEFAULT_FILLER_DELAY,
    DEFAULT_FILLER_TEXT,
    DEFAULT_MODEL_FILLER_DELAY,
    FillerConfig,
)
from brisvox.agent.tools.spec import ToolKind
from brisvox.agent.turn import (
    DEFAULT_FALLBACK_SILENCE,
    DEFAULT_FINAL_GRACE,
    DEFAULT_FINAL_TIMEOUT,
    DEFAULT_MIN_PAUSE,
    DEFAULT_PUNCTUATED_GRACE,
    Adaptive,
    FixedSilence,
    TurnPolicy,
)
from brisvox.core.errors import ConfigError
from brisvox.core.secret import Secret
from brisvox.engine.hooks import Hook
from brisvox.engine.phone import CARRIER_TIMEOUT
from brisvox.inference.vad import VadParams
from brisvox.providers.choice import CASCADE, ProviderChoice
from brisvox.providers.s2s import BargeIn, S2sPolicy
from brisvox.recording.format import RecordSettings
from brisvox.server._section import Section, in_bounds, range_text
from brisvox.server._toml_positions import KeyPath, Positions, end_position, excess_nesting, index_positions
from brisvox.server.agent_flow import (
    FlowSection,
    FlowSettings,
    WindowSection,
    WindowSettings,
    flow_settings,
    window_settings,
)
from brisvox.server.agent_link import AgentLinkConfig
from brisvox.server.carriers import TELNYX_API, TWILIO_API, TelephonySettings, check_destination
from brisvox.server.providers import (
    DEFAULT_PROVIDERS,
    Bounds,
    KeyUse,
    OptionType,
    ProviderEntry,
    Stage,
    lookup,
    names,
)

__all__ = [
    "AgentDefinition",
    "AgentFileError",
    "Problem",
    "ProviderChoice",
    "load_agent_file",
    "parse_agent_file",
    "parse_agent_table",
]


MAX_NESTING = 20
"""Arrays and inline tables nested deeper than this are refused before parsing (an agent file
needs three or four levels; ``tomllib`` recurses, and a few hundred end in a RecursionError)."""

_ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]*")
_LANGUAGE = re.compile(r"[a-z]{2,3}(-[A-Za-z0-9]{2,8})*")
_SECRET_KEYS = frozenset({"api_key", "apikey", "key", "token", "secret", "password", "auth_token"})
_BACKCHANNELS = {"english": BackchannelSet.english, "turkish": BackchannelSet.turkish}


# --- errors --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Problem:
    """One problem in an agent file; ``key`` is a dotted key path (``agent.tools[2]``), "" for the file."""

    file: str
    line: int
    column: int
    key: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}:{self.column}" if self.line else self.file
        return f"{where}: {self.key}: {self.message}" if self.key else f"{where}: {self.message}"


class AgentFileError(ConfigError):
    """An agent file is invalid; ``problems`` holds every problem, in file order."""

    def __init__(self, problems: list[Problem]) -> None:
        ordered = sorted(problems, key=lambda p: (p.line, p.column, p.key))
        super().__init__("\n".join(str(p) for p in ordered))
        self.problems = tuple(ordered)


def _dotted(path: KeyPath) -> str:
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            text = part if re.fullmatch(r"[A-Za-z0-9_-]+", part) else f'"{part}"'
            out = f"{out}.{text}" if out else text
    return out


# --- the file's shape ------------------------------------------------------------------------


class _Agent(Section):
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")
    prompt: str = Field(min_length=1)
    language: str = "en"
    greeting: str | None = None
    tools: list[str] = Field(default_factory=list)
    confirm_tools: list[str] = Field(default_factory=list)


class _Turn(Section):
    ranges = MappingProxyType({"silence": (0.0, 10.0), "fallback_silence": (0.0, 30.0), "final_grace": (0.0, 10.0),
                                "punctuated_grace": (0.0, 10.0), "min_pause": (0.0, 10.0),
                                "final_timeout": (0.0, 30.0)})
    policy: Literal["adaptive", "fixed_silence"] = "adaptive"
    silence: float | None = None
    fallback_silence: float | None = None
    require_final: bool | None = None
    final_grace: float | None = None
    punctuated_grace: float | None = None
    min_pause: float | None = None
    final_timeout: float | None = None


class _Interruption(Section):
    ranges = MappingProxyType({
        "min_speech": (0.0, 5.0), "min_words": (0, 20), "echo_guard": (0.0, 5.0), "echo_min_words": (0, 20),
        "transcript_wait": (0.0, 5.0), "backchannel_cap": (0.0, 10.0), "vad_hangover": (0.0, 2.0),
    })
    preset: Literal["disabled", "recommended"] = "disabled"
    min_speech: float | None = None
    min_words: int | None = None
    confirm: Literal["all", "any"] | None = None
    echo_guard: float | None = None
    echo_min_words: int | None = None
    transcript_wait: float | None = None
    backchannels: list[Literal["english", "turkish"]] | None = None
    backchannel_cap: float | None = None
    vad_hangover: float | None = None


class _Vad(Section):
    ranges = MappingProxyType({"threshold": (0.05, 1.0), "hysteresis": (0.0, 0.5), "min_speech": (0.0, 2.0),
                               "min_silence": (0.0, 5.0)})
    threshold: float | None = None
    hysteresis: float | None = None
    min_speech: float | None = None
    min_silence: float | None = None
    skip_silence: bool | None = None


class _Speculation(Section):
    enabled: bool = False


class _Filler(Section):
    ranges = MappingProxyType({"delay": (0.0, 30.0), "model_delay": (0.0, 30.0)})
    enabled: bool = True
    delay: float | None = None
    model_delay: float | None = None
    per_tool: bool = False
    phrases: list[Annotated[str, Field(min_length=1, max_length=200)]] | None = Field(default=None, min_length=1)
    prerender: bool | None = None
    at_call: bool | None = None


class _AgentLink(Section):
    # first_line stays under the engine's 8 s first-token deadline: the agent file's model,
    # answering a reply the agent missed, has the rest of it.
    ranges = MappingProxyType({"connect_timeout": (0.1, 30.0), "ready_timeout": (0.1, 30.0),
                               "reopen_attempts": (0, 100), "first_line": (0.1, 6.0)})
    url: str = Field(pattern=r"^wss?://[^\s/]+(/\S*)?$", max_length=2048)
    connect_timeout: float = 5.0
    ready_timeout: float = 5.0
    reopen_attempts: int = 5
    first_line: float = 3.0


class _Provider(Section):
    provider: str = Field(min_length=1)
    api_key_env: str | None = None
    options: dict[str, Any] = Field(default_factory=dict)


class _Telephony(Section):
    ranges = MappingProxyType({"timeout": (0.1, 30.0)})
    twilio_account_sid_env: str | None = None
    twilio_auth_token_env: str | None = None
    telnyx_api_key_env: str | None = None
    twilio_api_base: str = TWILIO_API
    telnyx_api_base: str = TELNYX_API
    timeout: float = CARRIER_TIMEOUT
    transfer_to: list[str] = Field(default_factory=list)


class _S2s(_Provider):
    ranges = MappingProxyType({"think_budget": (0.0, 120.0)})
    barge_in: Literal["model", "ours"] = "model"
    think_budget: float | None = None  # seconds; 0: the model waits for every result


class _Record(Section):
    ranges = MappingProxyType({"keep": (1, 1_000_000)})
    enabled: bool = False
    dir: str = Field(default="recordings", min_length=1)
    keep: int = 100


class _Tracing(Section):
    tool_arguments: bool = False  # the tool-call spans carry the call's arguments (they may hold caller data)


class _File(Section):
    agent: _Agent
    turn: _Turn = _Turn()
    interruption: _Interruption = _Interruption()
    vad: _Vad = _Vad()
    speculation: _Speculation = _Speculation()
    filler: _Filler = _Filler()
    window: WindowSection = WindowSection()
    flow: FlowSection | None = None
    agent_link: _AgentLink | None = None
    stt: _Provider | None = None
    llm: _Provider | None = None
    tts: _Provider | None = None
    s2s: _S2s | None = None
    telephony: _Telephony | None = None
    record: _Record = _Record()
    tracing: _Tracing = _Tracing()


_SECTIONS = tuple(_File.model_fields)


# --- the result ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AgentDefinition:
    """A checked agent file."""

    source: Path
    name: str
    prompt: str
    language: str
    greeting: str | None
    tools: tuple[str, ...]
    confirm_tools: tuple[str, ...]
    turn: TurnPolicy
    interruption: InterruptionPolicy
    speculation: bool
    filler: FillerConfig  # the [filler] section, as the engine takes it
    stt: ProviderChoice
    llm: ProviderChoice
    tts: ProviderChoice
    window: WindowSettings = field(default_factory=WindowSettings)
    flow: FlowSettings | None = None  # the call runs as this flow (the prompt is its role)
    # The [vad] keys the file set (VadParams field -> value); the rest keep the detector's defaults.
    vad: Mapping[str, float | bool] = field(default_factory=lambda: MappingProxyType({}))
    hooks: tuple[Hook, ...] = ()  # custom processing (brisvox.Agent's; a file has none)
    s2s: ProviderChoice | None = None  # a speech-to-speech model in place of stt, llm and tts
    s2s_policy: S2sPolicy = field(default_factory=S2sPolicy)
    telephony: TelephonySettings | None = None  # [telephony]: the carriers' credentials for the telephony tools
    record: RecordSettings | None = None  # [record] enabled: each call is written to a file (caller audio too)
    trace_tool_arguments: bool = False  # [tracing] tool_arguments: the traces' tool spans carry the arguments
    agent_link: AgentLinkConfig | None = None  # the agent process each call links to (docs/AGENT_PROTOCOL.md)

    def provider(self, stage: Stage) -> ProviderChoice:
        return {Stage.STT: self.stt, Stage.LLM: self.llm, Stage.TTS: self.tts}[stage]


# --- loading ---------------------------------------------------------------------------------


class _Report:
    def __init__(self, file: str, positions: Positions) -> None:
        self.file = file
        self.positions = positions
        self.problems: list[Problem] = []

    def at_key(self, path: KeyPath, message: str) -> None:
        pos = self.positions.key(path)
        self.problems.append(Problem(self.file, pos.line, pos.column, _dotted(path), message))

    def missing(self, path: KeyPath) -> None:
        pos = self.positions.key(path[:-1])
        self.problems.append(Problem(self.file, pos.line, pos.column, _dotted(path), "required key is missing"))

    def at_value(self, path: KeyPath, message: str) -> None:
        pos = self.positions.value(path)
        self.problems.append(Problem(self.file, pos.line, pos.column, _dotted(path), message))


def load_agent_file(
    path: str | Path,
    *,
    available_tools: Collection[str] = (),
    environ: Mapping[str, str] | None = None,
) -> AgentDefinition:
    """Read and check the agent file at ``path`` (see the module docs)."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise AgentFileError([Problem(str(p), 0, 0, "", f"cannot read the file: {exc}")]) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        at = end_position(data[: exc.start].decode("utf-8"))
        raise AgentFileError([Problem(str(p), at.line, at.column, "",
                                      f"not UTF-8 text: byte 0x{data[exc.start]:02x} ({exc.reason})")]) from None
    return parse_agent_file(text, source=p, available_tools=available_tools, environ=environ)


def parse_agent_file(
    text: str,
    *,
    source: str | Path = "<agent file>",
    available_tools: Collection[str] = (),
    environ: Mapping[str, str] | None = None,
) -> AgentDefinition:
    """Check the agent file ``text`` (named ``source`` in errors); see :func:`load_agent_file`."""
    file = str(source)
    if (deep := excess_nesting(text, MAX_NESTING)) is not None:
        raise AgentFileError([Problem(file, deep.line, deep.column, "",
                                      f"TOML: arrays and inline tables nested more than {MAX_NESTING} deep")])
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        m = re.search(r"\(at line (\d+), column (\d+)\)", str(exc))
        # tomllib gives no line and column for an error at the end of the document: that is where it is.
        at = end_position(text)
        line, col = (int(m.group(1)), int(m.group(2))) if m else (at.line, at.column)
        msg = re.sub(r"\s*\(at (line \d+, column \d+|end of document)\)", "", str(exc))
        raise AgentFileError([Problem(file, line, col, "", f"TOML syntax: {msg}")]) from None
    return parse_agent_table(raw, source=source, positions=index_positions(text), available_tools=available_tools,
                             environ=environ)


def parse_agent_table(
    raw: dict[str, Any],
    *,
    source: str | Path,
    positions: Positions | None = None,
    available_tools: Collection[str] = (),
    environ: Mapping[str, str] | None = None,
) -> AgentDefinition:
    """Check an agent file's parsed table (what ``tomllib`` gives; :class:`brisvox.Agent` builds
    one from its fields, so a Python agent is checked by the same code as a file)."""
    report = _Report(str(source), positions if positions is not None else Positions())
    model = _check_shape(raw, report)
    if model is None:
        # The tool names are still checked when they are readable, so one run shows both.
        agent = raw.get("agent")
        if isinstance(agent, dict):
            tools, confirm = agent.get("tools", []), agent.get("confirm_tools", [])
            if _strings(tools) and _strings(confirm):
                _check_tools(tools, confirm, report, available_tools)
        raise AgentFileError(report.problems)
    definition = _build(model, Path(source), report, available_tools, environ)
    if report.problems:
        raise AgentFileError(report.problems)
    assert definition is not None
    return definition


def _check_shape(raw: dict[str, Any], report: _Report) -> _File | None:
    try:
        return _File.model_validate(raw)
    except ValidationError as exc:
        for err in exc.errors():
            loc: KeyPath = tuple(err["loc"])
            kind = err["type"]
            if kind == "extra_forbidden":
                report.at_key(loc, _unknown_key_message(loc, raw))
            elif kind == "missing":
                report.missing(loc)
            else:
                got = err.get("input")
                shown = f" (got {got!r})" if not isinstance(got, dict | list) else ""
                report.at_value(loc, f"{_first_lower(err['msg'])}{shown}")
        return None


def _first_lower(s: str) -> str:
    return s[:1].lower() + s[1:]


def _unknown_key_message(loc: KeyPath, raw: dict[str, Any]) -> str:
    name = str(loc[-1])
    if name.lower() in _SECRET_KEYS:
        return "unknown key; secrets never go in the file: name an environment variable with api_key_env"
    parent: BaseModel | type[BaseModel] | None = _File
    for part in loc[:-1]:
        if parent is None or isinstance(part, int):
            parent = None
            break
        info = parent.model_fields.get(str(part))
        ann = info.annotation if info is not None else None
        parent = _model_of(ann)
    known = list(parent.model_fields) if parent is not None else []
    close = difflib.get_close_matches(name, known, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else (f" (known keys: {', '.join(known)})" if known else "")
    return f"unknown key{hint}"


def _model_of(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
    return None


def _build(
    f: _File,
    source: Path,
    report: _Report,
    available_tools: Collection[str],
    environ: Mapping[str, str] | None,
) -> AgentDefinition | None:
    a = f.agent
    if not _LANGUAGE.fullmatch(a.language):
        report.at_value(("agent", "language"), f"expected a language tag such as 'en' or 'tr-TR', got {a.language!r}")
    _check_tools(a.tools, a.confirm_tools, report, available_tools)
    turn = _turn_policy(f.turn, report)
    interruption = _interruption(f.interruption, report)
    filler = _filler(f.filler, report)
    providers = {stage: _provider(stage, getattr(f, stage.value), a.language, report, environ) for stage in CASCADE}
    s2s = _provider(Stage.S2S, f.s2s, a.language, report, environ) if f.s2s is not None else None
    s2s_policy = _s2s_policy(f, report) if f.s2s is not None else S2sPolicy()
    llm_entry = lookup(Stage.LLM, providers[Stage.LLM].provider)
    takes_model = llm_entry is not None and (llm_entry.options is None or "model" in llm_entry.options)
    window = window_settings(f.window, takes_model, report.at_key)
    flow = flow_settings(f.flow, a.tools, report.at_key) if f.flow is not None else None
    telephony = _telephony(f.telephony, report, environ) if f.telephony is not None else None
    vad = MappingProxyType({k: v if isinstance(v, bool) else float(v) for k, v in f.vad.model_dump().items()
                            if v is not None})
    try:
        VadParams().updated(vad)  # the keys together: hysteresis must stay below threshold
    except ConfigError as exc:
        report.at_key(("vad", "hysteresis" if "hysteresis" in vad else "threshold"), str(exc))
    if report.problems or turn is None or interruption is None:
        return None
    return AgentDefinition(
        source=source, name=a.name, prompt=a.prompt, language=a.language, greeting=a.greeting,
        tools=tuple(a.tools), confirm_tools=tuple(a.confirm_tools), turn=turn, interruption=interruption,
        speculation=f.speculation.enabled, filler=filler,
        stt=providers[Stage.STT], llm=providers[Stage.LLM], tts=providers[Stage.TTS], window=window, flow=flow,
        s2s=s2s, s2s_policy=s2s_policy, vad=vad, telephony=telephony, record=_record(f.record, source),
        trace_tool_arguments=f.tracing.tool_arguments,
        agent_link=None if f.agent_link is None else AgentLinkConfig(
            url=f.agent_link.url, connect_timeout=f.agent_link.connect_timeout,
            ready_timeout=f.agent_link.ready_timeout, reopen_attempts=f.agent_link.reopen_attempts,
            first_line=f.agent_link.first_line),
    )


def _record(section: _Record, source: Path) -> RecordSettings | None:
    """``[record]``: a relative ``dir`` is under the agent file's directory."""
    if not section.enabled:
        return None
    where = Path(section.dir)
    return RecordSettings(dir=where if where.is_absolute() else source.parent / where, keep=section.keep)


_NOT_S2S = ("stt", "llm", "tts", "turn", "interruption", "speculation", "window", "flow", "agent_link")
"""Sections a speech-to-speech agent has no use for: its model hears, decides turns and speaks."""


def _s2s_policy(f: _File, report: _Report) -> S2sPolicy:
    for name in _NOT_S2S:
        if name in f.model_fields_set:
            report.at_key((name,), f"does not apply to a speech-to-speech agent ([s2s]): its model hears, "
                                   f"takes turns and speaks; remove [{name}] or [s2s]")
    if "telephony" in f.model_fields_set:  # no PhoneLine in run_s2s_call: the tools would answer "no phone line"
        report.at_key(("telephony",), "does not apply to a speech-to-speech agent ([s2s]): the telephony tools "
                                      "act in cascaded calls only; remove [telephony] or [s2s]")
    s = f.s2s
    assert s is not None
    budget = s.think_budget
    return S2sPolicy(barge_in=BargeIn(s.barge_in),
                     think_budget=ThinkBudget() if budget is None else (ThinkBudget(budget) if budget > 0 else None))


def _strings(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _telephony(t: _Telephony, report: _Report, environ: Mapping[str, str] | None) -> TelephonySettings:
    """``[telephony]``: variable names (set, when ``environ`` is given), http(s) base URLs, destinations."""
    for key in ("twilio_account_sid_env", "twilio_auth_token_env", "telnyx_api_key_env"):
        env = getattr(t, key)
        if env is None:
            continue
        if not _ENV_NAME.fullmatch(env):
            report.at_value(("telephony", key), f"expected an environment variable name (A-Z, 0-9, _), got {env!r}")
        elif environ is not None and not environ.get(env, ""):
            report.at_value(("telephony", key), f"environment variable {env} is not set")
    if (t.twilio_account_sid_env is None) != (t.twilio_auth_token_env is None):
        report.at_key(("telephony",), "name both twilio_account_sid_env and twilio_auth_token_env, or neither")
    for key in ("twilio_api_base", "telnyx_api_base"):
        if not re.fullmatch(r"https?://[^\s/?#]+(/[^\s?#]*)?", getattr(t, key)):
            report.at_value(("telephony", key), "expected an http(s):// base URL")
    for i, to in enumerate(t.transfer_to):
        problem = check_destination(to)
        if problem is not None:
            report.at_value(("telephony", "transfer_to", i), problem)
    return TelephonySettings(
        twilio_account_sid_env=t.twilio_account_sid_env, twilio_auth_token_env=t.twilio_auth_token_env,
        telnyx_api_key_env=t.telnyx_api_key_env, twilio_api_base=t.twilio_api_base,
        telnyx_api_base=t.telnyx_api_base, timeout=t.timeout, transfer_to=tuple(t.transfer_to),
    )


def _check_tools(tools: list[str], confirm: list[str], report: _Report, available: Collection[str]) -> None:
    kinds: Mapping[str, ToolKind] = getattr(available, "kinds", dict)()
    seen: set[str] = set()
    for i, name in enumerate(tools):
        path: KeyPath = ("agent", "tools", i)
        if name in seen:
            report.at_key(path, f"tool {name!r} is listed twice")
        seen.add(name)
        if name not in available:
            offered = f"this server provides: {', '.join(sorted(available))}" if available else \
                "this server provides no tools"
            report.at_key(path, f"tool {name!r} is not provided by this server ({offered}; register Python "
                                "tools with brisvox.run_with_tools)")
    for i, name in enumerate(confirm):
        if name not in seen:
            report.at_key(("agent", "confirm_tools", i), f"tool {name!r} is not in agent.tools")
        elif kinds.get(name) is ToolKind.READ_ONLY:
            report.at_key(("agent", "confirm_tools", i),
                          f"tool {name!r} is read-only; only side-effect tools wait for a confirmation")


def _turn_policy(t: _Turn, report: _Report) -> TurnPolicy | None:
    base: KeyPath = ("turn",)
    if t.policy == "fixed_silence":
        for key in ("fallback_silence", "require_final", "final_grace", "punctuated_grace", "min_pause",
                    "final_timeout"):
            if getattr(t, key) is not None:
                report.at_key((*base, key), "applies only to policy = \"adaptive\"")
        return FixedSilence(silence=t.silence if t.silence is not None else 0.8)
    if t.silence is not None:
        report.at_key((*base, "silence"), "applies only to policy = \"fixed_silence\"")
    return Adaptive(
        fallback_silence=t.fallback_silence if t.fallback_silence is not None else DEFAULT_FALLBACK_SILENCE,
        require_final=bool(t.require_final),
        final_grace=t.final_grace if t.final_grace is not None else DEFAULT_FINAL_GRACE,
        punctuated_grace=t.punctuated_grace if t.punctuated_grace is not None else DEFAULT_PUNCTUATED_GRACE,
        min_pause=t.min_pause if t.min_pause is not None else DEFAULT_MIN_PAUSE,
        final_timeout=t.final_timeout if t.final_timeout is not None else DEFAULT_FINAL_TIMEOUT,
    )


def _interruption(i: _Interruption, report: _Report) -> InterruptionPolicy | None:
    base: KeyPath = ("interruption",)
    start = InterruptionPolicy.recommended() if i.preset == "recommended" else InterruptionPolicy.disabled()
    backchannels = (
        tuple(_BACKCHANNELS[name]() for name in i.backchannels) if i.backchannels is not None else start.backchannels
    )
    if i.backchannel_cap is not None and not backchannels:
        report.at_key((*base, "backchannel_cap"), "has no effect without backchannels")
    echo_guard = i.echo_guard if i.echo_guard is not None else start.echo_guard
    if i.echo_min_words is not None and echo_guard == 0:
        report.at_key((*base, "echo_min_words"), "has no effect without echo_guard")
    min_speech = i.min_speech if i.min_speech is not None else start.min_speech
    min_words = i.min_words if i.min_words is not None else start.min_words
    if i.confirm is not None and (min_speech == 0 or min_words == 0):
        report.at_key((*base, "confirm"), "combines min_speech and min_words; set both")
    cap = i.backchannel_cap if i.backchannel_cap is not None else start.backchannel_cap
    if backchannels and not math.isfinite(cap):
        cap = 1.5
    try:
        return InterruptionPolicy(
            min_speech=min_speech,
            min_words=min_words,
            confirm=Confirm(i.confirm) if i.confirm is not None else start.confirm,
            echo_guard=echo_guard,
            echo_min_words=i.echo_min_words if i.echo_min_words is not None else start.echo_min_words,
            transcript_wait=i.transcript_wait if i.transcript_wait is not None else start.transcript_wait,
            backchannels=backchannels,
            backchannel_cap=cap,
            vad_hangover=i.vad_hangover if i.vad_hangover is not None else start.vad_hangover,
        )
    except ConfigError as exc:  # pragma: no cover - the shape check bounds every field
        report.at_key(base, str(exc))
        return None


def _filler(fl: _Filler, report: _Report) -> FillerConfig:
    if fl.per_tool and fl.delay is not None:
        report.at_key(("filler", "delay"), "per_tool = true uses each tool's own delay; remove delay")
    if not fl.enabled:
        for key in ("delay", "model_delay", "phrases", "prerender", "at_call"):
            if getattr(fl, key) is not None:
                report.at_key(("filler", key), "has no effect with enabled = false")
    for i, phrase in enumerate(fl.phrases or ()):
        if not phrase.strip():
            report.at_key(("filler", "phrases", i), "a filler phrase must say something")
    # Blank phrases are reported above; what is built from a file with problems is never used.
    phrases = tuple(p.strip() for p in fl.phrases if p.strip()) if fl.phrases is not None else (DEFAULT_FILLER_TEXT,)
    delay = None if fl.per_tool else (fl.delay if fl.delay is not None else DEFAULT_FILLER_DELAY)
    model_delay = fl.model_delay if fl.model_delay is not None else DEFAULT_MODEL_FILLER_DELAY
    return FillerConfig(enabled=fl.enabled, delay=delay, per_tool=fl.per_tool, phrases=phrases,
                        prerender=bool(fl.prerender), model_delay=model_delay, at_call=bool(fl.at_call))


def _provider(
    stage: Stage,
    section: _Provider | None,
    language: str,
    report: _Report,
    environ: Mapping[str, str] | None,
) -> ProviderChoice:
    base: KeyPath = (stage.value,)
    if section is None:
        return ProviderChoice(stage, DEFAULT_PROVIDERS[stage])
    entry = lookup(stage, section.provider)
    if entry is None:
        report.at_value((*base, "provider"),
                        f"unknown {stage.value} provider {section.provider!r} (known: {', '.join(names(stage))})")
        return ProviderChoice(stage, section.provider)
    primary = language.split("-", 1)[0].lower()
    if entry.languages is not None and primary not in entry.languages:
        report.at_value((*base, "provider"),
                        f"{stage.value} provider {entry.name!r} does not speak {language!r} "
                        f"(it speaks {', '.join(entry.languages)})")
    options = _options(entry, section.options, report)
    env = section.api_key_env
    secret: Secret | None = None
    if env is not None and not _ENV_NAME.fullmatch(env):
        report.at_value((*base, "api_key_env"), f"expected an environment variable name (A-Z, 0-9, _), got {env!r}")
    elif entry.key is KeyUse.REQUIRED and env is None:
        hint = f" (for example api_key_env = \"{entry.key_env_hint}\")" if entry.key_env_hint else ""
        report.at_key((*base, "provider"), f"{stage.value} provider {entry.name!r} needs a key: name the "
                                           f"environment variable that holds it with api_key_env{hint}")
    elif entry.key is KeyUse.NONE and env is not None:
        report.at_key((*base, "api_key_env"), f"{stage.value} provider {entry.name!r} takes no key")
    elif env is not None and environ is not None:
        if environ.get(env, ""):
            secret = Secret(environ[env])
        else:
            report.at_value((*base, "api_key_env"), f"environment variable {env} is not set")
    return ProviderChoice(stage, entry.name, MappingProxyType(options), env, secret)


def _options(entry: ProviderEntry, given: Mapping[str, Any], report: _Report) -> dict[str, Any]:
    """The options table checked against the entry's (an int given for a float becomes a float)."""
    base: KeyPath = (entry.stage.value, "options")
    known = entry.options
    out: dict[str, Any] = {}
    for key, value in given.items():
        path: KeyPath = (*base, key)
        if key.lower() in _SECRET_KEYS:
            report.at_key(path, "secrets never go in the file: name an environment variable with api_key_env")
            continue
        if known is None:
            if isinstance(value, dict):
                report.at_value(path, "option values are strings, numbers, booleans or arrays")
            out[key] = value
            continue
        expected = known.get(key)
        if expected is None:
            listed = f"known: {', '.join(known)}" if known else "it takes none"
            report.at_key(path, f"unknown option for {entry.stage.value} provider {entry.name!r} ({listed})")
        elif not _is_option_type(value, expected):
            report.at_value(path, f"expected {_TYPE_NAMES[expected]} for {entry.stage.value} provider "
                                  f"{entry.name!r}, got {_shown(value)}")
        elif (problem := _out_of_bounds(value, entry.bounds.get(key))) is not None:
            report.at_value(path, f"{problem} for {entry.stage.value} provider {entry.name!r}, got {_shown(value)}")
        else:
            out[key] = float(value) if expected is float else value
    return out


def _out_of_bounds(value: object, bounds: Bounds | None) -> str | None:
    """What is wrong with a numeric ``value`` outside ``bounds`` (None: it is within them)."""
    if bounds is None or not isinstance(value, int | float) or isinstance(value, bool):
        return None
    return None if in_bounds(value, bounds) else range_text(bounds)


_TYPE_NAMES: dict[type, str] = {str: "a string", int: "an integer", float: "a number", bool: "a boolean"}


def _is_option_type(value: object, expected: OptionType) -> bool:
    if isinstance(value, bool):  # bool is an int in Python, not in TOML
        return expected is bool
    if expected is float:
        return isinstance(value, int | float)
    return isinstance(value, expected)


def _shown(value: object) -> str:
    kinds = {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "an array",
             dict: "a table"}
    kind = next((name for t, name in kinds.items() if isinstance(value, t)), type(value).__name__)
    return kind if isinstance(value, list | dict) else f"{value!r} ({kind})"

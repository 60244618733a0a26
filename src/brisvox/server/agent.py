"""``brisvox.Agent``: an agent as one Python object, built in code or read from an agent file.

::

    agent = brisvox.Agent(
        name="host", prompt="You take table bookings.", greeting="Hello!",
        tools=[check_availability, book_table],
        llm=providers.OpenAI(model="gpt-4o-mini"), tts=providers.Cartesia(voice="..."),
        interruption=InterruptionPolicy.recommended(),
    )

A speech-to-speech agent names its model instead of the three stages:
``brisvox.Agent(name=..., prompt=..., s2s=providers.OpenAIRealtime(voice="marin"),
s2s_policy=S2sPolicy(barge_in=BargeIn.OURS))`` (the ``[s2s]`` section of a file).

Every field is what an agent file's section becomes (``window`` and ``flow`` are the
``[window]`` and ``[flow]`` sections as the file's parser gives them): the providers are
:class:`~brisvox.providers.choice.ProviderChoice` objects (``brisvox.providers.OpenAI(...)``),
the turn, interruption and filler policies the engine's own objects, the tools
:class:`~brisvox.tool.FunctionTool` objects, ``ui`` the screen's contract (typed UI actions and
app events, :class:`~brisvox.transport.rtvi.ui.UiContract`, docs/RTVI.md).  The constructor checks the agent with the
agent file's checks (:func:`~brisvox.server.agent_file.parse_agent_table` on the table the
fields make: name, language, tools and ``confirm_tools``, each provider against the
catalog with its options), and raises :class:`AgentError` listing every problem.
:meth:`Agent.from_file` reads a file through the same function and builds the same
object: a file and the code that says the same thing compare equal.  The key of a
provider is read from its variable when the server builds it (``brisvox check --env``
checks that each one is set).
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from brisvox.agent.interrupt import InterruptionPolicy
from brisvox.agent.tools.filler import FillerConfig
from brisvox.agent.turn import Adaptive, TurnPolicy
from brisvox.core.errors import ConfigError
from brisvox.engine.hooks import Hook
from brisvox.providers.choice import Hibari, LocalWhisper, ProviderChoice, Scripted, Stage
from brisvox.providers.s2s import S2sPolicy
from brisvox.server.agent_file import AgentDefinition, AgentFileError, load_agent_file, parse_agent_table
from brisvox.server.agent_flow import FlowSettings, WindowSettings
from brisvox.server.carriers import TelephonySettings
from brisvox.server.tools import ToolSet
from brisvox.tool import FunctionTool
from brisvox.transport.rtvi.ui import UiContract

__all__ = ["Agent", "AgentError", "import_agent", "is_agent_ref"]


class AgentError(ConfigError):
    """An agent is invalid; ``problems`` lists each one (``key.path: message``)."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = tuple(problems)


def _table(choice: ProviderChoice) -> dict[str, Any]:
    table: dict[str, Any] = {"provider": choice.provider, "options": dict(choice.options)}
    if choice.api_key_env is not None:
        table["api_key_env"] = choice.api_key_env
    return table


@dataclass(frozen=True, slots=True, kw_only=True)
class Agent:
    """An agent (see the module docs).  ``source``: the file it was read from (not compared)."""

    prompt: str
    name: str = "agent"
    greeting: str | None = None
    language: str = "en"
    tools: tuple[FunctionTool, ...] = ()
    confirm_tools: tuple[str, ...] = ()
    stt: ProviderChoice = field(default_factory=LocalWhisper)
    llm: ProviderChoice = field(default_factory=Scripted)
    tts: ProviderChoice = field(default_factory=Hibari)
    turn: TurnPolicy = field(default_factory=Adaptive)
    interruption: InterruptionPolicy = field(default_factory=InterruptionPolicy.disabled)
    filler: FillerConfig = field(default_factory=FillerConfig)
    speculation: bool = False
    window: WindowSettings = field(default_factory=WindowSettings)
    flow: FlowSettings | None = None
    hooks: tuple[Hook, ...] = ()
    s2s: ProviderChoice | None = None
    s2s_policy: S2sPolicy = field(default_factory=S2sPolicy)
    ui: UiContract | None = None
    telephony: TelephonySettings | None = None
    source: Path | None = field(default=None, compare=False)
    _definition: AgentDefinition | None = field(default=None, compare=False, repr=False, init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "tools", tuple(self.tools))
        object.__setattr__(self, "confirm_tools", tuple(self.confirm_tools))
        object.__setattr__(self, "hooks", tuple(self.hooks))
        if self.ui is not None and not isinstance(self.ui, UiContract):
            raise AgentError([f"ui: {self.ui!r} is not a UiContract (brisvox.transport.rtvi.UiContract(actions=..., "
                              "events=...))"])
        for h in self.hooks:
            if not isinstance(h, Hook):
                raise AgentError([f"hooks: {h!r} is not a Hook (brisvox.Hook(brisvox.HookPoint.BEFORE_LLM, fn))"])
        for t in self.tools:
            if not isinstance(t, FunctionTool):
                raise AgentError([f"tools: {t!r} is not a tool (declare it with @brisvox.tool.read_only or "
                                  ".side_effect)"])
            if not t.bound:
                raise AgentError([f"tools: {t.name!r} is a method: give the agent instance.{t.name}"])
        object.__setattr__(self, "_definition", self._check(None))

    def _check(self, environ: Mapping[str, str] | None) -> AgentDefinition:
        agent: dict[str, Any] = {"name": self.name, "prompt": self.prompt, "language": self.language,
                                 "tools": [t.name for t in self.tools], "confirm_tools": list(self.confirm_tools)}
        if self.greeting is not None:
            agent["greeting"] = self.greeting
        raw: dict[str, Any] = {"agent": agent}
        if self.telephony is not None:
            fields = dataclasses.asdict(self.telephony)
            raw["telephony"] = {k: list(v) if isinstance(v, tuple) else v for k, v in fields.items() if v is not None}
        source = self.source if self.source is not None else f"agent {self.name!r}"
        for stage, choice in ((Stage.STT, self.stt), (Stage.LLM, self.llm), (Stage.TTS, self.tts)):
            if not isinstance(choice, ProviderChoice) or choice.stage is not stage:
                raise AgentError([f"{stage.value}: {choice!r} is not a {stage.value} provider"])
        if self.s2s is None:
            raw |= {"stt": _table(self.stt), "llm": _table(self.llm), "tts": _table(self.tts)}
        else:
            if not isinstance(self.s2s, ProviderChoice) or self.s2s.stage is not Stage.S2S:
                raise AgentError([f"s2s: {self.s2s!r} is not a speech-to-speech provider "
                                  "(brisvox.providers.OpenAIRealtime() or GeminiLive())"])
            if (self.stt, self.llm, self.tts) != (LocalWhisper(), Scripted(), Hibari()):
                raise AgentError(["s2s: a speech-to-speech agent hears, thinks and speaks through its model: "
                                  "give it no stt, llm or tts"])
            budget = self.s2s_policy.think_budget
            raw["s2s"] = {**_table(self.s2s), "barge_in": self.s2s_policy.barge_in.value,
                          "think_budget": budget.seconds if budget is not None else 0.0}
        try:
            checked = parse_agent_table(raw, source=source, available_tools=self.toolset(), environ=environ)
        except AgentFileError as exc:
            raise AgentError([f"{p.key}: {p.message}" if p.key else p.message for p in exc.problems]) from None
        return AgentDefinition(
            source=Path(source), name=self.name, prompt=self.prompt, language=self.language, greeting=self.greeting,
            tools=checked.tools, confirm_tools=checked.confirm_tools, turn=self.turn, interruption=self.interruption,
            speculation=self.speculation, filler=self.filler, stt=checked.stt, llm=checked.llm, tts=checked.tts,
            window=self.window, flow=self.flow, hooks=self.hooks, s2s=checked.s2s, s2s_policy=checked.s2s_policy,
            telephony=checked.telephony,
        )

    @classmethod
    def from_file(cls, path: str | Path, tools: Iterable[FunctionTool] = (), hooks: Iterable[Hook] = (),
                  ui: UiContract | None = None) -> Agent:
        """The agent an agent file describes, with its listed tools taken from ``tools`` by name
        (and ``hooks``, custom processing, and ``ui``, its screen, which a file does not describe).  Raises :class:`~brisvox.server.agent_file.AgentFileError` listing every problem."""
        offered = ToolSet()
        offered.include(*tools)
        d = load_agent_file(path, available_tools=offered)
        by_name = {name: offered.tool(name) for name in offered}
        return cls(name=d.name, prompt=d.prompt, greeting=d.greeting, language=d.language,
                   tools=tuple(t for name in d.tools if isinstance(t := by_name[name], FunctionTool)),
                   confirm_tools=d.confirm_tools, stt=d.stt, llm=d.llm, tts=d.tts, turn=d.turn,
                   interruption=d.interruption, filler=d.filler, speculation=d.speculation, window=d.window,
                   flow=d.flow, hooks=tuple(hooks), s2s=d.s2s, s2s_policy=d.s2s_policy, ui=ui,
                   telephony=d.telephony,
                   source=d.source)

    def toolset(self) -> ToolSet:
        """The agent's tools as the server offers them."""
        tools = ToolSet()
        tools.include(*self.tools)
        return tools

    def definition(self) -> AgentDefinition:
        """The agent as the server runs it."""
        assert self._definition is not None  # set by __post_init__
        return self._definition

    def check(self, environ: Mapping[str, str]) -> None:
        """Also require each provider's key variable to be set in ``environ`` (``brisvox check --env``)."""
        self._check(environ)


_REF = re.compile(r"(?P<where>[A-Za-z_][\w.]*|.+\.py):(?P<name>[A-Za-z_]\w*)")


def import_file(path: Path) -> ModuleType:
    """The Python file at ``path`` imported as the module named by its stem (registered in
    ``sys.modules``, so its annotations, the tools' schemas, resolve through it)."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None  # a .py file always has both
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module


def is_agent_ref(text: str) -> bool:
    """Whether ``text`` names a Python agent (``module:name`` or ``path/to/file.py:name``), not an agent file."""
    return _REF.fullmatch(text) is not None


def import_agent(ref: str) -> Agent:
    """The :class:`Agent` that ``ref`` names: ``module:name`` (the module imported with the
    current directory on the path, as ``python -m`` does) or ``path/to/file.py:name``;
    ``name`` is an Agent or a function of no arguments that returns one.  Raises
    :class:`AgentError` saying what is missing."""
    match = _REF.fullmatch(ref)
    if match is None:
        raise AgentError([f"{ref!r} names no Python agent: write module:name or path/to/file.py:name"])
    where, name = match["where"], match["name"]
    try:
        if where.endswith(".py"):
            path = Path(where).resolve()
            if not path.is_file():
                raise AgentError([f"{ref}: no file {where}"])
            module = import_file(path)
        else:
            if "" not in sys.path and str(Path.cwd()) not in sys.path:
                sys.path.insert(0, str(Path.cwd()))
            module = importlib.import_module(where)
    except ModuleNotFoundError as exc:
        raise AgentError([f"{ref}: cannot import {exc.name!r} ({exc})"]) from None
    found = getattr(module, name, None)
    if found is None:
        raise AgentError([f"{ref}: {where} has no {name!r}"])
    if not isinstance(found, Agent) and callable(found):
        found = found()
    if not isinstance(found, Agent):
        raise AgentError([f"{ref}: {name} is {type(found).__name__}, not a brisvox.Agent (or a function "
                          "that returns one)"])
    return found

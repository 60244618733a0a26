"""Filler policy: when a tool round is slow, what the agent says so the line is not silent.

Pure: the caller (the LLM runner) measures the delay on its injected clock from the
start of the tool round and calls :meth:`FillerPolicy.choose` when it passes.

* **Delay.** By default one fixed delay for every tool (:data:`DEFAULT_FILLER_DELAY`,
  1.2 s): the caller hears the same silence whatever runs, and a lookup that answers
  within about a second does not start a filler its answer would cut off.  A tool opts
  out with ``filler_after=None``; under the fixed delay its own value is only the on/off
  switch.  :meth:`FillerPolicy.per_tool` uses each tool's ``filler_after`` as its delay.
  A round with several calls fills after the smallest delay of its calls (ties: the
  first call).
* **Slow model rounds.** A model request whose first token has not come ``model_delay``
  seconds after it was sent gets a filler too (the generic phrases; :meth:`FillerPolicy.choose`
  with ``tool=""``), so a slow local model is not heard as a dead line; ``None``: never.
* **At the call** (``at_call``, off by default).  A model round whose first event names a
  call gets its filler at once, the tool's phrases (the tool must allow fillers): a local
  model writes the call for 3 to 6 s and reads its result for 2 to 3 s more, so the caller
  hears the acknowledgement when the model decides, as a person says it; a text round says
  nothing extra.  Off by default: with a quick cloud model and a quick tool the answer
  comes before any filler would have.
* **Once a turn.** The runner speaks at most one filler in a turn, whatever kind.
* **Phrases.** A generic list and per-tool lists rotate round-robin (no randomness, so
  simulations stay deterministic); only a filler actually chosen advances a rotation.
  A copy made with :meth:`FillerPolicy.clone` (or any ``with_*``) starts its own
  rotation and shares only the clip cache.
* **Clips.** A phrase may name a pre-rendered clip; the key reaches the choice only
  when the clip cache reports it available.

:class:`FillerConfig` is the one filler configuration (the engine's ``LlmConfig.filler``,
and what an agent file's ``[filler]`` section parses to); :meth:`FillerPolicy.from_config`
builds the per-call policy from it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar, Protocol, runtime_checkable

from brisvox.agent.tools.spec import ToolSpec
from brisvox.core.errors import ConfigError

__all__ = [
    "DEFAULT_FILLER_DELAY",
    "DEFAULT_FILLER_TEXT",
    "DEFAULT_MODEL_FILLER_DELAY",
    "FillerChoice",
    "FillerClips",
    "FillerConfig",
    "FillerPhrase",
    "FillerPlan",
    "FillerPolicy",
    "StaticClips",
    "filler_clip_key",
]

DEFAULT_FILLER_DELAY = 1.2
DEFAULT_FILLER_TEXT = "One moment, please."
DEFAULT_MODEL_FILLER_DELAY = 2.0  # longer than a cloud model's usual first token: only a slow round fills


@dataclass(frozen=True, slots=True)
class FillerPhrase:
    text: str
    clip: str | None = None


@runtime_checkable
class FillerClips(Protocol):
    """A cache of pre-rendered filler clips."""

    def has_clip(self, key: str) -> bool: ...


class StaticClips:
    """A fixed set of available clip keys."""

    __slots__ = ("_keys",)

    def __init__(self, keys: Iterable[str] = ()) -> None:
        self._keys = frozenset(keys)

    def has_clip(self, key: str) -> bool:
        return key in self._keys


@dataclass(frozen=True, slots=True)
class FillerChoice:
    text: str
    clip: str | None
    tool: str


@dataclass(frozen=True, slots=True)
class FillerPlan:
    """The round's filler: after ``delay`` seconds, for the call of ``tool``."""

    delay: float
    tool: str


def filler_clip_key(index: int) -> str:
    """The clip key of a configured phrase (its position in :attr:`FillerConfig.phrases`)."""
    return f"filler-{index}"


@dataclass(frozen=True, slots=True, kw_only=True)
class FillerConfig:
    """The filler configuration: on/off; either one fixed delay or each tool's own delay;
    ``model_delay``: seconds a model request may go without its first token before a filler
    (None: never); ``phrases``, spoken in turn, one per slow turn; ``prerender``: the phrases
    are rendered once as clips (keys :func:`filler_clip_key`) and played as such; ``at_call``:
    a round that is a call fills at once (see the module docs)."""

    DEFAULT: ClassVar[FillerConfig]
    PER_TOOL: ClassVar[FillerConfig]
    OFF: ClassVar[FillerConfig]

    enabled: bool = True
    delay: float | None = DEFAULT_FILLER_DELAY
    per_tool: bool = False
    phrases: tuple[str, ...] = (DEFAULT_FILLER_TEXT,)
    prerender: bool = False
    model_delay: float | None = DEFAULT_MODEL_FILLER_DELAY
    at_call: bool = False

    def clip_texts(self) -> dict[str, str]:
        """The clips to render (key to phrase): none unless the fillers are on and prerendered."""
        if not (self.enabled and self.prerender):
            return {}
        return {filler_clip_key(i): text for i, text in enumerate(self.phrases)}

    def __post_init__(self) -> None:
        for i, phrase in enumerate(self.phrases):
            if not isinstance(phrase, str) or not phrase.strip():
                raise ConfigError(f"filler: phrase {i} must say something, got {phrase!r}")
        if self.per_tool and self.delay is not None:
            raise ConfigError("filler: per_tool and a fixed delay exclude each other (one would be ignored)")
        if not self.per_tool and self.delay is None:
            raise ConfigError("filler: a fixed delay is needed unless per_tool is set")
        if self.delay is not None and (not math.isfinite(self.delay) or self.delay < 0):
            raise ConfigError(f"filler: delay must be a non-negative number of seconds, got {self.delay!r}")
        if self.model_delay is not None and (not math.isfinite(self.model_delay) or self.model_delay < 0):
            raise ConfigError(f"filler: model_delay must be a non-negative number of seconds, got {self.model_delay!r}")


FillerConfig.DEFAULT = FillerConfig()
FillerConfig.PER_TOOL = FillerConfig(delay=None, per_tool=True)
FillerConfig.OFF = FillerConfig(enabled=False)


class _Rotation:
    __slots__ = ("counters",)

    def __init__(self) -> None:
        self.counters: dict[str | None, int] = {}

    def next(self, key: str | None, n: int) -> int:
        i = self.counters.get(key, 0)
        self.counters[key] = i + 1
        return i % n


class FillerPolicy:
    """Decides when (``plan``) and what (``choose``) a tool round's filler is."""

    __slots__ = ("_at_call", "_clips", "_delay", "_enabled", "_model_delay", "_per_tool", "_phrases", "_rotation",
                 "_tool_phrases")

    def __init__(
        self,
        delay: float = DEFAULT_FILLER_DELAY,
        *,
        per_tool: bool = False,
        enabled: bool = True,
        phrases: Sequence[FillerPhrase] = (FillerPhrase(DEFAULT_FILLER_TEXT),),
        tool_phrases: Mapping[str, Sequence[FillerPhrase]] | None = None,
        clips: FillerClips | None = None,
        model_delay: float | None = DEFAULT_MODEL_FILLER_DELAY,
        at_call: bool = False,
    ) -> None:
        for what, value in (("delay", delay), ("model_delay", 0.0 if model_delay is None else model_delay)):
            if not math.isfinite(value) or value < 0:
                raise ConfigError(f"filler {what} must be a non-negative number of seconds, got {value!r}")
        self._delay = delay
        self._model_delay = model_delay
        self._at_call = at_call
        self._per_tool = per_tool
        self._enabled = enabled
        self._phrases = tuple(phrases)
        self._tool_phrases = {k: tuple(v) for k, v in (tool_phrases or {}).items()}
        self._clips = clips
        self._rotation = _Rotation()

    # -- construction -------------------------------------------------------------------------

    @classmethod
    def fixed(cls, delay: float = DEFAULT_FILLER_DELAY) -> FillerPolicy:
        return cls(delay)

    @classmethod
    def per_tool(cls) -> FillerPolicy:
        """Each tool's own ``filler_after`` is its delay."""
        return cls(per_tool=True)

    @classmethod
    def from_config(cls, config: FillerConfig) -> FillerPolicy:
        """The policy of ``config``: its timing and its phrases (naming their clips when prerendered)."""
        phrases = tuple(FillerPhrase(text, clip=filler_clip_key(i) if config.prerender else None)
                        for i, text in enumerate(config.phrases))
        if config.per_tool:
            return cls(per_tool=True, enabled=config.enabled, phrases=phrases, model_delay=config.model_delay,
                       at_call=config.at_call)
        assert config.delay is not None
        return cls(config.delay, enabled=config.enabled, phrases=phrases, model_delay=config.model_delay,
                   at_call=config.at_call)

    def _copy(self, **changes: object) -> FillerPolicy:
        fields: dict[str, object] = {
            "delay": self._delay,
            "per_tool": self._per_tool,
            "enabled": self._enabled,
            "phrases": self._phrases,
            "tool_phrases": self._tool_phrases,
            "clips": self._clips,
            "model_delay": self._model_delay,
            "at_call": self._at_call,
        }
        fields.update(changes)
        return FillerPolicy(**fields)  # type: ignore[arg-type]

    def clone(self) -> FillerPolicy:
        """A copy with its own rotation (it shares only the clip cache)."""
        return self._copy()

    def with_delay(self, delay: float) -> FillerPolicy:
        return self._copy(delay=delay, per_tool=False)

    def with_enabled(self, enabled: bool) -> FillerPolicy:
        return self._copy(enabled=enabled)

    def with_phrases(self, phrases: Iterable[FillerPhrase | str]) -> FillerPolicy:
        return self._copy(phrases=_phrases(phrases))

    def with_tool_phrases(self, tool: str, phrases: Iterable[FillerPhrase | str]) -> FillerPolicy:
        per = dict(self._tool_phrases)
        per[tool] = _phrases(phrases)
        return self._copy(tool_phrases=per)

    def with_clips(self, clips: FillerClips) -> FillerPolicy:
        return self._copy(clips=clips)

    # -- decisions ----------------------------------------------------------------------------

    @property
    def enabled(self) -> bool:
        return self._enabled and (bool(self._phrases) or any(self._tool_phrases.values()))

    @property
    def delay(self) -> float | None:
        """The fixed delay, or ``None`` for a per-tool policy."""
        return None if self._per_tool else self._delay

    @property
    def model_delay(self) -> float | None:
        """Seconds a model request may wait for its first token before a filler; None: never."""
        return self._model_delay if self._enabled and self._phrases else None

    @property
    def at_call(self) -> bool:
        """A round whose first event names a call fills at once (see the module docs)."""
        return self._at_call and self._enabled

    def with_at_call(self, at_call: bool = True) -> FillerPolicy:
        return self._copy(at_call=at_call)

    def delay_for(self, spec: ToolSpec) -> float | None:
        """Seconds after the round's start before this tool's filler; ``None``: never."""
        if not self._enabled or spec.filler_after is None:
            return None
        if not self._phrases and not self._tool_phrases.get(spec.name):
            return None
        return max(0.0, spec.filler_after) if self._per_tool else self._delay

    def plan(self, specs: Sequence[ToolSpec]) -> FillerPlan | None:
        """The round's filler: the smallest delay of its calls (ties: the first call)."""
        best: FillerPlan | None = None
        for spec in specs:
            d = self.delay_for(spec)
            if d is not None and (best is None or d < best.delay):
                best = FillerPlan(d, spec.name)
        return best

    def choose(self, tool: str) -> FillerChoice | None:
        """The phrase to speak now for ``tool``'s round (``""``: a slow model round, the generic
        phrases); advances that list's rotation."""
        if not self._enabled:
            return None
        own = self._tool_phrases.get(tool)
        phrases, key = (own, tool) if own else (self._phrases, None)
        if not phrases:
            return None
        phrase = phrases[self._rotation.next(key, len(phrases))]
        clip = phrase.clip
        if clip is not None and (self._clips is None or not self._clips.has_clip(clip)):
            clip = None
        return FillerChoice(phrase.text, clip, tool)

    def __repr__(self) -> str:
        how = "per_tool" if self._per_tool else f"{self._delay:g}s"
        return f"FillerPolicy({how}, enabled={self._enabled}, phrases={len(self._phrases)})"


def _phrases(items: Iterable[FillerPhrase | str]) -> tuple[FillerPhrase, ...]:
    return tuple(p if isinstance(p, FillerPhrase) else FillerPhrase(p) for p in items)

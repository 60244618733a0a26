"""Model-backed brains for three APIs, all on the one tool loop of :class:`~brisvox.sdk.loop.ModelBrain`.

Each builds brisvox's own streaming adapter (httpx, with the connect, first-token and idle
deadlines of :mod:`brisvox.providers.resilient`) and changes nothing else, so a brain
moves between them by changing its constructor::

    class Coach(OpenAIBrain):
        def __init__(self) -> None:
            super().__init__(model="gpt-4o-mini", system="You are a coach. Answer in a sentence.")

        @needs_result_now
        @brisvox.tool.read_only
        async def weekly_average(self) -> str:
            \"\"\"The user's average glucose this week, in mmol/L.\"\"\"
            return "6.1"

* :class:`OpenAIBrain`: the OpenAI-compatible chat completions API; ``preset`` is ``openai``
  (default), ``openrouter``, ``ollama`` or ``vllm``, and ``base_url`` points it at any other
  compatible server (a local one needs no key).
* :class:`AnthropicBrain`: the Anthropic Messages API.
* :class:`GeminiBrain`: the Gemini ``streamGenerateContent`` API.

A key not given is read from the vendor's variable (``OPENAI_API_KEY``,
``ANTHROPIC_API_KEY``, ``GEMINI_API_KEY``); a missing one is a ``ConfigError`` naming it.
"""

from __future__ import annotations

from typing import Any

import httpx

from brisvox.core.clock import Clock, SystemClock
from brisvox.core.secret import Secret
from brisvox.providers.cloud.anthropic import AnthropicLlm, AnthropicOptions
from brisvox.providers.cloud.gemini import GeminiLlm, GeminiOptions
from brisvox.providers.cloud.openai_compat import OpenAiCompatLlm, OpenAiCompatOptions
from brisvox.sdk.loop import ModelBrain

__all__ = ["AnthropicBrain", "GeminiBrain", "OpenAIBrain"]


def _key(api_key: Secret | str | None, variable: str) -> Secret:
    if api_key is None:
        return Secret.from_env(variable)
    return api_key if isinstance(api_key, Secret) else Secret(api_key)


def _given(**options: Any) -> dict[str, Any]:
    return {k: v for k, v in options.items() if v is not None}


class OpenAIBrain(ModelBrain):
    """A brain on the OpenAI-compatible chat completions API (see the module docs).

    Loop options (``system``, ``max_tool_hops``, ``max_tokens``, ``temperature``) are
    :class:`~brisvox.sdk.loop.ModelBrain`'s."""

    def __init__(self, *, model: str, preset: str = "openai", base_url: str | None = None,
                 api_key: Secret | str | None = None, client: httpx.AsyncClient | None = None,
                 clock: Clock | None = None, **loop: Any) -> None:
        clock = clock if clock is not None else SystemClock()
        key = Secret(api_key) if isinstance(api_key, str) else api_key
        options = OpenAiCompatOptions.preset(preset, model=model, **_given(api_key=key, base_url=base_url))
        super().__init__(OpenAiCompatLlm(options, clock, client), clock=clock, **loop)


class AnthropicBrain(ModelBrain):
    """A brain on the Anthropic Messages API (see the module docs)."""

    def __init__(self, *, model: str, base_url: str | None = None, api_key: Secret | str | None = None,
                 client: httpx.AsyncClient | None = None, clock: Clock | None = None, **loop: Any) -> None:
        clock = clock if clock is not None else SystemClock()
        options = AnthropicOptions(model=model, api_key=_key(api_key, "ANTHROPIC_API_KEY"),
                                   **_given(base_url=base_url))
        super().__init__(AnthropicLlm(options, clock, client), clock=clock, **loop)


class GeminiBrain(ModelBrain):
    """A brain on the Gemini API (see the module docs)."""

    def __init__(self, *, model: str, base_url: str | None = None, api_key: Secret | str | None = None,
                 client: httpx.AsyncClient | None = None, clock: Clock | None = None, **loop: Any) -> None:
        clock = clock if clock is not None else SystemClock()
        options = GeminiOptions(model=model, api_key=_key(api_key, "GEMINI_API_KEY"), **_given(base_url=base_url))
        super().__init__(GeminiLlm(options, clock, client), clock=clock, **loop)

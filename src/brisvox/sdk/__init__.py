"""brisvox.sdk: logic in another process, attached to calls over the agent protocol (docs/AGENT_PROTOCOL.md).

``Brain`` (its tools are ``brisvox.tool`` async methods, offered to the call's model) and
``serve`` run on the agent's side; ``ModelBrain`` and its three vendor brains
(``OpenAIBrain``, ``AnthropicBrain``, ``GeminiBrain``) run their own model and tools and
speak with ``say``; :mod:`brisvox.sdk.testing` is the conformance driver for brains;
:mod:`brisvox.sdk.protocol` holds the messages both sides share."""

from brisvox.providers.llm import ToolChoice
from brisvox.sdk.brain import Brain, serve
from brisvox.sdk.loop import ModelBrain, TurnReport, needs_result_now
from brisvox.sdk.models import AnthropicBrain, GeminiBrain, OpenAIBrain

__all__ = [
    "AnthropicBrain",
    "Brain",
    "GeminiBrain",
    "ModelBrain",
    "OpenAIBrain",
    "ToolChoice",
    "TurnReport",
    "needs_result_now",
    "serve",
]

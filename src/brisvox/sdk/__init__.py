"""brisvox.sdk: logic in another process, attached to calls over the agent protocol (docs/AGENT_PROTOCOL.md).

``Brain`` (its tools are ``brisvox.tool`` async methods) and ``serve`` run on the agent's
side; :mod:`brisvox.sdk.protocol` holds the messages both sides share."""

from brisvox.sdk.brain import Brain, serve

__all__ = ["Brain", "serve"]

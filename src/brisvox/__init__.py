"""brisvox: a real-time voice-agent framework."""

__version__ = "0.1.0"

__all__ = ["__version__"]

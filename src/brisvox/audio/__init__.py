"""brisvox.audio."""

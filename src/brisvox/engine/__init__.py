"""brisvox.engine."""

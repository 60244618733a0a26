"""brisvox.providers."""

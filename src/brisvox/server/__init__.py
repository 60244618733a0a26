"""brisvox.server."""

"""brisvox.transport."""

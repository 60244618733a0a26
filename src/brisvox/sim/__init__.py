"""brisvox.sim."""

"""brisvox.agent."""

"""brisvox.inference."""

"""brisvox.sdk."""

"""Credentials that never print.

A :class:`Secret` wraps a string (an API key, a token).  Its ``repr`` and ``str`` are
always ``Secret(***)``, so a secret that ends up in a log line, an exception message or a
config dump is redacted; code that needs the value calls :meth:`reveal` at the one place
that sends it.
"""

from __future__ import annotations

import os
from typing import Final

from brisvox.core.errors import ConfigError

__all__ = ["Secret"]

_REDACTED: Final = "Secret(***)"


class Secret:
    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        if not isinstance(value, str):
            raise TypeError(f"Secret wraps a str, got {type(value).__name__}")
        self._value = value

    @classmethod
    def from_env(cls, name: str) -> Secret:
        """Read a secret from the environment variable ``name``; a missing or empty one is a ConfigError."""
        value = os.environ.get(name, "")
        if not value:
            raise ConfigError(f"environment variable {name} is not set (it should hold a secret)")
        return cls(value)

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return _REDACTED

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        return _REDACTED

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)

    def __bool__(self) -> bool:
        return bool(self._value)

    def __reduce__(self) -> tuple[object, ...]:
        raise TypeError("a Secret cannot be pickled")

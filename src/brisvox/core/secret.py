"""Credentials that never print.

A :class:`Secret` wraps a string (an API key, a token).  Its ``repr`` and ``str`` are
always ``Secret(***)``, so a secret that ends up in a log line, an exception message or a
config dump is redacted; code that needs the value calls :meth:`reveal` at the one place
that sends it.

A secret's value can still reach a log as plain text by another road: a vendor that
echoes the key in its error body, a URL with a token in it.  So every ``Secret`` of at
least :data:`MIN_MASKED_LENGTH` characters is also entered in a process-wide registry,
:func:`mask` replaces every registered value in a text with ``***``, and
:func:`install_log_masking` (which ``brisvox serve`` calls when it sets up logging)
applies it to every log record the process creates, its arguments, traceback and stack
included, whichever logger and handler it goes to.  Shorter values are not masked as text
(masking every ``"abc"`` in a log would garble it; a real key is far longer).
"""

from __future__ import annotations

import logging
import os
import re
import threading
from typing import Any, Final

from brisvox.core.errors import ConfigError

__all__ = ["MIN_MASKED_LENGTH", "Secret", "install_log_masking", "mask"]

_REDACTED: Final = "Secret(***)"
_MASK: Final = "***"

MIN_MASKED_LENGTH: Final = 8
"""Secrets shorter than this are not masked as text in logs (their repr still is)."""


class _Registry:
    """The values of every Secret created in this process (for :func:`mask`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # logging runs on inference and server threads too
        self._values: set[str] = set()
        self._pattern: re.Pattern[str] | None = None

    def add(self, value: str) -> None:
        if len(value) < MIN_MASKED_LENGTH or value in self._values:
            return
        with self._lock:
            self._values.add(value)
            # Longest first, so a key that contains another is masked whole.
            ordered = sorted(self._values, key=len, reverse=True)
            self._pattern = re.compile("|".join(re.escape(v) for v in ordered))

    def mask(self, text: str) -> str:
        pattern = self._pattern  # one read: a concurrent add swaps the whole pattern
        return text if pattern is None else pattern.sub(_MASK, text)


_REGISTRY = _Registry()


def mask(text: str) -> str:
    """``text`` with the value of every registered secret replaced by ``***``."""
    return _REGISTRY.mask(text)


class Secret:
    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        if not isinstance(value, str):
            raise TypeError(f"Secret wraps a str, got {type(value).__name__}")
        self._value = value
        _REGISTRY.add(value)

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


def _masked_record(record: logging.LogRecord) -> logging.LogRecord:
    """``record`` with registered secrets masked in its message, traceback and stack."""
    try:
        message = record.getMessage()
    except Exception:  # a malformed format: the handler reports it (logging's handleError) when it emits
        return record
    masked = mask(message)
    if masked != message:  # only then: some formatters (uvicorn's access log) read record.args
        record.msg, record.args = masked, None
    if record.exc_info and not record.exc_text:
        # Formatted now so every handler's formatter uses the masked text (formatters keep exc_text).
        record.exc_text = _FORMATTER.formatException(record.exc_info)
    if record.exc_text:
        record.exc_text = mask(record.exc_text)
    if record.stack_info:
        record.stack_info = mask(record.stack_info)
    return record


_FORMATTER = logging.Formatter()
_installed = threading.Lock()


def install_log_masking() -> None:
    """Mask registered secrets in every log record this process creates, whatever logger or
    handler it goes to (uvicorn's own handlers included): wraps the log record factory once."""
    with _installed:
        current = logging.getLogRecordFactory()
        if getattr(current, "masks_secrets", False):
            return

        def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
            return _masked_record(current(*args, **kwargs))

        factory.masks_secrets = True  # type: ignore[attr-defined]
        logging.setLogRecordFactory(factory)

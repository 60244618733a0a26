"""Bounded error fields and byte-exact cuts."""

from __future__ import annotations

import json

from brisvox.agent.tools.results import (
    TRUNCATION_MARKER,
    ErrorKind,
    Issue,
    cut_utf8,
    error_body,
    truncate_result,
)


def test_error_fields_are_bounded_cut_inside_multibyte_characters_and_stay_valid_json() -> None:
    issues = [Issue("/" + "ş" * 200, "é" * 300) for _ in range(7)]
    raw = error_body(ErrorKind.INVALID_ARGUMENTS, "ğ" * 100, "ü" * 1000, issues=issues)
    b = json.loads(raw)
    assert b["error"] == "invalid_arguments"
    assert len(b["tool"].encode()) <= 64 and b["tool"].endswith("…")
    assert len(b["detail"].encode()) <= 512 and b["detail"].endswith("…")
    assert len(b["issues"]) == 5 and b["truncated"] is True
    for i in b["issues"]:
        assert len(i["path"].encode()) <= 128 and len(i["reason"].encode()) <= 200


def test_short_fields_are_kept_whole() -> None:
    b = json.loads(error_body(ErrorKind.TIMEOUT, "look", "no answer"))
    assert b == {"error": "timeout", "tool": "look", "detail": "no answer"}


def test_cut_utf8_never_splits_a_character_and_fits_the_bound() -> None:
    for n in range(0, 20):
        cut = cut_utf8("aé€😀" * 5, n)
        assert len(cut.encode()) <= n


def test_truncate_result_keeps_exact_fits_and_marks_cuts() -> None:
    assert truncate_result("x" * 20, 20) == ("x" * 20, False)
    text, cut = truncate_result("€" * 10, 20)  # 30 bytes
    assert cut and text == "€" * 2 + TRUNCATION_MARKER and len(text.encode()) == 20

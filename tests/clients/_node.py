"""The TypeScript client (clients/ts) from the tests: Node, its npm lock, and its compiled test build.

``make test`` runs ``npm ci`` in clients/ts (the lock pins TypeScript and ws); without Node or
that install the tests that need them skip, saying what to run.
"""

from __future__ import annotations

import functools
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
CLIENT = ROOT / "clients" / "ts"
BUILD = CLIENT / "build-test"


def need_client() -> str:
    """The path of ``node``; skips unless Node 20+ and the client's npm install are there."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed (Node 20 or later; `make test` uses it when present)")
    if not (CLIENT / "node_modules" / ".bin" / "tsc").exists():
        pytest.skip(f"the TypeScript client's packages are not installed (`npm ci` in {CLIENT})")
    return node


@functools.cache
def _compiled() -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(CLIENT / "node_modules" / ".bin" / "tsc"), "-p", "tsconfig.test.json"], cwd=CLIENT,
                          capture_output=True, text=True, timeout=300)


def built() -> Path:
    """The client's test build (src, tests, examples compiled once per test run, strict)."""
    need_client()
    done = _compiled()
    assert done.returncode == 0, done.stdout + done.stderr
    return BUILD


def parse_in_node(frames: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What the client's parsers make of ``frames`` (see clients/ts/tests/parse_frames.ts)."""
    node = need_client()
    done = subprocess.run([node, str(built() / "tests" / "parse_frames.js")], input=json.dumps(frames),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    results: list[dict[str, Any]] = json.loads(done.stdout)
    return results

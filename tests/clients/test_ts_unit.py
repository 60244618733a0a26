"""The TypeScript client's own unit tests (``node --test``, as ``npm test`` in clients/ts runs them)."""

from __future__ import annotations

import re
import subprocess

import pytest

from tests.clients._node import CLIENT, built, need_client


@pytest.mark.slow
def test_the_clients_node_tests_pass_under_strict_typescript() -> None:
    node = need_client()
    tests = built() / "tests"
    done = subprocess.run([node, "--test", str(tests)], cwd=CLIENT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    passed = re.search(r"^# pass (\d+)$", done.stdout, re.MULTILINE)
    failed = re.search(r"^# fail (\d+)$", done.stdout, re.MULTILINE)
    assert passed is not None and failed is not None, done.stdout[-2000:]
    assert int(passed.group(1)) >= 15 and int(failed.group(1)) == 0, done.stdout[-2000:]

"""The TypeScript client's own unit tests (``node --test``), run by ``npm test`` in clients/ts."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from tests.clients._node import CLIENT, need_client


@pytest.mark.slow
def test_the_clients_node_tests_pass_under_strict_typescript() -> None:
    need_client()
    npm = shutil.which("npm")
    assert npm is not None
    done = subprocess.run([npm, "test", "--silent"], cwd=CLIENT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    passed = re.search(r"^# pass (\d+)$", done.stdout, re.MULTILINE)
    failed = re.search(r"^# fail (\d+)$", done.stdout, re.MULTILINE)
    assert passed is not None and failed is not None, done.stdout[-2000:]
    assert int(passed.group(1)) >= 15 and int(failed.group(1)) == 0, done.stdout[-2000:]

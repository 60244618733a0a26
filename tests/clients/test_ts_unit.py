"""The TypeScript client's own unit tests (``node --test``, as ``npm test`` in clients/ts runs them)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

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


USE = """
import { Brain, readOnly, serve, type Tool } from "@brisvox/agent";

class Shop extends Brain {
  override tools(): Tool[] {
    return [readOnly<{ day: string }>({ name: "hours", description: "Hours.", run: ({ day }) => `${day}: nine` })];
  }
}

export const started = serve(() => new Shop(), { port: 0 });
"""

WRONG_USE = """
import { readOnly } from "@brisvox/agent";
export const tool = readOnly({ name: "hours", description: "Hours.", timeout: "soon", run: () => "nine" });
"""

RUN = """
const { Brain, serve } = require("@brisvox/agent");
serve(() => new Brain(), { port: 0 }).then(async (server) => {
  console.log(`listening ${server.url}`);
  await server.close();
});
"""


@pytest.mark.slow
def test_the_client_installs_from_the_repository_into_a_node_project_and_types_what_it_uses(tmp_path: Path) -> None:
    node = need_client()
    npm = shutil.which("npm")
    assert npm is not None
    (tmp_path / "package.json").write_text('{"name": "consumer", "version": "1.0.0", "private": true}')
    done = subprocess.run([npm, "install", str(CLIENT), "--offline", "--no-audit", "--no-fund"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    (tmp_path / "run.js").write_text(RUN)
    ran = subprocess.run([node, "run.js"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0 and ran.stdout.startswith("listening ws://127.0.0.1:"), ran.stdout + ran.stderr
    # The package's types: what the project does type-checks, a wrong option does not (one compile for both).
    (tmp_path / "use.ts").write_text(USE)
    (tmp_path / "wrong.ts").write_text(WRONG_USE)
    checked = subprocess.run([str(CLIENT / "node_modules" / ".bin" / "tsc"), "--strict", "--noEmit", "--module",
                              "node16", "--moduleResolution", "node16", "--target", "es2022", "--types", "node",
                              "--typeRoots", str(CLIENT / "node_modules" / "@types"), "use.ts", "wrong.ts"],
                             cwd=tmp_path, capture_output=True, text=True, timeout=300)
    errors = [line for line in checked.stdout.splitlines() if ": error TS" in line]
    assert [e.split(":")[0] for e in errors] == ["wrong.ts(3,70)"], checked.stdout  # the timeout "soon"

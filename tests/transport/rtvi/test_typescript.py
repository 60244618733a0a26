"""``brisvox types --ts``: the TypeScript of an agent's UI contract compiles with ``tsc`` (from the
RTVI tests' npm lock) and types what a page does with it; without tsc, its structure is checked."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Literal

import pytest
from pydantic import BaseModel, Field

from brisvox.transport.rtvi.typescript import typescript_types
from brisvox.transport.rtvi.ui import Action, AppEvent, UiContract

TSC = Path(__file__).resolve().parent / "js" / "node_modules" / ".bin" / "tsc"
SRC = Path(__file__).resolve().parents[3] / "src"


class Item(BaseModel):
    name: str
    price: float | None = None


class OpenConfirm(Action):
    nonce: str
    summary: str = Field(description="one line the user can read")
    items: list[Item] = Field(default_factory=list)


class ShowMap(Action):
    center: tuple[float, float]
    labels: dict[str, int] = Field(default_factory=dict)


class ConfirmAnswered(AppEvent):
    nonce: str
    answer: Literal["yes", "no"]


UI = UiContract(actions=(OpenConfirm, ShowMap), events=(ConfirmAnswered,))

USE = """
import { AppEventMessage, APP_EVENTS, UiCommand, UI_COMMANDS } from "./ui";
export function show(c: UiCommand): string {
  switch (c.command) {
    case "open_confirm": return c.payload.summary + (c.payload.items || []).map((i) => i.name).join(",");
    case "show_map": return String(c.payload.center[0] + c.payload.center[1]);
  }
}
export const answer: AppEventMessage = { event: "confirm_answered", payload: { nonce: "n", answer: "yes" } };
export const names: string[] = [...UI_COMMANDS, ...APP_EVENTS];
"""

WRONG = """
import { AppEventMessage } from "./ui";
export const answer: AppEventMessage = { event: "confirm_answered", payload: { nonce: "n", answer: "maybe" } };
"""


def test_the_types_declare_each_model_and_the_unions_a_page_uses() -> None:
    ts = typescript_types(UI)
    assert "export interface OpenConfirm {\n  nonce: string;\n  /** one line the user can read */\n  summary: string;" in ts
    assert "items?: Array<Item>;" in ts and "export interface Item {" in ts and "price?: number | null;" in ts
    assert "center: [number, number];" in ts and "labels?: { [key: string]: number };" in ts
    assert 'answer: "yes" | "no";' in ts
    assert ('export type UiCommand = { command: "open_confirm"; payload: OpenConfirm } | '
            '{ command: "show_map"; payload: ShowMap };') in ts
    assert 'export type AppEventMessage = { event: "confirm_answered"; payload: ConfirmAnswered };' in ts
    assert 'export const UI_COMMANDS = ["open_confirm", "show_map"] as const;' in ts


def _tsc(tmp_path: Path, use: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "use.ts").write_text(use)
    return subprocess.run([str(TSC), "--strict", "--noEmit", "--target", "es2017", "--moduleResolution", "node",
                           str(tmp_path / "ui.ts"), str(tmp_path / "use.ts")], capture_output=True, text=True,
                          timeout=120)


@pytest.mark.slow
def test_brisvox_types_ts_writes_typescript_that_tsc_compiles_and_that_refuses_a_wrong_payload(
    tmp_path: Path,
) -> None:
    (tmp_path / "uimod.py").write_text(
        "from tests.transport.rtvi.test_typescript import UI\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), str(SRC.parent), str(tmp_path)])}
    done = subprocess.run([sys.executable, "-m", "brisvox", "types", "--ts", "--ui", "uimod:UI", "-o",
                           str(tmp_path / "ui.ts")], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "ui.ts").read_text() == typescript_types(UI)
    if not TSC.exists():
        pytest.skip(f"tsc is not installed (`npm ci` in {TSC.parents[2]}); the structure is checked above")
    ok = _tsc(tmp_path, USE)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    wrong = _tsc(tmp_path, WRONG)
    assert wrong.returncode != 0 and '"maybe"' in wrong.stdout


def test_brisvox_types_without_a_ui_says_how_to_name_one(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    done = subprocess.run([sys.executable, "-m", "brisvox", "types", "--ts"], capture_output=True, text=True,
                          env=env, timeout=60)
    assert done.returncode == 1 and "--ui MODULE:NAME" in done.stderr


def test_brisvox_run_with_an_agent_prints_its_ui_types_and_an_agent_refuses_a_ui_that_is_not_a_contract(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import brisvox
    from brisvox.__main__ import main

    agent = brisvox.Agent(prompt="p", ui=UI)
    assert main(["types", "--ts"], agent=agent) == 0
    assert capsys.readouterr().out == typescript_types(UI)
    with pytest.raises(brisvox.AgentError) as err:
        brisvox.Agent(prompt="p", ui=(OpenConfirm,))  # type: ignore[arg-type]
    assert "is not a UiContract" in str(err.value)

"""The booking brain's own tests: the conformance driver, keyless, on virtual time."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from booking_brain import Booking

from brisvox.agent.context import SystemMessage
from brisvox.sdk.testing import BrainDriver, call, scripted


async def test_the_sheet_goes_up_at_once_and_the_answer_reaches_the_model_with_the_next_words() -> None:
    model = scripted(["It's on your screen to confirm.", call("confirm_on_screen", summary="Friday at nine")],
                     "You're booked for Friday at nine.")
    brain = Booking(api_key="unused")
    async with BrainDriver(brain, model=model) as driver:
        turn = await driver.user_says("Book Friday at nine.")
        assert turn.completed  # the tool returned; nothing waited on the user
        assert turn.said == ("It's on your screen to confirm.",)

        commands = await driver.collect_ui_commands(min_count=1)
        sheet = next(c for c in commands if c["command"] == "open_confirm")
        await driver.send_ui_event("confirm_answered", {"nonce": sheet["payload"]["nonce"], "answer": "yes"})
        assert brain.confirmed == ["Friday at nine"]

        nxt = await driver.user_says("Great.")
    handed = nxt.requests[0].messages
    assert SystemMessage(text="ON SCREEN, THE USER CONFIRMED: Friday at nine") in handed
    assert nxt.said == ("You're booked for Friday at nine.",)


async def test_a_tap_on_a_sheet_the_call_does_not_have_open_changes_nothing() -> None:
    brain = Booking(api_key="unused")
    async with BrainDriver(brain, model=scripted("Hello.")) as driver:
        await driver.send_ui_event("confirm_answered", {"nonce": "not-open", "answer": "yes"})
        turn = await driver.user_says("Hi.")
    assert brain.confirmed == []
    assert not [m for m in turn.requests[0].messages[1:] if isinstance(m, SystemMessage)]

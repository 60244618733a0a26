"""A brain that runs its own model and confirms bookings on the caller's screen.

The tool puts a sheet on the screen and returns at once (it never waits for the tap); the
caller's answer comes back later as an app event, which becomes a note in the brain's
context: the model reads it with the caller's next words.

Run it (the agent file points at it: ``[agent_link] url = "ws://127.0.0.1:8765"``)::

    OPENAI_API_KEY=... python examples/booking_brain/booking_brain.py

Its tests (``test_booking_brain.py``) run it keyless on virtual time with the conformance
driver, ``brisvox.sdk.testing``.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Literal

from pydantic import BaseModel

import brisvox
from brisvox.sdk import OpenAIBrain, serve
from brisvox.transport.rtvi.ui import Action, AppEvent, UiAnswer, UiContract

SYSTEM = ("You book appointments. The user confirms a booking on screen; you never confirm one yourself. "
          "When you use a tool, say one short line and call it in the same response.")


class OpenConfirm(Action):
    nonce: str
    summary: str


class ConfirmAnswered(AppEvent):
    nonce: str
    answer: Literal["yes", "no"]


class ConfirmArgs(BaseModel):
    """The booking to confirm, in one line the user can read."""

    summary: str


def _verdict(event: AppEvent, answers: Action | None) -> str | None:
    """The note an answer leaves for the model (None: a sheet this call does not have open)."""
    if not isinstance(event, ConfirmAnswered) or not isinstance(answers, OpenConfirm):
        return None
    verdict = "CONFIRMED" if event.answer == "yes" else "DECLINED"
    return f"ON SCREEN, THE USER {verdict}: {answers.summary}"


class Booking(OpenAIBrain):
    ui = UiContract(actions=(OpenConfirm,), events=(ConfirmAnswered,), on_event=_verdict)

    def __init__(self, *, api_key: str | None = None) -> None:
        super().__init__(model="gpt-4o-mini", api_key=api_key, system=SYSTEM)
        self.confirmed: list[str] = []

    @brisvox.tool.side_effect
    async def confirm_on_screen(self, args: ConfirmArgs) -> str:
        """Put the booking on the user's screen for them to confirm or decline. Returns as soon
        as the sheet is up; it does not wait. Say one short line with the call ("it's on your
        screen to confirm"). You will be told what they chose."""
        self.dispatch(OpenConfirm(nonce=uuid.uuid4().hex, summary=args.summary))
        return "The sheet is up. Wait to be told what they chose."

    async def on_app_event(self, answer: UiAnswer) -> None:
        if isinstance(answer.event, ConfirmAnswered) and answer.event.answer == "yes" and answer.answers is not None:
            self.confirmed.append(str(answer.answers.model_dump()["summary"]))  # the commit belongs to the tap
        await super().on_app_event(answer)


async def main() -> None:
    server = await serve(Booking, "127.0.0.1", 8765)
    await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())

import sys

from pydantic import BaseModel

import brisvox
from brisvox import providers


class Booking(BaseModel):
    day: str
    party_size: int


@brisvox.tool.side_effect(confirm=True)
async def book_table(args: Booking, ctx: brisvox.ToolContext) -> str:
    """Book a table. The caller confirms first."""
    return f"booked for {args.party_size} on {args.day}"


agent = brisvox.Agent(prompt="You take table bookings.", greeting="Hello!", tools=[book_table],
                      llm=providers.Scripted(), stt=providers.LocalWhisper(), tts=providers.Hibari())

if __name__ == "__main__":
    sys.exit(brisvox.run(agent))  # serve, check, console

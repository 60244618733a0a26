"""Brain mode across processes (slow, real time): ``brisvox serve`` and an SDK ``OpenAIBrain``, each a
subprocess on 127.0.0.1, the brain's model a fake OpenAI-compatible server in the brain's process,
and a caller on the server's WebSocket (espeak-ng speech).

The agent file's own model is the scripted restaurant host; the brain's model answers with a line
only it has.  The brain declares ``answers_turns``, so the call's model is the link: the caller hears
the brain's answer, and the agent file's model is never asked.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from brisvox.core.clock import SystemClock
from tests._speech import espeak_wav
from tests.server.test_agent_link_e2e import ENV, ROOT, calling, free_port, launch, serving

pytestmark = [pytest.mark.realtime, pytest.mark.slow]

ANSWER = "The brain says the kitchen opens at noon."

BRAIN = '''
import asyncio, sys
from brisvox.sdk import OpenAIBrain, serve
from tests.providers.cloud._llm_wire import Script, T, VendorFake

async def main() -> None:
    async with VendorFake("openai", [Script([T("The brain says "), T("the kitchen opens at noon.")])] * 20) as fake:
        def brain() -> OpenAIBrain:
            return OpenAIBrain(model="fake", base_url=fake.server.base_url + "/v1", api_key="unused",
                               system="You answer in one sentence.")

        server = await serve(brain, "127.0.0.1", int(sys.argv[1]))
        print("serving", flush=True)
        while True:
            await asyncio.sleep(0.2)
            print(f"model requests={len(fake.requests)}", flush=True)

asyncio.run(main())
'''


async def test_a_served_call_whose_agent_answers_the_turns_speaks_the_brains_answer_not_the_agent_files(
        tmp_path: Path) -> None:
    clock = SystemClock()
    speech = espeak_wav("a table for two on friday at seven", tmp_path, speed=200, lead=0.1, trail=0.0).pcm
    # The brain's process imports the fake vendor from the repository's tests.
    brain, server = launch(tmp_path, tmp_path / "brain.py", BRAIN, free_port(),
                           env={**ENV, "PYTHONPATH": f"{ROOT / 'src'}:{ROOT}"})
    try:
        await brain.wait_for("serving", clock)
        async with calling(await serving(server, clock), clock, speech) as caller:
            heard = await caller.bot_says(caller.say(), lambda t: "noon" in t)
        await brain.wait_for(r"model requests=1", clock)
    finally:
        for proc in (brain, server):
            proc.stop()
    assert heard.strip() == ANSWER  # the brain's words only: the agent file's host did not answer too
    assert "the agent file's model answers" not in server.text()

from __future__ import annotations

from brisvox.providers.stt import Transcript


def test_a_transcript_repr_shows_its_size_and_flags_but_never_the_text() -> None:
    t = Transcript(text="my card number", is_final=True, from_finalize=True, start=0.5, end=1.25)
    assert repr(t) == "Transcript(<14 chars>, [FZ], 0.500-1.250)"

"""Property-based fuzzing of a real server on 127.0.0.1 (tests/server/_fuzz.py; the long run is
``bench/fuzz_server.py``): at least 10,000 generated client messages and connection patterns,
only documented errors and close codes, a healthy server after every batch, no traceback."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings

from tests.server._fuzz import FuzzServer, Session, Tally, healthy, no_traceback, play, sessions

EXAMPLES = 400
BATCH = 50


@pytest.fixture(scope="module")
def server() -> Iterator[FuzzServer]:
    with FuzzServer() as s:
        yield s


def test_hostile_clients_get_only_documented_answers_and_the_server_stays_healthy(server: FuzzServer) -> None:
    tally = Tally()

    @settings(max_examples=EXAMPLES, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                     HealthCheck.function_scoped_fixture])
    @given(sessions())
    def attack(session: Session) -> None:
        play(server.url, session, tally)
        if tally.sessions % BATCH == 0:
            healthy(server)

    attack()
    healthy(server)
    no_traceback(server)
    assert tally.messages >= 10_000, tally
    assert set(tally.errors) >= {"invalid_start", "malformed_message", "message_too_big"}, tally
    assert {1000, 1008, 1009} <= set(tally.closes), tally

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from brisvox.transport.events import PlaybackPosition
from brisvox.transport.ledger import Ledger


def test_a_mark_becomes_due_once_the_audio_accepted_before_it_was_released() -> None:
    led = Ledger()
    led.accept_frame()
    led.add_mark("a")
    assert led.due_marks() == []
    led.release(0, 0, 320, 16000)
    assert led.due_marks() == ["a"]
    assert led.echo("a") and not led.echo("a")


def test_past_256_sent_marks_the_oldest_is_given_up_and_cut() -> None:
    led = Ledger(max_marks=256)
    for i in range(257):
        led.add_mark(f"m{i}")
    assert len(led.due_marks()) == 257
    assert led.take_cut_marks() == ["m0"]
    assert not led.echo("m0")


def test_a_clear_cuts_pending_and_sent_marks_and_is_ignored_unless_newer() -> None:
    led = Ledger()
    led.add_mark("sent")
    led.due_marks()
    led.accept_frame()
    led.add_mark("pending")
    assert led.clear(2)
    assert not led.clear(2) and not led.clear(1)
    assert led.take_cut_marks() == ["pending", "sent"]
    assert led.generation == 1 and led.epoch == 2


def test_past_256_counters_the_oldest_is_reported_and_forgotten() -> None:
    led = Ledger(position_interval=10.0, max_counters=256)
    for u in range(257):
        led.release(0, u, 160, 16000)
    due = {(r.epoch, r.utterance): r.samples for r in led.due_reports()}
    assert due[(0, 0)] == 160
    for r in led.due_reports():
        led.reported(r)
    led.release(0, 0, 160, 16000)  # the id returns after 256 others: it restarts at zero
    assert {(r.utterance, r.samples) for r in led.final_reports()} >= {(0, 160)}


def test_a_report_counts_only_once_it_was_delivered() -> None:
    led = Ledger(position_interval=0.02)
    led.release(0, 1, 320, 16000)
    (report,) = led.due_reports()
    assert led.final_reports() == [report]  # not delivered yet: still in the final set
    led.reported(report)
    assert led.final_reports() == []


@given(st.lists(st.one_of(st.tuples(st.just("r"), st.integers(0, 3), st.integers(1, 640)),
                          st.tuples(st.just("c"), st.just(0), st.just(0)),
                          st.tuples(st.just("d"), st.just(0), st.just(0))), max_size=80))
def test_reports_are_monotonic_and_the_last_one_equals_the_released_audio(ops: list[tuple[str, int, int]]) -> None:
    led = Ledger(position_interval=0.02)
    released: dict[tuple[int, int], int] = {}
    last: dict[tuple[int, int], int] = {}

    def deliver(reports: list[PlaybackPosition]) -> None:
        for r in reports:
            key = (r.epoch, r.utterance)
            assert r.samples >= last.get(key, 0)
            last[key] = r.samples
            led.reported(r)

    for op, utt, n in ops:
        if op == "r":
            led.release(led.epoch, utt, n, 16000)
            key = (led.epoch, utt)
            released[key] = released.get(key, 0) + n
        elif op == "c":
            led.clear(led.epoch + 1)
        else:
            deliver(led.due_reports())
    deliver(led.due_reports())
    deliver(led.final_reports())
    assert last == released


def test_an_idle_output_reports_the_unreported_tail_of_the_current_utterance() -> None:
    led = Ledger(position_interval=0.1)
    reports = []
    for _ in range(7):  # 140 ms: one report at 100 ms, a 40 ms tail
        led.release(0, 1, 320, 16000)
        for report in led.due_reports():
            led.reported(report)
            reports.append(report.samples)
    assert reports == [5 * 320]
    led.report_current()
    (tail,) = led.due_reports()
    assert tail.samples == 7 * 320
    led.reported(tail)
    led.report_current()  # nothing new: nothing due
    assert led.due_reports() == []

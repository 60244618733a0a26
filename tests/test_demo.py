from brisvox._demo import _call
from brisvox.core.clock import run_virtual


def test_the_demo_call_hears_nothing_of_the_interrupted_turn_after_the_interrupt() -> None:
    lines = run_virtual(_call)
    cut = next(i for i, line in enumerate(lines) if "InterruptFrame" in line)
    assert cut > 0
    assert all("epoch 0" in line for line in lines[:cut])
    assert not any("epoch 0" in line for line in lines[cut:])
    assert "StopFrame" in lines[-1]

"""stack_sampler: a sampled thread's time by function, each counting what it called, and the
table of it; runs without PyTorch."""

from __future__ import annotations

import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from stack_sampler import StackSampler, function_name  # noqa: E402


def busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def outer() -> None:
    busy(0.25)  # outer's own share is its call of busy
    inner()


def inner() -> None:
    busy(0.25)


def test_a_function_counts_the_time_of_what_it_called() -> None:
    sampler = StackSampler(period_s=0.001)
    sampler.start()
    outer()
    text = sampler.table()
    seconds = {name.rsplit(":", 1)[1]: s for s, name in sampler.inclusive()
               if name.startswith(__file__)}
    # A thread running Python gives up the interpreter every 5 ms (sys.getswitchinterval), so
    # that is how often the sampler gets to look.
    assert len(sampler.samples) > 40
    assert 0.45 < sampler.seconds < 2.0
    # outer holds every sample of the work, inner about half of them, busy all.
    assert seconds["outer"] >= 0.9 * seconds["busy"]
    assert 0.2 * seconds["outer"] < seconds["inner"] < 0.8 * seconds["outer"]
    lines = text.splitlines()
    assert lines[0].startswith(f"{len(sampler.samples)} samples over")
    assert any(line.endswith(f"{__file__}:inner") for line in lines[1:])
    # Stopped: no more samples after the table.
    count = len(sampler.samples)
    busy(0.02)
    assert len(sampler.samples) == count


def test_another_thread_is_not_sampled_and_names_drop_the_package_root() -> None:
    sampler = StackSampler(period_s=0.001, thread_id=-1)  # no such thread
    sampler.start()
    busy(0.02)
    sampler.stop()
    assert sampler.samples == [()] * len(sampler.samples)
    assert function_name("/usr/lib/python3/dist-packages/torch/library.py", "define") == (
        "torch/library.py:define")
    assert function_name("/opt/venv/lib/python3.12/site-packages/torch/_ops.py", "f") == (
        "torch/_ops.py:f")
    assert function_name("/work/x.py", "g") == "/work/x.py:g"
